#include "worker/cpu/cpu_backend.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "worker/cpu/flash_attention.hpp"
#include "worker/cpu/huge_page_buffer.hpp"
#include "worker/math/bf16.hpp"
#include "worker/math/gelu.hpp"
#include "worker/math/layernorm.hpp"
#include "worker/math/softmax.hpp"

namespace xtrain {

namespace {

constexpr size_t kAlignment = 64;  // a cache line, and enough for any vector load

// The fewest elements a loop gives one thread (PyTorch's grain for its parallel loops): below it,
// waking a helper (tens of microseconds) would cost about what the loop takes.
constexpr size_t kGrain = 32768;

// Buffers of a huge page or more (parameters, gradients, moments, most activations) in huge pages:
// a step of GPT-2 124M's shape ran 5-18% faster, of a 6-layer 384-wide model 4-10% (PERF.md, "CPU
// worker"); each such buffer grows to whole 2 MiB pages.
constexpr size_t kHugePageFrom = size_t{2} << 20;

void* alloc_zeroed(size_t bytes) {
  if (bytes >= kHugePageFrom) return alloc_huge_pages_zeroed(bytes);
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return p;
}

}  // namespace

int cpu_backend_threads() { return std::max(openblas_get_num_threads(), 1); }

CpuBackend::CpuBackend(Precision precision) : precision_(precision), team_(cpu_backend_threads()) {
  if (precision == Precision::tf32) {
    throw std::invalid_argument("CpuBackend: tf32 is a GPU tensor-core mode; the CPU computes in fp32 or emulates bf16");
  }
}

void CpuBackend::for_floats(size_t n, const std::function<void(size_t, size_t)>& fn) {
  team_.split(n, kGrain, kCacheLineFloats, fn);
}

void CpuBackend::for_rows(int N, int C, const std::function<void(size_t, size_t)>& fn) {
  team_.split(static_cast<size_t>(N), std::max<size_t>(kGrain / std::max(C, 1), 1), 1, fn);
}

void CpuBackend::for_columns(int N, int C, const std::function<void(size_t, size_t)>& fn) {
  team_.split(static_cast<size_t>(C), std::max<size_t>(kGrain / std::max(N, 1), 1), kCacheLineFloats, fn);
}

void CpuBackend::store_part(float* x, size_t first, size_t last) const {
  if (precision_ != Precision::bf16) return;
  for (size_t i = first; i < last; ++i) x[i] = math::round_to_bf16(x[i]);
}

void CpuBackend::store(float* x, size_t n) {
  if (precision_ != Precision::bf16) return;
  for_floats(n, [&](size_t first, size_t last) { store_part(x, first, last); });
}

float* CpuBackend::alloc_floats(size_t n) { return static_cast<float*>(alloc_zeroed(n * sizeof(float))); }
int32_t* CpuBackend::alloc_ints(size_t n) { return static_cast<int32_t*>(alloc_zeroed(n * sizeof(int32_t))); }
ActPtr CpuBackend::alloc_acts(size_t n) { return alloc_floats(n); }
void CpuBackend::free(void* p) noexcept { std::free(p); }

void CpuBackend::upload(float* dst, const float* host_src, size_t n) { std::memcpy(dst, host_src, n * sizeof(float)); }
void CpuBackend::upload(int32_t* dst, const int32_t* host_src, size_t n) {
  std::memcpy(dst, host_src, n * sizeof(int32_t));
}
void CpuBackend::download(float* host_dst, const float* src, size_t n) {
  std::memcpy(host_dst, src, n * sizeof(float));
}
void CpuBackend::download(int32_t* host_dst, const int32_t* src, size_t n) {
  std::memcpy(host_dst, src, n * sizeof(int32_t));
}
void CpuBackend::upload(ActPtr dst, const float* host_src, size_t n) { convert(dst, host_src, n); }
void CpuBackend::download(float* host_dst, ConstActPtr src, size_t n) { download(host_dst, src.as<float>(), n); }
const void* CpuBackend::download_view(ConstActPtr src, size_t) { return src.as<float>(); }
void CpuBackend::fill_zero(float* p, size_t n) { std::memset(p, 0, n * sizeof(float)); }
void CpuBackend::fill_zero(ActPtr p, size_t n) { fill_zero(p.as<float>(), n); }
void CpuBackend::convert(ActPtr dst, const float* src, size_t n) {
  float* d = dst.as<float>();
  if (d != src) std::memcpy(d, src, n * sizeof(float));
  store(d, n);
}
void CpuBackend::copy(float* dst, const float* src, size_t n) { std::memcpy(dst, src, n * sizeof(float)); }
void CpuBackend::copy(ActPtr dst, ConstActPtr src, size_t n) { copy(dst.as<float>(), src.as<float>(), n); }

void CpuBackend::embedding_forward(ActPtr out, const int32_t* tokens, ConstActPtr wte, ConstActPtr wpe, int B, int T,
                                   int C) {
  const int32_t first = 0;
  embedding_forward_at(out, tokens, wte, wpe, &first, B, T, C);
}

void CpuBackend::embedding_forward_at(ActPtr out_act, const int32_t* tokens, ConstActPtr wte_act, ConstActPtr wpe_act,
                                      const int32_t* first, int B, int T, int C) {
  float* out = out_act.as<float>();
  const float* wte = wte_act.as<float>();
  const float* wpe = wpe_act.as<float>() + static_cast<size_t>(*first) * C;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      float* o = out + (static_cast<size_t>(b) * T + t) * C;
      const float* w = wte + static_cast<size_t>(tokens[b * T + t]) * C;
      const float* p = wpe + static_cast<size_t>(t) * C;
      for (int i = 0; i < C; ++i) o[i] = w[i] + p[i];
    }
  }
  store(out, static_cast<size_t>(B) * T * C);
}

