// Generated text as it can be printed: the decoded bytes of each new token go in, and out comes
// what ends in whole UTF-8 characters (a character split across tokens waits for its last byte),
// up to a stop text that is never printed (bytes that may begin it wait until they cannot).
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace xtrain {

class TextStream {
 public:
  explicit TextStream(std::string stop = "") : stop_(std::move(stop)) {}

  // Appends `bytes` and returns what may be printed now. Once the stop text appeared (stopped()),
  // returns "" for every further call.
  std::string push(std::string_view bytes);
  // The bytes still held back (an unfinished character or the start of the stop text), at the end.
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::string stop_;
  std::string pending_;
  bool stopped_ = false;
};

// The length of the end of `bytes` that is an unfinished UTF-8 character (a lead byte and fewer
// continuation bytes than it announces): 0 when `bytes` ends on a character boundary or on bytes
// that are not UTF-8 (those are printed as they are).
size_t unfinished_utf8_tail(std::string_view bytes);

}  // namespace xtrain
