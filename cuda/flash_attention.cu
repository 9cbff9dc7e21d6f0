#include "cuda/flash_attention.hpp"

#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/kernels/flash_attention_bf16.cuh"
#include "cuda/kernels/flash_attention_fp32.cuh"
#include "worker/model/cuda_buffers.hpp"

namespace xtrain::cuda {

namespace {

void check_aligned(const void* p, const char* what) {
  if (!aligned16(p)) {
    throw std::invalid_argument(std::string("flash attention: ") + what + " is not 16-byte aligned");
  }
}

template <class S>
void run_forward(cudaStream_t stream, S* out, float* lse, const S* qkv, const AttentionShape& s) {
  check_flash_attention_shape(s);
  check_aligned(out, "out");
  check_aligned(qkv, "qkv");
  const float scale = flash::softmax_scale(s);
  flash::with_head_size(s, [&](auto hs) { flash::forward<decltype(hs)::value>(stream, out, lse, qkv, s, scale); });
}

template <class S>
void run_backward(cudaStream_t stream, S* dqkv, const S* dout, const S* qkv, const S* out, const float* lse,
                  float* scratch, const AttentionShape& s, bool atomic_dq) {
  check_flash_attention_shape(s);
  for (const auto& [p, what] : {std::pair<const void*, const char*>{dqkv, "dqkv"}, {dout, "dout"}, {qkv, "qkv"}}) {
    check_aligned(p, what);
  }
  const size_t rows = static_cast<size_t>(s.B) * s.NH * s.T;
  launch_kernel(flash::backward_dot_kernel<S>, blocks_for(rows, flash::kWarps), flash::kThreads, 0, stream, scratch, dout, out, s);
  const float scale = flash::softmax_scale(s);
  flash::with_head_size(s, [&](auto hs) {
    if constexpr (std::is_same_v<S, float>) {
      flash::backward<decltype(hs)::value>(stream, dqkv, dout, qkv, lse, scratch, s, scale);
    } else {
      float* const dq_sum = atomic_dq ? scratch + cuda_buffers::attention_dq_sum_offset(s.B, s.T, s.NH) : nullptr;
      if (dq_sum != nullptr) check_aligned(dq_sum, "scratch");
      flash::backward<decltype(hs)::value>(stream, dqkv, dout, qkv, lse, scratch, dq_sum, s, scale);
    }
  });
}

}  // namespace

void check_flash_attention_shape(const AttentionShape& s) {
  if (s.B < 1 || s.T < 1 || s.NH < 1 || s.C < s.NH || s.C % s.NH != 0) {
    throw std::invalid_argument("flash attention: bad shape B " + std::to_string(s.B) + " T " + std::to_string(s.T) +
                                " C " + std::to_string(s.C) + " NH " + std::to_string(s.NH) +
                                " (need B, T, NH >= 1 and C a positive multiple of NH)");
  }
  if (!flash_attention_head_size_supported(s.hs())) {
    throw std::invalid_argument("model.n_embd / model.n_head: the CUDA attention supports head sizes 16, 32, 64 "
                                "and 128; this model has " + std::to_string(s.C) + " / " + std::to_string(s.NH) +
                                " = " + std::to_string(s.hs()));
  }
}

size_t flash_attention_saved_floats(const AttentionShape& s) {
  return cuda_buffers::attention_row_floats(s.B, s.T, s.NH);
}
size_t flash_attention_scratch_floats(const AttentionShape& s, bool atomic_dq) {
  return cuda_buffers::attention_scratch_floats(s.B, s.T, s.C, s.NH, atomic_dq);
}

void flash_attention_forward(cudaStream_t stream, float* out, float* lse, const float* qkv, const AttentionShape& s) {
  run_forward(stream, out, lse, qkv, s);
}
void flash_attention_forward(cudaStream_t stream, __nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv,
                             const AttentionShape& s) {
  run_forward(stream, out, lse, qkv, s);
}

void flash_attention_backward(cudaStream_t stream, float* dqkv, const float* dout, const float* qkv,
                              const float* out, const float* lse, float* scratch, const AttentionShape& s) {
  run_backward(stream, dqkv, dout, qkv, out, lse, scratch, s, false);
}
void flash_attention_backward(cudaStream_t stream, __nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                              const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse, float* scratch,
                              const AttentionShape& s, bool atomic_dq) {
  run_backward(stream, dqkv, dout, qkv, out, lse, scratch, s, atomic_dq);
}

}  // namespace xtrain::cuda
