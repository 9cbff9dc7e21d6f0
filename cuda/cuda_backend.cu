// CudaBackend's operations, every one except the embedding's (cuda/embedding.cu, kept apart
// because CUB's radix sort is the slowest code to compile). Each is a launcher from
// cuda/kernels/*.cuh, the flash attention's entry points (cuda/flash_attention.hpp), or a product
// through GemmEngine, all on stream_. Memory, transfers and recording: cuda_backend_memory.cpp.
#include "cuda/cuda_backend.hpp"

#include <type_traits>

#include "cuda/check.hpp"
#include "cuda/flash_attention.hpp"
#include "cuda/kernels/adamw.cuh"
#include "cuda/kernels/attention_step.cuh"
#include "cuda/kernels/column_reduce.cuh"
#include "cuda/kernels/cross_entropy.cuh"
#include "cuda/kernels/elementwise.cuh"
#include "cuda/kernels/layernorm.cuh"
#include "cuda/kernels/sum_squares.cuh"

namespace xtrain::cuda {

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

// The step's kernel (cuda/kernels/attention_step.cuh) on plain fp32 arithmetic in either storage.
void CudaBackend::attention_step(ActPtr out, ActPtr cache, ConstActPtr qkv, const int32_t* position, int B, int T,
                                 int C, int NH) {
  with_storage(act_dtype(), [&](auto type) {
    using S = decltype(type);
    cuda::attention_step(stream_, out.as<S>(), cache.as<S>(), qkv.as<S>(), position, {B, T, C, NH});
  });
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
