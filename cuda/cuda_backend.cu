// CudaBackend: memory, and every operation except the embedding's (cuda/embedding.cu, kept apart
// because CUB's radix sort is the slowest code to compile). Each operation is a launcher from
// cuda/kernels/*.cuh, the flash attention's entry points (cuda/flash_attention.hpp), or a product
// through GemmEngine, all on stream_.
#include "cuda/cuda_backend.hpp"

#include <cstdio>
#include <cstring>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/check.hpp"
#include "cuda/flash_attention.hpp"
#include "cuda/kernels/adamw.cuh"
#include "cuda/kernels/column_reduce.cuh"
#include "cuda/kernels/cross_entropy.cuh"
#include "cuda/kernels/elementwise.cuh"
#include "cuda/kernels/layernorm.cuh"
#include "cuda/kernels/sum_squares.cuh"
#include "worker/math/bf16.hpp"

namespace xtrain::cuda {
namespace {

cudaStream_t select_device_and_create_stream(int device) {
  XTRAIN_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  XTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

// std::bad_alloc as the interface asks, with the sizes in its message.
class DeviceOutOfMemory : public std::bad_alloc {
 public:
  explicit DeviceOutOfMemory(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

[[noreturn]] void throw_out_of_memory(size_t bytes, int device, cudaError_t err) {
  size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  constexpr double kMiB = 1024.0 * 1024.0;
  throw DeviceOutOfMemory("cudaMalloc of " + std::to_string(bytes / kMiB) + " MiB on GPU " + std::to_string(device) +
                          " failed (" + cudaGetErrorString(err) + "); " + std::to_string(free_bytes / kMiB) +
                          " MiB free of " + std::to_string(total_bytes / kMiB));
}

}  // namespace

// ---- ScratchBuffer ------------------------------------------------------------------------------

ScratchBuffer::~ScratchBuffer() { cudaFree(data_); }

void* ScratchBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_) return data_;
  XTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));  // earlier work may still use the old buffer
  XTRAIN_CUDA_CHECK(cudaFree(data_));
  data_ = nullptr;
  bytes_ = 0;
  XTRAIN_CUDA_CHECK(cudaMalloc(&data_, bytes));
  bytes_ = bytes;
  return data_;
}

// ---- memory -------------------------------------------------------------------------------------

CudaBackend::CudaBackend(int device, Precision precision, bool deterministic)
    : device_(device),
      precision_(precision),
      atomic_dq_(!deterministic && precision == Precision::bf16),
      stream_(select_device_and_create_stream(device)),
      gemm_(stream_, precision == Precision::tf32),
      scratch_(stream_),
      pinned_(stream_, [this] { wait_for_stream("the pinned staging ring's drain"); }) {
  XTRAIN_CUDA_CHECK(cudaMalloc(&sum_partials_, (kSumSquaresBlocks + 1) * sizeof(double)));
}

CudaBackend::~CudaBackend() {
  abort_recording();
  cudaStreamSynchronize(stream_);
  for (cudaGraphExec_t g : graphs_) cudaGraphExecDestroy(g);
  cudaFree(sum_partials_);
  cudaStreamDestroy(stream_);
}

void CudaBackend::refuse_while_recording(const char* what) const {
  if (recording_) {
    throw std::logic_error(std::string("CudaBackend: ") + what +
                           " while recording (it would wait for the GPU or allocate)");
  }
}

size_t CudaBackend::own_bytes() const {
  return cuda_buffers::kGemmWorkspaceBytes + scratch_.capacity() + (kSumSquaresBlocks + 1) * sizeof(double);
}

// Growing moves the buffer: not while recording (it waits for the stream), and not under
// recorded graphs, which would go on using the old one.
void* CudaBackend::reserve_scratch_bytes(size_t bytes) {
  if (bytes > scratch_.capacity()) {
    refuse_while_recording("growing the scratch buffer");
    if (!graphs_.empty()) {
      throw std::logic_error("CudaBackend: the scratch buffer cannot grow under recorded graphs (drop them first)");
    }
  }
  return scratch_.reserve(bytes);
}

