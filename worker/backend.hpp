// The compute backend: memory and the small set of operations that GPT's forward and backward
// are written in. The CPU backend (worker/cpu_backend.*) implements it with OpenBLAS and plain
// loops; the CUDA backend (cuda/) with cuBLAS and kernels.
//
// Conventions every implementation follows:
// - Every float*/int32_t* argument is backend memory (host memory for CPU, device memory for
//   CUDA), allocated with alloc_floats/alloc_ints, except the host_* arguments of upload/download.
// - Operations are issued in program order on one queue (one CUDA stream) and may run
//   asynchronously: an operation returns once it is issued. Calls that hand a value to the host
//   (download, sum_squares) wait for everything issued before them. synchronize() waits for all.
// - Shapes are given in comments; N is a number of rows (positions), row-major throughout.
//   Weights are (out, in) row-major like llm.c: out = inp @ weight^T + bias.
// - "writes" means the output is overwritten; "accumulates" (+=) means the caller zeroed it or
//   wants the sum (parameter gradients always accumulate, so gradient accumulation over
//   micro-steps is just calling backward again).
// - Results are deterministic: the same inputs give bitwise the same outputs on every call.
// - Nothing is allocated per step: scratch that an operation needs is passed in, sized by the
//   *_floats() queries below, and allocated once by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "worker/math/adamw.hpp"  // AdamWHyper

namespace xtrain {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;  // "cpu", "cuda"

  // ---- memory -------------------------------------------------------------------------------
  virtual float* alloc_floats(size_t n) = 0;      // zero-filled; throws std::bad_alloc on failure
  virtual int32_t* alloc_ints(size_t n) = 0;      // zero-filled
  virtual void free(void* p) = 0;                 // p from alloc_*; nullptr is a no-op
  // upload returns once host_src may be reused; download returns once host_dst holds the data
  // (after every operation issued before it).
  virtual void upload(float* dst, const float* host_src, size_t n) = 0;
  virtual void upload(int32_t* dst, const int32_t* host_src, size_t n) = 0;
  virtual void download(float* host_dst, const float* src, size_t n) = 0;
  virtual void download(int32_t* host_dst, const int32_t* src, size_t n) = 0;
  virtual void fill_zero(float* p, size_t n) = 0;
  virtual void copy(float* dst, const float* src, size_t n) = 0;  // no overlap
  virtual void synchronize() = 0;

  // ---- operations ---------------------------------------------------------------------------

  // out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
  virtual void embedding_forward(float* out,            // (B,T,C) writes
                                 const int32_t* tokens,  // (B,T), each in [0, V)
                                 const float* wte,       // (Vp,C)
                                 const float* wpe,       // (T,C)
                                 int B, int T, int C) = 0;
  // dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += sum_b dout[b,t,:]
  virtual void embedding_backward(float* dwte,           // (Vp,C) accumulates
                                  float* dwpe,           // (T,C) accumulates
                                  const float* dout,     // (B,T,C)
                                  const int32_t* tokens,  // (B,T)
                                  int B, int T, int C) = 0;

  // out = (inp - mean) * rstd * weight + bias per row, eps = 1e-5 (PyTorch's default).
  virtual void layernorm_forward(float* out,           // (N,C) writes
                                 float* mean,          // (N) writes, saved for backward
                                 float* rstd,          // (N) writes, saved for backward
                                 const float* inp,     // (N,C)
                                 const float* weight,  // (C)
                                 const float* bias,    // (C)
                                 int N, int C) = 0;
  virtual void layernorm_backward(float* dinp,          // (N,C) ACCUMULATES (the residual stream)
                                  float* dweight,       // (C) accumulates
                                  float* dbias,         // (C) accumulates
                                  const float* dout,    // (N,C)
                                  const float* inp,     // (N,C) the forward input
                                  const float* weight,  // (C)
                                  const float* mean,    // (N) from forward
                                  const float* rstd,    // (N) from forward
                                  int N, int C) = 0;

