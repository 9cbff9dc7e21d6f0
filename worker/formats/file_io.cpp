#include "worker/formats/file_io.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <vector>

#include "common/atomic_file.hpp"

namespace xtrain {
namespace {

// Opens `path` read-only and checks that it is a regular file; returns the fd and its size.
int open_regular_file(const std::string& path, std::uint64_t& size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FileError(path, errno_text(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw FileError(path, errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw FileError(path, S_ISDIR(st.st_mode) ? "is a directory, expected a file" : "is not a regular file");
  }
  size = static_cast<std::uint64_t>(st.st_size);
  return fd;
}

// Reads and writes go in pieces of this size at most, so that progress is seen between them.
constexpr std::uint64_t kPieceBytes = 16 << 20;

}  // namespace

std::string errno_text(int err) { return std::strerror(err); }

FileChecksum checksum_file(const std::string& path) {
  constexpr std::uint64_t kBlock = 4 << 20;
  InputFile in(path);
  std::unique_ptr<char[]> block(new char[kBlock]);
  Crc32c crc;
  for (std::uint64_t at = 0; at < in.size(); at += kBlock) {
    const std::uint64_t n = std::min(kBlock, in.size() - at);
    in.read_at(at, block.get(), n);
    crc.update(block.get(), n);
  }
  return {in.size(), crc.value()};
}

void check_recorded_checksum(const std::string& path, const FileChecksum& actual, const RecordedChecksum& recorded) {
  if (actual.bytes != recorded.sum.bytes) {
    throw FileError(path, std::to_string(actual.bytes) + " bytes, but " + recorded.where + " recorded " +
                              std::to_string(recorded.sum.bytes) + " (truncated or overwritten)");
  }
  if (actual.crc32c != recorded.sum.crc32c) {
    throw FileError(path, "damaged: its CRC-32C is " + crc32c_hex(actual.crc32c) + " but " + recorded.where +
                              " recorded " + crc32c_hex(recorded.sum.crc32c));
  }
}

InputFile::InputFile(const std::string& path) : path_(path) { fd_ = open_regular_file(path, size_); }

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read_at(std::uint64_t offset, void* out, std::uint64_t count) const {
  auto* dst = static_cast<char*>(out);
  std::uint64_t done = 0;
  while (done < count) {
    const std::uint64_t piece = std::min(count - done, kPieceBytes);
    const ssize_t n = ::pread(fd_, dst + done, piece, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw FileError(path_, "read failed: " + errno_text(errno));
    if (n == 0) {
      throw FileError(path_, "truncated: expected " + std::to_string(offset + count) + " bytes, the file has " +
                                 std::to_string(offset + done));
    }
    done += static_cast<std::uint64_t>(n);
    WorkProgress::advance(static_cast<std::uint64_t>(n));
  }
}

OutputFile::OutputFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);  // overwrite() reads back
  if (fd_ < 0) throw FileError(path_, "cannot create: " + errno_text(errno));
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
}

void OutputFile::write(const void* data, std::uint64_t count) {
  crc_.update(data, count);
  written_ += count;
  const auto* src = static_cast<const char*>(data);
  std::uint64_t done = 0;
  while (done < count) {
    const ssize_t n = ::write(fd_, src + done, std::min(count - done, kPieceBytes));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw FileError(path_, "write failed: " + errno_text(errno));
    done += static_cast<std::uint64_t>(n);
    WorkProgress::advance(static_cast<std::uint64_t>(n));
  }
}

void OutputFile::overwrite(std::uint64_t offset, const void* data, std::uint64_t count) {
  if (offset > written_ || count > written_ - offset) throw std::logic_error("OutputFile::overwrite past the end");
  std::vector<char> was(count);
  for (std::uint64_t done = 0; done < count;) {
    const ssize_t n = ::pread(fd_, was.data() + done, count - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw FileError(path_, "reading back failed: " + (n < 0 ? errno_text(errno) : "the file shrank"));
    done += static_cast<std::uint64_t>(n);
  }
  const auto* src = static_cast<const char*>(data);
  for (std::uint64_t done = 0; done < count;) {
    const ssize_t n = ::pwrite(fd_, src + done, count - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw FileError(path_, "write failed: " + errno_text(errno));
    done += static_cast<std::uint64_t>(n);
  }
  crc_.replace(was.data(), data, count, written_ - offset - count);
}

void OutputFile::finish() {
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(path_.c_str());
    throw FileError(path_, "fsync failed: " + errno_text(err));
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(path_.c_str());
    throw FileError(path_, "close failed: " + errno_text(err));
  }
}

std::string temporary_name(const std::string& path) { return path + ".tmp-" + std::to_string(::getpid()); }

void rename_into_place(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    const int err = errno;
    std::error_code ignored;
    std::filesystem::remove_all(from, ignored);
    throw FileError(to, "rename from " + from + " failed: " + errno_text(err));
  }
  const auto parent = std::filesystem::path(to).parent_path();
  fsync_directory(parent.empty() ? "." : parent.string());
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = open_regular_file(path, size_);
  if (size_ > 0) {
    void* addr = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (addr == MAP_FAILED) throw FileError(path, "mmap failed: " + errno_text(err));
    data_ = static_cast<const std::uint8_t*>(addr);
  } else {
    ::close(fd);
  }
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::uint8_t*>(data_), size_);
}

}  // namespace xtrain
