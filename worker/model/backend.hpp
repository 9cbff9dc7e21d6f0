// The compute backend: memory and the small set of operations that GPT's forward and backward
// are written in. The CPU backend (worker/cpu/cpu_backend.*) implements it with OpenBLAS and plain
// loops; the CUDA backend (cuda/) with cuBLAS and kernels.
//
// Conventions every implementation follows:
// - Every pointer argument is backend memory (host memory for CPU, device memory for CUDA),
//   allocated with alloc_floats/alloc_ints/alloc_acts, except the host_* arguments of
//   upload/download.
// - Activations, the (B,T,·) tensors and their gradients, are ActPtr/ConstActPtr
//   (worker/model/act_ptr.hpp) in the backend's activation dtype, act_dtype(); so are the weights that
//   operations read (GPT passes its activation-dtype copy of the parameters). Parameter
//   gradients, optimizer moments, layernorm statistics, losses and the attention's private
//   buffers are float* (fp32) whatever the activation dtype.
// - Precision (common/precision.hpp) is fixed when the backend is created. In bf16 every
//   activation an operation writes is stored as bf16 (the CPU keeps fp32 storage but rounds to
//   bf16 at exactly those points, round to nearest even, so a CPU run emulates the GPU's
//   storage); products take bf16 inputs and accumulate in fp32; reductions (layernorm
//   statistics, softmax, cross-entropy, bias and layernorm-parameter gradients, the gradient
//   norm) and every float* output are fp32.
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
//   *_floats() queries below, and allocated once by the caller; a backend's private scratch is
//   sized by reserve_scratch before the first step.
#pragma once

#include <cstddef>
#include <cstring>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/precision.hpp"
#include "worker/model/act_ptr.hpp"
#include "worker/math/adamw.hpp"  // AdamWHyper

namespace xtrain {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;  // "cpu", "cuda"
  virtual Precision precision() const = 0;
  virtual DType act_dtype() const = 0;     // how activation tensors are stored

  // ---- memory -------------------------------------------------------------------------------
  virtual float* alloc_floats(size_t n) = 0;      // zero-filled; throws std::bad_alloc on failure
  virtual int32_t* alloc_ints(size_t n) = 0;      // zero-filled
  virtual ActPtr alloc_acts(size_t n) = 0;        // n activations in act_dtype(), zero-filled
  // p from alloc_*; nullptr is a no-op. Destructors free, so free never throws (a throw while a
  // stack unwinds ends the process): a backend that cannot free now (the CUDA backend while it
  // records, or on a CUDA error) says so on stderr and keeps the block to the process's end.
  virtual void free(void* p) noexcept = 0;
  // upload returns once host_src may be reused; download returns once host_dst holds the data
  // (after every operation issued before it).
  virtual void upload(float* dst, const float* host_src, size_t n) = 0;
  virtual void upload(int32_t* dst, const int32_t* host_src, size_t n) = 0;
  virtual void download(float* host_dst, const float* src, size_t n) = 0;
  virtual void download(int32_t* host_dst, const int32_t* src, size_t n) = 0;
  // Activations cross as floats, converted to and from act_dtype().
  virtual void upload(ActPtr dst, const float* host_src, size_t n) = 0;
  virtual void download(float* host_dst, ConstActPtr src, size_t n) = 0;
  // Host memory holding src's n values as stored (src's dtype, dtype_bytes of it each), after
  // every operation issued before; valid until the next call on this backend. No copy where the
  // host can read them in place: the CPU's own memory, the CUDA backend's pinned buffer (up to 4
  // MiB). The caller converts what it reads when it reads it: generate's rows, each on the thread
  // that draws it; fp32 parameters and moments a piece at a time, as checkpoints write them.
  virtual const void* download_view(ConstActPtr src, size_t n) = 0;
  // Whether the host reads this backend's memory in place (the CPU backend's is its own), after
  // synchronize(): then what it holds needs no download to be read (a checkpoint's parameters and
  // moments).
  virtual bool host_reads_in_place() const = 0;
  virtual void fill_zero(float* p, size_t n) = 0;
  virtual void fill_zero(ActPtr p, size_t n) = 0;
  // dst = src as activations (rounded to bf16 in bf16): the weights' copy from the master.
  virtual void convert(ActPtr dst, const float* src, size_t n) = 0;
  virtual void copy(float* dst, const float* src, size_t n) = 0;  // no overlap
  virtual void copy(ActPtr dst, ConstActPtr src, size_t n) = 0;   // as stored; no overlap
  virtual void synchronize() = 0;
  // Sizes the backend's private scratch for every operation on up to `rows` positions of up to
  // `cols` channels (GPT: B*T and 4C), so that none allocates during a step.
  virtual void reserve_scratch(int rows, int cols) = 0;
  // Memory the backend holds for itself, as worker/model/memory_plan.hpp counts it: from its
  // construction, a products' workspace and reduction partials; once reserve_scratch(rows, cols)
  // has run, its private scratch too. Only a GPT built for training reserves it: the scratch
  // serves backward (and forwards and decoder steps need none).
  struct OwnMemory {
    size_t workspace_bytes = 0;
    size_t partials_bytes = 0;
    size_t scratch_bytes = 0;
  };
  virtual OwnMemory own_memory(int /*rows*/, int /*cols*/) const { return {}; }

