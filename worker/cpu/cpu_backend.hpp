// The CPU backend: matrix products through OpenBLAS (cblas_sgemm), causal attention as flash
// attention (worker/cpu/flash_attention.*: its own tile products, no T x T storage), everything else
// as plain loops over the shared math in worker/math/ that GCC vectorises.
//
// Precision: fp32, or bf16 emulated. In bf16 the storage stays fp32 (OpenBLAS multiplies fp32),
// but every activation an operation writes is rounded to bf16 (worker/math/bf16.hpp) where the
// CUDA backend stores bf16, and the inputs are such rounded values; so the products see exactly
// the GPU's bf16 operands and only the order of fp32 accumulation differs. The rounding is one
// more pass over each output.
//
// Threads: as many as OpenBLAS's pool has when the backend is made (OPENBLAS_NUM_THREADS or
// OMP_NUM_THREADS, which xlaunch sets to cores / local ranks). The products run on that pool;
// everything else on a team of as many threads of our own (worker/cpu/thread_team.hpp, the
// calling thread among them), which work while OpenBLAS's threads wait for the next product: the
// attention by heads, the element-wise loops by parts of at least 32768 elements (smaller ones
// stay on the calling thread), the per-row ones by rows, and the sums over rows (bias and
// layernorm parameter gradients) by columns, each column summed over the rows in order. So
// everything but the products gives the same bits for any thread count; the products need not:
// OpenBLAS splits a sum differently for another thread count (a 700x300x900 sgemm differs between
// 1 and 2 threads), so a run is bitwise reproducible for a fixed count. Left on the calling thread:
// the embedding (its gradient is a scatter by token, and tokens repeat), copies and fills, and the
// gradient norm's one double sum.
#pragma once

#include <functional>
#include <vector>

#include "worker/cpu/thread_team.hpp"
#include "worker/model/backend.hpp"

namespace xtrain {

// The threads a CpuBackend made now works on: as many as OpenBLAS's pool has (at least 1).
int cpu_backend_threads();

class CpuBackend final : public Backend {
 public:
  // precision: fp32 or bf16 (tf32 is a GPU mode: std::invalid_argument). The attention's team
  // has as many members as OpenBLAS's pool has threads now.
  explicit CpuBackend(Precision precision = Precision::fp32);

  std::string name() const override { return "cpu"; }
  Precision precision() const override { return precision_; }
  DType act_dtype() const override { return DType::f32; }

  float* alloc_floats(size_t n) override;
  int32_t* alloc_ints(size_t n) override;
  ActPtr alloc_acts(size_t n) override;
  void free(void* p) noexcept override;
  void upload(float* dst, const float* host_src, size_t n) override;
  void upload(int32_t* dst, const int32_t* host_src, size_t n) override;
  void download(float* host_dst, const float* src, size_t n) override;
  void download(int32_t* host_dst, const int32_t* src, size_t n) override;
  void upload(ActPtr dst, const float* host_src, size_t n) override;
  void download(float* host_dst, ConstActPtr src, size_t n) override;
  const void* download_view(ConstActPtr src, size_t n) override;
  bool host_reads_in_place() const override { return true; }
  void fill_zero(float* p, size_t n) override;
  void fill_zero(ActPtr p, size_t n) override;
  void convert(ActPtr dst, const float* src, size_t n) override;
  void copy(float* dst, const float* src, size_t n) override;
  void copy(ActPtr dst, ConstActPtr src, size_t n) override;
  void synchronize() override {}
  void reserve_scratch(int /*rows*/, int /*cols*/) override {}  // no private scratch

  void embedding_forward(ActPtr out, const int32_t* tokens, ConstActPtr wte, ConstActPtr wpe, int B, int T,
                         int C) override;
  void embedding_forward_at(ActPtr out, const int32_t* tokens, ConstActPtr wte, ConstActPtr wpe, const int32_t* first,
                            int B, int T, int C) override;
  void embedding_backward(float* dwte, float* dwpe, ConstActPtr dout, const int32_t* tokens, int B, int T,
                          int C) override;
  void layernorm_forward(ActPtr out, float* mean, float* rstd, ConstActPtr inp, ConstActPtr weight,
                         ConstActPtr bias, int N, int C) override;
  void layernorm_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                          ConstActPtr weight, const float* mean, const float* rstd, int N, int C) override;
  void matmul_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight, ConstActPtr bias, int N, int C,
                      int OC) override;
  void matmul_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                       ConstActPtr weight, int N, int C, int OC, float dout_scale) override;
  void matmul_gelu_forward(ActPtr out, ActPtr pre, ConstActPtr inp, ConstActPtr weight, ConstActPtr bias, int N,
                           int C, int OC) override;
  void matmul_gelu_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                            ConstActPtr weight, ConstActPtr pre_gelu, int N, int C, int OC, float dout_scale) override;
  size_t attention_saved_floats(int B, int T, int C, int NH) const override;
  size_t attention_scratch_floats(int B, int T, int C, int NH) const override;
  void attention_forward(ActPtr out, float* saved, ConstActPtr qkv, float* scratch, int B, int T, int C,
                         int NH) override;
  void attention_backward(ActPtr dqkv, ConstActPtr dout, ConstActPtr qkv, ConstActPtr out, const float* saved,
                          float* scratch, int B, int T, int C, int NH) override;
  void attention_step(ActPtr out, ActPtr cache, ConstActPtr qkv, const int32_t* position, int B, int T, int C,
                      int NH) override;
  void gelu_forward(ActPtr out, ConstActPtr inp, size_t n) override;
  void gelu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, size_t n) override;
  void residual_forward(ActPtr out, ConstActPtr a, ConstActPtr b, size_t n) override;
  void softmax_cross_entropy(ActPtr logits, float* losses, const int32_t* targets, float dloss, int N, int V,
                             int Vp) override;
  void adamw_update(float* params, ActPtr weights, const float* grads, float* m, float* v, size_t n,
                    const AdamWHyper& h) override;
  double sum_squares(const float* x, size_t n) override;
  void scale(float* x, float s, size_t n) override;

 private:
  // fn(first, last) over parts of [0, n) floats, split over the team in whole cache lines
  // (ThreadTeam::split), or on the calling thread alone where n is too small to share.
  void for_floats(size_t n, const std::function<void(size_t, size_t)>& fn);
  // fn(first, last) over parts of the N rows of C floats each, split likewise.
  void for_rows(int N, int C, const std::function<void(size_t, size_t)>& fn);
  // fn(first, last) over parts of the C columns of N rows (sums over the rows of each column, in
  // row order whatever the split), in whole cache lines.
  void for_columns(int N, int C, const std::function<void(size_t, size_t)>& fn);
  // The CUDA backend's bf16 store: x rounded to bf16 in place, in bf16 precision only; store_part
  // rounds [first, last) of x, for a loop to round its part of an output while it is in cache.
  void store(float* x, size_t n);
  void store_part(float* x, size_t first, size_t last) const;
  // The products of matmul_* and matmul_gelu_*: a null pre / pre_gelu means no GELU.
  void product_forward(float* out, float* pre, const float* inp, const float* weight, const float* bias, int N, int C,
                       int OC);
  void product_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* pre_gelu, int N, int C, int OC, float dout_scale);

  Precision precision_;
  ThreadTeam team_;  // the attention's heads and the loops: as many as OpenBLAS's pool
  std::vector<float> step_scores_;  // (T) attention_step's row of scores, grown once to the context
};

}  // namespace xtrain
