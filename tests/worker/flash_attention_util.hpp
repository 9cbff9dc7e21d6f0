// Helpers shared by the CPU and CUDA flash attention tests: random inputs (optionally rounded to
// bf16 values, as bf16 storage holds them), one forward + backward on the CPU, the error measure,
// and the shapes every test runs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "worker/cpu/flash_attention.hpp"
#include "worker/math/bf16.hpp"

namespace xtrain::test {

inline double max_abs(const std::vector<float>& x) {
  double m = 0.0;
  for (float v : x) m = std::max(m, std::abs(static_cast<double>(v)));
  return m;
}

// max_i |got_i - want_i| / max_i |want_i|: the error relative to the tensor's scale, so that an
// element near zero is not held to a relative bound it cannot meet. `scale` replaces max |want|
// where the caller knows better (a tensor that is exactly zero). NaN never passes.
inline double max_rel_error(const std::vector<float>& got, const std::vector<float>& want, double scale = 0.0) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double err = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]);
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    err = std::max(err, d);
  }
  return err / std::max(scale > 0.0 ? scale : max_abs(want), 1e-30);
}

// Fraction of elements whose bits differ.
inline double mismatch_fraction(const std::vector<float>& a, const std::vector<float>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return a.empty() ? 0.0 : static_cast<double>(n) / static_cast<double>(a.size());
}

inline bool all_bf16(const std::vector<float>& x) {
  return std::all_of(x.begin(), x.end(), [](float v) { return math::round_to_bf16(v) == v; });
}

inline std::vector<float> normal_floats(size_t n, std::mt19937_64& rng, float sd, bool bf16) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = bf16 ? math::round_to_bf16(d(rng)) : d(rng);
  return v;
}

struct AttentionInputs {
  std::vector<float> qkv, dout;
};

// qkv with standard deviation qkv_sd (2: scores of a few units, peaked rows), dout with 1; bf16
// values when bf16 storage is emulated.
inline AttentionInputs random_inputs(const AttentionShape& s, std::mt19937_64& rng, bool bf16, float qkv_sd = 2.0f) {
  const size_t btc = static_cast<size_t>(s.B) * s.T * s.C;
  auto qkv = normal_floats(3 * btc, rng, qkv_sd, bf16);
  return {std::move(qkv), normal_floats(btc, rng, 1.0f, bf16)};
}

// The q, k or v part (0, 1, 2) of a (B,T,3C) array, as (B,T,C).
inline std::vector<float> qkv_part(const std::vector<float>& qkv, const AttentionShape& s, int part) {
  std::vector<float> r;
  r.reserve(static_cast<size_t>(s.B) * s.T * s.C);
  for (size_t row = 0; row < static_cast<size_t>(s.B) * s.T; ++row) {
    const auto first = qkv.begin() + static_cast<long>(row * 3 * s.C + static_cast<size_t>(part) * s.C);
    r.insert(r.end(), first, first + s.C);
  }
  return r;
}

// What the q, k or v part of a (B,T,3C) gradient is compared relative to: its own largest value,
// but for q and k at T = 1 the whole gradient's. A softmax over one key has no gradient, so those
// parts are zero in exact arithmetic and what both sides hold is the cancellation of dP - D in
// their own summation orders (about 1e-6 of dv's scale): noise, which only the gradient's scale
// can bound.
inline double gradient_part_scale(const std::vector<float>& want, const AttentionShape& s, int part) {
  return s.T == 1 && part < 2 ? max_abs(want) : max_abs(qkv_part(want, s, part));
}

// max_rel_error of the q, k and v parts of a (B,T,3C) gradient, each relative to gradient_part_scale.
inline std::vector<double> gradient_errors(const std::vector<float>& got, const std::vector<float>& want,
                                           const AttentionShape& s) {
  std::vector<double> errors;
  for (int part = 0; part < 3; ++part) {
    errors.push_back(max_rel_error(qkv_part(got, s, part), qkv_part(want, s, part), gradient_part_scale(want, s, part)));
  }
  return errors;
}

struct AttentionResult {
  std::vector<float> out, lse, dqkv;
};

// Two bf16 computations with the same rounding points: each tensor compared (out and the q, k, v
// gradients) must be within max_rel of its largest value; the elements that differ at all are
// counted over every tensor, for one bound on the whole (mismatch_fraction()).
class Bf16Agreement {
 public:
  explicit Bf16Agreement(double max_rel) : max_rel_(max_rel) {}

  // `scale`: what the error is relative to (0: want's largest value).
  void compare(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
               double scale = 0.0) {
    const double err = max_rel_error(got, want, scale);
    const double mismatch = test::mismatch_fraction(got, want);
    INFO(what << ": error " << err << ", " << mismatch << " of the elements differ");
    CHECK(err <= max_rel_);
    compared_ += got.size();
    mismatched_ += mismatch * static_cast<double>(got.size());
  }
  void compare(const std::vector<float>& got_out, const std::vector<float>& got_dqkv,
               const std::vector<float>& want_out, const std::vector<float>& want_dqkv, const AttentionShape& s) {
    compare("out", got_out, want_out);
    for (int part = 0; part < 3; ++part) {
      compare(std::string("gradient of ") + "qkv"[part], qkv_part(got_dqkv, s, part), qkv_part(want_dqkv, s, part),
              gradient_part_scale(want_dqkv, s, part));
    }
  }
  double mismatch_fraction() const { return compared_ ? mismatched_ / static_cast<double>(compared_) : 0.0; }
  std::string summary() const {
    return std::to_string(mismatched_) + " of " + std::to_string(compared_) + " elements differ";
  }

 private:
  double max_rel_;
  size_t compared_ = 0;
  double mismatched_ = 0.0;
};

// The CPU flash attention forward and backward on a team of `threads`.
inline AttentionResult cpu_flash_attention(const std::vector<float>& qkv, const std::vector<float>& dout,
                                           const AttentionShape& s, bool bf16, int threads = 1) {
  const float nan = std::numeric_limits<float>::quiet_NaN();  // every element must be written
  AttentionResult r{std::vector<float>(dout.size(), nan), std::vector<float>(flash_attention_saved_floats(s), nan),
                    std::vector<float>(qkv.size(), nan)};
  ThreadTeam team(threads);
  std::vector<float> scratch(flash_attention_scratch_floats(s, threads), nan);
  flash_attention_forward(r.out.data(), r.lse.data(), qkv.data(), scratch.data(), s, bf16, team);
  flash_attention_backward(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(), r.lse.data(), scratch.data(), s,
                           bf16, team);
  return r;
}

inline std::string describe(const AttentionShape& s) {
  return "B " + std::to_string(s.B) + " T " + std::to_string(s.T) + " C " + std::to_string(s.C) + " NH " +
         std::to_string(s.NH) + " (hs " + std::to_string(s.hs()) + ")";
}

}  // namespace xtrain::test
