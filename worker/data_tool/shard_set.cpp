#include "worker/data_tool/shard_set.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <regex>
#include <stdexcept>

#include "common/atomic_file.hpp"
#include "worker/data_tool/documents.hpp"
#include "worker/data/token_source.hpp"

namespace xtrain::data_tool {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what + ": " + std::strerror(errno));
}

// Names that xtrain-data writes (under any prefix): an existing output holding only these is replaced.
bool is_shard_name(const std::string& name) {
  static const std::regex shard(R"(.*_(val|train)_[0-9]{6}\.bin)");
  return std::regex_match(name, shard);
}

}  // namespace

// One shard being written: the header (its count filled in at the end), then uint16 tokens through
// a buffer. complete() fsyncs it and renames FILE.partial to FILE.
class ShardFile {
 public:
  explicit ShardFile(std::string path) : path_(std::move(path)), partial_(path_ + ".partial") {
    fd_ = ::open(partial_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) fail(partial_, "cannot create");
    std::array<std::int32_t, kShardHeaderBytes / sizeof(std::int32_t)> header{};
    header[0] = kShardMagic;
    header[1] = kShardVersion;
    write_all(header.data(), sizeof header);
    buffer_.reserve(kBufferTokens);
  }
  ~ShardFile() {
    if (fd_ >= 0) ::close(fd_);
  }

  std::uint64_t tokens() const { return count_; }

  void append(std::span<const std::int32_t> tokens) {
    for (const std::int32_t t : tokens) {
      buffer_.push_back(static_cast<std::uint16_t>(t));
      max_token_ = std::max(max_token_, t);
      if (buffer_.size() == kBufferTokens) flush();
    }
    count_ += tokens.size();
  }

  void complete() {
    flush();
    const auto count = static_cast<std::int32_t>(count_);
    if (::pwrite(fd_, &count, sizeof count, 2 * sizeof(std::int32_t)) != sizeof count) fail(partial_, "write failed");
    if (count_ > 0) {  // the largest token, so that a launcher checks the range from the header alone
      const std::int32_t record[2] = {kShardMaxTokenTag, max_token_};
      if (::pwrite(fd_, record, sizeof record, kShardMaxTokenWord * sizeof(std::int32_t)) != sizeof record) {
        fail(partial_, "write failed");
      }
    }
    if (::fsync(fd_) != 0) fail(partial_, "fsync failed");
    if (::close(fd_) != 0) fail(partial_, "close failed");
    fd_ = -1;
    if (::rename(partial_.c_str(), path_.c_str()) != 0) fail(path_, "rename failed");
  }

 private:
  static constexpr std::size_t kBufferTokens = 1 << 19;  // 1 MiB

  void flush() {
    write_all(buffer_.data(), buffer_.size() * sizeof(std::uint16_t));
    buffer_.clear();
  }
  void write_all(const void* data, std::size_t bytes) {
    const auto* p = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t n = ::write(fd_, p, bytes);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail(partial_, "write failed");
      p += n;
      bytes -= static_cast<std::size_t>(n);
    }
  }

  std::string path_, partial_;
  int fd_ = -1;
  std::uint64_t count_ = 0;
  std::int32_t max_token_ = 0;
  std::vector<std::uint16_t> buffer_;
};

ShardSet::ShardSet(Options options) : options_(std::move(options)) {
  const fs::path out = fs::path(options_.out_dir).lexically_normal();
  const fs::path dir = out.filename().empty() ? out.parent_path() : out;  // "data/x/" -> "data/x"
  options_.out_dir = dir.string();
  const fs::path parent = dir.parent_path().empty() ? fs::path(".") : dir.parent_path();
  staging_ = (parent / ("." + dir.filename().string() + ".xtrain-data-tmp")).string();

  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) throw BadInput(options_.out_dir + ": exists and is not a directory");
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (!entry.is_regular_file() || !is_shard_name(name)) {
        throw BadInput(options_.out_dir + ": holds " + name +
                         ", which xtrain-data did not write; the output directory is replaced as a whole, so "
                         "give a new one (or empty this one)");
      }
    }
  }
  if (!fs::create_directories(parent, ec) && ec) {
    throw BadInput(parent.string() + ": cannot create the output's parent directory: " + ec.message());
  }

  // The staging directory: fresh, and locked for as long as this run writes it.
  for (int attempt = 0;; ++attempt) {
    if (::mkdir(staging_.c_str(), 0755) == 0) break;
    if (errno != EEXIST || attempt > 0) {
      throw BadInput(staging_ + ": cannot create the staging directory: " + std::strerror(errno));
    }
    const int fd = ::open(staging_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const bool busy = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0;
    if (fd >= 0) ::close(fd);
    if (busy) throw BadInput(options_.out_dir + ": another xtrain-data is writing it (" + staging_ + " is locked)");
    std::fprintf(stderr, "xtrain-data: removing %s, left by an interrupted run\n", staging_.c_str());
    fs::remove_all(staging_, ec);
  }
  lock_fd_ = ::open(staging_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) fail(staging_, "cannot lock the staging directory");
  in_val_ = options_.val_tokens > 0;
}

