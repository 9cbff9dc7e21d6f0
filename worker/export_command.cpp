#include "worker/export_command.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <new>
#include <optional>
#include <stdexcept>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/command_line.hpp"
#include "common/exit_codes.hpp"
#include "common/tokenizer/gpt2_vocabulary.hpp"
#include "common/log.hpp"
#include "common/model_file.hpp"
#include "common/atomic_file.hpp"
#include "worker/formats/file_io.hpp"
#include "worker/formats/llmc_model.hpp"
#include "worker/formats/llmc_tokenizer.hpp"
#include "worker/formats/model_io.hpp"
#include "worker/train/model_argument.hpp"

namespace xtrain {
namespace {

namespace fs = std::filesystem;

const char* const kUsage =
    "usage: xtrain-worker export SOURCE --format hf|llmc OUT [--dtype fp32|bf16] [--tokenizer PATH] [--force]\n"
    "  Writes the weights of SOURCE (a run directory: its newest checkpoint with intact weights;\n"
    "  a checkpoint, or anything model.init_from takes: a Hugging Face GPT-2 directory or an\n"
    "  llm.c model file) as\n"
    "    hf    a Hugging Face GPT-2 directory: config.json, model.safetensors (F32, the default, or\n"
    "          BF16 with --dtype bf16, rounded to nearest even as PyTorch rounds) and, when the\n"
    "          source comes with GPT-2's vocabulary files (or --tokenizer names them), vocab.json +\n"
    "          merges.txt, tokenizer.json, tokenizer_config.json and generation_config.json (a\n"
    "          warning says when not; llm.c's tokenizer file, which decodes only, goes in as\n"
    "          gpt2_tokenizer.bin); a byte-level model gets tokenizer.json and\n"
    "          tokenizer_config.json of its 256 bytes\n"
    "    llmc  an llm.c model file: version 3 (fp32, the default) or version 5 (--dtype bf16), and\n"
    "          with a tokenizer gpt2_tokenizer.bin beside it (the file llm.c's sampler reads)\n"
    "  --tokenizer PATH: GPT-2's vocabulary files, or llm.c's gpt2_tokenizer.bin (it decodes only,\n"
    "          so it goes with llmc alone); the source's own is the default\n"
    "  OUT (and the directories above it) is written under a temporary name, fsynced and renamed\n"
    "  into place; an existing OUT, or a gpt2_tokenizer.bin holding another tokenizer, is an error\n"
    "  unless --force (models exported into one directory share one gpt2_tokenizer.bin).\n"
    "exit codes: 0 written; 1 runtime failure (OUT could not be written); 2 bad input (command line,\n"
    "  SOURCE unreadable or malformed, OUT exists)\n";

struct ExportOptions {
  std::string source;
  std::string format;  // hf | llmc
  std::string out;
  std::string dtype = "fp32";
  std::string tokenizer;  // overrides the one the source names
  bool force = false;
};

ExportOptions parse(int argc, char** argv) {
  ExportOptions o;
  const std::vector<std::string> positional = CommandLine(kUsage, "export --help")
                                                  .option("--format", o.format)
                                                  .option("--dtype", o.dtype)
                                                  .option("--tokenizer", o.tokenizer)
                                                  .flag("--force", [&] { o.force = true; })
                                                  .parse(argc, argv);
  if (positional.size() != 2) {
    throw BadInput("command line: expected SOURCE and OUT, got " + std::to_string(positional.size()) +
                   " paths (see export --help)");
  }
  o.source = positional[0];
  o.out = positional[1];
  if (o.format != "hf" && o.format != "llmc") {
    throw BadInput("--format: expected \"hf\" or \"llmc\", got \"" + o.format + "\"");
  }
  if (o.dtype != "fp32" && o.dtype != "bf16") {
    throw BadInput("--dtype: expected \"fp32\" or \"bf16\", got \"" + o.dtype + "\"");
  }
  std::error_code ec;
  if (fs::exists(o.out, ec) && !o.force) throw BadInput(o.out + ": exists (give --force to replace it)");
  return o;
}

// The tokenizer an export ships: --tokenizer, else the one the source names, loaded and checked
// against the model (model_tokenizer), so that only one that works is shipped. An llm.c export
// ships llm.c's tokenizer file, made from either kind; a Hugging Face directory ships GPT-2's
// vocabulary files, which llm.c's tokenizer file cannot stand in for (it decodes only).
struct ShippedVocab {
  TextCodec tokenizer;
  std::string vocabulary;  // GPT-2's vocabulary files, where the tokenizer is made of them
};

std::optional<ShippedVocab> vocabulary(const ExportOptions& o, const ModelFileInfo& source) {
  std::optional<TextCodec> tokenizer = model_tokenizer(source, o.tokenizer);
  if (!tokenizer) return std::nullopt;
  ShippedVocab vocab{std::move(*tokenizer), ""};
  if (vocab.tokenizer.encodes()) vocab.vocabulary = vocab.tokenizer.path();
  return vocab;
}

// Where an llm.c export's tokenizer goes: beside OUT, under the name llm.c's sampler opens.
std::string llmc_tokenizer_path(const std::string& out) {
  return (fs::path(out).parent_path() / kLlmcTokenizerFile).string();
}

// True when `path` is a file whose content is `bytes`: several models exported into one directory
// share the same gpt2_tokenizer.bin, which needs no --force to be written again.
bool holds_exactly(const std::string& path, const std::string& bytes) {
  std::error_code ec;
  if (fs::file_size(path, ec) != bytes.size() || ec) return false;
  const InputFile in(path);
  std::string content(bytes.size(), '\0');
  in.read_at(0, content.data(), content.size());
  return content == bytes;
}

// " with vocab.json, merges.txt, tokenizer.json, tokenizer_config.json", or "" for no files.
std::string shipped_names(const std::vector<NamedFile>& files) {
  std::string names;
  for (const NamedFile& f : files) names += (names.empty() ? " with " : ", ") + f.name;
  return names;
}

}  // namespace

int run_export(int argc, char** argv) {
  init_logging("");
  ExportOptions o;
  ModelFileInfo source;
  std::optional<ShippedVocab> vocab;
  std::optional<std::string> table;  // llm.c's gpt2_tokenizer.bin, where the export writes one
  std::vector<NamedFile> shipped;    // a Hugging Face directory's tokenizer files
  std::optional<FlatModel> flat;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    o = parse(argc, argv);
    source = open_model_argument(o.source);
    vocab = vocabulary(o, source);
    const bool gpt2 = vocab && !vocab->vocabulary.empty();
    if (vocab && (o.format == "llmc" || !gpt2)) table = llmc_tokenizer_bytes(vocab->tokenizer.decoding_table());
    if (o.format == "hf") {
      if (gpt2) {
        shipped = read_tokenizer_files(vocab->vocabulary, source.n_positions);
      } else if (table) {
        shipped = {{kLlmcTokenizerFile, *table}};
      } else if (source.vocab_size == kByteVocabulary) {
        shipped = read_tokenizer_files("", source.n_positions);  // the bytes' own
      }
    }
    if (o.format == "llmc" && table) {
      std::error_code ec;
      if (fs::exists(llmc_tokenizer_path(o.out), ec) && !o.force &&
          !holds_exactly(llmc_tokenizer_path(o.out), *table)) {
        throw BadInput(llmc_tokenizer_path(o.out) +
                       ": exists and holds another tokenizer (give --force to replace it)");
      }
    }
    flat = load_flat_model(source);
  } catch (const ModelOutOfMemory& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return exit_code::kRuntimeFailure;
  } catch (const std::exception& e) {  // everything else so far is about the input
    std::fprintf(stderr, "error: %s\n", e.what());
    return exit_code::kBadInput;
  }
  if (!vocab && source.vocab_size == kByteVocabulary && o.format == "llmc") {
    spdlog::info("{} is byte-level ({} tokens, one per byte): there is no tokenizer to ship", describe(source),
                 kByteVocabulary);
  } else if (!vocab && source.vocab_size == kByteVocabulary) {
    spdlog::info("{} is byte-level ({} tokens, one per byte): {} gets a tokenizer.json of the bytes",
                 describe(source), kByteVocabulary, o.out);
  } else if (!vocab) {
    spdlog::warn("{} comes with no tokenizer: {} (give --tokenizer PATH to ship GPT-2's)", describe(source),
                 o.format == "hf" ? o.out + " gets no vocabulary files"
                                  : "no " + std::string(kLlmcTokenizerFile) + " is written beside " + o.out);
  } else if (o.format == "hf" && vocab->vocabulary.empty()) {
    spdlog::warn("{} gets no vocabulary files, only {}: {} decodes only, and transformers loads no tokenizer from "
                 "it (give --tokenizer PATH to ship GPT-2's)",
                 o.out, kLlmcTokenizerFile, vocab->tokenizer.name());
  }
  try {
    const fs::path parent = fs::path(o.out).parent_path();
    std::error_code ec;
    if (!parent.empty() && !fs::create_directories(parent, ec) && ec) {
      throw FileError(parent.string(), "cannot create the directory: " + ec.message());
    }
    if (o.format == "hf") {
      export_hf_directory(o.out, flat->layout, flat->params.data(), shipped,
                          vocab ? vocab->tokenizer.end_of_text() : std::nullopt, o.force,
                          o.dtype == "bf16" ? StoredAs::kBF16 : StoredAs::kF32);
    } else {
      export_llmc_model(o.out, flat->layout, flat->params.data(),
                        o.dtype == "bf16" ? kLlmcVersionBf16 : kLlmcVersionFp32);
      if (table) write_file_atomic(llmc_tokenizer_path(o.out), *table);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return exit_code::kRuntimeFailure;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("exported {} ({:.2f}M parameters) to {} as {}{} in {:.1f} s", describe(source),
               static_cast<double>(flat->layout.total()) / 1e6, o.out,
               o.format == "hf" ? std::string("a Hugging Face GPT-2 directory (") +
                                      (o.dtype == "bf16" ? "BF16)" : "F32)")
                                : "an llm.c model file (version " +
                                      std::to_string(o.dtype == "bf16" ? kLlmcVersionBf16 : kLlmcVersionFp32) + ", " +
                                      o.dtype + ")",
               o.format == "llmc" ? (table ? " with " + llmc_tokenizer_path(o.out) : std::string())
                                  : shipped_names(shipped),
               seconds);
  return 0;
}

}  // namespace xtrain
