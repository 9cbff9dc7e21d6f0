// Training data as one sequence of tokens, read from
//   - a text file: byte-level tokens, one per byte (vocabulary 256), or
//   - an llm.c token shard: a header of 256 int32 [magic 20240520, version 1, token count, 0...]
//     followed by that many uint16 tokens, or
//   - a glob of either (expanded with glob(3), sorted by name, concatenated in that order).
// A file is a shard when it starts with the shard magic; a *.bin file that does not is an error
// rather than text, since it almost certainly is a damaged or foreign shard, and so is a *.jsonl
// file (xtrain-data makes shards of its text field) and a compressed one (gzip, zip, ...). Files
// are mapped read-only, so a large corpus costs page cache, not heap.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/job_spec.hpp"
#include "worker/formats/file_io.hpp"

namespace xtrain {

inline constexpr std::int32_t kShardMagic = 20240520;
inline constexpr std::int32_t kShardVersion = 1;
inline constexpr std::uint64_t kShardHeaderBytes = 256 * sizeof(std::int32_t);
// xtrain-data records a shard's largest token id in two of llm.c's unused header words:
// header[3] = kShardMaxTokenTag and header[4] = the id. Other tools leave both 0: unknown then.
inline constexpr std::int32_t kShardMaxTokenTag = 0x78746d74;  // "tmtx"
inline constexpr int kShardMaxTokenWord = 3;                   // the tag; the id is the word after

// The compression format a file's first 10 bytes announce (gzip, zip, zstd, bzip2, xz), nullptr for
// none: read as text, a compressed file trains on noise, so it is refused instead.
inline const char* compression_of(std::string_view head) {
  if (head.starts_with("\x1f\x8b")) return "gzip";
  if (head.starts_with("PK\x03\x04")) return "zip";
  if (head.starts_with("\x28\xb5\x2f\xfd")) return "zstd";
  // bzip2's "BZh", a block size digit and a block's magic: a text may begin with "BZh".
  if (head.size() >= 10 && head.starts_with("BZh") && head.substr(4, 6) == "1AY&SY") return "bzip2";
  if (head.starts_with("\xfd" "7zXZ")) return "xz";
  return nullptr;
}

// Bad data: what() is "FIELD: MESSAGE" with FIELD the spec field ("data.train", "data.val",
// "data.val_fraction"), and the message names the file, e.g.
//   data.train: /x/y.bin: No such file or directory
class DataError : public SpecError {
 public:
  using SpecError::SpecError;
};

class TokenSource {
 public:
  // Opens a file or a glob of files; `field` names the spec field in errors (DataError).
  TokenSource(const std::string& pattern, const std::string& field);

  const std::string& pattern() const { return pattern_; }
  const std::vector<std::string>& files() const { return files_; }
  std::uint64_t size() const { return total_; }
  bool byte_level() const { return byte_level_; }  // text, as opposed to token shards

  // Throws DataError unless every token is below `vocab_size`.
  void check_vocab(int vocab_size, const std::string& field) const;

  // Tokens [start, start + count) of the concatenation, widened to int32.
  void copy(std::uint64_t start, std::uint64_t count, std::int32_t* out) const;

 private:
  struct Segment {
    MappedFile file;
    const std::uint8_t* tokens = nullptr;  // first token's first byte
    int width = 1;                         // bytes per token: 1 (text) or 2 (shard)
    std::uint64_t first = 0;               // index of this segment's first token
    std::uint64_t count = 0;
    int max_token = -1;  // -1: no tokens
  };
  Segment open_file(const std::string& path, const std::string& field);

  std::string pattern_;
  std::vector<std::string> files_;
  std::vector<Segment> segments_;
  std::uint64_t total_ = 0;
  bool byte_level_ = true;
};

// A contiguous range of a source: the training split or the validation split.
struct TokenSpan {
  std::shared_ptr<const TokenSource> source;
  std::uint64_t begin = 0;
  std::uint64_t count = 0;

  void copy(std::uint64_t start, std::uint64_t n, std::int32_t* out) const;  // start is span-relative
};

struct DataSplit {
  TokenSpan train;
  TokenSpan val;            // count 0 when no validation data is needed and none was given
  bool byte_level = false;  // the training data is text (so samples can be printed as text)
};

// Opens data.train (and data.val when given, else holds out the last data.val_fraction of the
// training tokens, which training then never sees), checks every token against
// model.vocab_size and that each split can serve a window of model.seq_len + 1 tokens.
// `need_val` (validation is on): a validation split too small for one window is an error.
DataSplit load_data(const DataSpec& data, const ModelSpec& model, bool need_val);

// What a data file holds, known from its size and, for a shard, its 1 KiB header.
struct TokenFileInfo {
  std::string path;
  bool text = true;         // byte-level text, else an llm.c token shard
  std::uint64_t tokens = 0;
  std::optional<int> max_token;  // a shard's largest token id, when its header records it
};

// Reads the header only. Throws DataError naming `field` and the file: missing or unreadable, a
// *.bin that is not a shard, a shard of another version, or one whose size disagrees with the
// token count in its header (truncated).
TokenFileInfo inspect_token_file(const std::string& path, const std::string& field);

// What check_data_files learns: the training split's token count (load_data's train.count) and
// whether the data is byte-level text.
struct DataFilesInfo {
  std::uint64_t train_tokens = 0;
  std::uint64_t val_tokens = 0;  // data.val's, or those held out by data.val_fraction
  bool byte_level = true;
};

// Everything load_data checks, from headers and sizes alone, so it costs the same for a 1 KB file
// and a 100 GB corpus: the files, their kinds and headers, the split sizes, and the token range
// against model.vocab_size of every shard whose header records its largest token (xtrain-data's
// shards; the tokens of other tools' shards are checked by the ranks as they load them). Text is
// read whole only under a vocabulary smaller than bytes' (ASCII's 128, say), where no header can
// tell whether every byte fits; such corpora are small. The launcher runs it before any rank starts.
DataFilesInfo check_data_files(const DataSpec& data, const ModelSpec& model, bool need_val);

}  // namespace xtrain
