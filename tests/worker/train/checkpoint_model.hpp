// A small model's checkpoint for the checkpoint tests: distinct values in every buffer (no two
// tensors alike, so a misplaced copy shows), the state a run would save, and a tokenizer to copy.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/worker/gpt_test_util.hpp"
#include "worker/train/checkpoint.hpp"

namespace xtrain::test {

inline JobSpec small_spec() {
  JobSpec spec;
  spec.model = model_spec(2, 2, 8, 6, 50);  // padded to 128: the padding rows must survive too
  spec.checkpoint.keep = 2;
  return spec;
}

// Distinct, reproducible values (no two tensors alike, so a misplaced copy shows).
inline std::vector<float> random_floats(size_t n, std::uint64_t seed) {
  Xoshiro256 rng(seed);
  std::vector<float> out(n);
  for (auto& x : out) x = static_cast<float>(static_cast<double>(rng.next() >> 11) * 0x1p-53 * 2.0 - 1.0);
  return out;
}

struct CheckpointModel {
  JobSpec spec = small_spec();
  ParamLayout layout{ModelDims::from(spec.model)};
  std::vector<float> params = random_floats(layout.total(), 1);
  std::vector<float> m = random_floats(layout.total(), 2);
  std::vector<float> v = random_floats(layout.total(), 3);
  TrainState state = [] {
    TrainState s;
    s.step = 10;
    s.adam_t = 9;
    s.sampler.words = {0xffffffffffffffffULL, 1, 0x8000000000000001ULL, 0x123456789abcdef0ULL};
    s.train_tokens = 12345;
    return s;
  }();
  // The run's tokenizer as the trainer reads it (the checkpoint copies it without parsing it).
  std::vector<NamedFile> tokenizer = {{"vocab.json", "{\"!\": 0, \"<|endoftext|>\": 1}"},
                                      {"merges.txt", "#version: 0.2\n"}};

  std::string save(const std::string& run_dir, std::int64_t step) {
    state.step = step;
    return save_checkpoint(run_dir, spec, layout, params.data(), m.data(), v.data(), state, tokenizer);
  }
};

inline void truncate_file(const std::string& path, std::uintmax_t drop) {
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - drop);
}

}  // namespace xtrain::test
