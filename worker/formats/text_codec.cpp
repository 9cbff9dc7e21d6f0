#include "worker/formats/text_codec.hpp"

#include "common/file_error.hpp"
#include "common/model_file.hpp"

namespace xtrain {

TextCodec TextCodec::bytes() {
  TextCodec codec;
  codec.byte_level_ = true;
  return codec;
}

TextCodec TextCodec::load(const std::string& path) {
  TextCodec codec;
  if (is_llmc_tokenizer_file(path)) {
    try {
      codec.table_.emplace(read_llmc_tokenizer(path));
    } catch (const FileError& e) {
      throw TokenizerError(e.path(), 0, e.message());
    }
    codec.count_token_bytes();
  } else {
    codec = of(Gpt2Tokenizer::load(path));
  }
  codec.path_ = path;
  return codec;
}

TextCodec TextCodec::of(Gpt2Tokenizer tokenizer) {
  TextCodec codec;
  codec.tokenizer_.emplace(std::move(tokenizer));
  codec.count_token_bytes();
  return codec;
}

void TextCodec::count_token_bytes() {
  const std::int32_t eot = *end_of_text();
  token_bytes_.resize(static_cast<size_t>(vocab_size()));
  for (std::int32_t id = 0; id < vocab_size(); ++id) {
    token_bytes_[static_cast<size_t>(id)] =
        id == eot ? 0 : static_cast<std::uint32_t>(decode(std::span(&id, 1)).size());
  }
}

TextCodec TextCodec::for_run(const JobSpec& spec, bool byte_level) {
  if (spec.tokenizer.empty()) return byte_level ? bytes() : TextCodec();
  const std::string from = spec.model.init_from.empty() ? "" : " (model.init_from's)";
  if (byte_level) {
    // The tokenizer may be model.init_from's own, which the spec does not name.
    const std::string whose = spec.model.init_from.empty() ? "" : " (this key's, or model.init_from's own)";
    throw SpecError("tokenizer", "data.train (" + spec.data.train +
                                     ") is byte-level text, one token per byte; a GPT-2 tokenizer" + whose +
                                     " goes with llm.c token shards (xtrain-data makes them from text)");
  }
  TextCodec codec;
  try {
    codec = load(spec.tokenizer);
  } catch (const TokenizerError& e) {
    throw SpecError("tokenizer", e.what());
  }
  const int vocab = codec.vocab_size();
  const int model = spec.model.vocab_size;
  if (vocab != model) {
    throw SpecError("tokenizer", codec.source() + " has " + std::to_string(vocab) + " tokens but model.vocab_size is " +
                                     std::to_string(model) + from + ": " +
                                     (model > vocab ? "the model would sample ids the tokenizer cannot decode"
                                                    : "text would encode to ids the model does not have"));
  }
  if (codec.table_ && spec.sample.tokens > 0 && spec.sample.prompt != SampleSpec{}.prompt) {
    throw SpecError("sample.prompt", codec.name() + " decodes only, so a sample starts from <|endoftext|>: leave "
                                                    "sample.prompt out, or name GPT-2's vocabulary files "
                                                    "(vocab.json + merges.txt) with the tokenizer key to encode it");
  }
  return codec;
}

int TextCodec::vocab_size() const {
  if (tokenizer_) return tokenizer_->vocab_size();
  if (table_) return static_cast<int>(table_->tokens.size());
  return byte_level_ ? kByteVocabulary : 0;
}

std::string TextCodec::name() const {
  if (tokenizer_) return "the GPT-2 tokenizer " + tokenizer_->source();
  if (table_) return table_->path + " (llm.c's tokenizer file)";
  return byte_level_ ? "bytes" : "none";
}

std::string TextCodec::source() const {
  if (tokenizer_) return tokenizer_->source();
  return table_ ? table_->path : "";
}

std::optional<std::int32_t> TextCodec::end_of_text() const {
  if (tokenizer_) return tokenizer_->eot();
  if (table_) return table_->eot;
  return std::nullopt;
}

std::vector<std::int32_t> TextCodec::document_start() const {
  if (const auto eot = end_of_text()) return {*eot};
  return {'\n'};
}

std::vector<std::int32_t> TextCodec::prompt_tokens(std::string_view prompt) const {
  return prompt.empty() || !encodes() ? document_start() : encode(prompt);
}

std::vector<std::int32_t> TextCodec::encode(std::string_view text) const {
  if (tokenizer_) return tokenizer_->encode(text);
  std::vector<std::int32_t> bytes;
  for (const unsigned char c : text) bytes.push_back(c);
  return bytes;
}

std::string TextCodec::decode(std::span<const std::int32_t> tokens) const {
  if (tokenizer_) return tokenizer_->decode(tokens);
  if (!table_) return std::string(tokens.begin(), tokens.end());
  std::string text;
  for (const std::int32_t t : tokens) {
    if (t < 0 || static_cast<size_t>(t) >= table_->tokens.size()) {
      throw TokenizerError(table_->path, 0, "token id " + std::to_string(t) + " is outside its " +
                                                std::to_string(table_->tokens.size()) + " tokens");
    }
    text += table_->tokens[static_cast<size_t>(t)];
  }
  return text;
}

LlmcTokenizer TextCodec::decoding_table() const {
  if (table_) return *table_;
  LlmcTokenizer table{tokenizer_->source(), {}, tokenizer_->eot()};
  table.tokens.reserve(static_cast<size_t>(tokenizer_->vocab_size()));
  for (std::int32_t id = 0; id < tokenizer_->vocab_size(); ++id) table.tokens.push_back(tokenizer_->decode_token(id));
  return table;
}

std::uint64_t TextCodec::text_bytes(std::span<const std::int32_t> tokens) const {
  if (token_bytes_.empty()) return tokens.size();  // bytes
  std::uint64_t bytes = 0;
  for (const std::int32_t t : tokens) bytes += token_bytes_[static_cast<size_t>(t)];
  return bytes;
}

}  // namespace xtrain
