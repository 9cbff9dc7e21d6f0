#include "common/tokenizer/gpt2_vocabulary.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/tokenizer/gpt2_tokenizer.hpp"
#include "common/tokenizer/unicode_classes.hpp"

namespace xtrain {
namespace {

namespace fs = std::filesystem;

// ---- GPT-2's byte alphabet: every byte as one printable character ----

// Bytes that print as themselves stand for themselves; the other 68 (controls, space, DEL, the
// C1 range, NBSP, soft hyphen) become U+0100, U+0101, ... in byte order.
constexpr bool prints_as_itself(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174); }
constexpr char32_t kAlphabetEnd = 256 + 68;

struct ByteAlphabet {
  std::array<char32_t, 256> char_of_byte{};
  std::array<int, kAlphabetEnd> byte_of_char{};  // -1: not in the alphabet

  ByteAlphabet() {
    byte_of_char.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      char_of_byte[b] = prints_as_itself(b) ? static_cast<char32_t>(b) : next++;
      byte_of_char[char_of_byte[b]] = b;
    }
  }

  std::string encode(std::uint8_t byte) const {  // the character, as UTF-8
    const char32_t c = char_of_byte[byte];
    if (c < 0x80) return std::string(1, static_cast<char>(c));
    return {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
  }

  // The bytes a token written in the alphabet stands for; nullopt when a character is not in it.
  std::optional<std::string> decode(std::string_view token) const {
    std::string bytes;
    for (std::size_t pos = 0; pos < token.size();) {
      const Utf8Unit u = decode_utf8(token, pos);
      if (!u.valid || u.code_point >= kAlphabetEnd || byte_of_char[u.code_point] < 0) return std::nullopt;
      bytes.push_back(static_cast<char>(byte_of_char[u.code_point]));
      pos += u.length;
    }
    return bytes;
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet instance;
  return instance;
}

// ---- Files ----

std::string read_file(const std::string& path, const std::string& role) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TokenizerError(path, 0, "cannot read the " + role + ": " + std::strerror(errno));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) throw TokenizerError(path, 0, "cannot read the " + role + ": " + std::strerror(errno));
  return std::move(contents).str();
}

int line_of_offset(std::string_view text, std::size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
}

std::string in_quotes(std::string_view token) { return "\"" + std::string(token) + "\""; }

// ---- The vocabulary: {token: id}, ids 0 .. n-1 ----

// Hashes std::string and std::string_view alike, so maps keyed by std::string take views.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// token as written -> id, and id -> token as written.
struct Entries {
  std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>> ids;
  std::vector<std::string> names;
};

Entries read_vocab(const std::string& path) {
  const std::string text = read_file(path, "vocabulary");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 1, column 9: syntax ..."
    const auto colon = what.find(": ", what.find("parse error"));
    throw TokenizerError(path, line_of_offset(text, e.byte > 0 ? e.byte - 1 : 0),
                         "not valid JSON: " + (colon == std::string::npos ? what : what.substr(colon + 2)));
  }
  if (!doc.is_object() || doc.empty()) {
    throw TokenizerError(path, 0, "expected a JSON object mapping each token to its id, got " +
                                      std::string(doc.is_object() ? "an empty object" : doc.type_name()));
  }
  const std::size_t n = doc.size();
  Entries entries;
  entries.names.resize(n);
  entries.ids.reserve(n);
  for (const auto& [token, id] : doc.items()) {
    if (token.empty()) throw TokenizerError(path, 0, "a token is the empty string");
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= static_cast<std::int64_t>(n)) {
      throw TokenizerError(path, 0, "token " + in_quotes(token) + " has id " + id.dump() + "; the " + std::to_string(n) +
                                        " ids must be the integers 0 to " + std::to_string(n - 1));
    }
    const auto value = id.get<std::int32_t>();
    if (!entries.names[value].empty()) {
      throw TokenizerError(path, 0, "tokens " + in_quotes(entries.names[value]) + " and " + in_quotes(token) +
                                        " both have id " + std::to_string(value));
    }
    entries.names[value] = token;
    entries.ids.emplace(token, value);
  }
  return entries;
}

