// The CUDA backend: every Backend operation as kernels (cuda/kernels/*.cuh) and cuBLASLt
// products (cuda/gemm.hpp) issued in order on one compute stream of one device.
//
// Precision: bf16 stores activations as __nv_bfloat16 (act_dtype bf16) and runs every product
// on bf16 tensor cores with fp32 accumulation; tf32 and fp32 store fp32. Kernels are templates
// on the storage type (cuda/kernels/common.cuh). bf16 needs compute capability 8.0 or newer.
//
// Memory: alloc_floats/alloc_ints/alloc_acts are plain cudaMalloc calls; GPT and AdamW make a
// handful of them once (parameters, the weights' copy, gradients, moments, activations). The few
// operations that need scratch beyond what the interface passes in (the deterministic column
// sums of layernorm and bias gradients, or the bias gradients' epilogue output in bf16, the token
// sort of embedding backward) share one device
// buffer, sized by reserve_scratch before the first step (GPT calls it at construction); an
// operation on a bigger shape than reserved grows it, waiting for the stream first (never while
// recording). Every size is worker/model/cuda_buffers.hpp's, so the memory plan that the
// worker prints and checks before it allocates is what this backend holds.
//
// Host transfers: copies of up to PinnedStaging::kMaxBytes (everything a step moves: tokens,
// targets, losses, the norm, the step's scalars) go through a ring of pinned buffers
// (cuda/pinned_staging.hpp), so an upload never blocks the host and a download waits once, in
// wait_for_stream; larger ones (whole parameter sets, at load and checkpoint) stay pageable.
//
// Host waits: every wait for the compute stream (downloads, sum_squares, synchronize) goes
// through wait_for_stream: cudaStreamSynchronize, or the wait a communicator installed
// (set_stream_wait), which NcclCommunicator does so that a peer lost inside a collective that the
// stream waits for cannot hang the rank (cuda/host_wait.hpp).
//
// Recording (Backend::begin_recording): stream capture of the compute stream into a CUDA graph
// (thread-local capture mode, so other threads' CUDA calls, NCCL's included, are unaffected),
// instantiated once and replayed with cudaGraphLaunch on the same stream.
//
// Plain C++ (no CUDA kernels here) so the NCCL communicator can reach the stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/gemm.hpp"
#include "cuda/pinned_staging.hpp"
#include "worker/model/cuda_buffers.hpp"
#include "worker/model/backend.hpp"

namespace xtrain::cuda {

// A device buffer that only grows: reserve(bytes) returns storage of at least that size, valid
// until the next reserve. Growing waits for the stream (earlier work may still read the old
// buffer) and frees device memory, so it must happen before the first step, never in one.
class ScratchBuffer {
 public:
  explicit ScratchBuffer(cudaStream_t stream) : stream_(stream) {}
  ~ScratchBuffer();
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;

