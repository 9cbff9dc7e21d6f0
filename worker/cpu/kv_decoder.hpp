// GPT-2 inference on the CPU with a key/value cache: each layer's keys and values of every position
// seen so far are kept, so a new token costs one position of work (one matrix-vector product per
// weight matrix, attention over the cached positions) instead of a forward over the whole window.
// fp32 throughout, the same per-element math as training (worker/math/), the products on weight
// matrices repacked for them (worker/cpu/packed_matmul.hpp). The products' rows and the attention
// heads are split over a team of threads (worker/cpu/thread_team.hpp), the calling thread among
// them; every output is the same sum whatever the split, so the logits have the same bits at any
// thread count. Rows are sequences side by side (generate's samples of one prompt), each with its
// cache: the products take every row's positions at once, so each weight is read once a step for
// all of them (a token of one sequence reads them all, and memory sets its pace), and each
// row's logits are the bits a one-row decoder gives (each output's sum is fixed by the product's
// width alone, worker/cpu/packed_matmul.hpp). The window and its slide past the context are
// TokenDecoder's: after a slide the cache is filled again from position 0.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "worker/cpu/huge_page_buffer.hpp"
#include "worker/cpu/thread_team.hpp"
#include "worker/model/param_layout.hpp"
#include "worker/model/token_decoder.hpp"

namespace xtrain {

class KvDecoder : public TokenDecoder {
 public:
  // `load` writes the parameters, laid out by `layout` (layout.total() floats), into the buffer it
  // is given: the decoder's own huge pages (worker/cpu/huge_page_buffer.hpp), where the matrices
  // are then repacked, so no second copy of the weights is ever held (generate reads a model file
  // straight into them). `layout` must outlive the decoder; the context is layout.dims().T.
  // `threads` >= 1 (the team's members, the calling thread included) and `rows` >= 1
  // (std::invalid_argument otherwise): a cache of 2 L T C floats a row is allocated for them.
  KvDecoder(const ParamLayout& layout, const std::function<void(float* params)>& load, int threads = 1,
            int rows = 1);
  // The parameters copied from memory (layout.total() floats; std::invalid_argument otherwise).
  KvDecoder(const ParamLayout& layout, std::span<const float> params, int threads = 1, int rows = 1);

  int threads() const { return team_.members(); }
  // The team the decoder works on, idle between calls: generate draws its rows on it.
  ThreadTeam& team() { return team_; }
  // Empties the windows and runs `rows` rows from now on, in [1, the constructor's rows]
  // (std::invalid_argument otherwise).
  void set_rows(int rows);

  // The cache's bytes for one row, as the constructor allocates them for each.
  static size_t cache_bytes_per_row(const ModelDims& dims);

 private:
  StepLogits run(int first) override;
  void matmul(float* out, const float* inp, const float* weight, const float* bias, int n, int in, int out_dim);
  void product(float* out, const float* packed, const float* x, int n, int rows, int cols);  // out += x W^T
  void attention(int layer, int first, int n, int rows);
  void attend(int layer, int row, int h, int seen, int i, int member);
  size_t cache_at(int row, int layer, int h, int position) const;
  void copy_first_row(int to, int first, int n);

  const ParamLayout& layout_;
  HugePageBuffer params_;  // the matrices packed
  // (max rows, L, NH, T, hs) each: head h of layer l of a row holds its keys (values) of every
  // position in one contiguous run, so attention reads it as one stream (rows strided by C ran
  // 2-3 ms per GPT-2 124M token slower, waiting on memory).
  std::vector<float> keys_, values_;
  int max_rows_;
  // Work rows, (rows, n, ·) for n positions a row, sized for `positions_` of them in all (grown to
  // the largest call's).
  int positions_ = 0;
  std::vector<float> residual_, normed_, qkv_, att_, proj_, hidden_;
  std::vector<float> logits_;  // (rows, Vp)
  std::vector<float> scores_;  // (threads, T): each member's attention row
  ThreadTeam team_;
};

}  // namespace xtrain
