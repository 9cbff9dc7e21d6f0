// Text to the model's tokens and back, for the sample after training and for bits per byte:
// bytes for byte-level data (a text file: one token per byte), the GPT-2 tokenizer (the spec's
// `tokenizer`) for llm.c token shards. Token shards without a tokenizer have no text.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/tokenizer/gpt2_tokenizer.hpp"
#include "common/job_spec.hpp"

namespace xtrain {

class TextCodec {
 public:
  // The codec of a run whose training data is byte-level (`byte_level`) or token shards. Loads
  // spec.tokenizer, which must have exactly model.vocab_size tokens and go with token shards.
  // Throws SpecError("tokenizer", ...) naming the files and the mismatch.
  static TextCodec for_run(const JobSpec& spec, bool byte_level);
  // The codec of data that is bytes (`byte_level`: one token per byte, and then no tokenizer) or
  // tokens of `tokenizer` (none: tokens without text).
  static TextCodec of(std::optional<Gpt2Tokenizer> tokenizer, bool byte_level);
  // A codec that counts bytes only, from each token's bytes (`eot` stands for none): llm.c's
  // tokenizer file, which cannot encode.
  static TextCodec counting(const std::vector<std::string>& token_bytes, std::int32_t eot);

  bool has_text() const { return byte_level_ || tokenizer_.has_value(); }  // encodes and decodes
  bool counts_bytes() const { return byte_level_ || !token_bytes_.empty(); }
  std::string name() const;  // "bytes", or the tokenizer's files
  // The token that ends a document (<|endoftext|>), where the vocabulary has one: not bytes.
  std::optional<std::int32_t> end_of_text() const;

  // Need has_text(). encode: every id below the vocabulary; decode: the exact bytes.
  std::vector<std::int32_t> encode(std::string_view text) const;
  std::string decode(std::span<const std::int32_t> tokens) const;

  // Needs counts_bytes(). The bytes of text `tokens` stand for, as bits per byte counts them:
  // <|endoftext|> separates documents and stands for none.
  std::uint64_t text_bytes(std::span<const std::int32_t> tokens) const;

 private:
  bool byte_level_ = false;
  std::optional<Gpt2Tokenizer> tokenizer_;
  std::vector<std::uint32_t> token_bytes_;  // (vocab) bytes of each token; 0 for <|endoftext|>
};

}  // namespace xtrain