ShardSet::~ShardSet() {
  shard_.reset();
  if (!finished_) remove_staging();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void ShardSet::remove_staging() noexcept {
  std::error_code ignored;
  fs::remove_all(staging_, ignored);
}

void ShardSet::begin_document() {
  if (in_val_ && val_.tokens >= options_.val_tokens) {
    end_split();
    close_shard();
    in_val_ = false;
  }
  ++(in_val_ ? val_ : train_).documents;
}

void ShardSet::append(std::span<const std::int32_t> tokens) {
  // The input's one document reaching val_tokens is cut there: the rest of it is training data.
  if (options_.one_document && in_val_ && val_.tokens + tokens.size() > options_.val_tokens) {
    const std::size_t keep = options_.val_tokens - val_.tokens;
    write(tokens.first(keep));
    cut_at_ = val_.tokens;
    end_split();
    close_shard();
    in_val_ = false;
    ++train_.documents;
    tokens = tokens.subspan(keep);
  }
  write(tokens);
}

void ShardSet::write(std::span<const std::int32_t> tokens) {
  Split& split = in_val_ ? val_ : train_;
  while (!tokens.empty()) {
    if (!shard_) {
      char name[32];
      std::snprintf(name, sizeof name, "_%s_%06d.bin", in_val_ ? "val" : "train", next_index_++);
      shard_ = std::make_unique<ShardFile>(staging_ + "/" + options_.prefix + name);
      ++split.shards;
    }
    const std::size_t n = std::min<std::uint64_t>(tokens.size(), options_.shard_tokens - shard_->tokens());
    shard_->append(tokens.first(n));
    split.tokens += n;
    tokens = tokens.subspan(n);
    if (shard_->tokens() == options_.shard_tokens) close_shard();
  }
}

void ShardSet::end_split() {
  const Split& split = in_val_ ? val_ : train_;
  if (options_.end_token < 0 || split.tokens == 0) return;
  const std::int32_t token = options_.end_token;
  write(std::span(&token, 1));
}

void ShardSet::close_shard() {
  if (!shard_) return;
  shard_->complete();
  shard_.reset();
}

void ShardSet::finish() {
  end_split();
  close_shard();
  if (train_.tokens == 0) {
    throw BadInput(val_.tokens == 0 ? "the input holds no text"
                                      : "all " + std::to_string(val_.tokens) +
                                            " tokens went to validation (--val-tokens " +
                                            std::to_string(options_.val_tokens) +
                                            "), none are left to train on: give a smaller --val-tokens (or 0: "
                                            "no validation split)");
  }
  fsync_directory(staging_);
  const fs::path out(options_.out_dir);
  const fs::path old = fs::path(staging_).replace_filename("." + out.filename().string() + ".xtrain-data-old");
  std::error_code ec;
  fs::remove_all(old, ec);
  const bool replacing = fs::exists(out);
  if (replacing && ::rename(out.c_str(), old.c_str()) != 0) fail(out.string(), "cannot move the old output aside");
  if (::rename(staging_.c_str(), out.c_str()) != 0) {
    const int err = errno;
    if (replacing) ::rename(old.c_str(), out.c_str());  // put the old output back
    errno = err;
    fail(out.string(), "cannot rename " + staging_ + " to it");
  }
  finished_ = true;
  fsync_directory(out.parent_path().empty() ? "." : out.parent_path().string());
  fs::remove_all(old, ec);
}

}  // namespace xtrain::data_tool
