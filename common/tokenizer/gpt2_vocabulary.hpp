// A GPT-2 vocabulary as byte-pair encoding needs it, read from any published form and checked:
//   - OpenAI's encoder.json + vocab.bpe, or Hugging Face's vocab.json + merges.txt (the same
//     contents): a JSON object {token: id}, and one merge "LEFT RIGHT" per line in priority order
//     after a "#version" line;
//   - Hugging Face's tokenizer.json, which holds the same two as model.vocab and model.merges, when
//     it is GPT-2's kind of tokenizer (byte-level BPE behind GPT-2's regex, no prefix space);
//   - tokens are written in GPT-2's byte alphabet, one printable character per byte (bytes that
//     print as themselves are themselves; the other 68 are U+0100 onwards, space is "Ġ").
// The mergeable tokens are the 256 single bytes and the result of every merge; other entries
// (<|endoftext|>) are special: decode() knows them, BPE never produces them.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace xtrain {

// (left token, right token) -> the token their bytes concatenate to and its merge rank, for every
// pair of mergeable tokens that concatenates to a mergeable token: BPE's inner lookup, in a flat
// open-addressing table (ids are small integers, so one multiply hashes a pair).
class MergeTable {
 public:
  struct Merge {
    std::uint32_t rank = 0;  // lower merges first
    std::int32_t token = -1;
  };

  void reserve(std::size_t count);
  void insert(std::int32_t left, std::int32_t right, Merge merge);  // no duplicate pairs
  std::size_t size() const { return size_; }

  const Merge* find(std::int32_t left, std::int32_t right) const {
    const std::uint64_t key = pack(left, right);
    for (std::uint64_t i = slot_of(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};  // no pair of non-negative ids packs to it
  struct Slot {
    std::uint64_t key = kEmpty;
    Merge merge;
  };
  static std::uint64_t pack(std::int32_t left, std::int32_t right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
  }
  std::uint64_t slot_of(std::uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }

  std::vector<Slot> slots_;
  std::uint64_t mask_ = 0;
  int shift_ = 64;
  std::size_t size_ = 0;
};

// A fast hash of short byte strings (pieces average about five bytes): one multiply per 8 bytes,
// then murmur3's finaliser, so every input bit reaches the low bits that pick a table slot.
inline std::uint64_t hash_bytes(std::string_view s) {
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
  }
  std::uint64_t w = 0;
  std::memcpy(&w, s.data() + i, s.size() - i);
  h ^= w;
  h = (h ^ (h >> 33)) * 0xFF51AFD7ED558CCDull;
  h = (h ^ (h >> 33)) * 0xC4CEB9FE1A85EC53ull;
  return h ^ (h >> 33);
}

// Bytes -> token, for the mergeable tokens, in a flat open-addressing table of (hash, token)
// whose keys are the tokens' bytes in `token_bytes`.
class TokenIndex {
 public:
  TokenIndex() = default;
  TokenIndex(TokenIndex&&) = default;  // keeps pointing at the same token_bytes buffer
  TokenIndex& operator=(TokenIndex&&) = default;
  TokenIndex(const TokenIndex&) = delete;  // a copy would point at the original's buffer

  // `token_bytes` must outlive the index and not change (moving the vector is fine).
  void build(const std::vector<std::string>& token_bytes, const std::vector<std::int32_t>& tokens);

  std::int32_t find(std::string_view bytes) const { return find(bytes, hash_bytes(bytes)); }
  std::int32_t find(std::string_view bytes, std::uint64_t hash) const {  // -1: not a mergeable token
    for (std::uint64_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.token < 0) return -1;
      if (s.hash == hash && token_bytes_[s.token] == bytes) return s.token;
    }
  }

 private:
  struct Slot {
    std::uint64_t hash = 0;
    std::int32_t token = -1;  // -1: empty
  };
  const std::string* token_bytes_ = nullptr;
  std::vector<Slot> slots_;
  std::uint64_t mask_ = 0;
};

struct Gpt2Vocabulary {
  std::uint64_t identity = 0;              // unique per load: keys the per-thread encoding caches

  std::string source;                      // "DIR/encoder.json + DIR/vocab.bpe"
  std::vector<std::string> token_bytes;    // (vocab_size) id -> the bytes it stands for
  std::array<std::int32_t, 256> byte_tokens{};  // byte -> its single-byte token
  TokenIndex mergeable;  // the 256 byte tokens and every merge's result
  MergeTable merges;
  std::int32_t eot = -1;  // <|endoftext|>
};

// Hugging Face's names for the two files (a model directory's, which transformers loads).
inline constexpr char kHfVocabFile[] = "vocab.json";
inline constexpr char kHfMergesFile[] = "merges.txt";

// The files of the vocabulary at `path`: a directory (OpenAI's pair, else Hugging Face's, else
// their tokenizer.json), or one of the four names and its partner beside it, or a tokenizer.json;
// they need not exist. Throws TokenizerError for a path that is none of these.
struct VocabularyFiles {
  std::string vocab;           // encoder.json or vocab.json
  std::string merges;          // vocab.bpe or merges.txt
  std::string tokenizer_json;  // or both in Hugging Face's tokenizer.json (GPT-2's kind only)
};
VocabularyFiles find_vocabulary_files(const std::string& path);

// Throws TokenizerError naming the file (and the line of merges.txt / vocab.bpe where it applies).
Gpt2Vocabulary load_gpt2_vocabulary(const std::string& path);

// The vocabulary at `path` as its files write it: every token by id, and the merge lines
// ("LEFT RIGHT") in priority order. Read and checked as load_gpt2_vocabulary reads them (throws
// the same TokenizerError), for writing it in another form (hf_tokenizer_json.hpp).
struct VocabularyListing {
  std::vector<std::string> tokens;  // (vocab_size) id -> the token as written
  std::vector<std::string> merges;
};
VocabularyListing list_gpt2_vocabulary(const std::string& path);

// True when the tokenizer.json at `path` reads as GPT-2's kind of tokenizer, as
// load_gpt2_vocabulary takes it; false for another kind, for a byte-level model's (its
// pre-tokenizer takes the bytes whole: the model needs no vocabulary), and for a file that cannot
// be read.
bool is_gpt2_tokenizer_json(const std::string& path);

// The character GPT-2's byte alphabet writes `byte` as, in UTF-8 ("Ġ" for a space).
std::string gpt2_byte_character(std::uint8_t byte);

}  // namespace xtrain
