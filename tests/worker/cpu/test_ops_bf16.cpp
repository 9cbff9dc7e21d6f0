// Every CPU operation in bf16 precision against a double-precision reference of the emulated
// computation: the inputs rounded to bf16 (as every stored activation and the weights' copy are),
// the exact result computed in double (tests/worker/op_references.hpp, central differences for
// gradients), and, where the GPU stores bf16, that result rounded to bf16.
//
// Bounds (tests/worker/bf16_check.hpp). A stored output (an activation or activation gradient):
//   - is a bf16 value (the rounding point exists);
//   - is within one bf16 ulp of the rounded reference, plus 1e-5 of the output's RMS: the CPU
//     rounds its fp32 result, the reference rounds the exact one, and the two roundings part
//     only where the fp32 error (~1e-7 relative, ~1e-5 of the RMS where a row cancels, as in
//     layernorm's backward) straddles a rounding boundary, moving the result by one ulp;
//   - equals the rounded reference in at least 90% of elements (the straddles are rare: the
//     measured share of equal elements is above 99%), so a wrong rounding (truncation, a
//     rounding of inputs instead of outputs) fails.
// An fp32 output (parameter gradients, layernorm statistics, losses) matches the reference from
// the rounded inputs to the fp32 test's bounds, 2e-6 (forward) and 1e-5 (gradients) relative.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "tests/worker/bf16_check.hpp"
#include "tests/worker/op_references.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/cpu/flash_attention.hpp"
#include "worker/math/bf16.hpp"

namespace {

using namespace xtrain::test;
using xtrain::CpuBackend;
using xtrain::Precision;

constexpr double kFloorOfRms = 1e-5;
constexpr double kMinEqualShare = 0.9;

double bf16(double x) { return xtrain::math::round_to_bf16(static_cast<float>(x)); }

Vec rounded(Vec v) {
  for (double& x : v) x = bf16(x);
  return v;
}

// Random inputs that are bf16 values, as every input of an operation is in bf16 precision.
Vec random_bf16(size_t n, std::mt19937& rng, double lo = -1.0, double hi = 1.0) {
  return rounded(random_vec(n, rng, lo, hi));
}

void check_stored(const Vec& got, const Vec& exact) { check_bf16_close(got, rounded(exact), kFloorOfRms, kMinEqualShare); }

}  // namespace

TEST_CASE("bf16: embedding forward rounds its sum, backward accumulates fp32", "[ops][bf16]") {
  CpuBackend k(Precision::bf16);
  std::mt19937 rng(21);
  const int B = 2, T = 7, C = 16, V = 10, Vp = 128;
  std::vector<int32_t> tok(B * T);
  for (auto& t : tok) t = static_cast<int32_t>(rng() % V);
  tok[3] = tok[9];
  const Vec wte = random_bf16(static_cast<size_t>(Vp) * C, rng), wpe = random_bf16(T * C, rng);
  const Vec w = random_bf16(B * T * C, rng), dwte0 = random_vec(wte.size(), rng), dwpe0 = random_vec(wpe.size(), rng);
  DeviceInts dtok(k, tok);
  DeviceVec dwte_in(k, wte), dwpe_in(k, wpe), out(k, B * T * C), dout(k, w), dwte(k, dwte0), dwpe(k, dwpe0);
  k.embedding_forward(out.get(), dtok.get(), dwte_in.get(), dwpe_in.get(), B, T, C);
  check_stored(out.read(), ref_embedding(tok, wte, wpe, B, T, C));

  k.embedding_backward(dwte.get(), dwpe.get(), dout.get(), dtok.get(), B, T, C);
  const Vec g_wte = fd_grad([&](const Vec& x) { return dot(w, ref_embedding(tok, x, wpe, B, T, C)); }, wte);
  const Vec g_wpe = fd_grad([&](const Vec& x) { return dot(w, ref_embedding(tok, wte, x, B, T, C)); }, wpe);
  CHECK_REL(dwte.read(), add(dwte0, g_wte), kGradTol);
  CHECK_REL(dwpe.read(), add(dwpe0, g_wpe), kGradTol);
}

