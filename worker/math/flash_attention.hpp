// What the CPU and CUDA flash attentions (worker/cpu/flash_attention.*, cuda/kernels/flash_attention*.cuh)
// agree on: the key block of the online softmax and the points where bf16 storage rounds.
//
// Causal attention per head, queries i and keys j <= i, x_ij = scale * q_i . k_j, scale =
// 1/sqrt(hs). Forward visits the keys in blocks of kFlashKeyBlock and keeps per row a running
// max m and sum l (FlashAttention-2); backward recomputes p_ij = exp(x_ij - lse_i) from the saved
// logsumexp and uses D_i = dO_i . O_i. Everything is fp32 except the values marked [bf16], which
// are rounded to bf16 (round-to-nearest-even, worker/math/bf16.hpp) when the activations are
// stored in bf16: there a tensor-core kernel feeds them to a product as bf16, and the CPU
// emulation rounds the same values.
//
//   forward, per key block:  m' = max(m, max_j x_ij);  p_ij = exp(x_ij - m')   (fp32)
//                            l = l exp(m - m') + sum_j p_ij                    (the fp32 p)
//                            acc = acc exp(m - m') + sum_j [bf16] p_ij v_j      (fp32 accumulator)
//   forward, at the end:     O_i = [bf16] (acc / l);  lse_i = m + log(l)        (lse fp32, saved)
//   backward:                D_i = dO_i . O_i;  p_ij = exp(x_ij - lse_i);  dp_ij = dO_i . v_j  (fp32)
//                            ds_ij = p_ij (dp_ij - D_i)                         (fp32)
//                            dV_j = [bf16] sum_i [bf16] p_ij dO_i
//                            dQ_i = [bf16] (scale sum_j [bf16] ds_ij k_j)
//                            dK_j = [bf16] (scale sum_i [bf16] ds_ij q_i)
// The inputs q, k, v, dO (and O in backward) are read as stored: bf16 values already. The sums
// run in fp32, in an order each backend fixes (no atomics), so both are deterministic; they agree
// with each other to fp32 rounding plus a rare flip of a [bf16] rounding at a tie.
#pragma once

#include "worker/math/hd.hpp"

namespace xtrain {

// B sequences of T positions, C channels in NH heads of hs = C / NH.
struct AttentionShape {
  int B, T, C, NH;
  XTRAIN_HD int hs() const { return C / NH; }
};

}  // namespace xtrain

namespace xtrain::math {

// Keys per block of the forward's online softmax. The bf16 rounding of p happens relative to the
// running max after each block, so both backends use the same block for the same rounded values.
constexpr int kFlashKeyBlock = 64;

}  // namespace xtrain::math
