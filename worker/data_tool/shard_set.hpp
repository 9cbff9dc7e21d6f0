// xtrain-data's output: llm.c token shards (worker/data/token_source.hpp's format: a header of 256
// int32 [20240520, 1, token count, kShardMaxTokenTag, largest token id, 0...] then uint16 tokens;
// the largest id lets a launcher check the range from the header) in a directory of their own, named as
// llm.c names them: PREFIX_val_000000.bin, PREFIX_train_000001.bin, ... (one index across both
// splits). The first documents, whole, go to validation until it holds at least val_tokens tokens;
// the rest is training data. A document is never split, except where the input is one document
// (one text file): then validation is its first val_tokens tokens and training the rest of it, as
// llm.c's tinyshakespeare.py cuts its one text (kept whole, nothing would be left to train on).
// Each split ends with `end_token` (EOT), so its last document is closed like every other one
// ("EOT doc EOT doc ... EOT doc EOT"). Shards hold shard_tokens tokens (the last of each split
// fewer); training documents run on across shard boundaries, as llm.c's do.
//
// Nothing partial is ever visible: shards are written into a hidden staging directory beside the
// output directory (".NAME.xtrain-data-tmp"), each as "FILE.partial" until it is complete and
// fsynced and then renamed; finish() renames the staging directory into place of the output
// directory (a previous output is moved aside first, then deleted). The output directory thus holds
// a previous complete set, a new complete set, or for an instant nothing, never a mix. A killed run
// leaves only the staging directory, which the next run into the same directory removes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace xtrain::data_tool {

class ShardFile;

class ShardSet {
 public:
  struct Options {
    std::string out_dir;
    std::string prefix;
    std::uint64_t shard_tokens = 100'000'000;
    std::uint64_t val_tokens = 0;
    std::int32_t end_token = -1;  // appended once at the end of each split (EOT), -1 = none
    bool one_document = false;    // the input is one document: cut it after val_tokens tokens
  };
  struct Split {
    int shards = 0;
    std::uint64_t tokens = 0;
    std::uint64_t documents = 0;
  };

  // Checks the output directory (it may exist only holding shards: it will be replaced) and
  // creates the staging directory. Throws BadInput for a directory that holds anything else or
  // that another run is writing; std::runtime_error when the file system refuses.
  explicit ShardSet(Options options);
  ~ShardSet();  // an unfinished set's staging directory is removed
  ShardSet(const ShardSet&) = delete;
  ShardSet& operator=(const ShardSet&) = delete;

  void begin_document();                           // decides its split: validation or training
  void append(std::span<const std::int32_t> tokens);  // every token < 65536

  // Completes the last shard and puts the set in place. Throws BadInput when there is nothing to
  // train on (no tokens, or all of them in validation).
  void finish();

  const Split& val() const { return val_; }
  const Split& train() const { return train_; }  // a cut document counts in both
  // Where the one document was cut: its tokens in validation (its leading EOT included); 0: not cut.
  std::uint64_t cut_at() const { return cut_at_; }
  const std::string& staging_dir() const { return staging_; }

 private:
  void write(std::span<const std::int32_t> tokens);  // into the current split's shards
  void end_split();  // appends end_token to the current split, if it holds anything
  void close_shard();
  void remove_staging() noexcept;

  Options options_;
  std::string staging_;
  int lock_fd_ = -1;  // an flock on the staging directory: one run per output directory
  bool finished_ = false;
  bool in_val_ = true;
  int next_index_ = 0;
  std::unique_ptr<ShardFile> shard_;  // the shard being written, if any
  Split val_, train_;
  std::uint64_t cut_at_ = 0;
};

}  // namespace xtrain::data_tool
