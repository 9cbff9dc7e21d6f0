// The model files that model.init_from and `xtrain-worker export` read, recognised and their shape
// read from headers alone (config.json, state.json, llm.c's 1 KiB header, the file size), so that
// xlaunch resolves and checks a spec's model shape in milliseconds, before any rank starts:
//   - a Hugging Face GPT-2 directory: config.json (a GPT2Config) + model.safetensors, the layout
//     of the released gpt2 ... gpt2-xl (the tensors are read by worker/formats/hf_model.hpp);
//   - one of our checkpoint directories: the same two files, plus state.json
//     (worker/train/checkpoint.hpp); only the weights are taken, never the optimizer state;
//   - an llm.c model file: a header of 256 int32 [20240326, version, maxT, V, L, NH, C, Vp, 0...],
//     then every tensor in llm.c's order, fp32 (version 3) or bf16 (version 5)
//     (worker/formats/llmc_model.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/file_error.hpp"
#include "common/job_spec.hpp"

namespace xtrain {

inline constexpr std::int32_t kLlmcModelMagic = 20240326;
inline constexpr std::int32_t kLlmcVersionFp32 = 3;
inline constexpr std::int32_t kLlmcVersionBf16 = 5;
inline constexpr std::uint64_t kLlmcHeaderBytes = 256 * sizeof(std::int32_t);
// llm.c's tokenizer file (worker/formats/llmc_tokenizer.hpp), which llm.c keeps beside its model
// files under this name.
inline constexpr std::uint32_t kLlmcTokenizerMagic = 20240328;
inline constexpr char kLlmcTokenizerFile[] = "gpt2_tokenizer.bin";

// True when `path` is llm.c's tokenizer file: a file that begins with its magic, or that bears its
// name (so that a damaged one is reported as what it is). What tells it from GPT-2's vocabulary
// files wherever a tokenizer is named.
bool is_llmc_tokenizer_file(const std::string& path);

enum class ModelFormat { kHuggingFace, kCheckpoint, kLlmc };

// A model of this many tokens with no tokenizer reads and writes bytes, one token each (xtrain's
// byte-level text runs): there is no vocabulary to load or ship.
inline constexpr int kByteVocabulary = 256;

struct ModelFileInfo {
  ModelFormat format = ModelFormat::kHuggingFace;
  std::string path;           // as given: the directory or the llm.c file
  std::string weights;        // the file with the tensors: DIR/model.safetensors or the llm.c file
  std::string shape_source;   // where the shape was read, for messages: DIR/config.json or the llm.c file
  int n_layer = 0;
  int n_head = 0;
  int n_embd = 0;
  int n_positions = 0;        // rows of wpe: the longest context the weights cover
  int vocab_size = 0;         // real tokens (50257 for GPT-2), without padding
  int llmc_version = 0;       // llm.c files: kLlmcVersionFp32 or kLlmcVersionBf16
  int llmc_padded_vocab = 0;  // llm.c files: rows of wte in the file (Vp)
  std::string tokenizer;      // the tokenizer that comes with the weights: a directory's own GPT-2
                              // vocabulary files or llm.c tokenizer file, that file beside an llm.c model
                              // file (one whose header is of its vocabulary), or what an older checkpoint
                              // recorded; empty when none is known
};

// "Hugging Face GPT-2 directory gpt2", "checkpoint runs/x/checkpoints/step-00000100",
// "llm.c model file gpt2_124M.bin (version 3, fp32)"
std::string describe(const ModelFileInfo& file);

// Recognises `path` and reads its shape. Throws FileError naming the file and what is wrong:
// no such path, config.json missing or malformed (a key missing, n_embd not a multiple of n_head,
// another activation or layernorm epsilon than GPT-2's), no model.safetensors, an llm.c header
// with a wrong magic or version, or a file size that disagrees with its header (truncated).
ModelFileInfo read_model_file_info(const std::string& path);

// A file's name and content.
struct NamedFile {
  std::string name;
  std::string content;
};

// The tokenizer at `path` (GPT-2's vocabulary files, or llm.c's tokenizer file) read whole, under
// the names a model directory gives it, for a model of `context` positions:
//   - GPT-2's vocabulary: vocab.json + merges.txt (Hugging Face's names, whatever they are called
//     at `path`), and the same vocabulary as tokenizer.json with its tokenizer_config.json
//     (common/tokenizer/hf_tokenizer_json.hpp), so that any of Hugging Face's tokenizer loaders
//     takes the directory;
//   - llm.c's tokenizer file: gpt2_tokenizer.bin (it decodes only; Hugging Face loads nothing);
//   - "" (a byte-level model, one token per byte): tokenizer.json and tokenizer_config.json of
//     the 256 bytes.
// A checkpoint carries these, so that it needs no file outside itself once the path is gone, and
// a Hugging Face export ships them. Throws FileError naming a file that cannot be read
// (TokenizerError for a path that is neither kind).
std::vector<NamedFile> read_tokenizer_files(const std::string& path, int context);

// The tokenizer a model directory holds itself: `dir` where it holds GPT-2's vocabulary files,
// else its gpt2_tokenizer.bin, else "". A checkpoint carries its run's (worker/train/checkpoint.hpp),
// an exported Hugging Face directory GPT-2's vocabulary files or llm.c's tokenizer file (or, for a
// byte-level model, the tokenizer.json of its bytes, which is none of these: "").
std::string directory_tokenizer(const std::string& dir);

// True when `dir` holds GPT-2 vocabulary files: encoder.json + vocab.bpe (OpenAI's names),
// vocab.json + merges.txt (Hugging Face's) or, failing both, a tokenizer.json of GPT-2's kind, as
// Gpt2Tokenizer::load finds them. A tokenizer.json of another kind, or a byte-level model's (our
// exports of one), is no vocabulary.
bool holds_vocabulary(const std::string& dir);

// Fills the model shape of a spec with model.init_from from the file, where `doc` (the spec
// document, overrides applied) leaves a model key out; a key set in `doc` that disagrees is a
// SpecError naming both values ("model.n_layer: 4 in the spec but 12 in gpt2/config.json").
// model.seq_len may be set up to the file's n_positions; unset, it is n_positions. An empty
// `tokenizer` takes the vocabulary files that come with the weights.
// Resume wins: `resume_from` is the checkpoint this run continues from (the caller's choice,
// worker/train/checkpoint.hpp's find_resume_checkpoint, which has verified every file of it);
// given, the shape and the default tokenizer come from it and init_from is not read.
// Returns the file the shape came from; nullopt (and no change) without model.init_from.
std::optional<ModelFileInfo> resolve_model_source(JobSpec& spec, const nlohmann::json& doc,
                                                  const std::optional<std::string>& resume_from);

}  // namespace xtrain
