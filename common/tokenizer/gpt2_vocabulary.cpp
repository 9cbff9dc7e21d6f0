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
#include "common/tokenizer/hf_tokenizer_json.hpp"
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

// `text`, the file at `path`, as JSON; a syntax error names its line.
nlohmann::json parse_json(const std::string& path, const std::string& text) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 1, column 9: syntax ..."
    const auto colon = what.find(": ", what.find("parse error"));
    throw TokenizerError(path, line_of_offset(text, e.byte > 0 ? e.byte - 1 : 0),
                         "not valid JSON: " + (colon == std::string::npos ? what : what.substr(colon + 2)));
  }
}

// The vocabulary of `doc`, {token: id} (vocab.json, or tokenizer.json's model.vocab; `what` names it).
Entries entries_of(const std::string& path, const nlohmann::json& doc, const std::string& what = "") {
  if (!doc.is_object() || doc.empty()) {
    throw TokenizerError(path, 0, what + "expected a JSON object mapping each token to its id, got " +
                                      std::string(doc.is_object() ? "an empty object" : doc.type_name()));
  }
  const std::size_t n = doc.size();
  Entries entries;
  entries.names.resize(n);
  entries.ids.reserve(n);
  for (const auto& [token, id] : doc.items()) {
    if (token.empty()) throw TokenizerError(path, 0, what + "a token is the empty string");
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= static_cast<std::int64_t>(n)) {
      throw TokenizerError(path, 0, what + "token " + in_quotes(token) + " has id " + id.dump() + "; the " +
                                        std::to_string(n) + " ids must be the integers 0 to " + std::to_string(n - 1));
    }
    const auto value = id.get<std::int32_t>();
    if (!entries.names[value].empty()) {
      throw TokenizerError(path, 0, what + "tokens " + in_quotes(entries.names[value]) + " and " + in_quotes(token) +
                                        " both have id " + std::to_string(value));
    }
    entries.names[value] = token;
    entries.ids.emplace(token, value);
  }
  return entries;
}

Entries read_vocab(const std::string& path) {
  return entries_of(path, parse_json(path, read_file(path, "vocabulary")));
}

// ---- The merges: "LEFT RIGHT", highest priority first ----

// Merges as a file lists them, and how an error names one: its line of merges.txt, or its index in
// tokenizer.json's model.merges.
struct MergeList {
  std::string path;
  std::vector<std::string> merges;
  std::vector<int> lines;  // merges.txt: each merge's line; empty for tokenizer.json

  std::string name(std::size_t i) const {
    return lines.empty() ? "model.merges[" + std::to_string(i) + "]" : "line " + std::to_string(lines[i]);
  }
  TokenizerError error(std::size_t i, const std::string& message) const {
    return lines.empty() ? TokenizerError(path, 0, name(i) + ": " + message) : TokenizerError(path, lines[i], message);
  }
};

// merges.txt (or vocab.bpe): a "#version" line, then a merge per line.
MergeList read_merge_lines(const std::string& path) {
  const std::string text = read_file(path, "merges");
  MergeList list{path, {}, {}};
  int line_number = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_number == 1 && line.starts_with("#version"))) continue;
    list.merges.emplace_back(line);
    list.lines.push_back(line_number);
  }
  return list;
}

