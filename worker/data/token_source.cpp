#include "worker/data/token_source.hpp"

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>

#include "common/model_file.hpp"
#include "common/number_format.hpp"
#include "common/path_notes.hpp"

namespace xtrain {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// For a path that is not there: where a relative one was looked for, which a newcomer may not guess
// (or that a URL or "~" is not what it is in a shell).
std::string relative_note(const std::string& path) {
  if (const std::string note = missing_path_note(path, "data"); !note.empty()) return " (" + note + ")";
  if (path.empty() || path.front() == '/') return "";
  std::error_code ec;
  return " (a relative path, taken from the current directory " + std::filesystem::current_path(ec).string() + ")";
}

// Bare uint16 tokens without a header are nanoGPT's format (its prepare.py scripts write them).
std::string nanogpt_note(const std::string& dir) {
  return "nanoGPT's train.bin and val.bin hold bare uint16 tokens without a header: make llm.c token shards of them "
         "with xtrain-data --nanogpt " + dir + " --out DIR";
}

// For a directory given as data.train or data.val: the glob of its llm.c shards of that split
// (llm.c names them PREFIX_train_NNNNNN.bin, PREFIX_val_NNNNNN.bin), what to do with nanoGPT's, or
// the glob of its text files.
std::string directory_hint(const std::string& dir, const std::string& field) {
  const std::string split = field == "data.val" ? "_val_" : "_train_";
  bool shards = false, nanogpt = false, text = false;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    shards = shards || (name.find(split) != std::string::npos && ends_with(name, ".bin"));
    nanogpt = nanogpt || name == "train.bin";
    text = text || ends_with(name, ".txt");
  }
  const std::filesystem::path base(dir);
  if (shards) return ": give the glob of its shards, " + (base / ("*" + split + "*.bin")).string();
  if (nanogpt) return "; " + nanogpt_note(dir);
  if (text) {
    return ": " + (base / "*.txt").string() + " reads its text files as one stream of bytes, in name order; for "
           "GPT-2's tokens make llm.c token shards of them with xtrain-data";
  }
  return "";
}

// A file that could not be opened: its error, and relative_note when it is not there.
DataError open_error(const std::string& field, const std::string& path, const FileError& e) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return DataError(field, path + ": is a directory, expected a file or a glob" + directory_hint(path, field));
  }
  return DataError(field, e.what() + (std::filesystem::exists(path, ec) ? "" : relative_note(path)));
}

// The directory a pattern lists: its part before the first wildcard, up to the last '/'.
std::string pattern_directory(const std::string& pattern) {
  const std::string fixed = pattern.substr(0, pattern.find_first_of(kGlobCharacters));
  const size_t slash = fixed.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : fixed.substr(0, slash);
}

std::vector<std::string> expand(const std::string& pattern, const std::string& field) {
  if (!is_glob_pattern(pattern)) return {pattern};
  glob_t g{};
  const int rc = ::glob(glob_pattern_of(pattern).c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> files;
  if (rc == 0) files.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && files.empty())) {
    throw DataError(field, "no file matches " + pattern + relative_note(pattern));
  }
  if (rc != 0) {
    const std::string dir = pattern_directory(pattern);
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
      throw DataError(field, pattern + ": the directory " + dir + " does not exist" + relative_note(dir));
    }
    throw DataError(field, pattern + ": cannot list the matching files: a directory on the way cannot be read");
  }
  std::sort(files.begin(), files.end());  // by bytes, whatever the locale
  return files;
}

MappedFile map_data_file(const std::string& path, const std::string& field) {
  try {
    return MappedFile(path);
  } catch (const FileError& e) {
    throw open_error(field, path, e);
  }
}

