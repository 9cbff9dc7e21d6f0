// xtrain-data: turns text into llm.c token shards for xtrain-worker (data.train / data.val), with
// the GPT-2 tokenizer. Documents are text files or lines of JSON Lines files; each document's
// tokens are preceded by <|endoftext|>, as llm.c's data scripts do. See --help and docs/data.md.
//
// Exit codes: 0 the shards are in place; 1 runtime failure (the file system failed); 2 bad input
// (command line, vocabulary, input files, output directory), with one line "xtrain-data: error:
// <file[:line]>: <what>"; 128+N stopped by signal N (SIGINT, SIGTERM), leaving nothing behind.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "common/build_info.hpp"
#include "common/command_line.hpp"
#include "common/exit_codes.hpp"
#include "common/model_file.hpp"
#include "common/number_format.hpp"
#include "common/usable_cpus.hpp"
#include "common/tokenizer/gpt2_tokenizer.hpp"
#include "worker/data_tool/documents.hpp"
#include "worker/data_tool/nanogpt_import.hpp"
#include "worker/data_tool/pipeline.hpp"
#include "worker/data_tool/shard_set.hpp"

namespace {

using namespace xtrain;
using namespace xtrain::data_tool;
namespace fs = std::filesystem;

constexpr int kMaxUint16Vocab = 65536;

const char* const kUsage =
    "usage: xtrain-data --vocab PATH --out DIR [options] INPUT...   (xtrain-data --version: the build)\n"
    "       xtrain-data --nanogpt DIR --out DIR [--prefix NAME] [--shard-tokens N] [--quiet]\n"
    "  Encodes text with GPT-2's tokenizer into llm.c token shards DIR/PREFIX_val_000000.bin,\n"
    "  DIR/PREFIX_train_000001.bin, ... Each document (a text file, or a line of a JSON Lines\n"
    "  file) is preceded by <|endoftext|>, as in llm.c's shards. INPUT: files, or directories\n"
    "  (read recursively in name order, skipping names that start with \".\").\n"
    "options:\n"
    "  --vocab PATH         GPT-2 vocabulary: a directory with encoder.json + vocab.bpe,\n"
    "                       vocab.json + merges.txt or (GPT-2's kind of) tokenizer.json, or one\n"
    "                       of those files\n"
    "  --out DIR            output directory, replaced as a whole (it may hold only shards)\n"
    "  --prefix NAME        shard name prefix (default: DIR's name)\n"
    "  --nanogpt DIR        instead of INPUT: nanoGPT's prepared data, DIR/val.bin (validation) and\n"
    "                       DIR/train.bin (training), bare uint16 GPT-2 token ids copied unchanged,\n"
    "                       each checked against GPT-2's 50257 tokens (or --vocab's)\n"
    "  --jsonl-field NAME   inputs are JSON Lines; each line's string field NAME is a document\n"
    "  --shard-tokens N     tokens per shard (default 100000000, as llm.c)\n"
    "  --val-tokens N       the first documents, whole, until at least N tokens, are the validation\n"
    "                       split (default: a tenth of the input's tokens, estimated at 4 bytes\n"
    "                       a token, at most --shard-tokens, llm.c's first shard; 0: none); one\n"
    "                       text file alone is one document: its first N tokens, the rest training\n"
    "  --threads N          encoding threads (default: the CPUs this process may use)\n"
    "  --chunk-bytes N      text per unit of work (default 1048576; changes no output)\n"
    "  --quiet              no progress line\n"

    "exit codes: 0 done; 1 the file system failed; 2 bad input; 128+N stopped by signal N\n";

struct Options {
  std::string vocab, out, prefix;
  std::string nanogpt;  // nanoGPT's data directory, instead of inputs
  std::uint64_t shard_tokens = 100'000'000;
  std::uint64_t val_tokens = 0;
  bool val_tokens_given = false;
  PipelineOptions pipeline;
  std::vector<std::string> inputs;
};

std::uint64_t parse_count(const std::string& flag, const std::string& value, std::uint64_t min, std::uint64_t max) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(value.c_str(), &end);  // also "1e8"
  if (value.empty() || *end != '\0' || errno != 0 || x != static_cast<double>(static_cast<std::uint64_t>(x)) ||
      x < static_cast<double>(min) || x > static_cast<double>(max)) {
    throw BadInput("command line: " + flag + " expects an integer from " + std::to_string(min) + " to " +
                     std::to_string(max) + ", got \"" + value + "\"");
  }
  return static_cast<std::uint64_t>(x);
}

