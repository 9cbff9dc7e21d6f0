// The CPU backend's fused MLP products, matmul_gelu_forward and matmul_gelu_backward, against
// (1) a double-precision reference with central differences for the gradients (the method and
// bounds of test_ops_fd.cpp: 2e-6 forward, 1e-5 gradients, relative norm), (2) the unfused
// composition they replace (matmul_forward + gelu_forward, matmul_backward + gelu_backward):
// bitwise equal in fp32, where no rounding point exists to move, and (3) in bf16, the documented
// rounding points bit for bit: pre = bf16(x), out = bf16(gelu(x)) and dinp = bf16(x' * gelu'(pre))
// from the fp32 x, x' (the fp32 backend's products and GELU loops on the same bf16 inputs), where
// the unfused ops round x and x' first.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "tests/worker/bf16_check.hpp"
#include "tests/worker/op_references.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/math/bf16.hpp"

namespace {

using namespace xtrain::test;
using xtrain::CpuBackend;
using xtrain::Precision;

// GPT's MLP shapes, small: fc (N,C) -> (N,H), fc_proj (N,H) -> (N,C); H a multiple of 8.
constexpr int N = 5, C = 8, H = 24;

Vec gelu_of(const Vec& x) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = ref_gelu(x[i]);
  return y;
}

Vec rounded(Vec v) {
  for (double& x : v) x = xtrain::math::round_to_bf16(static_cast<float>(x));
  return v;
}

// The inputs of both products, bf16 values (so the fp32 and bf16 backends read the same numbers).
struct Inputs {
  Vec x, w_fc, b_fc, w_proj, dout, dw0, db0;
  explicit Inputs(std::mt19937& rng)
      : x(rounded(random_vec(N * C, rng, -2.0, 2.0))),      // (N,C)
        w_fc(rounded(random_vec(H * C, rng))),              // (H,C)
        b_fc(rounded(random_vec(H, rng))),                  // (H)
        w_proj(rounded(random_vec(C * H, rng))),            // (C,H)
        dout(rounded(random_vec(N * C, rng))),              // (N,C)
        dw0(random_vec(C * H, rng)),                        // (C,H) accumulated into
        db0(random_vec(C, rng)) {}                          // (C) accumulated into
};

// Everything one backend computes from the inputs, fused or not.
struct Outputs {
  Vec pre, out, dinp, dweight, dbias;
};

Outputs run(CpuBackend& k, const Inputs& in, bool fused, float s) {
  DeviceVec x(k, in.x), w_fc(k, in.w_fc), b_fc(k, in.b_fc), w_proj(k, in.w_proj), dout(k, in.dout);
  DeviceVec pre(k, N * H), out(k, N * H), dinp(k, N * H), dweight(k, in.dw0), dbias(k, in.db0);
  if (fused) {
    k.matmul_gelu_forward(out.get(), pre.get(), x.get(), w_fc.get(), b_fc.get(), N, C, H);
    k.matmul_gelu_backward(dinp.get(), dweight.get(), dbias.get(), dout.get(), out.get(), w_proj.get(), pre.get(), N,
                           H, C, s);
  } else {
    k.matmul_forward(pre.get(), x.get(), w_fc.get(), b_fc.get(), N, C, H);
    k.gelu_forward(out.get(), pre.get(), N * H);
    k.matmul_backward(dinp.get(), dweight.get(), dbias.get(), dout.get(), out.get(), w_proj.get(), N, H, C, s);
    k.gelu_backward(dinp.get(), pre.get(), dinp.get(), N * H);
  }
  return {pre.read(), out.read(), dinp.read(), dweight.read(), dbias.read()};
}

}  // namespace

