// llm.c's tokenizer file, what its sampler reads as gpt2_tokenizer.bin: a header of 256 uint32
// [20240328 (kLlmcTokenizerMagic), version, vocab size, eot id, 0...] (version 1 names no eot id:
// GPT-2's 50256), then each token's bytes as one uint8 length and the bytes. It decodes only:
// without the merges there is no way back from text to tokens, so llm.c's sampler starts from
// <|endoftext|>. It comes beside llm.c's model files (common/model_file.hpp), and our llm.c export
// writes one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xtrain {

struct LlmcTokenizer {
  std::string path;                 // where it was read, or the vocabulary it was made from
  std::vector<std::string> tokens;  // (vocab) each token's bytes
  std::int32_t eot = 0;
};

// Throws FileError naming the file: a wrong magic or version, an eot id outside the vocabulary, a
// token of no bytes, or a size other than its tokens'.
LlmcTokenizer read_llmc_tokenizer(const std::string& path);

// `table` as the file's bytes, version 2. Throws FileError naming table.path for a token of no
// bytes or more than 255 (the format's length is one byte).
std::string llmc_tokenizer_bytes(const LlmcTokenizer& table);

}  // namespace xtrain
