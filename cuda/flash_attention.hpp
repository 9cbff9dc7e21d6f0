// Host entry points of the CUDA flash attention (kernels: cuda/kernels/flash_attention*.cuh), one
// overload per storage type, all on one stream. Layout as Backend::attention_*: qkv (B,T,3C) rows
// [q | k | v], out and dout (B,T,C), lse and D (B,NH,T) fp32. Compiled apart from the backend
// (cuda/flash_attention.cu) because its kernels are many template instances.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "worker/math/flash_attention.hpp"  // AttentionShape

namespace xtrain::cuda {

// Throws std::invalid_argument naming what is wrong when the kernels cannot run the shape: the
// head size (C / NH) must be 16, 32, 64 or 128.
void check_flash_attention_shape(const AttentionShape& s);

size_t flash_attention_saved_floats(const AttentionShape& s);  // lse: B*NH*T
// D (B*NH*T), and with atomic_dq (bf16 only) the fp32 dQ sum (B*T*C) after it.
size_t flash_attention_scratch_floats(const AttentionShape& s, bool atomic_dq = false);

// out (B,T,C) and lse (B,NH,T) written. Pointers to storage must be 16-byte aligned.
void flash_attention_forward(cudaStream_t stream, float* out, float* lse, const float* qkv, const AttentionShape& s);
void flash_attention_forward(cudaStream_t stream, __nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv,
                             const AttentionShape& s);

// dqkv (B,T,3C) written; scratch (flash_attention_scratch_floats, 16-byte aligned) clobbered.
// Deterministic: every sum has a fixed order (a dK/dV kernel and a dQ kernel: 7 tile products).
// bf16 with atomic_dq (train.deterministic false): the dK/dV kernel also adds dQ's parts into an
// fp32 sum by atomics, in no fixed order (5 products; dQ may differ in its last bits between runs).
void flash_attention_backward(cudaStream_t stream, float* dqkv, const float* dout, const float* qkv,
                              const float* out, const float* lse, float* scratch, const AttentionShape& s);
void flash_attention_backward(cudaStream_t stream, __nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                              const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse, float* scratch,
                              const AttentionShape& s, bool atomic_dq = false);

}  // namespace xtrain::cuda