TEST_CASE("fused matmul + GELU: forward and backward match double references", "[ops]") {
  CpuBackend k;
  std::mt19937 rng(41);
  const Inputs in(rng);
  const float s = 0.5f;
  const Outputs got = run(k, in, true, s);
  const Vec pre = ref_matmul(in.x, in.w_fc, &in.b_fc, N, C, H);
  CHECK_REL(got.pre, pre, kForwardTol);
  CHECK_REL(got.out, gelu_of(pre), kForwardTol);

  // The loss through fc_proj as a function of the GELU's input, its weight and its bias.
  auto f = [&](const Vec& h, const Vec& w, const Vec& b) {
    return s * dot(in.dout, ref_matmul(gelu_of(h), w, &b, N, H, C));
  };
  CHECK_REL(got.dinp, fd_grad([&](const Vec& v) { return f(v, in.w_proj, Vec(C, 0.0)); }, pre), kGradTol);
  CHECK_REL(got.dweight, add(in.dw0, fd_grad([&](const Vec& v) { return f(pre, v, Vec(C, 0.0)); }, in.w_proj)),
            kGradTol);
  CHECK_REL(got.dbias, add(in.db0, fd_grad([&](const Vec& v) { return f(pre, in.w_proj, v); }, Vec(C, 0.0))),
            kGradTol);
}

TEST_CASE("fused matmul + GELU equals the unfused ops bit for bit in fp32", "[ops]") {
  CpuBackend k;
  std::mt19937 rng(42);
  const Inputs in(rng);
  const Outputs fused = run(k, in, true, 0.75f), unfused = run(k, in, false, 0.75f);
  CHECK(fused.pre == unfused.pre);
  CHECK(fused.out == unfused.out);
  CHECK(fused.dinp == unfused.dinp);
  CHECK(fused.dweight == unfused.dweight);
  CHECK(fused.dbias == unfused.dbias);
}

TEST_CASE("bf16: fused matmul + GELU rounds once, from the fp32 product", "[ops][bf16]") {
  CpuBackend k(Precision::bf16), fp32;
  std::mt19937 rng(43);
  const Inputs in(rng);
  const float s = 0.75f;
  const Outputs got = run(k, in, true, s);
  const Outputs unfused = run(k, in, false, s);
  // The fp32 backend on the same bf16 inputs runs the same products and GELU loops without the
  // roundings: forward gives x and gelu(x); backward, from the bf16 pre and GELU output that the
  // bf16 backward reads, gives x' * gelu'(pre). Rounded once, they must be the bf16 results.
  const Outputs exact_forward = run(fp32, in, true, s);
  DeviceVec dout(fp32, in.dout), w_proj(fp32, in.w_proj), out_bf16(fp32, got.out), pre_bf16(fp32, got.pre);
  DeviceVec dinp(fp32, N * H), dw(fp32, C * H);
  fp32.matmul_gelu_backward(dinp.get(), dw.get(), nullptr, dout.get(), out_bf16.get(), w_proj.get(), pre_bf16.get(), N,
                            H, C, s);
  CHECK(got.pre == rounded(exact_forward.pre));
  CHECK(got.out == rounded(exact_forward.out));
  CHECK(got.dinp == rounded(dinp.read()));
  // The pre-activation is the same rounding either way. The unfused GELU output is gelu of the
  // rounded x: off by |gelu'| (<= 1.13) times half an ulp of x, and rounded again, so the two
  // differ (somewhere here, they do) by at most that plus an ulp of the output.
  CHECK(got.pre == unfused.pre);
  size_t moved = 0;
  for (size_t i = 0; i < got.out.size(); ++i) {
    INFO("element " << i << ": fused " << got.out[i] << ", unfused " << unfused.out[i] << ", x " << got.pre[i]);
    CHECK(std::abs(got.out[i] - unfused.out[i]) <=
          bf16_ulp(std::max(std::abs(got.out[i]), std::abs(unfused.out[i]))) + 1.13 * 0.5 * bf16_ulp(got.pre[i]));
    moved += got.out[i] != unfused.out[i];
  }
  INFO(moved << " of " << got.out.size() << " GELU outputs differ from the unfused ops'");
  CHECK(moved > 0);
}