void* CudaBackend::alloc_zeroed(size_t bytes) {
  refuse_while_recording("an allocation");
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it, so the next launch check does not report it again
    throw_out_of_memory(bytes, device_, err);
  }
  XTRAIN_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  XTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));  // zeroed before any other stream sees it
  allocations_[p] = bytes;
  allocated_bytes_ += bytes;
  return p;
}

float* CudaBackend::alloc_floats(size_t n) { return static_cast<float*>(alloc_zeroed(n * sizeof(float))); }
int32_t* CudaBackend::alloc_ints(size_t n) { return static_cast<int32_t*>(alloc_zeroed(n * sizeof(int32_t))); }
ActPtr CudaBackend::alloc_acts(size_t n) { return {alloc_zeroed(n * dtype_bytes(act_dtype())), act_dtype()}; }

// free and drop_recordings never throw (worker/model/backend.hpp): what they cannot do is said on
// stderr, and the memory stays allocated until the process ends.
namespace {
void report_kept(const char* what, const char* why) noexcept {
  std::fprintf(stderr, "warning: CUDA backend: %s: %s; the memory stays allocated until the process ends\n", what, why);
}
}  // namespace

void CudaBackend::free(void* p) noexcept {
  if (p == nullptr) return;
  if (recording_) return report_kept("free", "called while recording (it would wait for the GPU)");
  const cudaError_t err = cudaFree(p);
  if (err != cudaSuccess) return report_kept("cudaFree", cudaGetErrorString(err));
  const auto found = allocations_.find(p);
  if (found != allocations_.end()) {
    allocated_bytes_ -= found->second;
    allocations_.erase(found);
  }
}

void CudaBackend::wait_for_stream(const char* what) {
  if (stream_wait_) return stream_wait_(stream_, what);
  XTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::upload_bytes(void* dst, size_t bytes, const void* plain, const std::function<void(void*)>& fill) {
  refuse_while_recording("an upload");
  if (bytes == 0) return;
  if (bytes <= PinnedStaging::kMaxBytes) {
    pinned_.use(bytes, [&](void* buffer) {
      if (plain != nullptr) {
        std::memcpy(buffer, plain, bytes);
      } else {
        fill(buffer);
      }
      XTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, buffer, bytes, cudaMemcpyHostToDevice, stream_));
    });
    return;
  }
  // Pageable: cudaMemcpyAsync returns once the source is staged, which is the interface's
  // "host_src may be reused" (and what lets pageable_ be refilled by the next upload).
  if (plain == nullptr) {
    pageable_.resize(bytes);
    fill(pageable_.data());
    plain = pageable_.data();
  }
  XTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, plain, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::download_bytes(const void* src, size_t bytes, const char* what, void* plain,
                                 const std::function<void(const void*)>& take) {
  refuse_while_recording("a download");
  if (bytes == 0) return;
  const void* arrived = plain;
  if (bytes <= PinnedStaging::kMaxBytes) {
    arrived = pinned_.use(bytes, [&](void* buffer) {
      XTRAIN_CUDA_CHECK(cudaMemcpyAsync(buffer, src, bytes, cudaMemcpyDeviceToHost, stream_));
    });
  } else {
    if (plain == nullptr) {
      pageable_.resize(bytes);
      arrived = pageable_.data();
    }
    XTRAIN_CUDA_CHECK(cudaMemcpyAsync(const_cast<void*>(arrived), src, bytes, cudaMemcpyDeviceToHost, stream_));
  }
  wait_for_stream(what);
  if (plain == nullptr) {
    take(arrived);
  } else if (arrived != plain) {
    std::memcpy(plain, arrived, bytes);
  }
}

