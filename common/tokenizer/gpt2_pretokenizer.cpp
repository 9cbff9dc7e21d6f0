#include "common/tokenizer/gpt2_pretokenizer.hpp"

#include <array>
#include <cstdint>

#include "common/tokenizer/unicode_classes.hpp"

namespace xtrain {
namespace {

constexpr std::array<UnicodeClass, 128> ascii_classes() {
  std::array<UnicodeClass, 128> classes{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      classes[c] = UnicodeClass::kLetter;
    } else if (c >= '0' && c <= '9') {
      classes[c] = UnicodeClass::kNumber;
    } else if (c == ' ' || (c >= '\t' && c <= '\r')) {
      classes[c] = UnicodeClass::kSpace;
    } else {
      classes[c] = UnicodeClass::kOther;
    }
  }
  return classes;
}
constexpr std::array<UnicodeClass, 128> kAsciiClasses = ascii_classes();

struct Char {
  UnicodeClass cls;  // never kUnassigned: the regex sees unassigned code points as "other"
  std::size_t length;
};

inline Char char_at(std::string_view text, std::size_t pos) {
  const auto byte = static_cast<unsigned char>(text[pos]);
  if (byte < 0x80) return {kAsciiClasses[byte], 1};
  const Utf8Unit unit = decode_utf8(text, pos);
  if (!unit.valid) return {UnicodeClass::kOther, unit.length};
  const UnicodeClass cls = unicode_class(unit.code_point);
  return {cls == UnicodeClass::kUnassigned ? UnicodeClass::kOther : cls, unit.length};
}

// The end of the run of characters of class `cls` that continues at `pos`.
std::size_t run_end(std::string_view text, std::size_t pos, UnicodeClass cls) {
  while (pos < text.size()) {
    const Char c = char_at(text, pos);
    if (c.cls != cls) break;
    pos += c.length;
  }
  return pos;
}

// 's|'t|'re|'ve|'m|'ll|'d at `pos` (which holds an apostrophe): the contraction's length, or 0.
std::size_t contraction_length(std::string_view text, std::size_t pos) {
  const std::string_view rest = text.substr(pos + 1);
  if (rest.empty()) return 0;
  const char c = rest[0];
  if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
  if (rest.starts_with("re") || rest.starts_with("ve") || rest.starts_with("ll")) return 3;
  return 0;
}

}  // namespace

std::size_t gpt2_piece_end(std::string_view text, std::size_t pos) {
  if (text[pos] == '\'') {
    if (const std::size_t n = contraction_length(text, pos)) return pos + n;
  }
  // " ?X+" for X = letters, numbers, other: an optional leading space joins the run after it.
  if (text[pos] == ' ' && pos + 1 < text.size()) {
    const Char next = char_at(text, pos + 1);
    if (next.cls != UnicodeClass::kSpace) return run_end(text, pos + 1 + next.length, next.cls);
  }
  const Char first = char_at(text, pos);
  if (first.cls != UnicodeClass::kSpace) return run_end(text, pos + first.length, first.cls);

  // \s+(?!\S) | \s+ : the whole run of white space when it ends the text; before anything else,
  // all but its last character (which then leads the next piece), or that one character alone.
  std::size_t last = pos;
  std::size_t end = pos + first.length;
  while (end < text.size()) {
    const Char c = char_at(text, end);
    if (c.cls != UnicodeClass::kSpace) break;
    last = end;
    end += c.length;
  }
  if (end == text.size() || last == pos) return end;
  return last;
}

std::vector<std::string_view> gpt2_pieces(std::string_view text) {
  std::vector<std::string_view> pieces;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = gpt2_piece_end(text, pos);
    pieces.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return pieces;
}

}  // namespace xtrain
