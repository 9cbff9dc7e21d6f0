// Shared by the op tests: backend memory holding host vectors, double-precision references of
// every operation's forward (plain loops), and central differences in double for their
// gradients. f(x) = sum_i w_i y_i(x) differentiated with h = 1e-5: truncation error ~ h^2 ~ 1e-10
// and rounding ~ 1e-16 / h ~ 1e-11, far below float precision.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "worker/model/backend.hpp"

namespace xtrain::test {

using Vec = std::vector<double>;

constexpr double kFdStep = 1e-5;
// Bounds on rel_error (CHECK_REL) of float ops against these double references. Each float
// rounding adds at most 2^-24 (6e-8) relative error, and the ops' sums run over a few dozen terms at
// the tests' sizes, so a correct forward stays well below 2e-6, while a wrong index or a missing
// term (errors of 1e-2 and up) fails. Gradients go through one more product or reduction, and
// their references are central differences (error ~1e-10 at kFdStep): 1e-5.
constexpr double kForwardTol = 2e-6;
constexpr double kGradTol = 1e-5;

inline Vec random_vec(size_t n, std::mt19937& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> u(lo, hi);
  Vec v(n);
  for (double& x : v) x = u(rng);
  return v;
}

// Backend memory holding a float copy of a double vector.
class DeviceVec {
 public:
  DeviceVec(Backend& k, const Vec& host) : k_(k), n_(host.size()) {
    p_ = k_.alloc_floats(n_);
    std::vector<float> f(host.begin(), host.end());
    k_.upload(p_, f.data(), n_);
  }
  DeviceVec(Backend& k, size_t n) : DeviceVec(k, Vec(n, 0.0)) {}
  ~DeviceVec() { k_.free(p_); }
  DeviceVec(const DeviceVec&) = delete;
  float* get() { return p_; }
  Vec read() const {
    std::vector<float> f(n_);
    k_.download(f.data(), p_, n_);
    return Vec(f.begin(), f.end());
  }

 private:
  Backend& k_;
  size_t n_;
  float* p_;
};

class DeviceInts {
 public:
  DeviceInts(Backend& k, const std::vector<int32_t>& host) : k_(k) {
    p_ = k_.alloc_ints(host.size());
    k_.upload(p_, host.data(), host.size());
  }
  ~DeviceInts() { k_.free(p_); }
  DeviceInts(const DeviceInts&) = delete;
  const int32_t* get() const { return p_; }

 private:
  Backend& k_;
  int32_t* p_;
};

inline double rel_error(const Vec& got, const Vec& want) {
  REQUIRE(got.size() == want.size());
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

#define CHECK_REL(got, want, tol)                          \
  do {                                                     \
    const double err_ = rel_error((got), (want));          \
    INFO(#got << " vs " << #want << ": rel error " << err_); \
    CHECK(err_ < (tol));                                   \
  } while (0)

inline Vec add(const Vec& a, const Vec& b) {
  Vec r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] + b[i];
  return r;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central-difference gradient of f at x, in double.
inline Vec fd_grad(const std::function<double(const Vec&)>& f, Vec x) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + kFdStep;
    const double fp = f(x);
    x[i] = x0 - kFdStep;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2.0 * kFdStep);
  }
  return g;
}

// ---- double-precision references ---------------------------------------------------------------

inline Vec ref_embedding(const std::vector<int32_t>& tok, const Vec& wte, const Vec& wpe, int B, int T, int C) {
  Vec y(static_cast<size_t>(B) * T * C);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c)
        y[(b * T + t) * C + c] = wte[tok[b * T + t] * C + c] + wpe[t * C + c];
  return y;
}

inline Vec ref_layernorm(const Vec& x, const Vec& w, const Vec& bias, int N, int C) {
  Vec y(x.size());
  for (int n = 0; n < N; ++n) {
    double mean = 0.0, var = 0.0;
    for (int c = 0; c < C; ++c) mean += x[n * C + c];
    mean /= C;
    for (int c = 0; c < C; ++c) var += (x[n * C + c] - mean) * (x[n * C + c] - mean);
    var /= C;
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (int c = 0; c < C; ++c) y[n * C + c] = (x[n * C + c] - mean) * rstd * w[c] + bias[c];
  }
  return y;
}

inline Vec ref_matmul(const Vec& x, const Vec& w, const Vec* bias, int N, int C, int OC) {
  Vec y(static_cast<size_t>(N) * OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = bias ? (*bias)[o] : 0.0;
      for (int c = 0; c < C; ++c) s += x[n * C + c] * w[o * C + c];
      y[n * OC + o] = s;
    }
  return y;
}

inline Vec ref_attention(const Vec& qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  Vec y(static_cast<size_t>(B) * T * C);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const double* q = &qkv[(b * T + t) * 3 * C + h * hs];
        Vec s(t + 1);
        double mx = -1e300;
        for (int j = 0; j <= t; ++j) {
          const double* k = &qkv[(b * T + j) * 3 * C + C + h * hs];
          double d = 0.0;
          for (int i = 0; i < hs; ++i) d += q[i] * k[i];
          s[j] = d * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        for (int j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int i = 0; i < hs; ++i) {
          double o = 0.0;
          for (int j = 0; j <= t; ++j) o += s[j] / sum * qkv[(b * T + j) * 3 * C + 2 * C + h * hs + i];
          y[(b * T + t) * C + h * hs + i] = o;
        }
      }
  return y;
}

inline double ref_gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

inline Vec ref_losses(const Vec& logits, const std::vector<int32_t>& targets, int N, int V, int Vp) {
  Vec loss(N);
  for (int n = 0; n < N; ++n) {
    const double* l = &logits[static_cast<size_t>(n) * Vp];
    double mx = -1e300;
    for (int j = 0; j < V; ++j) mx = std::max(mx, l[j]);
    double sum = 0.0;
    for (int j = 0; j < V; ++j) sum += std::exp(l[j] - mx);
    loss[n] = std::log(sum) + mx - l[targets[n]];
  }
  return loss;
}

}  // namespace xtrain::test