void CudaBackend::upload(float* dst, const float* host_src, size_t n) {
  upload_bytes(dst, n * sizeof(float), host_src, {});
}
void CudaBackend::upload(int32_t* dst, const int32_t* host_src, size_t n) {
  upload_bytes(dst, n * sizeof(int32_t), host_src, {});
}
void CudaBackend::download(float* host_dst, const float* src, size_t n) {
  download_bytes(src, n * sizeof(float), "a download", host_dst, {});
}
void CudaBackend::download(int32_t* host_dst, const int32_t* src, size_t n) {
  download_bytes(src, n * sizeof(int32_t), "a download", host_dst, {});
}
// bf16 activations are converted on the host, with the rounding the kernels use (bit-identical
// to __float2bfloat16_rn), and cross the bus at half the size.
void CudaBackend::upload(ActPtr dst, const float* host_src, size_t n) {
  if (dst.dtype() == DType::f32) return upload(dst.as<float>(), host_src, n);
  upload_bytes(dst.as<__nv_bfloat16>(), n * sizeof(std::uint16_t), nullptr, [=](void* buffer) {
    auto* bits = static_cast<std::uint16_t*>(buffer);
    for (size_t i = 0; i < n; ++i) bits[i] = math::bf16_bits_from_float(host_src[i]);
  });
}
void CudaBackend::download(float* host_dst, ConstActPtr src, size_t n) {
  if (src.dtype() == DType::f32) return download(host_dst, src.as<float>(), n);
  download_bytes(src.as<__nv_bfloat16>(), n * sizeof(std::uint16_t), "a download", nullptr, [=](const void* buffer) {
    const auto* bits = static_cast<const std::uint16_t*>(buffer);
    for (size_t i = 0; i < n; ++i) host_dst[i] = math::float_from_bf16_bits(bits[i]);
  });
}
void CudaBackend::fill_zero(float* p, size_t n) {
  XTRAIN_CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), stream_));
}
void CudaBackend::fill_zero(ActPtr p, size_t n) {
  XTRAIN_CUDA_CHECK(cudaMemsetAsync(p.data(), 0, n * dtype_bytes(p.dtype()), stream_));
}
void CudaBackend::convert(ActPtr dst, const float* src, size_t n) {
  with_storage(dst.dtype(), [&](auto type) {
    using T = decltype(type);
    if constexpr (std::is_same_v<T, float>) {
      if (dst.as<float>() != src) copy(dst.as<float>(), src, n);
    } else {
      cuda::convert(stream_, dst.as<T>(), src, n);
    }
  });
}
void CudaBackend::copy(float* dst, const float* src, size_t n) {
  XTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
}
void CudaBackend::synchronize() {
  refuse_while_recording("synchronize");
  wait_for_stream("synchronize");
}

// ---- recording ----------------------------------------------------------------------------------

void CudaBackend::begin_recording() {
  if (recording_) throw std::logic_error("CudaBackend: a recording is already under way");
  XTRAIN_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  recording_ = true;
}

// A capture that an illegal call invalidated fails here, at its end (the capture is over either
// way); the error is cleared so that the next launch check does not report it again.
int CudaBackend::end_recording() {
  if (!recording_) throw std::logic_error("CudaBackend: end_recording without begin_recording");
  recording_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = ended == cudaSuccess ? cudaGraphInstantiate(&exec, graph, 0) : ended;
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (instantiated != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string(ended != cudaSuccess ? "cudaStreamEndCapture" : "cudaGraphInstantiate") +
                             ": " + cudaGetErrorName(instantiated) + " (" + cudaGetErrorString(instantiated) + ")");
  }
  graphs_.push_back(exec);
  return static_cast<int>(graphs_.size() - 1);
}

// Ends the capture, even one that an illegal call invalidated, so the stream runs work again.
void CudaBackend::abort_recording() {
  if (!recording_) return;
  recording_ = false;
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();  // the capture's error is the caller's exception already
}

void CudaBackend::replay(int recording) {
  if (recording < 0 || recording >= static_cast<int>(graphs_.size()) || graphs_[recording] == nullptr) {
    throw std::logic_error("CudaBackend: no recording " + std::to_string(recording));
  }
  XTRAIN_CUDA_CHECK(cudaGraphLaunch(graphs_[recording], stream_));
}

