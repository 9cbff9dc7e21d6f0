#include "worker/train/model_argument.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>

#include "worker/train/checkpoint.hpp"

namespace xtrain {
namespace {

namespace fs = std::filesystem;

const char* const kKinds =
    "expected a run directory (with checkpoints/), a checkpoint or a Hugging Face GPT-2 directory "
    "(config.json + model.safetensors), or an llm.c model file";

bool starts_with_llmc_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::int32_t magic = 0;
  return in.read(reinterpret_cast<char*>(&magic), sizeof magic) && magic == kLlmcModelMagic;
}

}  // namespace

ModelFileInfo open_model_argument(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) {
    if (!fs::exists(p / "config.json", ec)) {
      if (!fs::is_directory(p / "checkpoints", ec)) {
        throw FileError(path, std::string("not a model: ") + kKinds +
                                  "; this directory has neither checkpoints/ nor config.json");
      }
      const auto newest = find_resume_checkpoint(path, "auto");
      if (!newest) {
        throw FileError(path, "a run directory without a complete, intact checkpoint in checkpoints/ "
                              "(nothing to load yet)");
      }
      return read_model_file_info(*newest);
    }
  } else if (fs::is_regular_file(p, ec) && p.filename() != "config.json" && p.extension() != ".safetensors" &&
             !starts_with_llmc_magic(path)) {
    throw FileError(path, std::string("not a model: ") + kKinds + "; this file does not begin with llm.c's magic " +
                              std::to_string(kLlmcModelMagic));
  }
  return read_model_file_info(path);
}

}  // namespace xtrain
