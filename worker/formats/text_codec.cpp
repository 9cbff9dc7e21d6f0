#include "worker/formats/text_codec.hpp"

namespace xtrain {

TextCodec TextCodec::for_run(const JobSpec& spec, bool byte_level) {
  if (spec.tokenizer.empty()) return of(std::nullopt, byte_level);
  if (byte_level) {
    throw SpecError("tokenizer", "data.train (" + spec.data.train +
                                     ") is byte-level text, one token per byte; a GPT-2 tokenizer goes with llm.c "
                                     "token shards (xtrain-data makes them from text)");
  }
  std::optional<Gpt2Tokenizer> tokenizer;
  try {
    tokenizer.emplace(Gpt2Tokenizer::load(spec.tokenizer));
  } catch (const TokenizerError& e) {
    throw SpecError("tokenizer", e.what());
  }
  const int vocab = tokenizer->vocab_size();
  const int model = spec.model.vocab_size;
  if (vocab != model) {
    const std::string from = spec.model.init_from.empty() ? "" : " (model.init_from's)";
    throw SpecError("tokenizer", tokenizer->source() + " has " + std::to_string(vocab) +
                                     " tokens but model.vocab_size is " + std::to_string(model) + from + ": " +
                                     (model > vocab ? "the model would sample ids the tokenizer cannot decode"
                                                    : "text would encode to ids the model does not have"));
  }
  return of(std::move(tokenizer), false);
}

TextCodec TextCodec::of(std::optional<Gpt2Tokenizer> tokenizer, bool byte_level) {
  TextCodec codec;
  codec.byte_level_ = byte_level && !tokenizer;
  codec.tokenizer_ = std::move(tokenizer);
  if (!codec.tokenizer_) return codec;
  const int vocab = codec.tokenizer_->vocab_size();
  codec.token_bytes_.resize(static_cast<size_t>(vocab));
  for (std::int32_t id = 0; id < vocab; ++id) {
    codec.token_bytes_[static_cast<size_t>(id)] =
        id == codec.tokenizer_->eot() ? 0 : static_cast<std::uint32_t>(codec.tokenizer_->decode_token(id).size());
  }
  return codec;
}

TextCodec TextCodec::counting(const std::vector<std::string>& token_bytes, std::int32_t eot) {
  TextCodec codec;
  codec.token_bytes_.reserve(token_bytes.size());
  for (const std::string& bytes : token_bytes) codec.token_bytes_.push_back(static_cast<std::uint32_t>(bytes.size()));
  codec.token_bytes_[static_cast<size_t>(eot)] = 0;
  return codec;
}

std::string TextCodec::name() const {
  if (tokenizer_) return "the GPT-2 tokenizer " + tokenizer_->source();
  return byte_level_ ? "bytes" : "none";
}

std::optional<std::int32_t> TextCodec::end_of_text() const {
  if (tokenizer_) return tokenizer_->eot();
  return std::nullopt;
}

std::vector<std::int32_t> TextCodec::encode(std::string_view text) const {
  if (tokenizer_) return tokenizer_->encode(text);
  std::vector<std::int32_t> bytes;
  for (const unsigned char c : text) bytes.push_back(c);
  return bytes;
}

std::string TextCodec::decode(std::span<const std::int32_t> tokens) const {
  if (tokenizer_) return tokenizer_->decode(tokens);
  return std::string(tokens.begin(), tokens.end());
}

std::uint64_t TextCodec::text_bytes(std::span<const std::int32_t> tokens) const {
  if (token_bytes_.empty()) return tokens.size();  // bytes (or nothing to count)
  std::uint64_t bytes = 0;
  for (const std::int32_t t : tokens) bytes += token_bytes_[static_cast<size_t>(t)];
  return bytes;
}

}  // namespace xtrain
