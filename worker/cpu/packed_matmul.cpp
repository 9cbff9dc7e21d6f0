#include "worker/cpu/packed_matmul.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace xtrain {
namespace {

constexpr int kRows = kPackedRowGroup;
constexpr int kChunk = 8;  // columns per chunk: one 256-bit vector

float horizontal_sum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// Where element (r, c) of a group's rows lives inside the group (4*cols floats), r < 4.
size_t in_group(int r, int c, int cols) {
  const int chunks = cols / kChunk, tail = cols % kChunk;
  if (c < chunks * kChunk) return static_cast<size_t>(c / kChunk) * kRows * kChunk + r * kChunk + c % kChunk;
  return static_cast<size_t>(chunks) * kRows * kChunk + static_cast<size_t>(r) * tail + (c - chunks * kChunk);
}

// The four rows of one group against NI positions of x: out[i*rows + r] += dot.
template <int NI>
void group_product(float* out, const float* group, const float* x, int rows, int cols) {
  const int chunks = cols / kChunk, tail = cols % kChunk;
  __m256 acc[NI][kRows];
  for (auto& a : acc)
    for (auto& v : a) v = _mm256_setzero_ps();
  for (int c = 0; c < chunks; ++c) {
    __m256 xv[NI];
    for (int i = 0; i < NI; ++i) xv[i] = _mm256_loadu_ps(x + static_cast<size_t>(i) * cols + c * kChunk);
    const float* w = group + static_cast<size_t>(c) * kRows * kChunk;
    for (int r = 0; r < kRows; ++r) {
      const __m256 wv = _mm256_loadu_ps(w + r * kChunk);
      for (int i = 0; i < NI; ++i) acc[i][r] = _mm256_fmadd_ps(wv, xv[i], acc[i][r]);
    }
  }
  const float* w_tail = group + static_cast<size_t>(chunks) * kRows * kChunk;
  for (int i = 0; i < NI; ++i) {
    const float* xi = x + static_cast<size_t>(i) * cols + chunks * kChunk;
    for (int r = 0; r < kRows; ++r) {
      float s = horizontal_sum(acc[i][r]);
      for (int t = 0; t < tail; ++t) s += w_tail[r * tail + t] * xi[t];
      out[static_cast<size_t>(i) * rows + r] += s;
    }
  }
}

// A row left row-major (rows % 4) against one position, chunks in the same order as a group's.
float row_product(const float* w, const float* x, int cols) {
  const int chunks = cols / kChunk;
  __m256 acc = _mm256_setzero_ps();
  for (int c = 0; c < chunks; ++c) acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + c * kChunk), _mm256_loadu_ps(x + c * kChunk), acc);
  float s = horizontal_sum(acc);
  for (int t = chunks * kChunk; t < cols; ++t) s += w[t] * x[t];
  return s;
}

}  // namespace

void pack_rows(float* W, int rows, int cols, std::vector<float>& scratch) {
  const size_t group = static_cast<size_t>(kRows) * cols;
  const int groups = rows / kRows;
  scratch.resize(group);
  for (int g = 0; g < groups; ++g) {
    float* rows_g = W + g * group;
    for (int r = 0; r < kRows; ++r)
      for (int c = 0; c < cols; ++c) scratch[in_group(r, c, cols)] = rows_g[static_cast<size_t>(r) * cols + c];
    std::memcpy(rows_g, scratch.data(), group * sizeof(float));
  }
}

void packed_matmul_accumulate(float* out, const float* W, const float* x, int n, int rows, int cols) {
  packed_matmul_accumulate_rows(out, W, x, n, rows, cols, 0, rows);
}

void packed_matmul_accumulate_rows(float* out, const float* W, const float* x, int n, int rows, int cols, int first,
                                   int last) {
  const size_t group = static_cast<size_t>(kRows) * cols;
  const int groups = rows / kRows;
  for (int g = first / kRows; g < std::min(groups, last / kRows); ++g) {
    const float* w = W + g * group;
    int i = 0;
    for (; i + 2 <= n; i += 2) {
      group_product<2>(out + static_cast<size_t>(i) * rows + g * kRows, w, x + static_cast<size_t>(i) * cols, rows, cols);
    }
    if (i < n) group_product<1>(out + static_cast<size_t>(i) * rows + g * kRows, w, x + static_cast<size_t>(i) * cols, rows, cols);
  }
  for (int r = std::max(first, groups * kRows); r < last; ++r) {
    const float* w = W + static_cast<size_t>(r) * cols;
    for (int i = 0; i < n; ++i) out[static_cast<size_t>(i) * rows + r] += row_product(w, x + static_cast<size_t>(i) * cols, cols);
  }
}

void packed_row(float* dst, const float* W, int r, int rows, int cols) {
  const int groups = rows / kRows;
  if (r >= groups * kRows) {
    std::memcpy(dst, W + static_cast<size_t>(r) * cols, static_cast<size_t>(cols) * sizeof(float));
    return;
  }
  const float* group = W + static_cast<size_t>(r / kRows) * kRows * cols;
  for (int c = 0; c < cols; ++c) dst[c] = group[in_group(r % kRows, c, cols)];
}

}  // namespace xtrain
