// xtrain-check-logits: our logits for given tokens, for the device check's comparison with the
// real `transformers` on a Hugging Face export (scripts/check/hf_export_check.py).
//
// Usage: xtrain-check-logits MODEL TOKENS OUT
//   MODEL   any model the worker's commands take (a run directory, a checkpoint, a Hugging Face
//           GPT-2 directory, an llm.c model file)
//   TOKENS  int32 little-endian tokens, B whole windows of the model's context T (n_positions)
//   OUT     float32 little-endian logits (B, T, V), V the model's vocabulary without padding
// The forward is the eval command's (worker/loaded_model.hpp): the CPU backend in fp32, so that
// the comparison tests the export and the model's arithmetic, not a precision. Prints one JSON
// line {"model", "batch", "seq", "vocab"}. Exit 0 written; 1 could not write OUT; 2 bad input
// (one `error:` line naming it).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/exit_codes.hpp"
#include "common/log.hpp"
#include "worker/loaded_model.hpp"
#include "worker/train/model_argument.hpp"

using namespace xtrain;

namespace {

std::vector<std::int32_t> read_tokens(const std::string& path, int T, int vocab) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("TOKENS: " + path + ": cannot be read");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t window_bytes = static_cast<size_t>(T) * sizeof(std::int32_t);
  if (bytes.empty() || bytes.size() % window_bytes != 0) {
    throw std::runtime_error("TOKENS: " + path + ": " + std::to_string(bytes.size()) +
                             " bytes, not a whole number of windows of " + std::to_string(T) + " int32 tokens");
  }
  std::vector<std::int32_t> tokens(bytes.size() / sizeof(std::int32_t));
  std::memcpy(tokens.data(), bytes.data(), bytes.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      throw std::runtime_error("TOKENS: " + path + ": token " + std::to_string(i) + " is " + std::to_string(tokens[i]) +
                               ", outside the model's vocabulary of " + std::to_string(vocab));
    }
  }
  return tokens;
}

}  // namespace

int main(int argc, char** argv) {
  init_logging("");
  if (argc != 4) {
    std::fprintf(stderr, "usage: xtrain-check-logits MODEL TOKENS OUT\n");
    return exit_code::kBadInput;
  }
  ModelFileInfo model;
  std::vector<std::int32_t> tokens;  // (B, T)
  try {
    model = open_model_argument(argv[1]);
    tokens = read_tokens(argv[2], model.n_positions, model.vocab_size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return exit_code::kBadInput;
  }
  const int T = model.n_positions, V = model.vocab_size;
  const int B = static_cast<int>(tokens.size() / static_cast<size_t>(T));
  LoadedModel m(model, T, B);
  m.gpt.forward(tokens.data(), nullptr, B);
  const int Vp = m.gpt.dims().Vp;
  std::vector<float> padded(tokens.size() * static_cast<size_t>(Vp));  // (B, T, Vp)
  m.backend->download(padded.data(), m.gpt.logits(), padded.size());
  std::vector<float> logits(tokens.size() * static_cast<size_t>(V));  // (B, T, V): the padding columns left out
  for (size_t row = 0; row < tokens.size(); ++row) {
    std::memcpy(&logits[row * static_cast<size_t>(V)], &padded[row * static_cast<size_t>(Vp)], sizeof(float) * static_cast<size_t>(V));
  }
  std::ofstream out(argv[3], std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
  out.close();
  if (!out) {
    std::fprintf(stderr, "error: OUT: %s: cannot be written\n", argv[3]);
    return exit_code::kRuntimeFailure;
  }
  std::printf("%s\n", nlohmann::json{{"model", describe(model)}, {"batch", B}, {"seq", T}, {"vocab", V}}.dump().c_str());
  return exit_code::kSuccess;
}
