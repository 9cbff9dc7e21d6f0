#include "worker/cpu/flash_attention.hpp"

#include <immintrin.h>
#include <math.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "worker/math/bf16.hpp"
#include "worker/math/exp.hpp"
#include "worker/math/flash_attention.hpp"
#include "worker/math/reduce.hpp"

namespace xtrain {

namespace {

// Query rows per block. Rows of a block share each key tile; small blocks waste the least on the
// masked half of the diagonal tiles (16 measured 5-15% faster than 32 or 64 at T = 64..1024).
constexpr int kQueryBlock = 16;
constexpr int kKeyBlock = math::kFlashKeyBlock;

// ---- the tile product ---------------------------------------------------------------------------
// Tiles are at most 16 x 64 x hs, too small for sgemm to pay for its packing and per-call set-up.
// A register tile of 8 rows x 2 vectors of columns (sixteen accumulators; GCC/Clang vector
// extensions) fixes the summation order: C[i][j] starts from 0 or its old value and takes one
// fused multiply-add per k, in order, on any CPU and BLAS. The vectors are 8 floats (AVX2, the
// build's baseline) or, where the CPU has AVX-512, 16 floats: the same fused multiply-adds on
// every element in the same order. The AVX-512 product ends with the AVX2 one's 8-float step, so
// that the last N % 8 columns go through the same scalar loop in both (GCC's scalar loop need
// not round as the vector one does); then both give the same bits, which
// tests/worker/cpu/test_flash_attention.cpp checks. Measured for the whole attention, one thread
// (docs/PERF.md, "CPU attention"): the AVX2 tile was 2x faster than sgemm tiles with OpenBLAS
// 0.3.21's Prescott kernel and 0.8x of them with its AVX-512 kernel; the AVX-512 tile is 1.4-1.8x
// faster than the AVX2 one at every shape there. With AVX2's 16 registers the 8 x 16 tile spills 3
// of its 19 live vectors and still measured 5-15% faster than 4 x 16 and 6 x 16; AVX-512 has 32.

using Vec8 = float __attribute__((vector_size(32)));
using Vec16 = float __attribute__((vector_size(64)));
constexpr int kTileRows = 8;

template <class V>
constexpr int kWidth = sizeof(V) / sizeof(float);

// By reference: a 64-byte vector passed by value would change the calling convention between
// the AVX2 and AVX-512 code (GCC warns), though every use is inlined.
template <class V>
[[gnu::always_inline]] inline void load(V& v, const float* p) {
  std::memcpy(&v, p, sizeof(v));
}
template <class V>
[[gnu::always_inline]] inline void store(float* p, const V& v) {
  std::memcpy(p, &v, sizeof(v));
}

// A (M,K) read as a[i * row + k * col]: a row-major block (col = 1) or the transpose of one.
struct Operand {
  const float* a;
  size_t row, col;
  float at(int i, int k) const { return a[i * row + k * col]; }
};

// C[i0:i0+R, j0:j0+NV*width] (+)= A[i0:i0+R, :] B[:, j0:j0+NV*width], NV vectors of V per row.
template <class V, int R, int NV>
[[gnu::always_inline]] inline void product_tile(float* c, size_t ldc, Operand a, const float* b, size_t ldb, int i0,
                                                int j0, int K, bool accumulate) {
  constexpr int W = kWidth<V>;
  V acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {
      acc[r][v] = V{};
      if (accumulate) load(acc[r][v], c + (i0 + r) * ldc + j0 + v * W);
    }
  for (int k = 0; k < K; ++k) {
    V bk[NV];
    for (int v = 0; v < NV; ++v) load(bk[v], b + k * ldb + j0 + v * W);
    for (int r = 0; r < R; ++r) {
      const float x = a.at(i0 + r, k);
      for (int v = 0; v < NV; ++v) acc[r][v] += x * bk[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) store(c + (i0 + r) * ldc + j0 + v * W, acc[r][v]);
}

// The columns [j0, j0 + NV*width) of C for every row: tiles of kTileRows rows, then single rows.
template <class V, int NV>
[[gnu::always_inline]] inline void product_columns(float* c, size_t ldc, Operand a, const float* b, size_t ldb,
                                                   int j0, int M, int K, bool accumulate) {
  int i = 0;
  for (; i + kTileRows <= M; i += kTileRows) product_tile<V, kTileRows, NV>(c, ldc, a, b, ldb, i, j0, K, accumulate);
  for (; i < M; ++i) product_tile<V, 1, NV>(c, ldc, a, b, ldb, i, j0, K, accumulate);
}

// C (M,N) = A (M,K) B (K,N), or C += A B; B and C row-major with row strides ldb, ldc.
template <class V>
[[gnu::always_inline]] inline void product_with(float* c, size_t ldc, Operand a, const float* b, size_t ldb, int M,
                                                int N, int K, bool accumulate) {
  constexpr int W = kWidth<V>;
  int j = 0;
  for (; j + 2 * W <= N; j += 2 * W) product_columns<V, 2>(c, ldc, a, b, ldb, j, M, K, accumulate);
  for (; j + W <= N; j += W) product_columns<V, 1>(c, ldc, a, b, ldb, j, M, K, accumulate);
  if constexpr (W > 8)
    for (; j + 8 <= N; j += 8) product_columns<Vec8, 1>(c, ldc, a, b, ldb, j, M, K, accumulate);
  for (; j < N; ++j) {  // the last N % 8 columns (head sizes of small test models)
    for (int i = 0; i < M; ++i) {
      float s = accumulate ? c[i * ldc + j] : 0.0f;
      for (int k = 0; k < K; ++k) s += a.at(i, k) * b[k * ldb + j];
      c[i * ldc + j] = s;
    }
  }
}

void product_avx2(float* c, size_t ldc, Operand a, const float* b, size_t ldb, int M, int N, int K, bool accumulate) {
  product_with<Vec8>(c, ldc, a, b, ldb, M, N, K, accumulate);
}

[[gnu::target("avx512f")]] void product_avx512(float* c, size_t ldc, Operand a, const float* b, size_t ldb, int M,
                                               int N, int K, bool accumulate) {
  product_with<Vec16>(c, ldc, a, b, ldb, M, N, K, accumulate);
}

const bool cpu_has_avx512 = __builtin_cpu_supports("avx512f");
bool use_avx512 = cpu_has_avx512;

void product(float* c, size_t ldc, Operand a, const float* b, size_t ldb, int M, int N, int K, bool accumulate) {
  (use_avx512 ? product_avx512 : product_avx2)(c, ldc, a, b, ldb, M, N, K, accumulate);
}

// ---- per-head views ---------------------------------------------------------------------------

// Where one head's rows start: its q in qkv / dqkv (k and v C further on, rows of stride 3C), its
// row in out / dout (stride C), and its first logsumexp (B,NH,T).
struct Head {
  size_t qkv, out, stat;
};

// f(head, q, k, v) for the heads [share.first, share.last) of the B x NH, numbered b * NH + h, in
// order; q, k and v point at the head's row 0 in qkv.
template <class F>
void for_each_head(const AttentionShape& s, const float* qkv, TeamShare share, F&& f) {
  const size_t hs = static_cast<size_t>(s.hs());
  for (int i = share.first; i < share.last; ++i) {
    const int b = i / s.NH, h = i % s.NH;
    const Head head{static_cast<size_t>(b) * s.T * 3 * s.C + h * hs, static_cast<size_t>(b) * s.T * s.C + h * hs,
                    (static_cast<size_t>(b) * s.NH + h) * s.T};
    const float* q = qkv + head.qkv;
    f(head, q, q + s.C, q + 2 * s.C);
  }
}

// dst (hs,T) = src (T,hs; row stride ld)^T: keys and values as the B operand of Q K^T, dO V^T.
// In 8 x 8 blocks transposed in registers (AVX), scalar at the edges. (Element by element, the
// hs stores of one position land a power-of-two stride apart, in the few L1 sets that stride
// reaches: that took a sixth of the attention's time.)
void transpose_head(float* dst, const float* src, size_t ld, int T, int hs) {
  int t0 = 0;
  for (; t0 + 8 <= T; t0 += 8) {
    int d0 = 0;
    for (; d0 + 8 <= hs; d0 += 8) {
      __m256 r[8], u[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + (t0 + i) * ld + d0);
      for (int i = 0; i < 8; i += 2) {
        u[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        u[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
      }
      for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(u[i], u[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(u[i], u[i + 2], 0xEE);
        r[i + 2] = _mm256_shuffle_ps(u[i + 1], u[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(u[i + 1], u[i + 3], 0xEE);
      }
      for (int i = 0; i < 4; ++i) {
        float* lo = dst + static_cast<size_t>(d0 + i) * T + t0;
        _mm256_storeu_ps(lo, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
        _mm256_storeu_ps(lo + static_cast<size_t>(4) * T, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
      }
    }
    for (int d = d0; d < hs; ++d)
      for (int t = t0; t < t0 + 8; ++t) dst[static_cast<size_t>(d) * T + t] = src[t * ld + d];
  }
  for (int t = t0; t < T; ++t)
    for (int d = 0; d < hs; ++d) dst[static_cast<size_t>(d) * T + t] = src[t * ld + d];
}

inline void round_row(float* x, int n, bool round_bf16) {
  if (!round_bf16) return;
  for (int j = 0; j < n; ++j) x[j] = math::round_to_bf16(x[j]);
}

// The keys of block [c0, c0 + keys) that query i may see: [c0, c0 + visible_keys).
inline int visible_keys(int i, int c0, int keys) { return std::clamp(i - c0 + 1, 0, keys); }

void check_shape(const AttentionShape& s) {
  if (s.B < 1 || s.T < 1 || s.NH < 1 || s.C < s.NH || s.C % s.NH != 0) {
    throw std::invalid_argument("flash attention: bad shape B " + std::to_string(s.B) + " T " + std::to_string(s.T) +
                                " C " + std::to_string(s.C) + " NH " + std::to_string(s.NH) +
                                " (need B, T, NH >= 1 and C a positive multiple of NH)");
  }
}

// Scratch of the forward pass, carved from the caller's buffer.
struct ForwardScratch {
  float* kt;    // (hs,T) the head's keys, transposed
  float* p;     // (kQueryBlock, kKeyBlock) scores, then probabilities
  float* acc;   // (kQueryBlock, hs) unnormalised output
  float* m;     // (kQueryBlock) running max
  float* l;     // (kQueryBlock) running sum
  static size_t floats(int T, int hs) {
    return static_cast<size_t>(hs) * T + kQueryBlock * (kKeyBlock + static_cast<size_t>(hs) + 2);
  }
  ForwardScratch(float* s, int T, int hs)
      : kt(s), p(kt + static_cast<size_t>(hs) * T), acc(p + kQueryBlock * kKeyBlock),
        m(acc + static_cast<size_t>(kQueryBlock) * hs), l(m + kQueryBlock) {}
};

struct BackwardScratch {
  float* kt;  // (hs,T) keys, transposed
  float* vt;  // (hs,T) values, transposed
  float* dk;  // (T,hs) key gradient, unscaled, summed over query blocks
  float* dv;  // (T,hs) value gradient
  float* p;   // (kQueryBlock, kKeyBlock) probabilities
  float* ds;  // (kQueryBlock, kKeyBlock) dP, then dS
  float* dq;  // (kQueryBlock, hs) query gradient, unscaled
  float* D;   // (kQueryBlock) dO . O per row
  static size_t floats(int T, int hs) {
    return 4 * static_cast<size_t>(hs) * T + kQueryBlock * (2 * kKeyBlock + static_cast<size_t>(hs) + 1);
  }
  BackwardScratch(float* s, int T, int hs) {
    const size_t head = static_cast<size_t>(hs) * T;
    kt = s;
    vt = kt + head;
    dk = vt + head;
    dv = dk + head;
    p = dv + head;
    ds = p + kQueryBlock * kKeyBlock;
    dq = ds + kQueryBlock * kKeyBlock;
    D = dq + static_cast<size_t>(kQueryBlock) * hs;
  }
};

// One member's scratch, rounded up to whole cache lines so that no two members write one line.
size_t member_scratch_floats(const AttentionShape& s) {
  const size_t floats = std::max(ForwardScratch::floats(s.T, s.hs()), BackwardScratch::floats(s.T, s.hs()));
  return (floats + kCacheLineFloats - 1) / kCacheLineFloats * kCacheLineFloats;
}

// fn(w, head, q, k, v) for every head, the heads split over the team's members in contiguous
// shares, each member with its own scratch W carved from the caller's buffer. The heads are
// independent (each writes only its own channels of the outputs), so the results are the same
// bits for any number of members.
template <class W, class F>
void for_heads_on_team(ThreadTeam& team, const AttentionShape& s, const float* qkv, float* scratch, F&& fn) {
  const size_t per_member = member_scratch_floats(s);
  team.run([&](int member, int members) {
    const W w(scratch + per_member * member, s.T, s.hs());
    for_each_head(s, qkv, team_share(s.B * s.NH, member, members),
                  [&](const Head& head, const float* q, const float* k, const float* v) { fn(w, head, q, k, v); });
  });
}

}  // namespace

bool flash_attention_use_avx512(bool on) {
  use_avx512 = on && cpu_has_avx512;
  return use_avx512;
}

size_t flash_attention_saved_floats(const AttentionShape& s) { return static_cast<size_t>(s.B) * s.NH * s.T; }

size_t flash_attention_scratch_floats(const AttentionShape& s, int members) {
  if (members < 1) throw std::invalid_argument("flash attention: scratch for " + std::to_string(members) + " members");
  return member_scratch_floats(s) * static_cast<size_t>(members);
}

void flash_attention_forward(float* out, float* lse, const float* qkv, float* scratch, const AttentionShape& s,
                             bool round_bf16, ThreadTeam& team) {
  check_shape(s);
  const int T = s.T, hs = s.hs();
  const size_t ld = 3 * static_cast<size_t>(s.C);
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  for_heads_on_team<ForwardScratch>(team, s, qkv, scratch, [&](const ForwardScratch& w, const Head& head,
                                                               const float* q, const float* k, const float* v) {
    float* o = out + head.out;
    float* row_lse = lse + head.stat;
    transpose_head(w.kt, k, ld, T, hs);
    for (int r0 = 0; r0 < T; r0 += kQueryBlock) {
      const int rows = std::min(kQueryBlock, T - r0);
      std::fill(w.m, w.m + rows, -INFINITY);
      std::fill(w.l, w.l + rows, 0.0f);
      std::fill(w.acc, w.acc + static_cast<size_t>(rows) * hs, 0.0f);
      // Key blocks that hold a key <= the last query of the block; later ones are all masked.
      for (int c0 = 0; c0 < r0 + rows; c0 += kKeyBlock) {
        const int keys = std::min(kKeyBlock, r0 + rows - c0);
        // S (rows,keys) = Q K^T
        product(w.p, kKeyBlock, {q + r0 * ld, ld, 1}, w.kt + c0, T, rows, keys, hs, false);
        for (int r = 0; r < rows; ++r) {
          float* p = w.p + r * kKeyBlock;
          const int n = visible_keys(r0 + r, c0, keys);
          std::fill(p + n, p + keys, 0.0f);
          if (n == 0) continue;  // nothing visible: m, l and the accumulator stay as they are
          for (int j = 0; j < n; ++j) p[j] *= scale;
          const float m_new = std::max(w.m[r], math::row_max(p, n));
          const float alpha = w.m[r] == -INFINITY ? 0.0f : math::exp_fast(w.m[r] - m_new);
          for (int j = 0; j < n; ++j) p[j] = math::exp_fast(p[j] - m_new);
          w.l[r] = w.l[r] * alpha + math::row_sum(p, n);
          w.m[r] = m_new;
          round_row(p, n, round_bf16);
          float* acc = w.acc + static_cast<size_t>(r) * hs;
          for (int d = 0; d < hs; ++d) acc[d] *= alpha;
        }
        // acc (rows,hs) += P (rows,keys) V (keys,hs)
        product(w.acc, hs, {w.p, kKeyBlock, 1}, v + c0 * ld, ld, rows, hs, keys, true);
      }
      for (int r = 0; r < rows; ++r) {
        const float inv = 1.0f / w.l[r];
        const float* acc = w.acc + static_cast<size_t>(r) * hs;
        float* orow = o + (r0 + r) * static_cast<size_t>(s.C);
        for (int d = 0; d < hs; ++d) orow[d] = acc[d] * inv;
        round_row(orow, hs, round_bf16);
        row_lse[r0 + r] = w.m[r] + logf(w.l[r]);
      }
    }
  });
}

void flash_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                              float* scratch, const AttentionShape& s, bool round_bf16, ThreadTeam& team) {
  check_shape(s);
  const int T = s.T, hs = s.hs();
  const size_t ld = 3 * static_cast<size_t>(s.C);
  const size_t ldo = s.C;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  for_heads_on_team<BackwardScratch>(team, s, qkv, scratch, [&](const BackwardScratch& w, const Head& head,
                                                                const float* q, const float* k, const float* v) {
    const float* o = out + head.out;
    const float* dO = dout + head.out;
    float* dq_out = dqkv + head.qkv;
    const float* row_lse = lse + head.stat;
    transpose_head(w.kt, k, ld, T, hs);
    transpose_head(w.vt, v, ld, T, hs);
    std::fill(w.dk, w.dk + static_cast<size_t>(T) * hs, 0.0f);
    std::fill(w.dv, w.dv + static_cast<size_t>(T) * hs, 0.0f);
    for (int r0 = 0; r0 < T; r0 += kQueryBlock) {
      const int rows = std::min(kQueryBlock, T - r0);
      for (int r = 0; r < rows; ++r) w.D[r] = math::row_dot(dO + (r0 + r) * ldo, o + (r0 + r) * ldo, hs);
      std::fill(w.dq, w.dq + static_cast<size_t>(rows) * hs, 0.0f);
      for (int c0 = 0; c0 < r0 + rows; c0 += kKeyBlock) {
        const int keys = std::min(kKeyBlock, r0 + rows - c0);
        // S (rows,keys) = Q K^T;  dP (rows,keys) = dO V^T
        product(w.p, kKeyBlock, {q + r0 * ld, ld, 1}, w.kt + c0, T, rows, keys, hs, false);
        product(w.ds, kKeyBlock, {dO + r0 * ldo, ldo, 1}, w.vt + c0, T, rows, keys, hs, false);
        for (int r = 0; r < rows; ++r) {
          float* p = w.p + r * kKeyBlock;
          float* ds = w.ds + r * kKeyBlock;
          const int n = visible_keys(r0 + r, c0, keys);
          const float lse_r = row_lse[r0 + r];
          for (int j = 0; j < n; ++j) {
            p[j] = math::exp_fast(p[j] * scale - lse_r);
            ds[j] = p[j] * (ds[j] - w.D[r]);
          }
          std::fill(p + n, p + keys, 0.0f);
          std::fill(ds + n, ds + keys, 0.0f);
          round_row(p, n, round_bf16);
          round_row(ds, n, round_bf16);
        }
        // dV (keys,hs) += P^T dO;  dK (keys,hs) += dS^T Q;  dQ (rows,hs) += dS K
        product(w.dv + static_cast<size_t>(c0) * hs, hs, {w.p, 1, kKeyBlock}, dO + r0 * ldo, ldo, keys, hs, rows,
                true);
        product(w.dk + static_cast<size_t>(c0) * hs, hs, {w.ds, 1, kKeyBlock}, q + r0 * ld, ld, keys, hs, rows,
                true);
        product(w.dq, hs, {w.ds, kKeyBlock, 1}, k + c0 * ld, ld, rows, hs, keys, true);
      }
      for (int r = 0; r < rows; ++r) {
        float* dst = dq_out + (r0 + r) * ld;
        const float* src = w.dq + static_cast<size_t>(r) * hs;
        for (int d = 0; d < hs; ++d) dst[d] = src[d] * scale;
        round_row(dst, hs, round_bf16);
      }
    }
    for (int t = 0; t < T; ++t) {
      float* dk_out = dq_out + t * ld + s.C;
      float* dv_out = dk_out + s.C;
      const float* dk = w.dk + static_cast<size_t>(t) * hs;
      const float* dv = w.dv + static_cast<size_t>(t) * hs;
      for (int d = 0; d < hs; ++d) {
        dk_out[d] = dk[d] * scale;
        dv_out[d] = dv[d];
      }
      round_row(dk_out, hs, round_bf16);
      round_row(dv_out, hs, round_bf16);
    }
  });
}

}  // namespace xtrain
