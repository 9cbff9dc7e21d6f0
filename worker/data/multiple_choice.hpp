// Multiple-choice evaluation files as llm.c's dev/data scripts write them (hellaswag.py through
// data_common.py's write_evalfile) and its EvalLoader reads them:
//   header: 256 int32 [magic 20240522, version 1, examples, longest example in bytes, 0...]
//   then per example a stream of uint16: 65535 (start), the example's size in bytes (these
//   fields included), its index, the label (the correct completion), the number of completions,
//   the context's length and tokens, then each completion's length and tokens.
// Scored as llm.c scores them: each completion's mean loss over its own tokens, each predicted
// from the context and the completion's tokens before it; the lowest mean wins.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xtrain {

inline constexpr std::int32_t kMultipleChoiceMagic = 20240522;

struct ChoiceExample {
  int index = 0;  // as the file numbers it
  int label = 0;
  std::vector<std::int32_t> context;
  std::vector<std::vector<std::int32_t>> completions;
};

// Reads and checks the whole file. Throws DataError(field, "PATH: ...") (`field`: the flag or spec
// key that named the file) for a missing or unreadable file, naming the header field, or the example (by its position in the file, from 0) and what is wrong with it:
// a missing start mark, a size that disagrees with its fields, a label outside its completions,
// an empty context or completion, a token at or above `vocab_size`, a file that ends inside it.
std::vector<ChoiceExample> read_multiple_choice(const std::string& path, int vocab_size, const std::string& field);

}  // namespace xtrain