void CudaBackend::drop_recordings() noexcept {
  if (recording_) return report_kept("drop_recordings", "called while recording");
  const cudaError_t err = cudaStreamSynchronize(stream_);  // no graph is destroyed while it runs
  if (err != cudaSuccess) return report_kept("drop_recordings", cudaGetErrorString(err));
  for (cudaGraphExec_t g : graphs_) {
    const cudaError_t destroyed = cudaGraphExecDestroy(g);
    if (destroyed != cudaSuccess) report_kept("cudaGraphExecDestroy", cudaGetErrorString(destroyed));
  }
  graphs_.clear();
}

// ---- operations ---------------------------------------------------------------------------------
// Each dispatches on the activations' storage type (with_storage); as<T>() checks every pointer.

void CudaBackend::layernorm_forward(ActPtr out, float* mean, float* rstd, ConstActPtr inp, ConstActPtr weight,
                                    ConstActPtr bias, int N, int C) {
  with_storage(act_dtype(), [&](auto type) {
    using T = decltype(type);
    cuda::layernorm_forward(stream_, out.as<T>(), mean, rstd, inp.as<T>(), weight.as<T>(), bias.as<T>(), N, C);
  });
}

void CudaBackend::residual_layernorm_forward(ActPtr residual, ActPtr out, float* mean, float* rstd, ConstActPtr a,
                                             ConstActPtr b, ConstActPtr weight, ConstActPtr bias, int N, int C) {
  with_storage(act_dtype(), [&](auto type) {
    using T = decltype(type);
    cuda::residual_layernorm_forward(stream_, residual.as<T>(), out.as<T>(), mean, rstd, a.as<T>(), b.as<T>(),
                                     weight.as<T>(), bias.as<T>(), N, C);
  });
}

void CudaBackend::layernorm_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                                     ConstActPtr weight, const float* mean, const float* rstd, int N, int C) {
  float* partials =
      static_cast<float*>(reserve_scratch_bytes(layernorm_backward_scratch_floats(N, C) * sizeof(float)));
  with_storage(act_dtype(), [&](auto type) {
    using T = decltype(type);
    cuda::layernorm_backward(stream_, dinp.as<T>(), dweight, dbias, dout.as<T>(), inp.as<T>(), weight.as<T>(), mean,
                             rstd, N, C, partials);
  });
}

namespace {
template <class T>
constexpr cudaDataType_t cuda_type() {
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
}
}  // namespace

// out (N,OC) = inp (N,C) @ weight^T (C,OC) + bias, and with `pre` (the fused MLP product) out =
// gelu(that), pre = that. The bias goes into the product's epilogue when it is 16-byte aligned
// (cuBLASLt's requirement); otherwise it is broadcast into out first and the product adds onto it
// (beta = 1, C = D), the CPU backend's way: one rounding of (product + bias) either way, and the
// GELU, when asked, takes that sum in fp32 before it is rounded.
void CudaBackend::product_forward(ActPtr out, ActPtr pre, ConstActPtr inp, ConstActPtr weight, ConstActPtr bias,
                                  int N, int C, int OC) {
  with_storage(act_dtype(), [&](auto type) {
    using T = decltype(type);
    constexpr cudaDataType_t t = cuda_type<T>();
    const T* b = bias.as<T>();
    const bool fused = b == nullptr || aligned16(b);
    if (!fused) broadcast_rows(stream_, out.as<T>(), b, N, OC);
    const GemmEpilogue epilogue{fused ? b : nullptr, pre ? GemmGelu::kForward : GemmGelu::kNone, pre.as<T>()};
    gemm_.run(N, OC, C, 1.0f, {inp.as<T>(), C, false, 0, t}, {weight.as<T>(), C, true, 0, t}, fused ? 0.0f : 1.0f,
              out.as<T>(), OC, 0, 1, epilogue, t);
  });
}

void CudaBackend::matmul_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight, ConstActPtr bias, int N, int C,
                                 int OC) {
  product_forward(out, {}, inp, weight, bias, N, C, OC);
}

