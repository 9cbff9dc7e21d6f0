// Text to the model's tokens and back, for samples, prompts and bits per byte. A codec is one of:
//   - bytes: byte-level data (a text file), one token per byte;
//   - GPT-2's tokenizer (its vocabulary files): encodes and decodes;
//   - llm.c's tokenizer file (worker/formats/llmc_tokenizer.hpp): decodes only, so samples start
//     from <|endoftext|> and no prompt can be given;
//   - none: token shards with no tokenizer named, tokens without text.
// Wherever a tokenizer is named (the spec's `tokenizer`, --tokenizer, the one a model comes with),
// either of the two kinds of file is taken, told apart by llm.c's magic or its file name.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/job_spec.hpp"
#include "common/tokenizer/gpt2_tokenizer.hpp"
#include "worker/formats/llmc_tokenizer.hpp"

namespace xtrain {

class TextCodec {
 public:
  TextCodec() = default;  // none
  static TextCodec bytes();
  // The tokenizer at `path`: llm.c's tokenizer file (a file with its magic, or named
  // gpt2_tokenizer.bin), else GPT-2's vocabulary files (a directory or one of its files). Throws
  // TokenizerError naming the file and what is wrong with it.
  static TextCodec load(const std::string& path);
  static TextCodec of(Gpt2Tokenizer tokenizer);

  // The codec of a run whose training data is byte-level (`byte_level`) or token shards: bytes,
  // or spec.tokenizer, which must have exactly model.vocab_size tokens, go with token shards, and
  // (llm.c's file) leave sample.prompt at its default. Throws SpecError naming the field.
  static TextCodec for_run(const JobSpec& spec, bool byte_level);

  bool encodes() const { return byte_level_ || tokenizer_.has_value(); }
  bool has_text() const { return encodes() || table_.has_value(); }  // decodes, and counts bytes
  int vocab_size() const;  // a tokenizer's tokens; 256 for bytes, 0 for none
  std::string name() const;    // for logs: "bytes", "none", or the tokenizer's kind and files
  std::string source() const;  // a tokenizer's files: "DIR/vocab.json + DIR/merges.txt", "DIR/gpt2_tokenizer.bin"
  const std::string& path() const { return path_; }  // what load() was given; "" for a codec not loaded
  // The token that ends a document (<|endoftext|>), where the vocabulary has one: not bytes.
  std::optional<std::int32_t> end_of_text() const;
  // What a sample with no prompt starts from: <|endoftext|>, or a newline for bytes. Needs has_text().
  std::vector<std::int32_t> document_start() const;
  // A sample's first tokens: `prompt` encoded, or the start of a document where it is empty or
  // cannot be encoded (llm.c's tokenizer file: the spec and generate refuse a prompt for it first).
  // Needs has_text().
  std::vector<std::int32_t> prompt_tokens(std::string_view prompt) const;

  // encode needs encodes(): every id below the vocabulary. decode needs has_text(): the exact
  // bytes, a token at a time as well as all at once. Throws TokenizerError for an id outside it.
  std::vector<std::int32_t> encode(std::string_view text) const;
  std::string decode(std::span<const std::int32_t> tokens) const;
  // The GPT-2 tokenizer, for code that takes one (xtrain-data's chunk encoder). Needs encodes() and
  // not bytes.
  const Gpt2Tokenizer& gpt2() const { return *tokenizer_; }
  // Every token's bytes and the end of text, as llm.c's tokenizer file holds them. Needs a
  // tokenizer (GPT-2's or llm.c's).
  LlmcTokenizer decoding_table() const;

  // Needs has_text(). The bytes of text `tokens` stand for, as bits per byte counts them:
  // <|endoftext|> separates documents and stands for none.
  std::uint64_t text_bytes(std::span<const std::int32_t> tokens) const;

 private:
  bool byte_level_ = false;
  std::string path_;
  std::optional<Gpt2Tokenizer> tokenizer_;
  std::optional<LlmcTokenizer> table_;
  std::vector<std::uint32_t> token_bytes_;  // (vocab) bytes of each token; 0 for <|endoftext|>

  void count_token_bytes();  // token_bytes_ of a tokenizer, once: validation sums them every time
};

}  // namespace xtrain
