#include "common/tokenizer/hf_tokenizer_json.hpp"

#include <cstdint>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace xtrain {
namespace {

using Json = nlohmann::ordered_json;  // keys in the order written

constexpr std::string_view kEndOfText = "<|endoftext|>";

// GPT-2's byte-level stages. The pre-tokenizer splits with GPT-2's regex (use_regex) and writes
// each piece in the byte alphabet; adding no prefix space keeps "Hello" and " Hello" apart, as
// GPT-2 was trained. The decoder maps the alphabet back to bytes.
Json byte_level(bool split) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", split}};
}

// {token: id} in id order, as Hugging Face writes it, on one line. Written here: ordered_json
// inserts a key in linear time, and GPT-2's 50,257 tokens took seconds.
std::string vocab_object(const std::vector<std::string>& tokens) {
  std::string vocab = "{";
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    vocab += (id == 0 ? "" : ",") + Json(tokens[id]).dump() + ":" + std::to_string(id);
  }
  return vocab + "}";
}

// tokenizer.json's text, on one line (1.4 MB for GPT-2's vocabulary, as the released gpt2's).
std::string tokenizer_json(const std::vector<std::string>& tokens, const Json& merges, const Json& added_tokens,
                           bool split) {
  Json post_processor = byte_level(split);
  post_processor["trim_offsets"] = false;  // offsets only: the ids are the model's
  const std::string vocab = vocab_object(tokens);
  const Json model_head = {{"type", "BPE"},           {"dropout", nullptr},
                           {"unk_token", nullptr},    {"continuing_subword_prefix", ""},
                           {"end_of_word_suffix", ""}, {"fuse_unk", false},
                           {"byte_fallback", false}};
  const std::string head = model_head.dump();  // {"type":"BPE",...}: the vocabulary and merges go before its "}"
  return "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":" + added_tokens.dump() +
         ",\"normalizer\":null,\"pre_tokenizer\":" + byte_level(split).dump() +
         ",\"post_processor\":" + post_processor.dump() + ",\"decoder\":" + byte_level(split).dump() +
         ",\"model\":" + head.substr(0, head.size() - 1) + ",\"vocab\":" + vocab + ",\"merges\":" + merges.dump() +
         "}}\n";
}

// What transformers reads besides tokenizer.json. Turning clean_up_tokenization_spaces off makes
// decoding give back the text: its default drops the space before "." and "'s".
Json tokenizer_config(int context, const char* tokenizer_class) {
  return {{"tokenizer_class", tokenizer_class},
          {"model_max_length", context},
          {"clean_up_tokenization_spaces", false}};
}

}  // namespace

std::string gpt2_tokenizer_json(const VocabularyListing& listing) {
  Json added_tokens = Json::array();
  for (std::size_t id = 0; id < listing.tokens.size(); ++id) {
    if (listing.tokens[id] != kEndOfText) continue;
    added_tokens.push_back({{"id", id},
                            {"content", kEndOfText},
                            {"single_word", false},
                            {"lstrip", false},
                            {"rstrip", false},
                            {"normalized", false},
                            {"special", true}});
  }
  return tokenizer_json(listing.tokens, listing.merges, added_tokens, /*split=*/true);
}

std::string vocab_json(const VocabularyListing& vocabulary) { return vocab_object(vocabulary.tokens); }

std::string merges_txt(const VocabularyListing& vocabulary) {
  std::string text = "#version: 0.2\n";
  for (const std::string& merge : vocabulary.merges) text += merge + "\n";
  return text;
}

std::string byte_level_tokenizer_json() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(gpt2_byte_character(static_cast<std::uint8_t>(b)));
  // No merges: splitting into pieces first would change nothing.
  return tokenizer_json(tokens, Json::array(), Json::array(), /*split=*/false);
}

std::string gpt2_tokenizer_config(int context) {
  Json config = tokenizer_config(context, "GPT2Tokenizer");
  for (const char* role : {"bos_token", "eos_token", "unk_token"}) config[role] = kEndOfText;
  config["add_prefix_space"] = false;
  config["errors"] = "replace";  // the slow GPT2Tokenizer's decoding of bytes that are not UTF-8
  return config.dump(2) + "\n";
}

std::string byte_level_tokenizer_config(int context) {
  return tokenizer_config(context, "PreTrainedTokenizerFast").dump(2) + "\n";
}

}  // namespace xtrain
