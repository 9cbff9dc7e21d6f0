#include "common/tokenizer/gpt2_tokenizer.hpp"

#include <algorithm>
#include <cstring>
#include <functional>

#include "common/tokenizer/gpt2_pretokenizer.hpp"
#include "common/tokenizer/gpt2_vocabulary.hpp"

namespace xtrain {
namespace {

// Text repeats (words, indentation, punctuation runs), so each thread remembers the tokens of the
// pieces it encoded lately, in a flat open-addressing table over two arenas (piece bytes, tokens):
// a hit costs one hash and usually one cache line. When full it starts over: cheap (a slot is
// empty unless it carries the current generation), and the frequent pieces return at once.
class PieceCache {
 public:
  static constexpr std::size_t kMaxPieces = 1 << 17;
  static constexpr std::size_t kMaxPieceBytes = 256;

  PieceCache() : slots_(2 * kMaxPieces) {}

  // The cached tokens of `piece`, or an empty span.
  std::span<const std::int32_t> find(std::string_view piece, std::uint64_t hash) const {
    for (std::size_t i = hash & kMask;; i = (i + 1) & kMask) {
      const Slot& s = slots_[i];
      if (s.generation != generation_) return {};
      if (s.hash == hash && s.piece_bytes == piece.size() &&
          std::memcmp(pieces_.data() + s.piece_offset, piece.data(), piece.size()) == 0) {
        return {tokens_.data() + s.token_offset, s.token_count};
      }
    }
  }

  void insert(std::string_view piece, std::uint64_t hash, std::span<const std::int32_t> tokens) {
    if (size_ == kMaxPieces) clear();
    std::size_t i = hash & kMask;
    while (slots_[i].generation == generation_) i = (i + 1) & kMask;
    slots_[i] = {hash, static_cast<std::uint32_t>(pieces_.size()), static_cast<std::uint32_t>(tokens_.size()),
                 generation_, static_cast<std::uint16_t>(piece.size()), static_cast<std::uint16_t>(tokens.size())};
    pieces_.append(piece);
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
    ++size_;
  }

  void clear() {
    if (++generation_ == 0) {  // after 2^32 clears: old slots could look current again
      std::fill(slots_.begin(), slots_.end(), Slot{});
      generation_ = 1;
    }
    pieces_.clear();
    tokens_.clear();
    size_ = 0;
  }

 private:
  static constexpr std::size_t kMask = 2 * kMaxPieces - 1;  // at most half full: short probes
  struct Slot {
    std::uint64_t hash = 0;
    std::uint32_t piece_offset = 0;  // into pieces_
    std::uint32_t token_offset = 0;  // into tokens_
    std::uint32_t generation = 0;    // in use when equal to generation_
    std::uint16_t piece_bytes = 0;
    std::uint16_t token_count = 0;
  };
  std::vector<Slot> slots_;
  std::uint32_t generation_ = 1;
  std::string pieces_;
  std::vector<std::int32_t> tokens_;
  std::size_t size_ = 0;
};

struct EncodeState {
  std::uint64_t vocabulary = 0;  // Gpt2Vocabulary::identity the cache belongs to
  PieceCache cache;

  // Byte-pair merging of one piece, by byte offset in the piece: the token of the part starting
  // there (-1: inside a part), the next part's start, the previous part's start.
  std::vector<std::int32_t> part_token;
  std::vector<std::uint32_t> next, prev;
  std::vector<std::uint64_t> heap;  // candidate merges: rank << 32 | left part's start

  void use(const Gpt2Vocabulary& v) {
    if (vocabulary == v.identity) return;
    vocabulary = v.identity;
    cache.clear();
  }
};

EncodeState& encode_state() {
  thread_local EncodeState state;
  return state;
}

void push_candidate(const Gpt2Vocabulary& v, EncodeState& s, std::uint32_t left) {
  const std::uint32_t right = s.next[left];
  if (const MergeTable::Merge* m = v.merges.find(s.part_token[left], s.part_token[right])) {
    s.heap.push_back(static_cast<std::uint64_t>(m->rank) << 32 | left);
    std::push_heap(s.heap.begin(), s.heap.end(), std::greater<>{});
  }
}

// tiktoken's merge loop: starting from single bytes, merge the adjacent pair whose concatenation
// has the lowest rank (the leftmost on a tie) until no pair concatenates to a mergeable token.
// A min-heap of candidates keeps long pieces (runs of punctuation, byte soup) O(n log n); a stale
// candidate (a part merged away since) is recognised when popped and skipped.
void byte_pair_encode(const Gpt2Vocabulary& v, EncodeState& s, std::string_view piece, std::vector<std::int32_t>& out) {
  const auto n = static_cast<std::uint32_t>(piece.size());
  s.part_token.resize(n + 1);
  s.next.resize(n + 1);
  s.prev.resize(n + 1);
  s.heap.clear();
  for (std::uint32_t i = 0; i < n; ++i) {
    s.part_token[i] = v.byte_tokens[static_cast<unsigned char>(piece[i])];
    s.next[i] = i + 1;
    s.prev[i] = i - 1;
  }
  s.part_token[n] = -1;  // the end: a sentinel part that merges with nothing
  for (std::uint32_t i = 0; i + 1 < n; ++i) push_candidate(v, s, i);

  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), std::greater<>{});
    const std::uint64_t candidate = s.heap.back();
    s.heap.pop_back();
    const auto left = static_cast<std::uint32_t>(candidate & 0xFFFFFFFFu);
    const auto rank = static_cast<std::uint32_t>(candidate >> 32);
    const std::uint32_t right = s.next[left];
    if (s.part_token[left] < 0 || right == n) continue;
    const MergeTable::Merge* m = v.merges.find(s.part_token[left], s.part_token[right]);
    if (m == nullptr || m->rank != rank) continue;  // stale: a part changed since it was pushed