  // ---- recorded work (CUDA graphs) ----------------------------------------------------------
  // A backend that can record a sequence of operations and replay it as one unit (the CUDA
  // backend: stream capture into a CUDA graph, one launch per replay) says so with can_record().
  // Between begin_recording() and end_recording() operations are recorded, not run; replay()
  // runs them again with the same pointers, sizes and scalars. Recorded work hands nothing to the
  // host and allocates nothing: upload, download, sum_squares, synchronize and alloc_* throw
  // std::logic_error while recording, and the caller then ends it with abort_recording().
  // Recordings live until drop_recordings() or the backend's end.
  virtual bool can_record() const { return false; }
  virtual void begin_recording() { throw std::logic_error(name() + " backend: no recording"); }
  virtual int end_recording() { throw std::logic_error(name() + " backend: no recording"); }
  virtual void abort_recording() {}
  virtual void replay(int /*recording*/) { throw std::logic_error(name() + " backend: no recording"); }
  virtual void drop_recordings() noexcept {}  // never throws, as free (destructors call it)

  // ---- operations ---------------------------------------------------------------------------

  // out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
  virtual void embedding_forward(ActPtr out,             // (B,T,C) writes
                                 const int32_t* tokens,  // (B,T), each in [0, V)
                                 ConstActPtr wte,        // (Vp,C)
                                 ConstActPtr wpe,        // (T,C)
                                 int B, int T, int C) = 0;
  // The same from position *first on (a decoder's step, GPT::forward_step):
  //   out[b,t,:] = wte[tokens[b,t],:] + wpe[*first + t,:]
  // `first` is backend memory, read when the operation runs, so recorded work replays at whatever
  // position was uploaded since; *first + T must not pass wpe's rows (the caller checks).
  virtual void embedding_forward_at(ActPtr out,             // (B,T,C) writes
                                    const int32_t* tokens,  // (B,T), each in [0, V)
                                    ConstActPtr wte,        // (Vp,C)
                                    ConstActPtr wpe,        // (context,C)
                                    const int32_t* first,   // (1)
                                    int B, int T, int C) = 0;
  // dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += sum_b dout[b,t,:]
  virtual void embedding_backward(float* dwte,           // (Vp,C) accumulates
                                  float* dwpe,           // (T,C) accumulates
                                  ConstActPtr dout,      // (B,T,C)
                                  const int32_t* tokens,  // (B,T)
                                  int B, int T, int C) = 0;

  // out = (inp - mean) * rstd * weight + bias per row, eps = 1e-5 (PyTorch's default).
  virtual void layernorm_forward(ActPtr out,           // (N,C) writes
                                 float* mean,          // (N) writes, saved for backward
                                 float* rstd,          // (N) writes, saved for backward
                                 ConstActPtr inp,      // (N,C)
                                 ConstActPtr weight,   // (C)
                                 ConstActPtr bias,     // (C)
                                 int N, int C) = 0;
  // residual = a + b (stored as activations, as residual_forward), then out = the layernorm of the
  // stored residual (as layernorm_forward): the residual add fused into the layernorm after it.
  // The CUDA backend does both in one pass over the row; this default composes the two
  // operations, which rounds at the same points, so it is the fused kernel's exact reference.
  virtual void residual_layernorm_forward(ActPtr residual,     // (N,C) writes; may alias a or b
                                          ActPtr out,          // (N,C) writes
                                          float* mean,         // (N) writes
                                          float* rstd,         // (N) writes
                                          ConstActPtr a,       // (N,C)
                                          ConstActPtr b,       // (N,C)
                                          ConstActPtr weight,  // (C)
                                          ConstActPtr bias,    // (C)
                                          int N, int C) {
    residual_forward(residual, a, b, static_cast<size_t>(N) * C);
    layernorm_forward(out, mean, rstd, residual, weight, bias, N, C);
  }
  virtual void layernorm_backward(ActPtr dinp,          // (N,C) ACCUMULATES (the residual stream)
                                  float* dweight,       // (C) accumulates
                                  float* dbias,         // (C) accumulates
                                  ConstActPtr dout,     // (N,C)
                                  ConstActPtr inp,      // (N,C) the forward input
                                  ConstActPtr weight,   // (C)
                                  const float* mean,    // (N) from forward
                                  const float* rstd,    // (N) from forward
                                  int N, int C) = 0;

