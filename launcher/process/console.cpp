#include "launcher/process/console.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fcntl.h>
#include <unistd.h>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace xtrain::launcher {
namespace {

// Writes all of `text`; false once the fd is unusable (a closed pipe: EPIPE, SIGPIPE is ignored).
bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string dropped_notice(size_t lines) {
  return "[xlaunch] console fell behind: " + std::to_string(lines) + " lines dropped (all are in logs/)\n";
}

// Every xlaunch event goes to logs/xlaunch.log with a time stamp and, unless detached, to the
// console. The file is opened O_CLOEXEC so that ranks do not inherit it.
class SupervisorSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // `earlier`: lines already said on the console (the plan's warnings), for the file only.
  SupervisorSink(Console* console, const std::string& path, const std::vector<std::string>& earlier)
      : console_(console) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
    for (const std::string& line : earlier) write_all(fd_, line);
  }
  ~SupervisorSink() override { ::close(fd_); }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    write_all(fd_, fmt::to_string(formatted));
    if (!console_) return;
    console_->message("[xlaunch] " + std::string(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override {}

 private:
  Console* console_;
  int fd_ = -1;
};

}  // namespace

Console::Console(size_t backlog_limit_bytes)
    : backlog_limit_(backlog_limit_bytes), thread_([this] { run(); }) {}

Console::~Console() {
  {
    std::lock_guard lock(mu_);
    if (dropped_lines_ > 0) enqueue({STDERR_FILENO, dropped_notice(dropped_lines_), false});
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void Console::enqueue(Item item) {
  if (item.counted) backlog_bytes_ += item.text.size();
  queue_.push_back(std::move(item));
}

void Console::rank_lines(std::string text, size_t line_count) {
  {
    std::lock_guard lock(mu_);
    if (backlog_bytes_ + text.size() > backlog_limit_) {
      dropped_lines_ += line_count;
      return;
    }
    if (dropped_lines_ > 0) {
      enqueue({STDERR_FILENO, dropped_notice(dropped_lines_), false});
      dropped_lines_ = 0;
    }
    enqueue({STDOUT_FILENO, std::move(text), true});
  }
  wake_.notify_one();
}

void Console::message(const std::string& line) {
  {
    std::lock_guard lock(mu_);
    enqueue({STDERR_FILENO, line + "\n", false});
  }
  wake_.notify_one();
}

void Console::flush() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [this] { return queue_.empty() && !writing_; });
}

void Console::run() {
  bool usable[3] = {true, true, true};  // per fd: false after a write error
  std::unique_lock lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything is written
    std::deque<Item> batch;
    batch.swap(queue_);
    writing_ = true;
    lock.unlock();
    size_t counted = 0;
    for (const Item& item : batch) {
      if (usable[item.fd]) usable[item.fd] = write_all(item.fd, item.text);
      if (item.counted) counted += item.text.size();
    }
    lock.lock();
    backlog_bytes_ -= counted;
    writing_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
}

// The supervisor's log file's line format.
constexpr const char* kLogPattern = "%Y-%m-%d %H:%M:%S.%e [%n] %l: %v";

void init_command_logging() {
  auto console = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  console->set_pattern("xlaunch: %l: %v");
  // Kept for the run's log file, which does not exist yet (a plan says a few lines at most).
  auto kept = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  kept->set_pattern(kLogPattern);
  auto logger = std::make_shared<spdlog::logger>("xlaunch", spdlog::sinks_init_list{console, kept});
  logger->set_level(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

void init_supervisor_logging(Console* console, const std::string& log_file) {
  std::vector<std::string> earlier;
  for (const auto& sink : spdlog::default_logger()->sinks()) {
    if (const auto kept = std::dynamic_pointer_cast<spdlog::sinks::ringbuffer_sink_mt>(sink)) {
      for (std::string& line : kept->last_formatted()) earlier.push_back(std::move(line));
    }
  }
  auto sink = std::make_shared<SupervisorSink>(console, log_file, earlier);
  auto logger = std::make_shared<spdlog::logger>("xlaunch", sink);
  logger->set_pattern(kLogPattern);
  logger->set_level(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace xtrain::launcher
