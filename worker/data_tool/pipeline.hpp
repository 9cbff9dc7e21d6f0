// xtrain-data's pipeline: one reader thread cuts the input into chunks, `threads` workers encode
// them, and the calling thread writes the results into the shard set strictly in input order, so
// the output is the same for every thread count. At most a few chunks per worker are in flight.
// The first error in input order (a broken JSON line, an unreadable file) stops everything.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/tokenizer/gpt2_tokenizer.hpp"
#include "worker/data_tool/documents.hpp"
#include "worker/data_tool/shard_set.hpp"

namespace xtrain::data_tool {

struct PipelineOptions {
  std::string jsonl_field;          // empty: text files
  int threads = 1;
  std::size_t chunk_bytes = kChunkBytes;
  bool progress = true;             // a progress line on stderr (rewritten in place on a terminal)
};

// Set (to the signal number) by a SIGINT/SIGTERM handler: the pipeline stops at the next chunk.
extern std::atomic<int> g_stop_signal;

struct Interrupted {
  int signal;
};

// Encodes every file into `shards` (then shards.finish()). Throws BadInput (bad input),
// Interrupted, or std::runtime_error (the file system failed).
void run_pipeline(const std::vector<InputFile>& files, const Gpt2Tokenizer& tokenizer, ShardSet& shards,
                  const PipelineOptions& options);

}  // namespace xtrain::data_tool
