// One rank's output during one attempt. The rank's stdout and stderr share one pipe (like 2>&1,
// so their relative order is kept). Bytes go unmodified to logs/rank-R.log as they arrive;
// whole lines go, prefixed "[rank R] ", to the console when this rank is teed, and the last
// lines are kept for the failure report.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

namespace xtrain::launcher {

class Console;

// Cuts a byte stream into lines (without their '\n'). A line longer than kMaxLineBytes is
// passed on in pieces of that size, so a rank that never prints '\n' cannot exhaust memory.
class LineSplitter {
 public:
  static constexpr size_t kMaxLineBytes = size_t{1} << 20;

  template <class OnLine>
  void feed(std::string_view chunk, OnLine&& on_line) {
    while (!chunk.empty()) {
      const size_t newline = chunk.find('\n');
      const size_t take = std::min(newline == std::string_view::npos ? chunk.size() : newline,
                                   kMaxLineBytes - partial_.size());
      const std::string_view piece = chunk.substr(0, take);
      const bool complete = take == newline || partial_.size() + take == kMaxLineBytes;
      chunk.remove_prefix(take == newline ? take + 1 : take);
      if (!complete) {
        partial_.append(piece);
      } else if (partial_.empty()) {
        on_line(piece);
      } else {
        partial_.append(piece);
        on_line(std::string_view(partial_));
        partial_.clear();
      }
    }
  }

  // At end of stream: the last line if it had no '\n'.
  template <class OnLine>
  void finish(OnLine&& on_line) {
    if (!partial_.empty()) on_line(std::string_view(partial_));
    partial_.clear();
  }

 private:
  std::string partial_;
};

// Appends all of `text` to `fd` with write(2). Returns false on an error (errno set).
bool append_to_file(int fd, std::string_view text);

// Appends `line` and '\n' to the log file `fd`, on a line of its own even when the file ends in
// a rank's last line without a newline.
bool append_line(int fd, const std::string& line);

class LogStream : public std::enable_shared_from_this<LogStream> {
 public:
  static constexpr size_t kTailLines = 20;
  static constexpr size_t kTailLineBytes = 400;  // longer lines are cut in the report

  // `console` null = this rank is not teed. `on_closed` runs once, at end of stream. `node` >= 0:
  // console lines read "[node N rank R] " (a job on several nodes).
  LogStream(boost::asio::io_context& io, int rank, int log_fd, Console* console, std::function<void()> on_closed,
            int node = -1);
  ~LogStream();

  int write_end() const { return write_fd_; }  // for the child's stdout and stderr
  void close_write_end();                       // after the spawn: the child holds its copy
  void start();
  void close();                                 // stop reading; on_closed is not called
  bool is_open() const { return open_; }
  std::vector<std::string> tail() const { return {tail_.begin(), tail_.end()}; }

 private:
  void read_more();
  void on_data(size_t bytes);
  void on_end();
  void keep_in_tail(std::string_view line);

  const int rank_;
  const std::string prefix_;  // "[rank R] " or "[node N rank R] "
  const int log_fd_;
  Console* const console_;
  std::function<void()> on_closed_;
  boost::asio::posix::stream_descriptor pipe_;
  int write_fd_ = -1;
  bool open_ = true;
  bool file_error_reported_ = false;
  std::vector<char> buffer_;
  LineSplitter splitter_;
  std::deque<std::string> tail_;
};

}  // namespace xtrain::launcher