Options parse(int argc, char** argv) {
  Options o;
  o.pipeline.threads = static_cast<int>(usable_cpus());
  const auto count = [](const char* flag, std::uint64_t min, std::uint64_t max, auto store) {
    return [=](const std::string& v) { store(parse_count(flag, v, min, max)); };
  };
  o.inputs = CommandLine(kUsage, "--help")
                 .option("--vocab", o.vocab)
                 .option("--out", o.out)
                 .option("--prefix", o.prefix)
                 .option("--nanogpt", o.nanogpt)
                 .option("--jsonl-field",
                         [&](const std::string& v) {
                           if (v.empty()) throw BadInput("command line: --jsonl-field needs a field name");
                           o.pipeline.jsonl_field = v;
                         })
                 // The header's count is an int32.
                 .option("--shard-tokens", count("--shard-tokens", 1, 0x7FFFFFFF, [&](std::uint64_t n) { o.shard_tokens = n; }))
                 .option("--val-tokens", count("--val-tokens", 0, 1ull << 53,
                                               [&](std::uint64_t n) { o.val_tokens = n, o.val_tokens_given = true; }))
                 .option("--threads", count("--threads", 1, 1024,
                                            [&](std::uint64_t n) { o.pipeline.threads = static_cast<int>(n); }))
                 .option("--chunk-bytes", count("--chunk-bytes", 1, 1ull << 30,
                                                [&](std::uint64_t n) { o.pipeline.chunk_bytes = n; }))
                 .flag("--quiet", [&] { o.pipeline.progress = false; })
                 .parse(argc, argv);
  if (!o.nanogpt.empty()) {
    // nanoGPT's files are tokens already, split already.
    if (!o.inputs.empty()) throw BadInput("command line: --nanogpt DIR is the input: no INPUT with it");
    if (!o.pipeline.jsonl_field.empty() || o.val_tokens_given) {
      throw BadInput("command line: --nanogpt's splits are its files (val.bin, train.bin): no " +
                     std::string(o.val_tokens_given ? "--val-tokens" : "--jsonl-field") + " with it");
    }
  } else {
    if (o.vocab.empty()) throw BadInput("command line: no vocabulary: give --vocab PATH (see --help)");
    if (o.inputs.empty()) throw BadInput("command line: no input: give text files, directories or JSON Lines files");
  }
  if (o.out.empty()) throw BadInput("command line: no output directory: give --out DIR (see --help)");
  if (o.prefix.empty()) o.prefix = fs::path(o.out).lexically_normal().filename().string();
  if (o.prefix.empty()) o.prefix = fs::path(o.out).lexically_normal().parent_path().filename().string();
  if (o.prefix.empty() || o.prefix.find('/') != std::string::npos) {
    throw BadInput("command line: --prefix must be a file name; give one for --out " + o.out);
  }
  return o;
}

// An output directory inside an input directory would be read as input by the next run.
void check_output_outside_inputs(const Options& o) {
  const fs::path out = fs::weakly_canonical(o.out);
  for (const std::string& input : o.inputs) {
    if (!fs::is_directory(input)) continue;
    const fs::path in = fs::weakly_canonical(input);
    const auto [in_end, out_it] = std::mismatch(in.begin(), in.end(), out.begin(), out.end());
    if (in_end == in.end()) throw BadInput(o.out + ": the output directory is inside the input directory " + input);
  }
}

// Without --val-tokens: a tenth of the input's tokens (at about 4 bytes a token of English), at
// most one shard as llm.c's first, so that a small corpus keeps most of its text to train on.
constexpr std::uint64_t kBytesPerToken = 4;
constexpr std::uint64_t kValShare = 10;

void choose_val_tokens(Options& o, const std::vector<InputFile>& files) {
  if (o.val_tokens_given) return;
  std::uint64_t bytes = 0;
  for (const InputFile& f : files) bytes += f.size;
  const std::uint64_t estimate = bytes / kBytesPerToken;
  o.val_tokens = std::clamp<std::uint64_t>(estimate / kValShare, 1, o.shard_tokens);
  std::fprintf(stderr,
               "xtrain-data: validation split: the first documents up to %llu tokens (default --val-tokens: a "
               "tenth of the input's about %llu tokens, at most --shard-tokens)\n",
               static_cast<unsigned long long>(o.val_tokens), static_cast<unsigned long long>(estimate));
}