  // out = inp @ weight^T + bias
  virtual void matmul_forward(ActPtr out,           // (N,OC) writes
                              ConstActPtr inp,      // (N,C)
                              ConstActPtr weight,   // (OC,C)
                              ConstActPtr bias,     // (OC) or null
                              int N, int C, int OC) = 0;
  // With g = dout_scale * dout:  dinp = g @ weight; dweight += g^T @ inp; dbias += sum_rows g.
  // dout_scale lets the caller fold a loss scale into the first matmul of backward for free.
  virtual void matmul_backward(ActPtr dinp,          // (N,C) WRITES
                               float* dweight,       // (OC,C) accumulates
                               float* dbias,         // (OC) accumulates, or nullptr
                               ConstActPtr dout,     // (N,OC)
                               ConstActPtr inp,      // (N,C) the forward input
                               ConstActPtr weight,   // (OC,C)
                               int N, int C, int OC, float dout_scale) = 0;

  // The MLP's fc product with the GELU fused into it (the CUDA backend: cuBLASLt's GELU_AUX_BIAS
  // epilogue): x = inp @ weight^T + bias in fp32; pre = x, out = gelu(x), each rounded once from
  // the same fp32 x (so in bf16 out is gelu of the unrounded sum, not of the stored pre). GELU as
  // gelu_forward's. OC must be a multiple of 8 (cuBLASLt's rule for the stored pre-activation).
  virtual void matmul_gelu_forward(ActPtr out,          // (N,OC) writes gelu(x)
                                   ActPtr pre,          // (N,OC) writes x, kept for backward
                                   ConstActPtr inp,     // (N,C)
                                   ConstActPtr weight,  // (OC,C)
                                   ConstActPtr bias,    // (OC) or null
                                   int N, int C, int OC) = 0;
  // matmul_backward of the product that follows the GELU (the MLP's fc_proj), with the GELU's
  // gradient fused into dinp's product (CUDA: the DGELU epilogue): with g = dout_scale * dout,
  //   dinp = (g @ weight) * gelu'(pre_gelu), rounded once; dweight += g^T @ inp; dbias += sum_rows g.
  // C (dinp's width) must be a multiple of 8, as OC for matmul_gelu_forward.
  virtual void matmul_gelu_backward(ActPtr dinp,            // (N,C) WRITES
                                    float* dweight,         // (OC,C) accumulates
                                    float* dbias,           // (OC) accumulates, or nullptr
                                    ConstActPtr dout,       // (N,OC)
                                    ConstActPtr inp,        // (N,C) the forward input, gelu(pre_gelu)
                                    ConstActPtr weight,     // (OC,C)
                                    ConstActPtr pre_gelu,   // (N,C) the GELU's input in forward
                                    int N, int C, int OC, float dout_scale) = 0;

  // Causal multi-head self-attention, NH heads of size hs = C/NH, scale 1/sqrt(hs):
  // qkv[b,t,:] = [q (C) | k (C) | v (C)], head h uses channels [h*hs, (h+1)*hs) of each.
  // `saved` is per-layer memory this backend keeps from forward to backward (CPU: the
  // probabilities); `scratch` is shared by all layers and may be clobbered by any call.
  virtual size_t attention_saved_floats(int B, int T, int C, int NH) const = 0;
  virtual size_t attention_scratch_floats(int B, int T, int C, int NH) const = 0;
  virtual void attention_forward(ActPtr out,         // (B,T,C) writes
                                 float* saved,       // (attention_saved_floats) writes
                                 ConstActPtr qkv,    // (B,T,3C)
                                 float* scratch,     // (attention_scratch_floats)
                                 int B, int T, int C, int NH) = 0;
  virtual void attention_backward(ActPtr dqkv,         // (B,T,3C) WRITES
                                  ConstActPtr dout,    // (B,T,C)
                                  ConstActPtr qkv,     // (B,T,3C) forward input
                                  ConstActPtr out,     // (B,T,C) forward output
                                  const float* saved,  // (attention_saved_floats) from forward
                                  float* scratch,      // (attention_scratch_floats)
                                  int B, int T, int C, int NH) = 0;