  // out = inp @ weight^T + bias
  virtual void matmul_forward(float* out,           // (N,OC) writes
                              const float* inp,     // (N,C)
                              const float* weight,  // (OC,C)
                              const float* bias,    // (OC) or nullptr
                              int N, int C, int OC) = 0;
  // With g = dout_scale * dout:  dinp = g @ weight; dweight += g^T @ inp; dbias += sum_rows g.
  // dout_scale lets the caller fold a loss scale into the first matmul of backward for free.
  virtual void matmul_backward(float* dinp,          // (N,C) WRITES
                               float* dweight,       // (OC,C) accumulates
                               float* dbias,         // (OC) accumulates, or nullptr
                               const float* dout,    // (N,OC)
                               const float* inp,     // (N,C) the forward input
                               const float* weight,  // (OC,C)
                               int N, int C, int OC, float dout_scale) = 0;

  // Causal multi-head self-attention, NH heads of size hs = C/NH, scale 1/sqrt(hs):
  // qkv[b,t,:] = [q (C) | k (C) | v (C)], head h uses channels [h*hs, (h+1)*hs) of each.
  // `saved` is per-layer memory this backend keeps from forward to backward (CPU: the
  // probabilities); `scratch` is shared by all layers and may be clobbered by any call.
  virtual size_t attention_saved_floats(int B, int T, int C, int NH) const = 0;
  virtual size_t attention_scratch_floats(int B, int T, int C, int NH) const = 0;
  virtual void attention_forward(float* out,         // (B,T,C) writes
                                 float* saved,       // (attention_saved_floats) writes
                                 const float* qkv,   // (B,T,3C)
                                 float* scratch,     // (attention_scratch_floats)
                                 int B, int T, int C, int NH) = 0;
  virtual void attention_backward(float* dqkv,         // (B,T,3C) WRITES
                                  const float* dout,   // (B,T,C)
                                  const float* qkv,    // (B,T,3C) forward input
                                  const float* out,    // (B,T,C) forward output
                                  const float* saved,  // (attention_saved_floats) from forward
                                  float* scratch,      // (attention_scratch_floats)
                                  int B, int T, int C, int NH) = 0;

  // GELU, tanh approximation (PyTorch's approximate="tanh"), elementwise over n floats.
  virtual void gelu_forward(float* out, const float* inp, size_t n) = 0;  // writes
  // dinp = dout * gelu'(inp); WRITES dinp; dinp may alias dout.
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) = 0;

  // out = a + b elementwise; out may alias a or b.
  virtual void residual_forward(float* out, const float* a, const float* b, size_t n) = 0;

  // Fused softmax + cross-entropy + its gradient over a padded vocabulary, per row i < N:
  //   p = softmax(logits[i, :V]); losses[i] = -log p[targets[i]];
  //   logits[i, j] = dloss * (p[j] - [j == targets[i]]) for j < V, and 0 for V <= j < Vp,
  // i.e. the row is overwritten by its gradient (never by the normalised probabilities).
  // Padded columns neither enter the softmax nor receive gradient.
  virtual void softmax_cross_entropy(float* logits,          // (N,Vp) in: logits, out: dlogits
                                     float* losses,          // (N) writes
                                     const int32_t* targets,  // (N), each in [0, V)
                                     float dloss, int N, int V, int Vp) = 0;

  // AdamW on one contiguous span (worker/math/adamw.hpp per element):
  //   g = grad_scale * grads; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  //   params -= lr * (weight_decay * params + (m/bc1) / (sqrt(v/bc2) + eps))
  virtual void adamw_update(float* params,       // (n) updated in place
                            const float* grads,  // (n)
                            float* m,            // (n) first moment, updated
                            float* v,            // (n) second moment, updated
                            size_t n, const AdamWHyper& h) = 0;

  // sum_i x[i]^2 accumulated in double in an order fixed by n alone (deterministic); returns to
  // the host, so it waits for the queue.
  virtual double sum_squares(const float* x, size_t n) = 0;

  // x *= s
  virtual void scale(float* x, float s, size_t n) = 0;
};

}  // namespace xtrain
