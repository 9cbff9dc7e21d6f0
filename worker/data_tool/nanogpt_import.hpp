// nanoGPT's prepared data made into llm.c token shards. nanoGPT's prepare.py scripts write
// DIR/train.bin and DIR/val.bin: bare little-endian uint16 token ids (numpy's memmap) of GPT-2's
// tokenizer, with no header, so nothing in the files says what they hold. The import checks what it
// can: an even size, no llm.c shard header, every id inside the vocabulary, and no DIR/meta.pkl
// (nanoGPT's character-level datasets, whose ids are characters, not GPT-2's tokens). val.bin becomes
// the validation split and train.bin the training split, the tokens copied unchanged: nanoGPT's
// scripts already end each document with <|endoftext|> where their data has documents.
#pragma once

#include <cstdint>
#include <string>

#include "worker/data_tool/shard_set.hpp"

namespace xtrain::data_tool {

inline constexpr int kGpt2Tokens = 50257;  // tiktoken's "gpt2" encoding, which nanoGPT's scripts use

struct NanogptData {
  std::string dir;
  std::string train;           // DIR/train.bin
  std::string val;             // DIR/val.bin; empty when there is none
  std::uint64_t val_tokens = 0;
  std::uint64_t bytes = 0;     // both files
};

// The files of nanoGPT's data directory `dir`, checked for the above before anything is written.
// Throws BadInput naming the file and what is wrong.
NanogptData find_nanogpt_data(const std::string& dir);

// Copies val.bin, then train.bin, into `shards` (made with val_tokens = data.val_tokens), checking
// every id against `vocab_size`, then finishes the set. Throws BadInput (an id out of range, a file
// that changed), Interrupted, or std::runtime_error (the file system failed).
void import_nanogpt(const NanogptData& data, int vocab_size, ShardSet& shards, bool progress);

}  // namespace xtrain::data_tool