std::int32_t read_int32(const std::uint8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// A file's kind and token count from its first `available` bytes (at least the shard header's,
// when the file is that long) and its size: nullopt for text, else the shard's token count.
// A *.bin file that is not a shard, a *.jsonl file, and a shard whose header disagrees with its
// size, are errors.
std::optional<std::uint64_t> shard_token_count(const std::uint8_t* bytes, std::uint64_t available,
                                               std::uint64_t size, const std::string& path,
                                               const std::string& field) {
  const bool shard = available >= sizeof(std::int32_t) && read_int32(bytes) == kShardMagic;
  // Compressed first: a shard.bin.gz renamed shard.bin is better told so than "not a shard".
  const std::string_view head(reinterpret_cast<const char*>(bytes), std::min<std::uint64_t>(available, 16));
  if (const char* compression = shard ? nullptr : compression_of(head)) {
    throw DataError(field, path + ": " + compression + "-compressed: decompress it first");
  }
  if (!shard && ends_with(path, ".bin")) {
    const std::string magic = available >= sizeof(std::int32_t) ? std::to_string(read_int32(bytes)) : "missing";
    const std::string dir = std::filesystem::path(path).parent_path().string();
    throw DataError(field, path + ": not an llm.c token shard: magic is " + magic + ", expected " +
                               std::to_string(kShardMagic) + "; " + nanogpt_note(dir.empty() ? "." : dir));
  }
  // Read as text, JSON Lines would train on its syntax (quotes, keys, escapes) rather than its text.
  if (!shard && ends_with(path, ".jsonl")) {
    throw DataError(field, path + ": JSON Lines, whose JSON syntax would be read as text: make llm.c token shards "
                                  "of its text field with xtrain-data --jsonl-field NAME");
  }
  if (!shard) return std::nullopt;
  if (size < kShardHeaderBytes) {
    throw DataError(field, path + ": truncated llm.c token shard: " + std::to_string(size) + " bytes, less than its " +
                               std::to_string(kShardHeaderBytes) + "-byte header");
  }
  const std::int32_t version = read_int32(bytes + 4);
  if (version != kShardVersion) {
    throw DataError(field, path + ": llm.c token shard version is " + std::to_string(version) + ", expected " +
                               std::to_string(kShardVersion) + " (uint16 tokens)");
  }
  const std::int32_t count = read_int32(bytes + 8);
  const std::uint64_t expected = kShardHeaderBytes + 2 * static_cast<std::uint64_t>(std::max(count, 0));
  if (count < 0 || size != expected) {
    throw DataError(field, path + ": size is " + std::to_string(size) + " bytes but its header's token count " +
                               std::to_string(count) + " needs " + std::to_string(expected));
  }
  return static_cast<std::uint64_t>(count);
}

// The largest token id a shard's header records (kShardMaxTokenTag), nullopt when it records none.
std::optional<int> recorded_max_token(const std::uint8_t* header) {
  if (read_int32(header + 4 * kShardMaxTokenWord) != kShardMaxTokenTag) return std::nullopt;
  return read_int32(header + 4 * (kShardMaxTokenWord + 1));
}

DataError vocab_error(const std::string& field, const std::string& path, int max_token, int vocab_size) {
  return DataError(field, path + ": the data needs vocab_size >= " + std::to_string(max_token + 1) +
                              " (its largest token is " + std::to_string(max_token) +
                              "), but model.vocab_size is " + std::to_string(vocab_size));
}

// The files of one source must all be text or all be shards.
void check_one_kind(const std::string& pattern, const std::string& first, bool first_text, const std::string& path,
                    bool text, const std::string& field) {
  if (text == first_text) return;
  const auto kind = [](bool t) { return t ? "text" : "an llm.c token shard"; };
  throw DataError(field, pattern + ": " + first + " is " + kind(first_text) + " but " + path + " is " + kind(text) +
                             "; the files must all be of one kind");
}

// A source as the split sees it: its kind and its token count.
struct SourceSize {
  bool text = true;
  std::uint64_t tokens = 0;
};

// Sizes the training and validation splits (load_data's rules, its errors) from the sources' sizes.
struct SplitSizes {
  std::uint64_t train = 0;     // the first `train` tokens of data.train
  std::uint64_t held_out = 0;  // without data.val: the tokens after them, for validation
};

SplitSizes split_sizes(const DataSpec& data, const ModelSpec& model, bool need_val, const SourceSize& train,
                       const std::optional<SourceSize>& val) {
  const std::uint64_t window = static_cast<std::uint64_t>(model.seq_len) + 1;
  const std::string needs =
      "model.seq_len " + std::to_string(model.seq_len) + " needs at least " + std::to_string(window);
  SplitSizes split{train.tokens, 0};
  if (val) {
    if (val->text != train.text) {
      const auto kind = [](bool text) { return text ? std::string("text") : std::string("llm.c token shards"); };
      throw DataError("data.val", data.val + " is " + kind(val->text) + " but data.train (" + data.train + ") is " +
                                      kind(train.text) + "; validate on the same kind of tokens");
    }
    if (val->tokens < window) {
      throw DataError("data.val", data.val + ": " + std::to_string(val->tokens) + " tokens, but " + needs);
    }
  } else {
    split.held_out =
        static_cast<std::uint64_t>(std::llround(static_cast<double>(train.tokens) * data.val_fraction));
    split.train = train.tokens - split.held_out;
    // Too little data for a training and a validation window: no data.val_fraction can help.
    if (need_val && train.tokens < 2 * window) {
      throw DataError("data.train", data.train + ": " + std::to_string(train.tokens) + " tokens, but " + needs +
                                        " for training and as many held out for validation (eval_every > 0 "
                                        "without data.val); give more data or data.val");
    }
    if (need_val && split.held_out < window) {
      throw DataError("data.val_fraction", format_number(data.val_fraction) + " of " + data.train + "'s " +
                                               std::to_string(train.tokens) + " tokens is " +
                                               std::to_string(split.held_out) + " validation tokens, but " + needs +
                                               "; give data.val, more data or a larger data.val_fraction");
    }
  }
  if (split.train < window) {
    std::string what = std::to_string(train.tokens) + " tokens";
    if (split.train != train.tokens) {
      what += ", " + std::to_string(split.train) + " of them for training after holding out " +
              std::to_string(split.held_out) + " for validation";
    }
    throw DataError("data.train", data.train + ": " + what + ", but " + needs);
  }
  return split;
}

// The largest byte of a text file (-1: empty), as its tokens under a byte-level vocabulary.
int largest_byte(const std::string& path, const std::string& field) {
  const MappedFile file = map_data_file(path, field);
  return file.size() ? *std::max_element(file.data(), file.data() + file.size()) : -1;
}

// A source's kind and size from its files' headers and sizes alone, and the recorded token
// range of its shards against `vocab_size` (of text too where `vocab_size` is below bytes').
SourceSize inspect_source(const std::string& pattern, const std::vector<std::string>& files,
                          const std::string& field, int vocab_size) {
  SourceSize out;
  for (size_t i = 0; i < files.size(); ++i) {
    TokenFileInfo info = inspect_token_file(files[i], field);
    if (info.text && vocab_size < kByteVocabulary) info.max_token = largest_byte(files[i], field);
    if (i > 0) check_one_kind(pattern, files.front(), out.text, files[i], info.text, field);
    if (info.max_token && *info.max_token >= vocab_size) {
      throw vocab_error(field, files[i], *info.max_token, vocab_size);
    }
    out.text = info.text;
    out.tokens += info.tokens;
  }
  return out;
}

// Validation on files the model also trains on measures memorisation, not generalisation: a glob
// like DIR/*.bin takes llm.c's DIR/NAME_val_000000.bin into training along with data.val. The
// same files for both (overfitting a sequence on purpose, to watch validation follow) are meant.
// `train` and `val` are the files of data.train and data.val, as expanded.
void check_splits_apart(const DataSpec& data, const std::vector<std::string>& train,
                        const std::vector<std::string>& val) {
  const auto same = [](const std::string& a, const std::string& b) {
    std::error_code ec;
    return std::filesystem::equivalent(a, b, ec);
  };
  const auto in = [&](const std::vector<std::string>& files, const std::string& file) {
    return std::any_of(files.begin(), files.end(), [&](const std::string& f) { return same(f, file); });
  };
  const auto shared = std::find_if(val.begin(), val.end(), [&](const std::string& f) { return in(train, f); });
  if (shared == val.end()) return;
  const bool identical = train.size() == val.size() &&
                         std::all_of(train.begin(), train.end(), [&](const std::string& f) { return in(val, f); });
  if (identical) return;
  throw DataError("data.val", *shared + " is in data.train too (" + data.train +
                                  "): validation would score tokens the model trains on; give the splits files of "
                                  "their own (llm.c's shards: *_train_*.bin and *_val_*.bin)");
}

}  // namespace