// The token each merge makes, in merge order (rank 0 first), each checked against the vocabulary.
std::vector<std::int32_t> check_merges(const MergeList& list, const Entries& entries, const std::string& vocab_path) {
  std::vector<std::int32_t> merges;
  std::unordered_map<std::int32_t, std::size_t> made_at;  // result -> merge
  for (std::size_t i = 0; i < list.merges.size(); ++i) {
    const std::string_view line = list.merges[i];
    const auto space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      throw list.error(i, "expected a merge: two tokens separated by one space, got " + in_quotes(line));
    }
    const std::string_view left = line.substr(0, space), right = line.substr(space + 1);
    const std::string result = std::string(left) + std::string(right);
    for (const std::string_view part : {left, right}) {
      if (!entries.ids.contains(part)) {
        throw list.error(i, "merge " + in_quotes(line) + ": " + in_quotes(part) + " is not in " + vocab_path);
      }
    }
    const auto it = entries.ids.find(result);
    if (it == entries.ids.end()) {
      throw list.error(i,
                       "merge " + in_quotes(line) + " makes " + in_quotes(result) + ", which is not in " + vocab_path);
    }
    if (!alphabet().decode(result)) {
      throw list.error(i, "merge " + in_quotes(line) + ": not written in GPT-2's byte alphabet");
    }
    if (const auto [at, fresh] = made_at.emplace(it->second, i); !fresh) {
      throw list.error(i, "merge " + in_quotes(line) + " makes " + in_quotes(result) + ", as " + list.name(at->second) +
                              " does already");
    }
    merges.push_back(it->second);
  }
  return merges;
}

// A vocabulary and its merges, as its files write them.
struct VocabularyText {
  Entries entries;
  MergeList merges;
  std::string vocab_path;  // the file errors about the vocabulary name
  std::string vocab_name;  // what an error about a merge calls it
};

// ---- Hugging Face's tokenizer.json: the vocabulary and the merges in one file ----

// The vocabulary and the merges of a tokenizer.json that is GPT-2's kind of tokenizer: byte-level
// BPE behind GPT-2's regex, no prefix space, no normalizer, every merge applied (anything else
// would encode text otherwise than we do: one error naming the key). Added tokens missing from
// model.vocab (ids past it) join the vocabulary as special tokens.
VocabularyText read_tokenizer_json_document(const std::string& path, nlohmann::json& doc) {
  const auto refuse = [&](const std::string& key, const nlohmann::json& value) {
    return TokenizerError(path, 0,
                          key + " is " + value.dump() +
                              ": only GPT-2's byte-level BPE is supported (model.type \"BPE\", a \"ByteLevel\" "
                              "pre_tokenizer with its regex and no prefix space, no normalizer)");
  };
  if (!doc.is_object()) throw TokenizerError(path, 0, "expected a JSON object, got " + std::string(doc.type_name()));
  nlohmann::json& model = doc["model"];
  if (!model.is_object() || model.value("type", "") != "BPE") {
    throw refuse("model.type", model.is_object() ? model.value("type", nlohmann::json()) : model);
  }
  const nlohmann::json& pre = doc["pre_tokenizer"];
  if (!pre.is_object() || pre.value("type", "") != "ByteLevel" || pre.value("add_prefix_space", false) ||
      !pre.value("use_regex", true)) {
    throw refuse("pre_tokenizer", pre);
  }
  if (!doc["normalizer"].is_null()) throw refuse("normalizer", doc["normalizer"]);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const nlohmann::json& affix = model[key];
    if (!affix.is_null() && affix != "") throw refuse("model." + std::string(key), affix);
  }
  // Merges skipped for whole words in the vocabulary, or dropped at random, encode otherwise.
  if (model["ignore_merges"] == true) throw refuse("model.ignore_merges", true);
  if (!model["dropout"].is_null() && model["dropout"] != 0) throw refuse("model.dropout", model["dropout"]);
  nlohmann::json& vocab = model["vocab"];
  if (vocab.is_object() && doc["added_tokens"].is_array()) {
    for (const nlohmann::json& added : doc["added_tokens"]) {
      if (added.is_object() && added["content"].is_string() && !vocab.contains(added["content"].get<std::string>())) {
        vocab[added["content"].get<std::string>()] = added["id"];
      }
    }
  }
  VocabularyText t{entries_of(path, vocab, "model.vocab: "), {path, {}, {}}, path, "model.vocab"};
  const nlohmann::json& merges = model["merges"];
  if (!merges.is_array()) {
    throw TokenizerError(path, 0, "model.merges: expected an array, got " + std::string(merges.type_name()));
  }
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const nlohmann::json& m = merges[i];
    if (m.is_string()) {
      t.merges.merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      t.merges.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      throw t.merges.error(i, "expected \"LEFT RIGHT\" or [\"LEFT\", \"RIGHT\"], got " + m.dump());
    }
  }
  return t;
}

