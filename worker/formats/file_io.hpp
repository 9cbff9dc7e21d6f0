// Plain POSIX file access for the data, checkpoint and model-file formats: whole reads and writes
// whose failures name the file and say why, and read-only memory maps for token data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/file_error.hpp"
#include "common/work_progress.hpp"
#include "worker/formats/crc32c.hpp"

namespace xtrain {

// errno as text, for messages: "No such file or directory".
std::string errno_text(int err);

// Reads, writes and checksums below advance WorkProgress (common/work_progress.hpp) as bytes go by,
// in pieces of at most 16 MiB.

// A file's size and CRC-32C, as a checkpoint's state.json records them.
struct FileChecksum {
  std::uint64_t bytes = 0;
  std::uint32_t crc32c = 0;
};

// Reads the whole file in large blocks; throws FileError.
FileChecksum checksum_file(const std::string& path);

// A file's size and CRC-32C as recorded elsewhere, and where ("state.json"): what a reader checks
// the whole file against.
struct RecordedChecksum {
  FileChecksum sum;
  std::string where;
};

// Throws FileError(path, ...) unless `actual` is what was recorded: "100 bytes, but state.json
// recorded 200 (truncated or overwritten)", "damaged: its CRC-32C is 0a1b2c3d but state.json
// recorded 4e5f6071".
void check_recorded_checksum(const std::string& path, const FileChecksum& actual, const RecordedChecksum& recorded);

// A regular file opened for reading; a directory or other non-file is refused.
class InputFile {
 public:
  explicit InputFile(const std::string& path);  // throws FileError
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  std::uint64_t size() const { return size_; }
  // Reads exactly `count` bytes at `offset`; a short file is a FileError ("truncated").
  void read_at(std::uint64_t offset, void* out, std::uint64_t count) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// A file created (or truncated) for writing. finish() fsyncs and closes it; a writer destroyed
// without finish() removes its file, so an exception never leaves a half-written one behind.
// It checksums what it writes on the way (CRC-32C, several GB/s: small next to the write).
class OutputFile {
 public:
  explicit OutputFile(std::string path);  // throws FileError
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  const std::string& path() const { return path_; }
  void write(const void* data, std::uint64_t count);
  // Rewrites `count` bytes already written at `offset` (a header whose contents are known only
  // once the data behind it are written), reading back what was there so that checksum() stays
  // that of the file as it now is.
  void overwrite(std::uint64_t offset, const void* data, std::uint64_t count);
  void finish();
  FileChecksum checksum() const { return {written_, crc_.value()}; }  // of everything written

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t written_ = 0;
  Crc32c crc_;
};

// Writes `path` through a temporary name in the same directory, fsyncs it, renames it into place
// and fsyncs the directory. `fill` writes the contents into the OutputFile it is given.
template <class Fill>
void write_file_atomically(const std::string& path, Fill&& fill);

// The temporary name write_file_atomically uses: "PATH.tmp-PID".
std::string temporary_name(const std::string& path);
void rename_into_place(const std::string& from, const std::string& to);  // rename + fsync parent

template <class Fill>
void write_file_atomically(const std::string& path, Fill&& fill) {
  const std::string tmp = temporary_name(path);
  {
    OutputFile out(tmp);
    fill(out);
    out.finish();
  }
  rename_into_place(tmp, path);
}

// A whole regular file mapped read-only. An empty file maps to data() == nullptr, size() == 0.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws FileError
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const std::uint8_t* data() const { return data_; }
  std::uint64_t size() const { return size_; }

 private:
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace xtrain
