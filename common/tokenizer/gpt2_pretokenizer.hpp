// GPT-2's pre-tokenisation: text is cut into pieces before byte-pair encoding, exactly where
// tiktoken's `gpt2` regex
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (leftmost alternative first, greedy, backtracking, \s = White_Space) would cut it, written out
// as a scanner instead of a regex engine. Bytes that are not valid UTF-8 count as "other"
// (neither letter, number nor space), as the U+FFFD a decoder would put in their place does, so
// the pieces are those of the text with each ill-formed sequence replaced by U+FFFD.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace xtrain {

// The end of the piece that starts at `pos` (pos < text.size()).
std::size_t gpt2_piece_end(std::string_view text, std::size_t pos);

// Every piece of `text`, in order (their concatenation is `text`).
std::vector<std::string_view> gpt2_pieces(std::string_view text);

}  // namespace xtrain
