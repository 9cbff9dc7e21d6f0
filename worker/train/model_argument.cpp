#include "worker/train/model_argument.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>

#include "common/bad_input.hpp"
#include "common/foreign_model.hpp"
#include "worker/train/checkpoint.hpp"

namespace xtrain {
namespace {

namespace fs = std::filesystem;

const char* const kKinds =
    "expected a run directory (with checkpoints/), a checkpoint or a Hugging Face GPT-2 directory "
    "(config.json + model.safetensors), or an llm.c model file";

// What the file's first four bytes say, as llm.c's header's first int32 (nullopt: shorter).
std::optional<std::int32_t> first_int32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::int32_t magic = 0;
  if (!in.read(reinterpret_cast<char*>(&magic), sizeof magic)) return std::nullopt;
  return magic;
}

}  // namespace

ModelFileInfo open_model_argument(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) {
    if (!fs::exists(p / "config.json", ec)) {
      if (!holds_a_run(p)) {
        const auto holder = describe_checkpoint_holder(p);  // a run's checkpoints/ itself, or nothing of ours
        throw FileError(path, std::string("not a model: ") + kKinds +
                                  (holder ? "; this is " + *holder + ": give it, or the run directory above it"
                                          : "; this directory has neither checkpoints/ nor config.json"));
      }
      const auto newest = find_model_checkpoint(path);
      if (!newest) {
        throw FileError(path, "a run directory without a complete, intact checkpoint in checkpoints/ "
                              "(nothing to load yet)");
      }
      return read_model_file_info(*newest);
    }
  } else if (fs::is_regular_file(p, ec) && p.filename() != "config.json" && p.extension() != ".safetensors") {
    const auto magic = first_int32(path);
    // A PyTorch file goes on to read_model_file_info, which names it.
    if (magic != kLlmcModelMagic && !is_pytorch_checkpoint(path)) {
      throw FileError(path, std::string("not a model: ") + kKinds + "; this file begins with " +
                                (magic ? std::to_string(*magic) : "fewer than 4 bytes") + ", not llm.c's magic " +
                                std::to_string(kLlmcModelMagic));
    }
  }
  ModelFileInfo info = read_model_file_info(path);
  // The weights carry their own digest; a checkpoint's tokenizer and config are checked here.
  if (info.format == ModelFormat::kCheckpoint) verify_checkpoint_small_files(info.path);
  return info;
}

std::optional<TextCodec> model_tokenizer(const ModelFileInfo& model, const std::string& flag_path) {
  const std::string& path = flag_path.empty() ? model.tokenizer : flag_path;
  if (path.empty()) return std::nullopt;
  const std::string field = flag_path.empty() ? model.path + ": its tokenizer: " : "--tokenizer: ";
  std::optional<TextCodec> tokenizer;
  try {
    tokenizer.emplace(TextCodec::load(path));
  } catch (const TokenizerError& e) {
    throw BadInput(field + e.what() + (flag_path.empty() ? " (name the vocabulary with --tokenizer PATH)" : ""));
  }
  if (tokenizer->vocab_size() != model.vocab_size) {
    throw BadInput(field + tokenizer->source() + " has " + std::to_string(tokenizer->vocab_size()) +
                   " tokens but the model's vocabulary is " + std::to_string(model.vocab_size));
  }
  return tokenizer;
}

}  // namespace xtrain