TEST_CASE("bf16: layernorm stores rounded outputs and input gradients, fp32 statistics and parameter gradients",
          "[ops][bf16]") {
  CpuBackend k(Precision::bf16);
  std::mt19937 rng(22);
  const int N = 12, C = 64;
  const Vec x = random_bf16(N * C, rng, -2.0, 3.0), wt = random_bf16(C, rng, 0.5, 1.5), bs = random_bf16(C, rng);
  const Vec w = random_bf16(N * C, rng), dx0 = random_bf16(N * C, rng);
  const Vec dw0 = random_vec(C, rng), db0 = random_vec(C, rng);
  DeviceVec inp(k, x), weight(k, wt), bias(k, bs), out(k, N * C), mean(k, N), rstd(k, N);
  DeviceVec dout(k, w), dinp(k, dx0), dweight(k, dw0), dbias(k, db0);
  k.layernorm_forward(out.get(), mean.get(), rstd.get(), inp.get(), weight.get(), bias.get(), N, C);
  check_stored(out.read(), ref_layernorm(x, wt, bs, N, C));
  Vec ref_mean(N);
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) ref_mean[n] += x[n * C + c] / C;
  }
  CHECK_REL(mean.read(), ref_mean, kForwardTol);

  k.layernorm_backward(dinp.get(), dweight.get(), dbias.get(), dout.get(), inp.get(), weight.get(), mean.get(),
                       rstd.get(), N, C);
  const Vec gx = fd_grad([&](const Vec& v) { return dot(w, ref_layernorm(v, wt, bs, N, C)); }, x);
  const Vec gw = fd_grad([&](const Vec& v) { return dot(w, ref_layernorm(x, v, bs, N, C)); }, wt);
  const Vec gb = fd_grad([&](const Vec& v) { return dot(w, ref_layernorm(x, wt, v, N, C)); }, bs);
  check_stored(dinp.read(), add(dx0, gx));  // the residual stream's gradient: accumulated, then stored
  CHECK_REL(dweight.read(), add(dw0, gw), kGradTol);
  CHECK_REL(dbias.read(), add(db0, gb), kGradTol);
}

TEST_CASE("bf16: matmul stores rounded products, parameter gradients accumulate in fp32", "[ops][bf16]") {
  CpuBackend k(Precision::bf16);
  std::mt19937 rng(23);
  const int N = 9, C = 48, OC = 40;
  const float s = 0.25f;
  const Vec x = random_bf16(N * C, rng), wt = random_bf16(OC * C, rng), bs = random_bf16(OC, rng);
  const Vec w = random_bf16(N * OC, rng), dw0 = random_vec(OC * C, rng), db0 = random_vec(OC, rng);
  DeviceVec inp(k, x), weight(k, wt), bias(k, bs), out(k, N * OC), dout(k, w), dinp(k, N * C), dweight(k, dw0),
      dbias(k, db0);
  k.matmul_forward(out.get(), inp.get(), weight.get(), bias.get(), N, C, OC);
  check_stored(out.read(), ref_matmul(x, wt, &bs, N, C, OC));

  k.matmul_backward(dinp.get(), dweight.get(), dbias.get(), dout.get(), inp.get(), weight.get(), N, C, OC, s);
  auto f = [&](const Vec& xv, const Vec& wv, const Vec& bv) { return s * dot(w, ref_matmul(xv, wv, &bv, N, C, OC)); };
  check_stored(dinp.read(), fd_grad([&](const Vec& v) { return f(v, wt, bs); }, x));
  CHECK_REL(dweight.read(), add(dw0, fd_grad([&](const Vec& v) { return f(x, v, bs); }, wt)), kGradTol);
  CHECK_REL(dbias.read(), add(db0, fd_grad([&](const Vec& v) { return f(x, wt, v); }, bs)), kGradTol);
}

TEST_CASE("bf16: attention rounds where the flash attention's bf16 kernels do and stays near the exact result",
          "[ops][bf16]") {
  // Attention in bf16 rounds inside as well as at its outputs: p and ds before the products that
  // take them, as the GPU's tensor-core kernels do (worker/math/flash_attention.hpp; checked
  // against a double reference of those points in test_flash_attention.cpp). Here: the backend
  // runs the flash attention with its rounding on, stores bf16 values, and lands within 2^-6 of
  // the largest value of the exact attention of its (rounded) inputs; measured 2.3e-3 (output)
  // and 2.7e-3 (gradients), about 2^-8.5: the roundings of p and ds (2^-9 each, relative) add to
  // the output's own.
  CpuBackend k(Precision::bf16);
  std::mt19937 rng(24);
  const int B = 2, T = 70, C = 32, NH = 2;  // two key blocks, the second partial
  const xtrain::AttentionShape s{B, T, C, NH};
  const Vec qkv = random_bf16(static_cast<size_t>(B) * T * 3 * C, rng, -1.5, 1.5);
  const Vec w = random_bf16(static_cast<size_t>(B) * T * C, rng);
  DeviceVec in(k, qkv), out(k, B * T * C), dout(k, w), dqkv(k, qkv.size());
  DeviceVec saved(k, k.attention_saved_floats(B, T, C, NH)), scratch(k, k.attention_scratch_floats(B, T, C, NH));
  k.attention_forward(out.get(), saved.get(), in.get(), scratch.get(), B, T, C, NH);
  k.attention_backward(dqkv.get(), dout.get(), in.get(), out.get(), saved.get(), scratch.get(), B, T, C, NH);
  const Vec got_out = out.read(), got_dqkv = dqkv.read();
  CHECK(got_out == rounded(got_out));
  CHECK(got_dqkv == rounded(got_dqkv));

  // The same as the flash attention with rounding, bit for bit.
  const std::vector<float> fq(qkv.begin(), qkv.end()), fw(w.begin(), w.end());
  std::vector<float> f_out(fw.size()), f_lse(xtrain::flash_attention_saved_floats(s)), f_dqkv(fq.size());
  xtrain::ThreadTeam one(1);
  std::vector<float> f_scratch(xtrain::flash_attention_scratch_floats(s, 1));
  xtrain::flash_attention_forward(f_out.data(), f_lse.data(), fq.data(), f_scratch.data(), s, true, one);
  xtrain::flash_attention_backward(f_dqkv.data(), fw.data(), fq.data(), f_out.data(), f_lse.data(), f_scratch.data(),
                                   s, true, one);
  CHECK(got_out == Vec(f_out.begin(), f_out.end()));
  CHECK(got_dqkv == Vec(f_dqkv.begin(), f_dqkv.end()));

  auto max_rel = [](const Vec& got, const Vec& want) {
    double err = 0.0, scale = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
      err = std::max(err, std::abs(got[i] - want[i]));
      scale = std::max(scale, std::abs(want[i]));
    }
    return err / scale;
  };
  const double out_err = max_rel(got_out, ref_attention(qkv, B, T, C, NH));
  const double grad_err =
      max_rel(got_dqkv, fd_grad([&](const Vec& v) { return dot(w, ref_attention(v, B, T, C, NH)); }, qkv));
  INFO("out error " << out_err << ", gradient error " << grad_err);
  CHECK(out_err <= 0x1p-6);
  CHECK(grad_err <= 0x1p-6);
}

