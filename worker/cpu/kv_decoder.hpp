// GPT-2 inference on the CPU with a key/value cache: each layer's keys and values of every position
// seen so far are kept, so a new token costs one position of work (one matrix-vector product per
// weight matrix, attention over the cached positions) instead of a forward over the whole window.
// fp32 throughout, the same per-element math as training (worker/math/), the products on weight
// matrices repacked for them (worker/cpu/packed_matmul.hpp). The products' rows and the attention
// heads are split over a team of threads (worker/cpu/thread_team.hpp), the calling thread among
// them; every output is the same sum whatever the split, so the logits have the same bits at any
// thread count.
//
// Past the context: GPT-2's positions are learned absolute embeddings, so cached keys and values
// belong to their positions and cannot be shifted. When the cache is full, the decoder keeps the
// newest half of the window and runs it again from position 0 (one prompt-sized pass every T/2
// tokens), so the model always sees between T/2 and T tokens of context.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "worker/cpu/huge_page_buffer.hpp"
#include "worker/cpu/thread_team.hpp"
#include "worker/model/param_layout.hpp"

namespace xtrain {

class KvDecoder {
 public:
  // `params`: laid out by `layout` (layout.total() floats; std::invalid_argument otherwise), copied
  // into huge pages (worker/cpu/huge_page_buffer.hpp) with the matrices repacked, then released.
  // `layout` must outlive the decoder; the context is layout.dims().T. `threads` >= 1 (the team's
  // members, the calling thread included; std::invalid_argument otherwise).
  KvDecoder(const ParamLayout& layout, std::vector<float> params, int threads = 1);

  int threads() const { return team_.members(); }

  int context() const { return dims_.T; }
  int position() const { return static_cast<int>(window_.size()); }  // tokens in the cache
  const std::vector<std::int32_t>& window() const { return window_; }
  // Positions run through the model since construction, slides included (what the cache saves).
  std::uint64_t positions_computed() const { return positions_computed_; }

  void reset() { window_.clear(); }

  // Runs `tokens` at the next positions and returns the logits (Vp floats; the first V are the
  // vocabulary's) of the last one, valid until the next call. When the tokens do not fit behind
  // the cache, it slides first (above); more tokens than the context is std::length_error, an id
  // outside [0, V) or no tokens std::out_of_range.
  std::span<const float> append(std::span<const std::int32_t> tokens);

 private:
  void run(const std::int32_t* tokens, int n);  // positions [window_.size() - n, window_.size())
  void matmul(float* out, const float* inp, const float* weight, const float* bias, int n, int in, int out_dim);
  void product(float* out, const float* packed, const float* x, int n, int rows, int cols);  // out += x W^T
  void attention(int layer, int first, int n);
  void attend(int layer, int h, int seen, int i, int member);

  ModelDims dims_;
  const ParamLayout& layout_;
  HugePageBuffer params_;  // the matrices packed
  std::vector<std::int32_t> window_;
  std::uint64_t positions_computed_ = 0;
  // (L, NH, T, hs) each: head h of layer l holds its keys (values) of every position in one
  // contiguous run, so attention reads it as one stream (rows strided by C ran 2-3 ms per
  // GPT-2 124M token slower, waiting on memory).
  std::vector<float> keys_, values_;
  // Per-position work rows, sized for `rows_` positions (grown to a prompt's length).
  int rows_ = 0;
  std::vector<float> residual_, normed_, qkv_, att_, proj_, hidden_, logits_;
  std::vector<float> scores_;  // (threads, T): each member's attention row
  ThreadTeam team_;
};

}  // namespace xtrain