void CpuBackend::embedding_backward(float* dwte, float* dwpe, ConstActPtr dout_act, const int32_t* tokens, int B,
                                    int T, int C) {
  const float* dout = dout_act.as<float>();
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const float* d = dout + (static_cast<size_t>(b) * T + t) * C;
      float* dw = dwte + static_cast<size_t>(tokens[b * T + t]) * C;
      float* dp = dwpe + static_cast<size_t>(t) * C;
      for (int i = 0; i < C; ++i) {
        dw[i] += d[i];
        dp[i] += d[i];
      }
    }
  }
}

void CpuBackend::layernorm_forward(ActPtr out_act, float* mean, float* rstd, ConstActPtr inp_act,
                                   ConstActPtr weight_act, ConstActPtr bias_act, int N, int C) {
  float* out = out_act.as<float>();
  const float* inp = inp_act.as<float>();
  const float* weight = weight_act.as<float>();
  const float* bias = bias_act.as<float>();
  for_rows(N, C, [&](size_t first, size_t last) {
    for (size_t n = first; n < last; ++n) {
      const float* x = inp + n * C;
      const math::RowStats s = math::layernorm_row_stats(x, C);
      math::layernorm_row_forward(out + n * C, x, weight, bias, s, C);
      mean[n] = s.mean;
      rstd[n] = s.rstd;
    }
    store_part(out, first * C, last * C);
  });
}

void CpuBackend::layernorm_backward(ActPtr dinp_act, float* dweight, float* dbias, ConstActPtr dout_act,
                                    ConstActPtr inp_act, ConstActPtr weight_act, const float* mean, const float* rstd,
                                    int N, int C) {
  float* dinp = dinp_act.as<float>();
  const float* dout = dout_act.as<float>();
  const float* inp = inp_act.as<float>();
  const float* weight = weight_act.as<float>();
  // By rows the input gradient (each row's two sums are the row's own), then by columns the
  // weight and bias gradients, each column summed over the rows in order: the same bits on any
  // number of threads.
  for_rows(N, C, [&](size_t first, size_t last) {
    for (size_t n = first; n < last; ++n) {
      const size_t row = n * C;
      math::layernorm_row_backward_input(dinp + row, dout + row, inp + row, weight, {mean[n], rstd[n]}, C);
    }
    store_part(dinp, first * C, last * C);
  });
  for_columns(N, C, [&](size_t first, size_t last) {
    for (int n = 0; n < N; ++n) {
      const size_t row = static_cast<size_t>(n) * C;
      math::layernorm_row_backward_params(dweight, dbias, dout + row, inp + row, {mean[n], rstd[n]}, first, last);
    }
  });
}

// x = inp @ weight^T + bias into `pre` (the GELU's input) or straight into `out`. With a GELU, out =
// gelu(x) is taken from the fp32 x before either is rounded to bf16, the rounding points of the CUDA
// backend's GELU_AUX_BIAS epilogue (one rounding each from the same x; the unfused gelu_forward on
// the stored pre rounds x first).
void CpuBackend::product_forward(float* out, float* pre, const float* inp, const float* weight, const float* bias,
                                 int N, int C, int OC) {
  float* x = pre != nullptr ? pre : out;  // (N,OC)
  float beta = 0.0f;
  if (bias != nullptr) {
    for (int n = 0; n < N; ++n) std::memcpy(x + static_cast<size_t>(n) * OC, bias, OC * sizeof(float));
    beta = 1.0f;
  }
  // x (N,OC) = inp (N,C) @ weight^T (C,OC) [+ x]. One row (a decoder's step) is a matrix-vector
  // product: OpenBLAS's sgemm would pack the whole weight for it, reading it twice and writing it
  // once (GPT-2 124M's step 64 ms a token on one core against 19 for generate's own decoder).
  if (N == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, C, 1.0f, weight, C, inp, 1, beta, x, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, beta, x, OC);
  }
  const size_t n = static_cast<size_t>(N) * OC;
  if (pre == nullptr) {
    store(out, n);
    return;
  }
  for_floats(n, [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) out[i] = math::gelu(pre[i]);
    store_part(pre, first, last);
    store_part(out, first, last);
  });
}