// ---- The merges: "#version ..." then "LEFT RIGHT" per line, highest priority first ----

// The token each merge makes, in merge order (rank 0 first); the lines themselves into `lines`
// where given.
std::vector<std::int32_t> read_merges(const std::string& path, const Entries& entries, const std::string& vocab_path,
                                      std::vector<std::string>* lines = nullptr) {
  const std::string text = read_file(path, "merges");
  std::vector<std::int32_t> merges;
  std::unordered_map<std::int32_t, int> made_at;  // result -> line
  int line_number = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_number == 1 && line.starts_with("#version"))) continue;

    const auto space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      throw TokenizerError(path, line_number, "expected a merge: two tokens separated by one space, got " + in_quotes(line));
    }
    const std::string_view left = line.substr(0, space), right = line.substr(space + 1);
    const std::string result = std::string(left) + std::string(right);
    for (const std::string_view part : {left, right}) {
      if (!entries.ids.contains(part)) {
        throw TokenizerError(path, line_number, "merge " + in_quotes(line) + ": " + in_quotes(part) + " is not in " + vocab_path);
      }
    }
    const auto it = entries.ids.find(result);
    if (it == entries.ids.end()) {
      throw TokenizerError(path, line_number,
                           "merge " + in_quotes(line) + " makes " + in_quotes(result) + ", which is not in " + vocab_path);
    }
    if (!alphabet().decode(result)) {
      throw TokenizerError(path, line_number, "merge " + in_quotes(line) + ": not written in GPT-2's byte alphabet");
    }
    if (const auto [at, fresh] = made_at.emplace(it->second, line_number); !fresh) {
      throw TokenizerError(path, line_number,
                           "merge " + in_quotes(line) + " makes " + in_quotes(result) + ", as line " +
                               std::to_string(at->second) + " does already");
    }
    merges.push_back(it->second);
    if (lines != nullptr) lines->emplace_back(line);
  }
  return merges;
}

}  // namespace

void TokenIndex::build(const std::vector<std::string>& token_bytes, const std::vector<std::int32_t>& tokens) {
  token_bytes_ = token_bytes.data();
  std::size_t capacity = 16;
  while (capacity < 2 * tokens.size()) capacity *= 2;
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  for (const std::int32_t token : tokens) {
    const std::uint64_t hash = hash_bytes(token_bytes[static_cast<std::size_t>(token)]);
    std::uint64_t i = hash & mask_;
    while (slots_[i].token >= 0) i = (i + 1) & mask_;
    slots_[i] = {hash, token};
  }
}

void MergeTable::reserve(std::size_t count) {
  std::size_t capacity = 16;
  shift_ = 60;
  while (capacity < 2 * count) {
    capacity *= 2;
    --shift_;
  }
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  size_ = 0;
}

void MergeTable::insert(std::int32_t left, std::int32_t right, Merge merge) {
  const std::uint64_t key = pack(left, right);
  std::uint64_t i = slot_of(key);
  while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
  slots_[i] = {key, merge};
  ++size_;
}

