// GPT-2's initial weights, drawn on the host from the seed alone: N(0, 0.02) for every matrix,
// N(0, 0.02 / sqrt(2 L)) for the residual projections (c_proj), layernorm gains 1, biases and
// wte's padded rows 0. Every rank draws the same values (the trainer checks them bit for bit).
//
// The normals come from one stream per seed: mt19937_64, whose draws are sequential, and our own
// Box-Muller transform in double (so every standard library gives the same values; std::
// normal_distribution does not), each pair of draws giving a cosine and then a sine sample,
// tensor after tensor in the layout's order. The draws are taken a chunk at a time on the calling
// thread; the transforms, most of the work (a log, a square root, a sine and a cosine a pair),
// run on several threads, each pair on its own, so the values are those of drawing one at a time
// on any number of threads. GPT-2 124M: 124M normals, about 4 s on one core of the build VM.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>

#include "worker/model/host_access.hpp"
#include "worker/model/param_layout.hpp"

namespace xtrain {

// Standard normals from `seed`, in stream order across calls.
class NormalStream {
 public:
  explicit NormalStream(std::int64_t seed) : engine_(static_cast<std::uint64_t>(seed)) {}

  // out[i] = scale * (float)(the stream's next normal), for i in [0, n), transforms on `threads`
  // threads, `chunk_pairs` pairs of draws at a time (a test makes chunks small to cross them).
  void fill(float* out, size_t n, float scale, int threads, size_t chunk_pairs = size_t{1} << 18);

 private:
  double uniform_open() {  // in (0, 1], from the top 53 bits
    return (static_cast<double>(engine_() >> 11) + 1.0) * 0x1.0p-53;
  }

  std::mt19937_64 engine_;
  double spare_ = 0.0;  // a pair's sine, for the next call's first sample
  bool has_spare_ = false;
};

// Fills `out` (layout.total() floats in `memory`) with GPT-2's initial weights for `seed`, the
// transforms on `threads` threads (>= 1).
void draw_initial_weights(const ParamLayout& layout, std::int64_t seed, float* out, int threads,
                          const HostAccess& memory = {});

}  // namespace xtrain
