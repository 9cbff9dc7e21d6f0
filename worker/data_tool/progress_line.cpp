#include "worker/data_tool/progress_line.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "common/number_format.hpp"

namespace xtrain::data_tool {

ProgressLine::ProgressLine(bool enabled, std::uint64_t total_bytes)
    : enabled_(enabled), tty_(::isatty(STDERR_FILENO) == 1), total_(total_bytes), start_(Clock::now()), last_(start_) {}

ProgressLine::~ProgressLine() {
  if (shown_ && tty_) std::fputc('\n', stderr);
}

void ProgressLine::update(std::uint64_t bytes, std::optional<std::uint64_t> documents, std::uint64_t tokens,
                          bool final) {
  const auto now = Clock::now();
  if (!enabled_ || (!final && now - last_ < (tty_ ? std::chrono::milliseconds(250) : std::chrono::seconds(10)))) return;
  last_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const double rate = seconds > 0 ? static_cast<double>(bytes) / seconds : 0;
  const double eta = rate > 0 ? static_cast<double>(total_ - std::min(bytes, total_)) / rate : 0;
  const std::string counted =
      documents ? with_thousands(static_cast<long long>(*documents)) + " documents, " : std::string();
  char line[256];
  std::snprintf(line, sizeof line, "xtrain-data: %.1f MB of %.1f MB (%.0f%%), %.1f MB/s, %s%s tokens, ETA %d:%02d",
                static_cast<double>(bytes) / 1e6, static_cast<double>(total_) / 1e6,
                total_ ? 100.0 * static_cast<double>(bytes) / static_cast<double>(total_) : 100.0, rate / 1e6,
                counted.c_str(), with_thousands(static_cast<long long>(tokens)).c_str(), static_cast<int>(eta) / 60,
                static_cast<int>(eta) % 60);
  if (tty_) {
    std::fprintf(stderr, "\r%-130s%s", line, final ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line);
  }
  shown_ = !final;
}

}  // namespace xtrain::data_tool