TokenFileInfo inspect_token_file(const std::string& path, const std::string& field) {
  try {
    InputFile in(path);
    std::uint8_t header[kShardHeaderBytes];
    const std::uint64_t available = std::min<std::uint64_t>(in.size(), sizeof header);
    in.read_at(0, header, available);
    const std::optional<std::uint64_t> shard = shard_token_count(header, available, in.size(), path, field);
    if (!shard) return {path, true, in.size(), std::nullopt};
    return {path, false, *shard, recorded_max_token(header)};
  } catch (const FileError& e) {
    throw open_error(field, path, e);
  }
}

DataFilesInfo check_data_files(const DataSpec& data, const ModelSpec& model, bool need_val) {
  const std::vector<std::string> train_files = expand(data.train, "data.train");
  const std::vector<std::string> val_files =
      data.val.empty() ? std::vector<std::string>{} : expand(data.val, "data.val");
  check_splits_apart(data, train_files, val_files);
  const SourceSize train = inspect_source(data.train, train_files, "data.train", model.vocab_size);
  std::optional<SourceSize> val;
  if (!data.val.empty()) val = inspect_source(data.val, val_files, "data.val", model.vocab_size);
  const SplitSizes split = split_sizes(data, model, need_val, train, val);
  return {split.train, val ? val->tokens : split.held_out, train.text};
}

