// GPT-2's kind of tokenizer in Hugging Face's files, as a model directory on their hub carries
// them: tokenizer.json, the one file that every "fast" tokenizer loads (the Rust tokenizers
// library, transformers' GPT2TokenizerFast and PreTrainedTokenizerFast, Tokenizers.js, candle,
// text-generation-inference), and tokenizer_config.json, transformers' settings for it.
#pragma once

#include <string>

#include "common/tokenizer/gpt2_vocabulary.hpp"

namespace xtrain {

inline constexpr char kHfTokenizerFile[] = "tokenizer.json";
inline constexpr char kHfTokenizerConfigFile[] = "tokenizer_config.json";

// tokenizer.json for a GPT-2 vocabulary (list_gpt2_vocabulary's): byte-level BPE behind GPT-2's
// pre-tokenizer regex, with the vocabulary and its merges as the files write them and
// <|endoftext|> an added special token (as Hugging Face's tokenizers match it in text).
std::string gpt2_tokenizer_json(const VocabularyListing& vocabulary);

// The same vocabulary as vocab.json (compact, in id order) and merges.txt, for one read from a
// tokenizer.json: a model directory carries all three.
std::string vocab_json(const VocabularyListing& vocabulary);
std::string merges_txt(const VocabularyListing& vocabulary);

// tokenizer.json for a byte-level model (256 tokens, each byte its own): the same byte-level BPE
// with the 256 single-byte tokens, no merges and no special token.
std::string byte_level_tokenizer_json();

// tokenizer_config.json, for a context of `context` tokens (model_max_length). GPT-2's
// vocabulary: GPT2Tokenizer with <|endoftext|> as its bos, eos and unk token, as the released
// gpt2's; byte-level: PreTrainedTokenizerFast, which invents no special token (GPT2Tokenizer
// would add <|endoftext|> as a 257th). Both turn clean_up_tokenization_spaces off, so that
// decoding gives back the text (transformers' and Tokenizers.js's default drop the space before
// "." and "'s").
std::string gpt2_tokenizer_config(int context);
std::string byte_level_tokenizer_config(int context);

}  // namespace xtrain
