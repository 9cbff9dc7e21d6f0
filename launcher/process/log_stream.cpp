#include "launcher/process/log_stream.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/read.hpp>
#include <spdlog/spdlog.h>

#include "launcher/process/console.hpp"

namespace xtrain::launcher {
namespace {

constexpr size_t kReadBytes = 64 * 1024;
constexpr int kPipeBytes = 1 << 20;  // Linux's default pipe-max-size: bursts of 1 MiB never block a rank

}  // namespace

bool append_to_file(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    text.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool append_line(int fd, const std::string& line) {
  struct stat st {};
  char last = '\n';
  if (::fstat(fd, &st) == 0 && st.st_size > 0) (void)!::pread(fd, &last, 1, st.st_size - 1);
  return append_to_file(fd, (last == '\n' ? "" : "\n") + line + "\n");
}

LogStream::LogStream(boost::asio::io_context& io, int rank, int log_fd, Console* console,
                     std::function<void()> on_closed, int node)
    : rank_(rank),
      prefix_(node >= 0 ? "[node " + std::to_string(node) + " rank " + std::to_string(rank) + "] "
                        : "[rank " + std::to_string(rank) + "] "),
      log_fd_(log_fd), console_(console), on_closed_(std::move(on_closed)), pipe_(io),
      buffer_(kReadBytes) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("cannot create a pipe for rank ") + std::to_string(rank) + ": " +
                             std::strerror(errno));
  }
  ::fcntl(fds[0], F_SETPIPE_SZ, kPipeBytes);  // best effort: the default 64 KiB also works
  pipe_.assign(fds[0]);
  write_fd_ = fds[1];
}

LogStream::~LogStream() { close_write_end(); }

void LogStream::close_write_end() {
  if (write_fd_ >= 0) ::close(write_fd_);
  write_fd_ = -1;
}

void LogStream::start() { read_more(); }

void LogStream::close() {
  open_ = false;
  boost::system::error_code ignored;
  pipe_.close(ignored);
}

void LogStream::read_more() {
  pipe_.async_read_some(boost::asio::buffer(buffer_),
                        [self = shared_from_this()](const boost::system::error_code& ec, size_t bytes) {
                          if (!self->open_) return;  // closed by us
                          if (bytes > 0) self->on_data(bytes);
                          if (ec) {
                            self->on_end();  // eof, or the pipe broke: either way nothing more comes
                          } else {
                            self->read_more();
                          }
                        });
}

void LogStream::on_data(size_t bytes) {
  const std::string_view chunk(buffer_.data(), bytes);
  if (!append_to_file(log_fd_, chunk) && !file_error_reported_) {
    file_error_reported_ = true;
    spdlog::error("rank {}: writing logs/rank-{}.log failed: {}; the console still gets its lines", rank_, rank_,
                  std::strerror(errno));
  }
  std::string lines;
  size_t count = 0;
  if (console_) lines.reserve(bytes + bytes / 8);
  splitter_.feed(chunk, [&](std::string_view line) {
    keep_in_tail(line);
    if (!console_) return;
    lines.append(prefix_).append(line).push_back('\n');
    ++count;
  });
  if (count > 0) console_->rank_lines(std::move(lines), count);
}

void LogStream::on_end() {
  splitter_.finish([&](std::string_view line) {
    keep_in_tail(line);
    if (console_) console_->rank_lines(prefix_ + std::string(line) + "\n", 1);
  });
  close();
  if (on_closed_) on_closed_();
}

void LogStream::keep_in_tail(std::string_view line) {
  if (tail_.size() == kTailLines) tail_.pop_front();
  tail_.emplace_back(line.substr(0, kTailLineBytes));
  if (line.size() > kTailLineBytes) tail_.back() += " [...]";
}

}  // namespace xtrain::launcher