TEST_CASE("bf16: gelu and the residual add store rounded results", "[ops][bf16]") {
  CpuBackend k(Precision::bf16);
  std::mt19937 rng(25);
  const size_t n = 600;
  const Vec x = random_bf16(n, rng, -6.0, 6.0), w = random_bf16(n, rng), y = random_bf16(n, rng);
  DeviceVec inp(k, x), out(k, n), dout(k, w), dinp(k, n), other(k, y), sum(k, n);
  k.gelu_forward(out.get(), inp.get(), n);
  Vec ref(n), grad(n), ref_sum(n);
  for (size_t i = 0; i < n; ++i) {
    ref[i] = ref_gelu(x[i]);
    grad[i] = w[i] * (ref_gelu(x[i] + kFdStep) - ref_gelu(x[i] - kFdStep)) / (2.0 * kFdStep);
    ref_sum[i] = x[i] + y[i];
  }
  check_stored(out.read(), ref);
  k.gelu_backward(dinp.get(), inp.get(), dout.get(), n);
  check_stored(dinp.read(), grad);
  k.residual_forward(sum.get(), inp.get(), other.get(), n);
  check_stored(sum.read(), ref_sum);
}

TEST_CASE("bf16: softmax cross-entropy gives fp32 losses and stores the rounded logits gradient", "[ops][bf16]") {
  CpuBackend k(Precision::bf16);
  std::mt19937 rng(26);
  const int N = 6, V = 50, Vp = 128;
  const float dloss = 1.0f / N;
  Vec logits = random_bf16(static_cast<size_t>(N) * Vp, rng, -3.0, 3.0);
  std::vector<int32_t> targets(N);
  for (auto& t : targets) t = static_cast<int32_t>(rng() % V);
  DeviceVec dl(k, logits), losses(k, N);
  DeviceInts dt(k, targets);
  k.softmax_cross_entropy(dl.get(), losses.get(), dt.get(), dloss, N, V, Vp);
  CHECK_REL(losses.read(), ref_losses(logits, targets, N, V, Vp), kForwardTol);
  Vec g = fd_grad([&](const Vec& v) {
    double s = 0.0;
    for (double x : ref_losses(v, targets, N, V, Vp)) s += dloss * x;
    return s;
  }, logits);
  check_stored(dl.read(), g);
}

TEST_CASE("bf16: AdamW refreshes the weights' copy in its pass, and uploads round", "[ops][bf16]") {
  CpuBackend k(Precision::bf16);
  std::mt19937 rng(27);
  const size_t n = 300;
  const Vec p = random_vec(n, rng), g = random_vec(n, rng);
  DeviceVec params(k, p), grads(k, g), m(k, n), v(k, n), copy(k, n);
  xtrain::AdamWHyper h;
  h.lr = 1e-2f;
  k.adamw_update(params.get(), copy.get(), grads.get(), m.get(), v.get(), n, h);
  const Vec master = params.read(), weights = copy.read();
  for (size_t i = 0; i < n; ++i) REQUIRE(weights[i] == bf16(master[i]));
  CHECK(rounded(master) != master);  // the master keeps its fp32 bits

  std::vector<float> host(p.begin(), p.end());
  k.upload(xtrain::ActPtr(copy.get()), host.data(), n);
  CHECK(copy.read() == rounded(p));
}