VocabularyFiles find_vocabulary_files(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) throw TokenizerError(path, 0, "no such file or directory");
  if (fs::is_directory(status)) {
    const fs::path dir(path);
    if (fs::exists(dir / "encoder.json") || fs::exists(dir / "vocab.bpe")) {
      return {(dir / "encoder.json").string(), (dir / "vocab.bpe").string()};
    }
    if (fs::exists(dir / kHfVocabFile) || fs::exists(dir / kHfMergesFile)) {
      return {(dir / kHfVocabFile).string(), (dir / kHfMergesFile).string()};
    }
    throw TokenizerError(path, 0,
                         "holds neither encoder.json + vocab.bpe (OpenAI's GPT-2 vocabulary) nor "
                         "vocab.json + merges.txt (Hugging Face's)");
  }
  const fs::path file(path);
  const fs::path dir = file.parent_path();
  const std::string name = file.filename().string();
  if (name == "encoder.json") return {path, (dir / "vocab.bpe").string()};
  if (name == "vocab.bpe") return {(dir / "encoder.json").string(), path};
  if (name == kHfVocabFile) return {path, (dir / kHfMergesFile).string()};
  if (name == kHfMergesFile) return {(dir / kHfVocabFile).string(), path};
  throw TokenizerError(path, 0,
                       "not a GPT-2 vocabulary file: give its directory, or encoder.json, vocab.bpe, vocab.json "
                       "or merges.txt");
}

Gpt2Vocabulary load_gpt2_vocabulary(const std::string& path) {
  const VocabularyFiles files = find_vocabulary_files(path);
  const Entries entries = read_vocab(files.vocab);

  static std::atomic<std::uint64_t> loads{0};
  Gpt2Vocabulary v;
  v.identity = ++loads;
  v.source = files.vocab + " + " + files.merges;
  const std::size_t n = entries.names.size();
  v.token_bytes.resize(n);
  for (std::size_t id = 0; id < n; ++id) {
    // Tokens outside the byte alphabet can only be special tokens: they stand for their UTF-8.
    v.token_bytes[id] = alphabet().decode(entries.names[id]).value_or(entries.names[id]);
  }
  std::vector<std::int32_t> mergeable;
  for (int b = 0; b < 256; ++b) {
    const std::string name = alphabet().encode(static_cast<std::uint8_t>(b));
    const auto it = entries.ids.find(name);
    if (it == entries.ids.end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      throw TokenizerError(files.vocab, 0,
                           "no token for byte " + std::string(hex) + " (" + in_quotes(name) +
                               "): a byte-level vocabulary has a token for each of the 256 bytes");
    }
    v.byte_tokens[b] = it->second;
    mergeable.push_back(it->second);
  }
  const auto eot = entries.ids.find("<|endoftext|>");
  if (eot == entries.ids.end()) throw TokenizerError(files.vocab, 0, "no <|endoftext|> token");
  v.eot = eot->second;

  const std::vector<std::int32_t> merges = read_merges(files.merges, entries, files.vocab);
  mergeable.insert(mergeable.end(), merges.begin(), merges.end());
  v.mergeable.build(v.token_bytes, mergeable);

  // tiktoken merges any two adjacent parts whose bytes concatenate to a mergeable token, whatever
  // merge line made it: index every split of every merged token into two mergeable halves.
  struct Pair {
    std::int32_t left, right;
    MergeTable::Merge merge;
  };
  std::vector<Pair> pairs;
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const std::int32_t token = merges[rank];
    const std::string_view bytes = v.token_bytes[token];
    for (std::size_t k = 1; k < bytes.size(); ++k) {
      const std::int32_t left = v.mergeable.find(bytes.substr(0, k));
      const std::int32_t right = v.mergeable.find(bytes.substr(k));
      if (left >= 0 && right >= 0) pairs.push_back({left, right, {static_cast<std::uint32_t>(rank), token}});
    }
  }
  v.merges.reserve(pairs.size());
  for (const Pair& p : pairs) v.merges.insert(p.left, p.right, p.merge);
  return v;
}

VocabularyListing list_gpt2_vocabulary(const std::string& path) {
  const VocabularyFiles files = find_vocabulary_files(path);
  VocabularyListing listing;
  Entries entries = read_vocab(files.vocab);
  read_merges(files.merges, entries, files.vocab, &listing.merges);
  listing.tokens = std::move(entries.names);
  return listing;
}

std::string gpt2_byte_character(std::uint8_t byte) { return alphabet().encode(byte); }

}  // namespace xtrain
