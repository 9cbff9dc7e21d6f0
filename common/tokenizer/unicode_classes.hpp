// The Unicode character classes that GPT-2's pre-tokenisation regex tells apart, and a UTF-8
// decoder that never fails. The classes come from a table generated from the Unicode Character
// Database (scripts/gen-unicode-classes.py -> common/tokenizer/unicode_class_table.inc); kUnicodeVersion
// says which version.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace xtrain {

enum class UnicodeClass : std::uint8_t {
  kOther = 0,       // assigned, none of the below (punctuation, symbols, marks, controls, ...)
  kLetter = 1,      // General_Category L*: \p{L}
  kNumber = 2,      // General_Category N*: \p{N}
  kSpace = 3,       // White_Space: \s as the Rust regex crate (tiktoken) defines it
  kUnassigned = 4,  // not assigned in this Unicode version (the regex sees it as "other")
};

// The Unicode version the table was generated from ("15.0.0").
std::string_view unicode_version();

// The class of a code point; anything above U+10FFFF is kUnassigned.
UnicodeClass unicode_class(char32_t code_point);

// One step of UTF-8 decoding at text[pos] (pos < text.size()). An ill-formed sequence is one unit
// of `length` bytes (its maximal subpart, as Unicode's "U+FFFD substitution of maximal subparts"
// and the WHATWG decoder delimit it) with valid == false, which a decoder would replace with
// U+FFFD.
struct Utf8Unit {
  char32_t code_point = 0;  // meaningful only when valid
  std::uint8_t length = 1;  // bytes, 1 to 4
  bool valid = true;
};
Utf8Unit decode_utf8(std::string_view text, std::size_t pos);

}  // namespace xtrain
