#include "worker/data_tool/nanogpt_import.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "common/bad_input.hpp"
#include "worker/data/token_source.hpp"
#include "worker/data_tool/pipeline.hpp"
#include "worker/data_tool/progress_line.hpp"

namespace xtrain::data_tool {
namespace {

namespace fs = std::filesystem;

// Tokens read and checked at a time: 2 MB of file.
constexpr std::size_t kTokensPerRead = 1 << 20;

// The size of a file of bare uint16 tokens, checked.
std::uint64_t token_file_bytes(const std::string& path) {
  std::error_code ec;
  const std::uint64_t bytes = fs::file_size(path, ec);
  if (ec) throw BadInput(path + ": " + ec.message());
  if (bytes % 2 != 0) {
    throw BadInput(path + ": " + std::to_string(bytes) + " bytes, an odd number: not bare uint16 tokens");
  }
  std::ifstream in(path, std::ios::binary);
  std::int32_t first = 0;
  if (in.read(reinterpret_cast<char*>(&first), sizeof first) && first == kShardMagic) {
    throw BadInput(path + ": already an llm.c token shard (its header's magic is " + std::to_string(kShardMagic) +
                   "): give it to data.train or data.val as it is");
  }
  return bytes;
}

// Appends the tokens of `path` to `shards` as one document, checking each id.
void copy_tokens(const std::string& path, int vocab_size, ShardSet& shards, ProgressLine& progress,
                 std::uint64_t& bytes_done, std::uint64_t& tokens_done) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BadInput(path + ": " + std::strerror(errno));
  std::vector<std::uint16_t> read(kTokensPerRead);
  std::vector<std::int32_t> tokens;
  std::uint64_t position = 0;
  shards.begin_document();
  for (;;) {
    if (const int sig = g_stop_signal.load()) throw Interrupted{sig};
    in.read(reinterpret_cast<char*>(read.data()), static_cast<std::streamsize>(read.size() * sizeof read[0]));
    const auto got = static_cast<std::size_t>(in.gcount()) / sizeof read[0];
    if (got == 0) break;
    tokens.assign(read.begin(), read.begin() + static_cast<std::ptrdiff_t>(got));
    for (std::size_t i = 0; i < got; ++i) {
      if (tokens[i] >= vocab_size) {
        throw BadInput(path + ": token " + std::to_string(position + i) + " is " + std::to_string(tokens[i]) +
                       ", outside the vocabulary's " + std::to_string(vocab_size) +
                       " tokens: not GPT-2 token ids (or not little-endian)");
      }
    }
    shards.append(tokens);
    position += got;
    bytes_done += got * sizeof read[0];
    tokens_done += got;
    progress.update(bytes_done, std::nullopt, tokens_done);
  }
  if (in.bad()) throw std::runtime_error(path + ": read failed: " + std::strerror(errno));
}

}  // namespace

NanogptData find_nanogpt_data(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw BadInput("--nanogpt: " + dir + (fs::exists(dir, ec) ? ": not a directory" : ": no such directory") +
                   " (expected nanoGPT's data directory, data/NAME, with train.bin and val.bin)");
  }
  NanogptData data;
  data.dir = dir;
  const fs::path meta = fs::path(dir) / "meta.pkl";
  if (fs::exists(meta, ec)) {
    throw BadInput(meta.string() + ": a character-level vocabulary (nanoGPT's *_char datasets): its token ids are "
                   "characters, not GPT-2's tokens; make shards of the text itself with xtrain-data --vocab GPT2_DIR");
  }
  data.train = (fs::path(dir) / "train.bin").string();
  if (!fs::exists(data.train, ec)) {
    throw BadInput("--nanogpt: " + dir + ": no train.bin (nanoGPT's prepare.py writes train.bin and val.bin)");
  }
  data.bytes = token_file_bytes(data.train);
  if (data.bytes == 0) throw BadInput(data.train + ": empty: nothing to train on");
  const std::string val = (fs::path(dir) / "val.bin").string();
  if (fs::exists(val, ec)) {
    data.val = val;
    const std::uint64_t val_bytes = token_file_bytes(val);
    data.val_tokens = val_bytes / 2;
    data.bytes += val_bytes;
  }
  return data;
}

void import_nanogpt(const NanogptData& data, int vocab_size, ShardSet& shards, bool progress) {
  ProgressLine line(progress, data.bytes);
  std::uint64_t bytes = 0, tokens = 0;
  if (data.val_tokens > 0) copy_tokens(data.val, vocab_size, shards, line, bytes, tokens);
  copy_tokens(data.train, vocab_size, shards, line, bytes, tokens);
  if (bytes != data.bytes) {
    throw BadInput(data.dir + ": train.bin or val.bin changed while it was read (" + std::to_string(data.bytes) +
                   " bytes expected, " + std::to_string(bytes) + " read)");
  }
  shards.finish();
  line.update(bytes, std::nullopt, tokens, /*final=*/true);
}

}  // namespace xtrain::data_tool
