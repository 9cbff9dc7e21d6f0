// xtrain-data's progress on stderr: "12.3 MB of 45.6 MB (27%), 21.0 MB/s, 1,234 documents,
// 3,456,789 tokens, ETA 0:02"; on a terminal rewritten in place up to four times a second, in a log
// one line every ten seconds.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace xtrain::data_tool {

class ProgressLine {
 public:
  ProgressLine(bool enabled, std::uint64_t total_bytes);
  ~ProgressLine();  // ends a partial line on a terminal, so that an error line starts on its own
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // `documents` is left out of the line where the input does not mark them. The final update is
  // always shown (when enabled) and ends the line.
  void update(std::uint64_t bytes, std::optional<std::uint64_t> documents, std::uint64_t tokens, bool final = false);

 private:
  using Clock = std::chrono::steady_clock;
  bool enabled_, tty_;
  std::uint64_t total_;
  Clock::time_point start_, last_;
  bool shown_ = false;
};

}  // namespace xtrain::data_tool