  void* reserve(size_t bytes);
  size_t capacity() const { return bytes_; }

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class CudaBackend final : public Backend {
 public:
  // Selects `device` for the calling thread and creates the stream, cuBLASLt handle and the
  // fixed buffers. tf32 selects TF32 tensor cores for every product, fp32 strict fp32.
  // deterministic false (train.deterministic) lets the bf16 attention backward sum dQ by atomics
  // (cuda/flash_attention.hpp): faster, and dQ no longer the same bits on every call.
  CudaBackend(int device, Precision precision, bool deterministic);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  int device() const { return device_; }
  Precision precision() const override { return precision_; }
  cudaStream_t stream() const { return stream_; }  // every operation runs on it, in order

  // How the host waits for the stream: `wait(stream, what)` returns once the stream is idle or
  // throws; empty: cudaStreamSynchronize. `what` names the wait in errors.
  using StreamWait = std::function<void(cudaStream_t stream, const char* what)>;
  void set_stream_wait(StreamWait wait) { stream_wait_ = std::move(wait); }
  void wait_for_stream(const char* what);
  size_t pinned_buffers() const { return pinned_.buffers(); }  // for the tests

  DType act_dtype() const override { return precision_ == Precision::bf16 ? DType::bf16 : DType::f32; }

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
  bool host_reads_in_place() const override { return false; }
  void fill_zero(float* p, size_t n) override;
  void fill_zero(ActPtr p, size_t n) override;
  void convert(ActPtr dst, const float* src, size_t n) override;
  void copy(float* dst, const float* src, size_t n) override;
  void copy(ActPtr dst, ConstActPtr src, size_t n) override;
  void synchronize() override;
  void reserve_scratch(int rows, int cols) override;
  OwnMemory own_memory(int rows, int cols) const override;

  bool can_record() const override { return true; }
  void begin_recording() override;
  int end_recording() override;
  void abort_recording() override;
  void replay(int recording) override;
  void drop_recordings() noexcept override;

  // Device memory now held: the alloc_* buffers, and the backend's own (workspace, partials,
  // scratch). The [gpu] test of the memory plan compares these with the plan.
  size_t allocated_bytes() const { return allocated_bytes_; }
  size_t own_bytes() const;

  void embedding_forward(ActPtr out, const int32_t* tokens, ConstActPtr wte, ConstActPtr wpe, int B, int T,
                         int C) override;
  // first null: from position 0 (embedding_forward's own call).
  void embedding_forward_at(ActPtr out, const int32_t* tokens, ConstActPtr wte, ConstActPtr wpe, const int32_t* first,
                            int B, int T, int C) override;
  void embedding_backward(float* dwte, float* dwpe, ConstActPtr dout, const int32_t* tokens, int B, int T,
                          int C) override;
  void layernorm_forward(ActPtr out, float* mean, float* rstd, ConstActPtr inp, ConstActPtr weight,
                         ConstActPtr bias, int N, int C) override;
  void residual_layernorm_forward(ActPtr residual, ActPtr out, float* mean, float* rstd, ConstActPtr a, ConstActPtr b,
                                  ConstActPtr weight, ConstActPtr bias, int N, int C) override;
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
  void sum_squares_into(float* dst, const float* x, size_t n) override;
  void scale(float* x, float s, size_t n) override;

 private:
  void* alloc_zeroed(size_t bytes);
  // Throws std::logic_error naming `what` while recording: it would wait for the device or
  // allocate, which a recording cannot hold.
  void refuse_while_recording(const char* what) const;
  void* reserve_scratch_bytes(size_t bytes);
  // A host-to-device copy of `bytes`: `plain` itself, or (null) what `fill(buffer)` writes, the
  // bf16 conversion. Through the pinned ring when small enough; a large plain one straight from
  // `plain` (pageable).
  void upload_bytes(void* dst, size_t bytes, const void* plain, const std::function<void(void*)>& fill);
  // A device-to-host copy of `bytes`, waited for; returns where the host reads it: a pinned
  // buffer when small enough, else `pageable` (at least `bytes`), the copy going straight there.
  const void* arrive(const void* src, size_t bytes, const char* what, void* pageable);
  // A device-to-host copy of `bytes`, waited for: into `plain`, or (null) handed to
  // `take(buffer)`, the bf16 conversion.
  void download_bytes(const void* src, size_t bytes, const char* what, void* plain,
                      const std::function<void(const void*)>& take);
  size_t embedding_sort_reserve(int BT) const;
  // The products of matmul_* and matmul_gelu_*: a null pre / pre_gelu means no GELU epilogue.
  void product_forward(ActPtr out, ActPtr pre, ConstActPtr inp, ConstActPtr weight, ConstActPtr bias, int N, int C,
                       int OC);
  void product_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                        ConstActPtr weight, ConstActPtr pre_gelu, int N, int C, int OC, float dout_scale);

  int device_;
  Precision precision_;
  bool atomic_dq_;  // the bf16 attention backward sums dQ by atomics (not deterministic)
  cudaStream_t stream_ = nullptr;
  GemmEngine gemm_;
  ScratchBuffer scratch_;
  double* sum_partials_ = nullptr;  // (kSumSquaresBlocks + 1) the reduction's fixed partials
  StreamWait stream_wait_;
  PinnedStaging pinned_;  // small transfers
  std::vector<std::uint8_t> large_view_;  // download_view's host side past the pinned ring's size
  std::unordered_map<void*, size_t> allocations_;  // alloc_* buffers and their sizes
  size_t allocated_bytes_ = 0;
  struct {
    int rows = -1;     // the positions reserve_scratch sized for
    size_t bytes = 0;  // the radix sort's storage for them
  } sort_reserve_;
  bool recording_ = false;
  std::vector<cudaGraphExec_t> graphs_;  // recordings, by id
};

}  // namespace xtrain::cuda