  // A decoder's step: one new position per sequence after the P = *position positions that a KV
  // cache holds. `cache` is attention_forward's qkv layout for T positions, its rows [0, P) those
  // of earlier forwards or steps; the new position's row qkv[b] is written into row P, then per
  // head, over the rows j in [0, P]:
  //   x_j = scale q . k_j;  p_j = exp(x_j - max x);  out = (sum_j p_j v_j) / (sum_j p_j)
  // in fp32, out rounded once to the activation dtype. Unlike the forward's bf16 product, p is not
  // rounded to bf16 (the step's products run on fp32 arithmetic), so in bf16 a step agrees with
  // the forward's row to bf16 rounding, not bit for bit. `position` is backend memory read when
  // the operation runs (as embedding_forward_at's first), in [0, T); B sequences, all at P.
  virtual void attention_step(ActPtr out,               // (B,C) writes
                              ActPtr cache,             // (B,T,3C) row P written
                              ConstActPtr qkv,          // (B,3C) the new position's q, k, v
                              const int32_t* position,  // (1)
                              int B, int T, int C, int NH) = 0;

  // GELU, tanh approximation (PyTorch's approximate="tanh"), elementwise over n activations.
  virtual void gelu_forward(ActPtr out, ConstActPtr inp, size_t n) = 0;  // writes
  // dinp = dout * gelu'(inp); WRITES dinp; dinp may alias dout.
  virtual void gelu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, size_t n) = 0;

  // out = a + b elementwise; out may alias a or b.
  virtual void residual_forward(ActPtr out, ConstActPtr a, ConstActPtr b, size_t n) = 0;

  // Fused softmax + cross-entropy + its gradient over a padded vocabulary, per row i < N:
  //   p = softmax(logits[i, :V]); losses[i] += -log p[targets[i]];
  //   logits[i, j] = dloss * (p[j] - [j == targets[i]]) for j < V, and 0 for V <= j < Vp,
  // i.e. the row is overwritten by its gradient (never by the normalised probabilities).
  // Padded columns neither enter the softmax nor receive gradient.
  virtual void softmax_cross_entropy(ActPtr logits,           // (N,Vp) in: logits, out: dlogits
                                     float* losses,          // (N) accumulates (sums over micro-steps)
                                     const int32_t* targets,  // (N), each in [0, V)
                                     float dloss, int N, int V, int Vp) = 0;

  // AdamW on one contiguous span (worker/math/adamw.hpp per element):
  //   g = grad_scale * grads; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  //   params -= lr * (weight_decay * params + (m/bc1) / (sqrt(v/bc2) + eps))
  // and, in the same pass, weights = params as activations (convert's rounding).
  virtual void adamw_update(float* params,       // (n) fp32 master, updated in place
                            ActPtr weights,      // (n) its activation-dtype copy, writes; or null
                            const float* grads,  // (n)
                            float* m,            // (n) first moment, updated
                            float* v,            // (n) second moment, updated
                            size_t n, const AdamWHyper& h) = 0;

  // sum_i x[i]^2 accumulated in double in an order fixed by n alone (deterministic); returns to
  // the host, so it waits for the queue.
  virtual double sum_squares(const float* x, size_t n) = 0;
  // The same sum, left in backend memory instead of handed to the host: dst[0..1] (backend
  // memory) receive the double's 8 bytes, so that one later download brings it to the host with
  // whatever else the caller reads there (the training step's one wait after the loss). Waits for
  // nothing on a backend that overrides it; this default, for backends whose waits cost nothing,
  // composes sum_squares and upload.
  virtual void sum_squares_into(float* dst, const float* x, size_t n) {
    const double sum = sum_squares(x, n);
    float bytes[2];
    static_assert(sizeof bytes == sizeof sum);
    std::memcpy(bytes, &sum, sizeof sum);
    upload(dst, bytes, 2);
  }

  // x *= s
  virtual void scale(float* x, float s, size_t n) = 0;

  // The width rule of matmul_gelu_forward (OC) and matmul_gelu_backward (C), checked alike by
  // every backend so that a shape one refuses no other accepts.
  static constexpr int kGeluWidthMultiple = 8;
  static void check_gelu_width(const char* op, const char* name, int width) {
    if (width % kGeluWidthMultiple != 0) {
      throw std::invalid_argument(std::string(op) + ": " + name + " (" + std::to_string(width) +
                                  ") must be a multiple of 8 (cuBLASLt's rule for the stored GELU input)");
    }
  }
};

}  // namespace xtrain