extern "C" void on_stop_signal(int sig) { g_stop_signal.store(sig); }

Gpt2Tokenizer load_vocabulary(const std::string& path) {
  if (is_llmc_tokenizer_file(path)) {
    throw BadInput("--vocab: " + path + " is llm.c's tokenizer file, which decodes only: give GPT-2's "
                   "vocabulary files (encoder.json + vocab.bpe, or vocab.json + merges.txt) to encode text");
  }
  Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(path);
  if (tokenizer.vocab_size() > kMaxUint16Vocab) {
    throw BadInput(tokenizer.source() + ": " + std::to_string(tokenizer.vocab_size()) +
                   " tokens, but llm.c shards store tokens as uint16 (at most " + std::to_string(kMaxUint16Vocab) +
                   ")");
  }
  return tokenizer;
}

std::string count_of(std::uint64_t n, const char* one, const char* many) {
  return with_thousands(static_cast<long long>(n)) + " " + (n == 1 ? one : many);
}

std::string summary(const char* name, const ShardSet::Split& s) {
  return std::string(name) + " " + count_of(s.shards, "shard", "shards") + ", " +
         count_of(s.tokens, "token", "tokens") + ", " + count_of(s.documents, "document", "documents");
}

// --nanogpt DIR: its val.bin and train.bin, copied into shards.
int import_nanogpt_dir(const Options& o) {
  const NanogptData data = find_nanogpt_data(o.nanogpt);
  const int vocab_size = o.vocab.empty() ? kGpt2Tokens : load_vocabulary(o.vocab).vocab_size();
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  ShardSet shards({o.out, o.prefix, o.shard_tokens, data.val_tokens, /*end_token=*/-1, /*one_document=*/false});
  import_nanogpt(data, vocab_size, shards, o.pipeline.progress);
  const auto split = [](const ShardSet::Split& s) {
    return count_of(s.shards, "shard", "shards") + ", " + count_of(s.tokens, "token", "tokens");
  };
  std::fprintf(stderr, "xtrain-data: wrote %s from nanoGPT's %s: val %s (val.bin%s); train %s (train.bin)\n",
               o.out.c_str(), o.nanogpt.c_str(), split(shards.val()).c_str(), data.val.empty() ? ": none" : "",
               split(shards.train()).c_str());
  return exit_code::kSuccess;
}

}  // namespace

int main(int argc, char** argv) {
  if (print_version_if_asked(argc, argv, "xtrain-data")) return exit_code::kSuccess;
  try {
    Options o = parse(argc, argv);
    if (!o.nanogpt.empty()) return import_nanogpt_dir(o);
    const std::vector<InputFile> files = list_inputs(o.inputs, !o.pipeline.jsonl_field.empty());
    check_output_outside_inputs(o);
    const Gpt2Tokenizer tokenizer = load_vocabulary(o.vocab);
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
    choose_val_tokens(o, files);  // said once every input is known good
    // One text file with text in it is one document, which validation would otherwise take whole.
    const bool one_document =
        o.pipeline.jsonl_field.empty() &&
        std::count_if(files.begin(), files.end(), [](const InputFile& f) { return f.size > 0; }) == 1;
    ShardSet shards({o.out, o.prefix, o.shard_tokens, o.val_tokens, tokenizer.eot(), one_document});
    run_pipeline(files, tokenizer, shards, o.pipeline);
    const std::string cut =
        shards.cut_at() == 0
            ? ""
            : " (the input is one document: validation is its first " + std::to_string(shards.cut_at()) +
                  " tokens, training the rest)";
    std::fprintf(stderr, "xtrain-data: wrote %s: %s; %s%s\n", o.out.c_str(), summary("val", shards.val()).c_str(),
                 summary("train", shards.train()).c_str(), cut.c_str());
    return 0;
  } catch (const Interrupted& i) {
    std::fprintf(stderr, "xtrain-data: stopped by signal %d; no shard was left behind\n", i.signal);
    return 128 + i.signal;
  } catch (const BadInput& e) {
    std::fprintf(stderr, "xtrain-data: error: %s\n", e.what());
    return exit_code::kBadInput;
  } catch (const TokenizerError& e) {
    std::fprintf(stderr, "xtrain-data: error: %s\n", e.what());
    return exit_code::kBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xtrain-data: error: %s\n", e.what());
    return exit_code::kRuntimeFailure;
  }
}