void CudaBackend::matmul_gelu_forward(ActPtr out, ActPtr pre, ConstActPtr inp, ConstActPtr weight, ConstActPtr bias,
                                      int N, int C, int OC) {
  check_gelu_width("matmul_gelu_forward", "OC", OC);
  product_forward(out, pre, inp, weight, bias, N, C, OC);
}

// With pre_gelu (the fused MLP backward), dinp's product applies the GELU gradient in its
// epilogue: dinp = (s * dout @ weight) * gelu'(pre_gelu), rounded once to T.
// dbias in bf16 with s == 1 (every bias of GPT's backward): the weight-gradient product also sums
// dout's columns (BGRADB; fp32, as the product's C), into scratch, and one add over OC floats
// accumulates them into dbias (the epilogue writes; gradients accumulate). Otherwise, or where
// cuBLASLt has no such algorithm, a deterministic column sum of dout into fp32.
void CudaBackend::product_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                                   ConstActPtr weight, ConstActPtr pre_gelu, int N, int C, int OC,
                                   float dout_scale) {
  with_storage(act_dtype(), [&](auto type) {
    using T = decltype(type);
    constexpr cudaDataType_t t = cuda_type<T>();
    const T* g = dout.as<T>();
    const GemmEpilogue epilogue{nullptr, pre_gelu ? GemmGelu::kBackward : GemmGelu::kNone, pre_gelu.as<T>()};
    // dinp (N,C) = s * dout (N,OC) @ weight (OC,C), stored as T
    gemm_.run(N, C, OC, dout_scale, {g, OC, false, 0, t}, {weight.as<T>(), C, false, 0, t}, 0.0f, dinp.as<T>(), C, 0,
              1, epilogue, t);
    // The column sums' scratch (OC floats for BGRADB fit in it): the size the memory plan counts.
    float* scratch = dbias != nullptr ? static_cast<float*>(reserve_scratch_bytes(
                                            column_reduce_scratch_floats(1, N, OC) * sizeof(float)))
                                      : nullptr;
    // dweight (OC,C) += s * dout^T (OC,N) @ inp (N,C), accumulated into fp32
    auto dweight_product = [&](const GemmEpilogue& e) {
      return gemm_.run(OC, C, N, dout_scale, {g, OC, true, 0, t}, {inp.as<T>(), C, false, 0, t}, 1.0f, dweight, C, 0,
                       1, e);
    };
    GemmEpilogue with_bias_grad{};
    with_bias_grad.bias_grad = scratch;
    if (t == CUDA_R_16BF && dbias != nullptr && dout_scale == 1.0f && dweight_product(with_bias_grad)) {
      cuda::residual_forward(stream_, dbias, dbias, scratch, static_cast<size_t>(OC));
      return;
    }
    dweight_product({});
    if (dbias != nullptr) column_sums(stream_, dbias, scratch, g, N, OC, dout_scale);
  });
}

void CudaBackend::matmul_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                                  ConstActPtr weight, int N, int C, int OC, float dout_scale) {
  product_backward(dinp, dweight, dbias, dout, inp, weight, {}, N, C, OC, dout_scale);
}

void CudaBackend::matmul_gelu_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                                       ConstActPtr weight, ConstActPtr pre_gelu, int N, int C, int OC,
                                       float dout_scale) {
  check_gelu_width("matmul_gelu_backward", "C", C);
  product_backward(dinp, dweight, dbias, dout, inp, weight, pre_gelu, N, C, OC, dout_scale);
}

// Flash attention (cuda/flash_attention.hpp) in the activations' storage type: fp32 kernels for
// fp32 and tf32, tensor-core kernels for bf16; lse saved per row, D = dO . O as scratch (and the
// fp32 dQ sum when it is summed by atomics). The shape check runs when GPT sizes its buffers,
// before any step.
size_t CudaBackend::attention_saved_floats(int B, int T, int C, int NH) const {
  check_flash_attention_shape({B, T, C, NH});
  return flash_attention_saved_floats({B, T, C, NH});
}

