// GPT-2's byte-level BPE tokenizer: loads the released vocabulary, encodes text exactly as
// tiktoken's `gpt2` encoding does (token for token), decodes exactly (every byte sequence).
//
// Encoding: the pre-tokeniser (common/tokenizer/gpt2_pretokenizer.hpp) cuts the text into pieces; a piece
// that is itself a token is that token, otherwise its bytes are merged pairwise, always the
// adjacent pair whose concatenation has the lowest merge rank (leftmost on a tie), until no
// adjacent pair concatenates to a mergeable token: tiktoken's algorithm. "<|endoftext|>" in the
// text is ordinary text; eot() is the id to put between documents. Bytes that are not valid UTF-8
// are encoded as byte tokens, so decode(encode(x)) == x for every x (tiktoken, which takes only
// Unicode strings, would have replaced them with U+FFFD first).
//
// Thread safety: a loaded tokenizer is immutable and may be shared; encode() keeps a bounded cache
// of recent pieces per thread, so threads never contend.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace xtrain {

struct Gpt2Vocabulary;  // the loaded tables (common/tokenizer/gpt2_vocabulary.hpp)

// A vocabulary that cannot be read or is inconsistent, or an id that decode() cannot map.
// what() is "PATH:LINE: MESSAGE" (line 0 is left out: "PATH: MESSAGE"), one line.
class TokenizerError : public std::runtime_error {
 public:
  TokenizerError(std::string path, int line, const std::string& message);
  const std::string& path() const { return path_; }
  int line() const { return line_; }  // 1-based; 0 when not about one line

 private:
  std::string path_;
  int line_ = 0;
};

class Gpt2Tokenizer {
 public:
  // `path`: a directory holding encoder.json + vocab.bpe (OpenAI's release) or vocab.json +
  // merges.txt (Hugging Face's), or the path of one of those files (its partner is looked up
  // beside it). Throws TokenizerError.
  static Gpt2Tokenizer load(const std::string& path);

  std::vector<std::int32_t> encode(std::string_view text) const;
  void encode(std::string_view text, std::vector<std::int32_t>& out) const;  // appends to out

  // The bytes of the tokens, concatenated. Throws TokenizerError for an id outside [0, vocab_size()).
  std::string decode(std::span<const std::int32_t> tokens) const;
  std::string decode_token(std::int32_t token) const;

  int vocab_size() const;     // 50257 for GPT-2
  std::int32_t eot() const;   // the id of <|endoftext|> (50256 for GPT-2)
  std::string source() const;  // the files it was loaded from, for logs: "DIR/encoder.json + DIR/vocab.bpe"

 private:
  explicit Gpt2Tokenizer(std::shared_ptr<const Gpt2Vocabulary> vocabulary);
  std::shared_ptr<const Gpt2Vocabulary> vocabulary_;
};

}  // namespace xtrain
