#include "worker/cpu/gemv.hpp"

#include <immintrin.h>

#include <cstddef>

namespace xtrain {
namespace {

float horizontal_sum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

}  // namespace

// One row at a time, so the weights are read as one sequential stream (the hardware prefetcher's
// best case: four rows interleaved, which loads x once per four rows, ran at 60-70% of this speed
// here), with eight independent FMA chains over 64 columns at a time.
void gemv_accumulate(float* out, const float* W, const float* x, int rows, int cols) {
  for (int i = 0; i < rows; ++i) {
    const float* w = W + static_cast<size_t>(i) * cols;
    __m256 acc[8];
    for (auto& a : acc) a = _mm256_setzero_ps();
    int j = 0;
    for (; j + 64 <= cols; j += 64) {
      for (int k = 0; k < 8; ++k) {
        acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 8 * k), _mm256_loadu_ps(x + j + 8 * k), acc[k]);
      }
    }
    for (; j + 8 <= cols; j += 8) acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(x + j), acc[0]);
    const __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])),
                                     _mm256_add_ps(_mm256_add_ps(acc[4], acc[5]), _mm256_add_ps(acc[6], acc[7])));
    float s = horizontal_sum(sum);
    for (; j < cols; ++j) s += w[j] * x[j];
    out[i] += s;
  }
}

}  // namespace xtrain