    s.part_token[left] = m->token;
    s.part_token[right] = -1;
    s.next[left] = s.next[right];
    if (s.next[left] < n) s.prev[s.next[left]] = left;
    if (left > 0) push_candidate(v, s, s.prev[left]);
    if (s.next[left] < n) push_candidate(v, s, left);
  }
  for (std::uint32_t i = 0; i < n; i = s.next[i]) out.push_back(s.part_token[i]);
}

void encode_piece(const Gpt2Vocabulary& v, EncodeState& s, std::string_view piece, std::vector<std::int32_t>& out) {
  if (piece.size() == 1) {
    out.push_back(v.byte_tokens[static_cast<unsigned char>(piece[0])]);
    return;
  }
  const bool cacheable = piece.size() <= PieceCache::kMaxPieceBytes;
  const std::uint64_t hash = hash_bytes(piece);
  if (cacheable) {
    if (const auto tokens = s.cache.find(piece, hash); !tokens.empty()) {
      out.insert(out.end(), tokens.begin(), tokens.end());
      return;
    }
  }
  const std::size_t start = out.size();
  // A piece that is a token is that token, even where merging its bytes would not reach it.
  if (const std::int32_t token = v.mergeable.find(piece, hash); token >= 0) {
    out.push_back(token);
  } else {
    byte_pair_encode(v, s, piece, out);
  }
  if (cacheable) s.cache.insert(piece, hash, std::span(out).subspan(start));
}

// The bytes of a token; throws for an id outside the vocabulary.
const std::string& token_bytes(const Gpt2Vocabulary& v, std::int32_t token) {
  if (token < 0 || static_cast<std::size_t>(token) >= v.token_bytes.size()) {
    throw TokenizerError(v.source, 0,
                         "token " + std::to_string(token) + " is not in the vocabulary (ids 0 to " +
                             std::to_string(v.token_bytes.size() - 1) + ")");
  }
  return v.token_bytes[static_cast<std::size_t>(token)];
}

}  // namespace

TokenizerError::TokenizerError(std::string path, int line, const std::string& message)
    : std::runtime_error(path + (line > 0 ? ":" + std::to_string(line) : "") + ": " + message),
      path_(std::move(path)),
      line_(line) {}

Gpt2Tokenizer::Gpt2Tokenizer(std::shared_ptr<const Gpt2Vocabulary> vocabulary) : vocabulary_(std::move(vocabulary)) {}

Gpt2Tokenizer Gpt2Tokenizer::load(const std::string& path) {
  return Gpt2Tokenizer(std::make_shared<const Gpt2Vocabulary>(load_gpt2_vocabulary(path)));
}

void Gpt2Tokenizer::encode(std::string_view text, std::vector<std::int32_t>& out) const {
  const Gpt2Vocabulary& v = *vocabulary_;
  EncodeState& s = encode_state();
  s.use(v);
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = gpt2_piece_end(text, pos);
    encode_piece(v, s, text.substr(pos, end - pos), out);
    pos = end;
  }
}

std::vector<std::int32_t> Gpt2Tokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> tokens;
  tokens.reserve(text.size() / 3);
  encode(text, tokens);
  return tokens;
}

std::string Gpt2Tokenizer::decode_token(std::int32_t token) const { return token_bytes(*vocabulary_, token); }

std::string Gpt2Tokenizer::decode(std::span<const std::int32_t> tokens) const {
  std::string text;
  for (const std::int32_t token : tokens) text += token_bytes(*vocabulary_, token);
  return text;
}

int Gpt2Tokenizer::vocab_size() const { return static_cast<int>(vocabulary_->token_bytes.size()); }
std::int32_t Gpt2Tokenizer::eot() const { return vocabulary_->eot; }
std::string Gpt2Tokenizer::source() const { return vocabulary_->source; }

}  // namespace xtrain
