// The console: rank lines to stdout, xlaunch's own lines to stderr, all written by one thread.
// Producers only queue, so a slow terminal or a full pipe never blocks the rank pipe readers;
// each queued item holds whole lines, so lines never interleave mid-line. Rank lines are
// dropped (and counted) while the backlog is over its limit; the log files keep everything.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace xtrain::launcher {

class Console {
 public:
  static constexpr std::size_t kDefaultBacklogBytes = std::size_t{64} << 20;

  explicit Console(std::size_t backlog_limit_bytes = kDefaultBacklogBytes);
  ~Console();  // writes everything queued, then stops the thread
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  // `text` is `line_count` whole lines, each ending in '\n'.
  void rank_lines(std::string text, std::size_t line_count);
  // One line of xlaunch's own, without the '\n'; never dropped.
  void message(const std::string& line);
  // Blocks until everything queued so far is written.
  void flush();

 private:
  struct Item {
    int fd;
    std::string text;
    bool counted;  // part of the droppable backlog
  };
  void enqueue(Item item);  // mu_ held
  void run();

  const std::size_t backlog_limit_;
  std::mutex mu_;
  std::condition_variable wake_;  // work queued, or stopping
  std::condition_variable idle_;  // queue empty and nothing in flight
  std::deque<Item> queue_;
  std::size_t backlog_bytes_ = 0;  // queued or in-flight rank bytes
  std::size_t dropped_lines_ = 0;  // since the last notice
  bool writing_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

// Makes spdlog's default logger write to stderr as "xlaunch: warning: message", as the errors are:
// what the plan says before any run dir or console exists, so that stdout carries only a
// command's own output (--dry-run's JSON, --check's line).
void init_command_logging();

// Makes spdlog's default logger write xlaunch's events to `log_file` (time-stamped, appended)
// and, when `console` is not null, to the console as "[xlaunch] message". The file first gets what
// init_command_logging's logger said (the plan's warnings), already on the console.
void init_supervisor_logging(Console* console, const std::string& log_file);

}  // namespace xtrain::launcher