void CpuBackend::matmul_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight, ConstActPtr bias, int N, int C,
                                int OC) {
  product_forward(out.as<float>(), nullptr, inp.as<float>(), weight.as<float>(), bias.as<float>(), N, C, OC);
}

void CpuBackend::matmul_gelu_forward(ActPtr out, ActPtr pre, ConstActPtr inp, ConstActPtr weight, ConstActPtr bias,
                                     int N, int C, int OC) {
  check_gelu_width("matmul_gelu_forward", "OC", OC);
  product_forward(out.as<float>(), pre.as<float>(), inp.as<float>(), weight.as<float>(), bias.as<float>(), N, C,
                  OC);
}

// With pre_gelu, dinp's fp32 product is multiplied by gelu'(pre_gelu) before its one bf16 rounding,
// as the CUDA backend's DGELU epilogue does (the unfused gelu_backward rounds the product first).
void CpuBackend::product_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                  const float* weight, const float* pre_gelu, int N, int C, int OC,
                                  float dout_scale) {
  // dinp (N,C) = s * dout (N,OC) @ weight (OC,C)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, dout_scale, dout, OC, weight, C, 0.0f, dinp, C);
  const size_t n = static_cast<size_t>(N) * C;
  if (pre_gelu == nullptr) {
    store(dinp, n);
  } else {
    for_floats(n, [&](size_t first, size_t last) {
      for (size_t i = first; i < last; ++i) dinp[i] *= math::gelu_grad(pre_gelu[i]);
      store_part(dinp, first, last);
    });
  }
  // dweight (OC,C) += s * dout^T (OC,N) @ inp (N,C)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, dout_scale, dout, OC, inp, C, 1.0f, dweight, C);
  if (dbias != nullptr) {  // by columns, each summed over the rows in order
    for_columns(N, OC, [&](size_t first, size_t last) {
      for (int r = 0; r < N; ++r) {
        const float* d = dout + static_cast<size_t>(r) * OC;
        for (size_t o = first; o < last; ++o) dbias[o] += dout_scale * d[o];
      }
    });
  }
}

void CpuBackend::matmul_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                                 ConstActPtr weight, int N, int C, int OC, float dout_scale) {
  product_backward(dinp.as<float>(), dweight, dbias, dout.as<float>(), inp.as<float>(), weight.as<float>(), nullptr,
                   N, C, OC, dout_scale);
}

void CpuBackend::matmul_gelu_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                                      ConstActPtr weight, ConstActPtr pre_gelu, int N, int C, int OC,
                                      float dout_scale) {
  check_gelu_width("matmul_gelu_backward", "C", C);
  product_backward(dinp.as<float>(), dweight, dbias, dout.as<float>(), inp.as<float>(), weight.as<float>(),
                   pre_gelu.as<float>(), N, C, OC, dout_scale);
}

size_t CpuBackend::attention_saved_floats(int B, int T, int C, int NH) const {
  return flash_attention_saved_floats({B, T, C, NH});  // the logsumexp of each row
}

size_t CpuBackend::attention_scratch_floats(int B, int T, int C, int NH) const {
  return flash_attention_scratch_floats({B, T, C, NH}, team_.members());
}

// In bf16 the flash attention rounds at its own points (p, ds, and every output it stores).
void CpuBackend::attention_forward(ActPtr out, float* saved, ConstActPtr qkv, float* scratch, int B, int T, int C,
                                   int NH) {
  flash_attention_forward(out.as<float>(), saved, qkv.as<float>(), scratch, {B, T, C, NH},
                          precision_ == Precision::bf16, team_);
}

void CpuBackend::attention_backward(ActPtr dqkv, ConstActPtr dout, ConstActPtr qkv, ConstActPtr out,
                                    const float* saved, float* scratch, int B, int T, int C, int NH) {
  flash_attention_backward(dqkv.as<float>(), dout.as<float>(), qkv.as<float>(), out.as<float>(), saved, scratch,
                           {B, T, C, NH}, precision_ == Precision::bf16, team_);
}

