#include "common/tokenizer/unicode_classes.hpp"

#include <algorithm>
#include <iterator>

namespace xtrain {
namespace {

#include "common/tokenizer/unicode_class_table.inc"

constexpr int kClassBits = 3;

}  // namespace

std::string_view unicode_version() { return kUnicodeVersion; }

UnicodeClass unicode_class(char32_t code_point) {
  if (code_point > 0x10FFFF) return UnicodeClass::kUnassigned;
  // The last run that starts at or before the code point. The class bits never reach the next
  // code point's key, so comparing keys compares first code points.
  const std::uint32_t key = (static_cast<std::uint32_t>(code_point) << kClassBits) | ((1u << kClassBits) - 1);
  const auto* run = std::upper_bound(std::begin(kUnicodeClassRuns), std::end(kUnicodeClassRuns), key) - 1;
  return static_cast<UnicodeClass>(*run & ((1u << kClassBits) - 1));
}

Utf8Unit decode_utf8(std::string_view text, std::size_t pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const unsigned lead = s[pos];
  if (lead < 0x80) return {lead, 1, true};
  // Well-formed sequences (Unicode table 3-7): the lead byte fixes the length and the range of
  // the first continuation byte (which excludes overlong forms, surrogates and > U+10FFFF).
  int continuation;
  char32_t code_point;
  unsigned low = 0x80, high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    continuation = 1;
    code_point = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    continuation = 2;
    code_point = lead & 0x0F;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    continuation = 3;
    code_point = lead & 0x07;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return {0, 1, false};  // a continuation byte without a lead, C0, C1, F5..FF
  }
  std::uint8_t length = 1;
  for (int i = 0; i < continuation; ++i) {
    if (pos + length >= text.size()) return {0, length, false};
    const unsigned byte = s[pos + length];
    if (byte < low || byte > high) return {0, length, false};
    code_point = (code_point << 6) | (byte & 0x3F);
    ++length;
    low = 0x80;
    high = 0xBF;
  }
  return {code_point, length, true};
}

}  // namespace xtrain