VocabularyText read_tokenizer_json(const std::string& path) {
  nlohmann::json doc = parse_json(path, read_file(path, "tokenizer"));
  try {
    return read_tokenizer_json_document(path, doc);
  } catch (const nlohmann::json::exception& e) {  // a key of another type than the format's
    throw TokenizerError(path, 0, std::string("not a tokenizer.json as Hugging Face writes one: ") + e.what());
  }
}

// The vocabulary at `files`, in whichever form they are.
VocabularyText read_vocabulary(const VocabularyFiles& files) {
  if (!files.tokenizer_json.empty()) return read_tokenizer_json(files.tokenizer_json);
  Entries entries = read_vocab(files.vocab);
  return {std::move(entries), read_merge_lines(files.merges), files.vocab, files.vocab};
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
      return {(dir / "encoder.json").string(), (dir / "vocab.bpe").string(), ""};
    }
    if (fs::exists(dir / kHfVocabFile) || fs::exists(dir / kHfMergesFile)) {
      return {(dir / kHfVocabFile).string(), (dir / kHfMergesFile).string(), ""};
    }
    if (fs::exists(dir / kHfTokenizerFile)) return {"", "", (dir / kHfTokenizerFile).string()};
    throw TokenizerError(path, 0,
                         "holds neither encoder.json + vocab.bpe (OpenAI's GPT-2 vocabulary) nor "
                         "vocab.json + merges.txt or tokenizer.json (Hugging Face's)");
  }
  const fs::path file(path);
  const fs::path dir = file.parent_path();
  const std::string name = file.filename().string();
  if (name == "encoder.json") return {path, (dir / "vocab.bpe").string(), ""};
  if (name == "vocab.bpe") return {(dir / "encoder.json").string(), path, ""};
  if (name == kHfVocabFile) return {path, (dir / kHfMergesFile).string(), ""};
  if (name == kHfMergesFile) return {(dir / kHfVocabFile).string(), path, ""};
  if (name == kHfTokenizerFile) return {"", "", path};
  throw TokenizerError(path, 0,
                       "not a GPT-2 vocabulary file: give its directory, or encoder.json, vocab.bpe, vocab.json, "
                       "merges.txt or tokenizer.json");
}

Gpt2Vocabulary load_gpt2_vocabulary(const std::string& path) {
  const VocabularyFiles files = find_vocabulary_files(path);
  const VocabularyText text = read_vocabulary(files);
  const Entries& entries = text.entries;

  static std::atomic<std::uint64_t> loads{0};
  Gpt2Vocabulary v;
  v.identity = ++loads;
  v.source = files.tokenizer_json.empty() ? files.vocab + " + " + files.merges : files.tokenizer_json;
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
      throw TokenizerError(text.vocab_path, 0,
                           "no token for byte " + std::string(hex) + " (" + in_quotes(name) +
                               "): a byte-level vocabulary has a token for each of the 256 bytes");
    }
    v.byte_tokens[b] = it->second;
    mergeable.push_back(it->second);
  }
  const auto eot = entries.ids.find("<|endoftext|>");
  if (eot == entries.ids.end()) throw TokenizerError(text.vocab_path, 0, "no <|endoftext|> token");
  v.eot = eot->second;

  const std::vector<std::int32_t> merges = check_merges(text.merges, entries, text.vocab_name);
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
  VocabularyText text = read_vocabulary(find_vocabulary_files(path));
  check_merges(text.merges, text.entries, text.vocab_name);
  return {std::move(text.entries.names), std::move(text.merges.merges)};
}

bool is_gpt2_tokenizer_json(const std::string& path) {
  try {
    read_tokenizer_json(path);
    return true;
  } catch (const TokenizerError&) {
    return false;
  }
}

std::string gpt2_byte_character(std::uint8_t byte) { return alphabet().encode(byte); }

}  // namespace xtrain