// Per sequence and head, in the order the interface states: the scores, their max, p and its sum,
// then the weighted sum of the values, each summed in ascending order.
void CpuBackend::attention_step(ActPtr out_act, ActPtr cache_act, ConstActPtr qkv_act, const int32_t* position, int B,
                                int T, int C, int NH) {
  const int P = *position;
  if (P < 0 || P >= T) {
    throw std::out_of_range("attention_step: position " + std::to_string(P) + " outside the cache's [0, " +
                            std::to_string(T) + ")");
  }
  float* out = out_act.as<float>();
  float* cache = cache_act.as<float>();
  const float* qkv = qkv_act.as<float>();
  const int hs = C / NH;
  const size_t row = 3 * static_cast<size_t>(C);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  if (step_scores_.size() < static_cast<size_t>(T)) step_scores_.resize(static_cast<size_t>(T));
  float* p = step_scores_.data();
  for (int b = 0; b < B; ++b) {
    float* seq = cache + static_cast<size_t>(b) * T * row;
    std::memcpy(seq + P * row, qkv + b * row, row * sizeof(float));
    for (int h = 0; h < NH; ++h) {
      const float* q = seq + P * row + h * hs;
      float top = -INFINITY;
      for (int j = 0; j <= P; ++j) {
        const float* k = seq + j * row + C + h * hs;
        float x = 0.0f;
        for (int c = 0; c < hs; ++c) x += q[c] * k[c];
        p[j] = x * scale;
        top = std::max(top, p[j]);
      }
      float sum = 0.0f;
      for (int j = 0; j <= P; ++j) {
        p[j] = std::exp(p[j] - top);
        sum += p[j];
      }
      float* y = out + static_cast<size_t>(b) * C + h * hs;
      std::fill(y, y + hs, 0.0f);
      for (int j = 0; j <= P; ++j) {
        const float* v = seq + j * row + 2 * C + h * hs;
        for (int c = 0; c < hs; ++c) y[c] += p[j] * v[c];
      }
      for (int c = 0; c < hs; ++c) y[c] /= sum;
    }
  }
  store(out, static_cast<size_t>(B) * C);
}

void CpuBackend::gelu_forward(ActPtr out_act, ConstActPtr inp_act, size_t n) {
  float* out = out_act.as<float>();
  const float* inp = inp_act.as<float>();
  for_floats(n, [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) out[i] = math::gelu(inp[i]);
    store_part(out, first, last);
  });
}

void CpuBackend::gelu_backward(ActPtr dinp_act, ConstActPtr inp_act, ConstActPtr dout_act, size_t n) {
  float* dinp = dinp_act.as<float>();
  const float* inp = inp_act.as<float>();
  const float* dout = dout_act.as<float>();
  for_floats(n, [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) dinp[i] = math::gelu_grad(inp[i]) * dout[i];
    store_part(dinp, first, last);
  });
}

void CpuBackend::residual_forward(ActPtr out_act, ConstActPtr a_act, ConstActPtr b_act, size_t n) {
  float* out = out_act.as<float>();
  const float* a = a_act.as<float>();
  const float* b = b_act.as<float>();
  for_floats(n, [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) out[i] = a[i] + b[i];
    store_part(out, first, last);
  });
}

void CpuBackend::softmax_cross_entropy(ActPtr logits_act, float* losses, const int32_t* targets, float dloss, int N,
                                       int V, int Vp) {
  float* logits = logits_act.as<float>();
  for_rows(N, Vp, [&](size_t first, size_t last) {
    for (size_t n = first; n < last; ++n) {
      losses[n] += math::softmax_cross_entropy_row(logits + n * Vp, targets[n], dloss, V, Vp);
    }
    store_part(logits, first * Vp, last * Vp);
  });
}

void CpuBackend::adamw_update(float* params, ActPtr weights, const float* grads, float* m, float* v, size_t n,
                              const AdamWHyper& h) {
  float* w = weights.as<float>();
  for_floats(n, [&](size_t first, size_t last) {
    if (w == nullptr) {
      for (size_t i = first; i < last; ++i) params[i] = math::adamw_element(params[i], grads[i], m[i], v[i], h);
      return;
    }
    for (size_t i = first; i < last; ++i) {
      params[i] = math::adamw_element(params[i], grads[i], m[i], v[i], h);
      w[i] = precision_ == Precision::bf16 ? math::round_to_bf16(params[i]) : params[i];
    }
  });
}

double CpuBackend::sum_squares(const float* x, size_t n) {
  // Eight interleaved double partial sums (lane i % 8), combined in a fixed order: deterministic
  // for a given n, and a pattern GCC turns into vector code without reassociating anything.
  constexpr size_t kLanes = 8;
  double lane[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(x[i + j]) * x[i + j];
  }
  for (; i < n; ++i) lane[i % kLanes] += static_cast<double>(x[i]) * x[i];
  double sum = 0.0;
  for (double s : lane) sum += s;
  return sum;
}

void CpuBackend::scale(float* x, float s, size_t n) {
  for_floats(n, [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) x[i] *= s;
  });
}

}  // namespace xtrain