size_t CudaBackend::attention_scratch_floats(int B, int T, int C, int NH) const {
  check_flash_attention_shape({B, T, C, NH});
  return flash_attention_scratch_floats({B, T, C, NH}, atomic_dq_);
}

void CudaBackend::attention_forward(ActPtr out, float* saved, ConstActPtr qkv, float* /*scratch*/, int B, int T,
                                    int C, int NH) {
  with_storage(act_dtype(), [&](auto type) {
    using S = decltype(type);
    flash_attention_forward(stream_, out.as<S>(), saved, qkv.as<S>(), {B, T, C, NH});
  });
}

void CudaBackend::attention_backward(ActPtr dqkv, ConstActPtr dout, ConstActPtr qkv, ConstActPtr out,
                                     const float* saved, float* scratch, int B, int T, int C, int NH) {
  if (act_dtype() == DType::bf16) {
    flash_attention_backward(stream_, dqkv.as<__nv_bfloat16>(), dout.as<__nv_bfloat16>(), qkv.as<__nv_bfloat16>(),
                             out.as<__nv_bfloat16>(), saved, scratch, {B, T, C, NH}, atomic_dq_);
  } else {
    flash_attention_backward(stream_, dqkv.as<float>(), dout.as<float>(), qkv.as<float>(), out.as<float>(), saved,
                             scratch, {B, T, C, NH});
  }
}

void CudaBackend::gelu_forward(ActPtr out, ConstActPtr inp, size_t n) {
  with_storage(act_dtype(), [&](auto type) {
    using T = decltype(type);
    cuda::gelu_forward(stream_, out.as<T>(), inp.as<T>(), n);
  });
}

void CudaBackend::gelu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, size_t n) {
  with_storage(act_dtype(), [&](auto type) {
    using T = decltype(type);
    cuda::gelu_backward(stream_, dinp.as<T>(), inp.as<T>(), dout.as<T>(), n);
  });
}

void CudaBackend::residual_forward(ActPtr out, ConstActPtr a, ConstActPtr b, size_t n) {
  with_storage(act_dtype(), [&](auto type) {
    using T = decltype(type);
    cuda::residual_forward(stream_, out.as<T>(), a.as<T>(), b.as<T>(), n);
  });
}

void CudaBackend::softmax_cross_entropy(ActPtr logits, float* losses, const int32_t* targets, float dloss, int N,
                                        int V, int Vp) {
  with_storage(act_dtype(), [&](auto type) {
    using T = decltype(type);
    cuda::softmax_cross_entropy(stream_, logits.as<T>(), losses, targets, dloss, N, V, Vp);
  });
}

void CudaBackend::adamw_update(float* params, ActPtr weights, const float* grads, float* m, float* v, size_t n,
                               const AdamWHyper& h) {
  with_storage(weights ? weights.dtype() : DType::f32, [&](auto type) {
    using T = decltype(type);
    cuda::adamw_update(stream_, params, weights.as<T>(), grads, m, v, n, h);
  });
}

double CudaBackend::sum_squares(const float* x, size_t n) {
  refuse_while_recording("sum_squares");
  cuda::sum_squares(stream_, sum_partials_, x, n);
  double result = 0.0;
  download_bytes(sum_partials_ + kSumSquaresBlocks, sizeof(double), "sum_squares", &result, {});
  return result;
}

void CudaBackend::sum_squares_into(float* dst, const float* x, size_t n) {
  refuse_while_recording("sum_squares_into");
  cuda::sum_squares(stream_, sum_partials_, x, n);
  // A device-to-device copy on the compute stream: ordered, and no host wait.
  XTRAIN_CUDA_CHECK(
      cudaMemcpyAsync(dst, sum_partials_ + kSumSquaresBlocks, sizeof(double), cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::scale(float* x, float s, size_t n) { cuda::scale(stream_, x, s, n); }

}  // namespace xtrain::cuda