TokenSource::TokenSource(const std::string& pattern, const std::string& field) : pattern_(pattern) {
  files_ = expand(pattern, field);
  for (const auto& path : files_) {
    Segment s = open_file(path, field);
    const bool text = s.width == 1;
    if (!segments_.empty()) check_one_kind(pattern, files_.front(), byte_level_, path, text, field);
    byte_level_ = text;
    s.first = total_;
    total_ += s.count;
    segments_.push_back(std::move(s));
  }
}

TokenSource::Segment TokenSource::open_file(const std::string& path, const std::string& field) {
  Segment s{map_data_file(path, field)};
  const std::uint8_t* bytes = s.file.data();
  const std::uint64_t size = s.file.size();
  const std::optional<std::uint64_t> shard = shard_token_count(bytes, size, size, path, field);
  if (!shard) {  // text: one token per byte
    s.tokens = bytes;
    s.width = 1;
    s.count = size;
    s.max_token = size ? *std::max_element(bytes, bytes + size) : -1;
    return s;
  }
  s.tokens = bytes + kShardHeaderBytes;
  s.width = 2;
  s.count = *shard;
  std::uint16_t max = 0;
  for (std::uint64_t i = 0; i < s.count; ++i) {
    std::uint16_t t;
    std::memcpy(&t, s.tokens + 2 * i, 2);
    max = std::max(max, t);
  }
  s.max_token = s.count ? max : -1;
  const std::optional<int> recorded = recorded_max_token(bytes);
  if (recorded && *recorded != s.max_token) {
    throw DataError(field, path + ": damaged llm.c token shard: its header records a largest token of " +
                               std::to_string(*recorded) + " but it holds " + std::to_string(s.max_token));
  }
  return s;
}

void TokenSource::check_vocab(int vocab_size, const std::string& field) const {
  for (const auto& s : segments_) {
    if (s.max_token >= vocab_size) throw vocab_error(field, s.file.path(), s.max_token, vocab_size);
  }
}

void TokenSource::copy(std::uint64_t start, std::uint64_t count, std::int32_t* out) const {
  // The segment holding `start`: the last one whose first token is at or before it.
  auto it = std::upper_bound(segments_.begin(), segments_.end(), start,
                             [](std::uint64_t pos, const Segment& s) { return pos < s.first; });
  --it;
  while (count > 0) {
    const std::uint64_t offset = start - it->first;
    const std::uint64_t n = std::min(count, it->count - offset);
    if (it->width == 1) {
      for (std::uint64_t i = 0; i < n; ++i) out[i] = it->tokens[offset + i];
    } else {
      for (std::uint64_t i = 0; i < n; ++i) {
        std::uint16_t t;
        std::memcpy(&t, it->tokens + 2 * (offset + i), 2);
        out[i] = t;
      }
    }
    out += n;
    start += n;
    count -= n;
    ++it;
  }
}

void TokenSpan::copy(std::uint64_t start, std::uint64_t n, std::int32_t* out) const {
  source->copy(begin + start, n, out);
}

DataSplit load_data(const DataSpec& data, const ModelSpec& model, bool need_val) {
  auto train = std::make_shared<const TokenSource>(data.train, "data.train");
  std::shared_ptr<const TokenSource> val;
  if (!data.val.empty()) {
    val = std::make_shared<const TokenSource>(data.val, "data.val");
    check_splits_apart(data, train->files(), val->files());
    val->check_vocab(model.vocab_size, "data.val");
  }
  train->check_vocab(model.vocab_size, "data.train");
  const SplitSizes sizes =
      split_sizes(data, model, need_val, {train->byte_level(), train->size()},
                  val ? std::optional<SourceSize>({val->byte_level(), val->size()}) : std::nullopt);
  DataSplit split;
  split.byte_level = train->byte_level();
  split.train = {train, 0, sizes.train};
  split.val = val ? TokenSpan{val, 0, val->size()} : TokenSpan{train, sizes.train, sizes.held_out};
  return split;
}

}  // namespace xtrain
