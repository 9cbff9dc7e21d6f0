// Generated text as it is printed: whole UTF-8 characters only, however the tokens split them,
// and never the stop text, however the tokens split it.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "worker/formats/text_stream.hpp"

using namespace xtrain;

namespace {

// Pushes `pieces` one after another; returns what each push printed.
std::vector<std::string> pushes(TextStream& s, const std::vector<std::string>& pieces) {
  std::vector<std::string> out;
  for (const auto& p : pieces) out.push_back(s.push(p));
  return out;
}

}  // namespace

TEST_CASE("A character split across tokens is printed once it is whole", "[text_stream]") {
  TextStream s;
  // "é" is C3 A9, "€" E2 82 AC, "😀" F0 9F 98 80.
  const auto out = pushes(s, {"a\xC3", "\xA9", "\xE2\x82", "\xAC!", "\xF0\x9F\x98", "\x80"});
  CHECK(out == std::vector<std::string>{"a", "\xC3\xA9", "", "\xE2\x82\xAC!", "", "\xF0\x9F\x98\x80"});
  CHECK(s.finish().empty());
}

TEST_CASE("Bytes that are not UTF-8 are printed as they are, an unfinished end at finish", "[text_stream]") {
  TextStream s;
  CHECK(s.push("\xFF\x80x") == "\xFF\x80x");  // never a lead byte, a stray continuation byte
  CHECK(s.push("\xC0") == "\xC0");            // 0xC0 never leads a valid character
  CHECK(s.push("\xE2\x82") == "");
  CHECK(s.finish() == "\xE2\x82");
  CHECK(unfinished_utf8_tail("ab\xF0\x9F") == 2);
  CHECK(unfinished_utf8_tail("ab\xF0\x9F\x98\x80") == 0);
  CHECK(unfinished_utf8_tail("") == 0);
}

TEST_CASE("The stop text ends the stream and is never printed, even split across tokens", "[text_stream]") {
  TextStream s("\n\n");
  CHECK(s.push("one\n") == "one");  // the newline may begin the stop text
  CHECK(s.push("two") == "\ntwo");  // it did not
  CHECK(s.push("\n") == "");
  CHECK(s.push("\nthree") == "");
  CHECK(s.stopped());
  CHECK(s.push("more").empty());
  CHECK(s.finish().empty());

  TextStream whole("END");
  CHECK(whole.push("abcENDdef") == "abc");
  CHECK(whole.stopped());

  TextStream held("END");
  CHECK(held.push("xEN") == "x");
  CHECK(held.finish() == "EN");  // the stream ended before the stop text was complete
}
