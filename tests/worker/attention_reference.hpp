// The causal attention the CPU backend ran before flash attention, kept as the reference the flash
// attention is tested (tests/worker/cpu/test_flash_attention.cpp) and measured
// (scripts/bench/attention_cpu.cpp) against: per head, blocks of query rows whose scores against
// every key up to the block's end go through sgemm, an exact softmax per row, and the (B,NH,T,T)
// probabilities kept for backward. fp32 throughout.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "worker/math/exp.hpp"
#include "worker/math/flash_attention.hpp"  // AttentionShape
#include "worker/math/reduce.hpp"

namespace xtrain::test {

constexpr int kReferenceRowBlock = 128;

inline size_t reference_attention_probs_floats(const AttentionShape& s) {
  return static_cast<size_t>(s.B) * s.NH * s.T * s.T;  // (B,NH,T,T)
}
inline size_t reference_attention_scratch_floats(const AttentionShape& s) {
  return static_cast<size_t>(s.T) * s.T;  // one head's (T,T) score gradient
}

// Row t in place: row[j] = softmax_j(scale * row[j]) over j <= t, and 0 for t < j < T.
inline void reference_causal_softmax_row(float* row, int t, int T, float scale) {
  const int n = t + 1;
  const float mx = scale * math::row_max(row, n);
  for (int j = 0; j < n; ++j) row[j] = math::exp_fast(scale * row[j] - mx);
  const float inv = 1.0f / math::row_sum(row, n);
  for (int j = 0; j < n; ++j) row[j] *= inv;
  for (int j = n; j < T; ++j) row[j] = 0.0f;
}

// Backward of p = softmax(scale * s) over j <= t, in place: dp becomes
// scale * p_j * (dp_j - sum_k p_k dp_k); entries t < j < T become 0.
inline void reference_causal_softmax_backward_row(float* dp, const float* p, int t, int T, float scale) {
  const int n = t + 1;
  const float dot = math::row_dot(p, dp, n);
  for (int j = 0; j < n; ++j) dp[j] = scale * p[j] * (dp[j] - dot);
  for (int j = n; j < T; ++j) dp[j] = 0.0f;
}

// Per (b, h): P = causal_softmax(Q K^T / sqrt(hs)), out_h = P V.
inline void reference_attention_forward(float* out,        // (B,T,C) writes
                                        float* probs,      // (B,NH,T,T) writes
                                        const float* qkv,  // (B,T,3C)
                                        const AttentionShape& s) {
  const int T = s.T, C = s.C, hs = s.hs(), ld = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.NH; ++h) {
      const float* q = qkv + static_cast<size_t>(b) * T * ld + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* p = probs + (static_cast<size_t>(b) * s.NH + h) * T * T;
      float* o = out + static_cast<size_t>(b) * T * C + h * hs;
      for (int r0 = 0; r0 < T; r0 += kReferenceRowBlock) {
        const int r1 = std::min(T, r0 + kReferenceRowBlock), rows = r1 - r0;
        float* pr = p + static_cast<size_t>(r0) * T;
        // S[r0:r1, 0:r1] = Q[r0:r1] K[0:r1]^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, 1.0f, q + static_cast<size_t>(r0) * ld,
                    ld, k, ld, 0.0f, pr, T);
        for (int t = r0; t < r1; ++t) reference_causal_softmax_row(p + static_cast<size_t>(t) * T, t, T, scale);
        // out[r0:r1] = P[r0:r1, 0:r1] V[0:r1]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, 1.0f, pr, T, v, ld, 0.0f,
                    o + static_cast<size_t>(r0) * C, C);
      }
    }
  }
}

// Per (b, h): dP = dout_h V^T; dV = P^T dout_h; dS = softmax backward of dP (times the scale);
// dQ = dS K; dK = dS^T Q, row block by row block (block [r0, r1) touches keys [0, r1) only).
inline void reference_attention_backward(float* dqkv,         // (B,T,3C) writes
                                         const float* dout,   // (B,T,C)
                                         const float* qkv,    // (B,T,3C)
                                         const float* probs,  // (B,NH,T,T) from forward
                                         float* scratch,      // (reference_attention_scratch_floats)
                                         const AttentionShape& s) {
  const int T = s.T, C = s.C, hs = s.hs(), ld = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.NH; ++h) {
      const size_t head = static_cast<size_t>(b) * T * ld + h * hs;
      const float* q = qkv + head;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + head;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* p = probs + (static_cast<size_t>(b) * s.NH + h) * T * T;
      const float* d = dout + static_cast<size_t>(b) * T * C + h * hs;
      for (int r0 = 0; r0 < T; r0 += kReferenceRowBlock) {
        const int r1 = std::min(T, r0 + kReferenceRowBlock), rows = r1 - r0;
        const float beta = r0 == 0 ? 0.0f : 1.0f;  // the first block writes keys [0, r1), later ones add
        const float* pr = p + static_cast<size_t>(r0) * T;
        const float* dr = d + static_cast<size_t>(r0) * C;
        float* ds = scratch + static_cast<size_t>(r0) * T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, 1.0f, dr, C, v, ld, 0.0f, ds, T);
        if (r0 == 0 && r1 < T) {  // keys beyond the first block are first reached by blocks that add
          for (int t = r1; t < T; ++t) {
            std::memset(dk + static_cast<size_t>(t) * ld, 0, hs * sizeof(float));
            std::memset(dv + static_cast<size_t>(t) * ld, 0, hs * sizeof(float));
          }
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rows, 1.0f, pr, T, dr, C, beta, dv, ld);
        for (int t = r0; t < r1; ++t) {
          reference_causal_softmax_backward_row(scratch + static_cast<size_t>(t) * T, p + static_cast<size_t>(t) * T,
                                                t, r1, scale);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, 1.0f, ds, T, k, ld, 0.0f,
                    dq + static_cast<size_t>(r0) * ld, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rows, 1.0f, ds, T,
                    q + static_cast<size_t>(r0) * ld, ld, beta, dk, ld);
      }
    }
  }
}

}  // namespace xtrain::test
