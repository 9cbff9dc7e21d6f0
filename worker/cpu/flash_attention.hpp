// Causal multi-head self-attention on the CPU without the (T,T) matrices, FlashAttention-2 style:
// query blocks x key blocks, an online softmax, the blocks above the diagonal skipped, and only
// the output and one logsumexp per row saved for backward, which recomputes the probabilities.
// The arithmetic and its bf16 rounding points are defined in worker/math/flash_attention.hpp,
// shared with the CUDA kernels (cuda/kernels/flash_attention*.cuh).
//
// Layout as Backend::attention_*: qkv (B,T,3C) rows [q | k | v], head h at channels
// [h*hs, (h+1)*hs) of each, out (B,T,C), lse (B,NH,T). Any T >= 1 and any head size.
//
// Storage: every array is fp32. With round_bf16 the results are rounded to bf16 values at the
// points a bf16 tensor-core kernel rounds (the CPU's emulation of bf16 activations); the inputs
// must then hold bf16 values already, as bf16 storage would.
//
// Work: heads, the B x NH (batch, head) pairs, split over a team of threads
// (worker/cpu/thread_team.hpp) in contiguous shares; each member takes its heads one at a time, in
// tiles of kQueryBlock queries by math::kFlashKeyBlock keys multiplied by a small register-tiled
// product (flash_attention.cpp says why not sgemm), with its own part of the scratch. Every sum
// has a fixed order and a head writes only its own channels, so the results are the same bits for
// any number of members.
#pragma once

#include <cstddef>

#include "worker/cpu/thread_team.hpp"
#include "worker/math/flash_attention.hpp"  // AttentionShape

namespace xtrain {

// The tile product's vectors: 16 floats (AVX-512) where the CPU has them, the default, or 8 (AVX2,
// the build's baseline). Both give the same bits; the tests run both, the benchmark compares them.
// Returns whether AVX-512 is used now (false where the CPU lacks it, whatever `on` says).
bool flash_attention_use_avx512(bool on);

// Floats saved from forward to backward: the logsumexp of each row, (B,NH,T).
size_t flash_attention_saved_floats(const AttentionShape& s);
// Floats of scratch either pass needs on a team of `members` (>= 1): for each member O(T * hs),
// one head's transposed keys and values and its key-gradient accumulators plus a few tiles;
// nothing of size T x T.
size_t flash_attention_scratch_floats(const AttentionShape& s, int members);

void flash_attention_forward(float* out,          // (B,T,C) writes
                             float* lse,          // (B,NH,T) writes
                             const float* qkv,    // (B,T,3C)
                             float* scratch,      // (flash_attention_scratch_floats of team.members())
                             const AttentionShape& s, bool round_bf16, ThreadTeam& team);

void flash_attention_backward(float* dqkv,         // (B,T,3C) writes
                              const float* dout,   // (B,T,C)
                              const float* qkv,    // (B,T,3C) forward input
                              const float* out,    // (B,T,C) forward output
                              const float* lse,    // (B,NH,T) from forward
                              float* scratch,      // (flash_attention_scratch_floats of team.members())
                              const AttentionShape& s, bool round_bf16, ThreadTeam& team);

}  // namespace xtrain
