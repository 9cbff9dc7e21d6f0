#include "worker/formats/text_stream.hpp"

#include <algorithm>

namespace xtrain {

size_t unfinished_utf8_tail(std::string_view bytes) {
  // A character is at most 4 bytes: its lead byte is among the last 3 if it is unfinished.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const auto c = static_cast<unsigned char>(bytes[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: the lead is further back
    size_t length = 1;  // ASCII, or a byte that never leads (0xC0, 0xC1, 0xF5 and above)
    if (c >= 0xC2 && c <= 0xDF) length = 2;
    if (c >= 0xE0 && c <= 0xEF) length = 3;
    if (c >= 0xF0 && c <= 0xF4) length = 4;
    return back < length ? back : 0;
  }
  return 0;
}

std::string TextStream::push(std::string_view bytes) {
  if (stopped_) return "";
  pending_.append(bytes);
  if (!stop_.empty()) {
    const size_t at = pending_.find(stop_);
    if (at != std::string::npos) {
      stopped_ = true;
      std::string out = pending_.substr(0, at);
      pending_.clear();
      return out;
    }
  }
  // Hold back the longest end that could still become the stop text, and an unfinished character.
  size_t hold = unfinished_utf8_tail(pending_);
  for (size_t k = std::min(stop_.size() - (stop_.empty() ? 0 : 1), pending_.size()); k > hold; --k) {
    if (std::string_view(pending_).substr(pending_.size() - k) == std::string_view(stop_).substr(0, k)) {
      hold = k;
      break;
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string TextStream::finish() {
  std::string out = stopped_ ? "" : pending_;
  pending_.clear();
  return out;
}

}  // namespace xtrain
