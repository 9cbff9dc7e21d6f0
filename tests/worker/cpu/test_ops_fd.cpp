// Every backend operation against an independent double-precision reference.
//
// Method: for each operation its forward is written again in double (tests/worker/op_references.hpp),
// a random projection of the output, f(x) = sum_i w_i y_i(x), is differentiated by central
// differences in double, (f(x + h) - f(x - h)) / 2h with h = 1e-5: truncation error ~ h^2 ~ 1e-10
// and rounding ~ 1e-16 / h ~ 1e-11, so the reference gradient is exact to far below float
// precision. The CPU backend runs the operation in float with dout = w and must match it.
// Tolerance: the error norm relative to the reference norm, ||got - ref|| / ||ref||, below 2e-6
// for forward outputs and 1e-5 for gradients. Float rounds at ~6e-8 relative and these small
// reductions run over at most a few dozen terms; the measured errors are 3e-8 to 2.2e-7 (GELU's
// backward is the largest), so the bounds leave a 10-45x margin for other compilers and BLAS
// kernels while a wrong index or a missing term (errors of order 1e-2 to 1) cannot pass.
// Accumulating outputs are pre-filled with random values to check "+=" against "=".
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "tests/worker/op_references.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/math/softmax.hpp"

namespace {

using namespace xtrain::test;
using xtrain::CpuBackend;

}  // namespace

TEST_CASE("embedding forward and backward match double references", "[ops]") {
  CpuBackend k;
  std::mt19937 rng(1);
  const int B = 2, T = 5, C = 8, V = 10, Vp = 128;
  std::vector<int32_t> tok(B * T);
  for (auto& t : tok) t = static_cast<int32_t>(rng() % V);
  tok[3] = tok[7];  // a repeated token must accumulate both positions
  Vec wte = random_vec(static_cast<size_t>(Vp) * C, rng), wpe = random_vec(T * C, rng);
  Vec w = random_vec(B * T * C, rng);
  Vec dwte0 = random_vec(wte.size(), rng), dwpe0 = random_vec(wpe.size(), rng);

  DeviceInts dtok(k, tok);
  DeviceVec dwte_in(k, wte), dwpe_in(k, wpe), out(k, B * T * C), dout(k, w), dwte(k, dwte0), dwpe(k, dwpe0);
  k.embedding_forward(out.get(), dtok.get(), dwte_in.get(), dwpe_in.get(), B, T, C);
  CHECK_REL(out.read(), ref_embedding(tok, wte, wpe, B, T, C), kForwardTol);

  k.embedding_backward(dwte.get(), dwpe.get(), dout.get(), dtok.get(), B, T, C);
  const Vec g_wte = fd_grad([&](const Vec& x) { return dot(w, ref_embedding(tok, x, wpe, B, T, C)); }, wte);
  const Vec g_wpe = fd_grad([&](const Vec& x) { return dot(w, ref_embedding(tok, wte, x, B, T, C)); }, wpe);
  CHECK_REL(dwte.read(), add(dwte0, g_wte), kGradTol);
  CHECK_REL(dwpe.read(), add(dwpe0, g_wpe), kGradTol);
}

TEST_CASE("layernorm forward and backward match double references", "[ops]") {
  CpuBackend k;
  std::mt19937 rng(2);
  const int N = 6, C = 16;
  Vec x = random_vec(N * C, rng, -2.0, 3.0), wt = random_vec(C, rng, 0.5, 1.5), bs = random_vec(C, rng);
  Vec w = random_vec(N * C, rng);
  Vec dx0 = random_vec(N * C, rng), dw0 = random_vec(C, rng), db0 = random_vec(C, rng);

  DeviceVec inp(k, x), weight(k, wt), bias(k, bs), out(k, N * C), mean(k, N), rstd(k, N);
  DeviceVec dout(k, w), dinp(k, dx0), dweight(k, dw0), dbias(k, db0);
  k.layernorm_forward(out.get(), mean.get(), rstd.get(), inp.get(), weight.get(), bias.get(), N, C);
  CHECK_REL(out.read(), ref_layernorm(x, wt, bs, N, C), kForwardTol);

  k.layernorm_backward(dinp.get(), dweight.get(), dbias.get(), dout.get(), inp.get(), weight.get(), mean.get(),
                       rstd.get(), N, C);
  const Vec gx = fd_grad([&](const Vec& v) { return dot(w, ref_layernorm(v, wt, bs, N, C)); }, x);
  const Vec gw = fd_grad([&](const Vec& v) { return dot(w, ref_layernorm(x, v, bs, N, C)); }, wt);
  const Vec gb = fd_grad([&](const Vec& v) { return dot(w, ref_layernorm(x, wt, v, N, C)); }, bs);
  CHECK_REL(dinp.read(), add(dx0, gx), kGradTol);
  CHECK_REL(dweight.read(), add(dw0, gw), kGradTol);
  CHECK_REL(dbias.read(), add(db0, gb), kGradTol);
}

TEST_CASE("matmul forward and backward match double references", "[ops]") {
  CpuBackend k;
  std::mt19937 rng(3);
  const int N = 7, C = 12, OC = 20;
  const float dout_scale = GENERATE(1.0f, 0.25f);
  const bool with_bias = GENERATE(true, false);
  Vec x = random_vec(N * C, rng), wt = random_vec(OC * C, rng), bs = random_vec(OC, rng);
  Vec w = random_vec(N * OC, rng);
  Vec dx0 = random_vec(N * C, rng), dw0 = random_vec(OC * C, rng), db0 = random_vec(OC, rng);
  const Vec* bias_ref = with_bias ? &bs : nullptr;

  DeviceVec inp(k, x), weight(k, wt), bias(k, bs), out(k, N * OC);
  DeviceVec dout(k, w), dinp(k, dx0), dweight(k, dw0), dbias(k, db0);
  const Vec dbias_before = dbias.read();
  k.matmul_forward(out.get(), inp.get(), weight.get(), with_bias ? bias.get() : nullptr, N, C, OC);
  CHECK_REL(out.read(), ref_matmul(x, wt, bias_ref, N, C, OC), kForwardTol);

  k.matmul_backward(dinp.get(), dweight.get(), with_bias ? dbias.get() : nullptr, dout.get(), inp.get(),
                    weight.get(), N, C, OC, dout_scale);
  auto f = [&](const Vec& xv, const Vec& wv, const Vec& bv) {
    return dout_scale * dot(w, ref_matmul(xv, wv, with_bias ? &bv : nullptr, N, C, OC));
  };
  const Vec gx = fd_grad([&](const Vec& v) { return f(v, wt, bs); }, x);
  const Vec gw = fd_grad([&](const Vec& v) { return f(x, v, bs); }, wt);
  CHECK_REL(dinp.read(), gx, kGradTol);  // dinp is overwritten, not accumulated
  CHECK_REL(dweight.read(), add(dw0, gw), kGradTol);
  if (with_bias) {
    const Vec gb = fd_grad([&](const Vec& v) { return f(x, wt, v); }, bs);
    CHECK_REL(dbias.read(), add(db0, gb), kGradTol);
  } else {
    CHECK(dbias.read() == dbias_before);  // untouched
  }
}

TEST_CASE("causal attention forward and backward match double references", "[ops]") {
  // The backend's flash attention. T = 1, shorter than a 64-key block, and 70: a full block, a
  // tail, and query blocks whose diagonal tile is partial; several heads, B > 1, head sizes 4 and
  // 16 (the tile product's scalar and vector paths).
  struct Shape { int B, T, C, NH; };
  const Shape s = GENERATE(Shape{1, 1, 8, 2}, Shape{2, 9, 8, 2}, Shape{2, 70, 32, 2});
  INFO("B " << s.B << " T " << s.T << " C " << s.C << " NH " << s.NH);
  CpuBackend k;
  std::mt19937 rng(4);
  Vec qkv = random_vec(static_cast<size_t>(s.B) * s.T * 3 * s.C, rng, -1.5, 1.5);
  Vec w = random_vec(static_cast<size_t>(s.B) * s.T * s.C, rng);

  DeviceVec in(k, qkv), out(k, w.size()), dout(k, w), dqkv(k, random_vec(qkv.size(), rng));
  DeviceVec saved(k, k.attention_saved_floats(s.B, s.T, s.C, s.NH));
  DeviceVec scratch(k, k.attention_scratch_floats(s.B, s.T, s.C, s.NH));
  k.attention_forward(out.get(), saved.get(), in.get(), scratch.get(), s.B, s.T, s.C, s.NH);
  CHECK_REL(out.read(), ref_attention(qkv, s.B, s.T, s.C, s.NH), kForwardTol);

  k.attention_backward(dqkv.get(), dout.get(), in.get(), out.get(), saved.get(), scratch.get(), s.B, s.T, s.C, s.NH);
  // Central differences cost 2 * 3BTC forward passes of O(T^2): for T = 70 a sample of the inputs.
  const size_t stride = s.T > 16 ? 7 : 1;
  const Vec got_all = dqkv.read();  // overwritten, not accumulated
  Vec got, want;
  for (size_t i = 0; i < qkv.size(); i += stride) {
    Vec x = qkv;
    x[i] = qkv[i] + kFdStep;
    const double fp = dot(w, ref_attention(x, s.B, s.T, s.C, s.NH));
    x[i] = qkv[i] - kFdStep;
    want.push_back((fp - dot(w, ref_attention(x, s.B, s.T, s.C, s.NH))) / (2.0 * kFdStep));
    got.push_back(got_all[i]);
  }
  CHECK_REL(got, want, kGradTol);
}

TEST_CASE("gelu forward and backward match double references", "[ops]") {
  CpuBackend k;
  std::mt19937 rng(5);
  const size_t n = 300;
  Vec x = random_vec(n, rng, -6.0, 6.0), w = random_vec(n, rng);
  DeviceVec inp(k, x), out(k, n), dout(k, w), dinp(k, random_vec(n, rng));
  k.gelu_forward(out.get(), inp.get(), n);
  Vec ref(n);
  for (size_t i = 0; i < n; ++i) ref[i] = ref_gelu(x[i]);
  CHECK_REL(out.read(), ref, kForwardTol);

  Vec g(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = w[i] * (ref_gelu(x[i] + kFdStep) - ref_gelu(x[i] - kFdStep)) / (2.0 * kFdStep);
  }
  k.gelu_backward(dinp.get(), inp.get(), dout.get(), n);
  CHECK_REL(dinp.read(), g, kGradTol);
  k.gelu_backward(dout.get(), inp.get(), dout.get(), n);  // in place, as GPT's backward uses it
  CHECK_REL(dout.read(), g, kGradTol);
}

TEST_CASE("residual add", "[ops]") {
  CpuBackend k;
  std::mt19937 rng(6);
  const size_t n = 50;
  Vec a = random_vec(n, rng), b = random_vec(n, rng);
  DeviceVec da(k, a), db(k, b), out(k, n);
  k.residual_forward(out.get(), da.get(), db.get(), n);
  CHECK_REL(out.read(), add(a, b), kForwardTol);
}

TEST_CASE("fused softmax cross-entropy over a padded vocabulary matches double references", "[ops]") {
  CpuBackend k;
  std::mt19937 rng(7);
  const int N = 6, V = 10, Vp = 128;
  const float dloss = 1.0f / N;
  Vec logits = random_vec(static_cast<size_t>(N) * Vp, rng, -3.0, 3.0);
  // Huge padded logits: they must neither win the softmax nor get gradient.
  for (int n = 0; n < N; ++n)
    for (int j = V; j < Vp; ++j) logits[n * Vp + j] = 50.0;
  std::vector<int32_t> targets(N);
  for (auto& t : targets) t = static_cast<int32_t>(rng() % V);
  targets[0] = V - 1;  // the last real column

  DeviceVec dl(k, logits), losses(k, N);
  DeviceInts dt(k, targets);
  k.softmax_cross_entropy(dl.get(), losses.get(), dt.get(), dloss, N, V, Vp);
  const Vec ref = ref_losses(logits, targets, N, V, Vp);
  CHECK_REL(losses.read(), ref, kForwardTol);
  for (double l : ref) CHECK(l < 10.0);  // the padded 50s would give losses near 50

  const Vec g = fd_grad([&](const Vec& v) {
    const Vec l = ref_losses(v, targets, N, V, Vp);
    double s = 0.0;
    for (double x : l) s += dloss * x;
    return s;
  }, logits);
  const Vec got = dl.read();
  CHECK_REL(got, g, kGradTol);
  for (int n = 0; n < N; ++n)
    for (int j = V; j < Vp; ++j) REQUIRE(got[n * Vp + j] == 0.0);
}

TEST_CASE("adamw update matches PyTorch's formula in double", "[ops]") {
  CpuBackend k;
  std::mt19937 rng(8);
  const size_t n = 200;
  Vec p = random_vec(n, rng), m(n, 0.0), v(n, 0.0);
  DeviceVec dp(k, p), dm(k, n), dv(k, n);
  xtrain::AdamWHyper h;
  h.lr = 1e-2f;
  h.beta1 = 0.9f;
  h.beta2 = 0.95f;
  h.eps = 1e-8f;
  h.weight_decay = 0.1f;
  h.grad_scale = 0.5f;
  for (int t = 1; t <= 3; ++t) {
    Vec g = random_vec(n, rng);
    DeviceVec dg(k, g);
    h.bias_correction1 = static_cast<float>(1.0 - std::pow(0.9, t));
    h.bias_correction2 = static_cast<float>(1.0 - std::pow(0.95, t));
    k.adamw_update(dp.get(), nullptr, dg.get(), dm.get(), dv.get(), n, h);
    // torch.optim.AdamW: p *= 1 - lr*wd; m, v updated; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)
    const double b1 = 0.9f, b2 = 0.95f, lr = 1e-2f, wd = 0.1f, eps = 1e-8f;
    for (size_t i = 0; i < n; ++i) {
      const double gi = 0.5 * static_cast<float>(g[i]);
      p[i] = static_cast<float>(p[i]) * (1.0 - lr * wd);
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      p[i] -= lr / (1 - std::pow(b1, t)) * m[i] / (std::sqrt(v[i]) / std::sqrt(1 - std::pow(b2, t)) + eps);
    }
    CHECK_REL(dp.read(), p, kForwardTol);
    CHECK_REL(dm.read(), m, kForwardTol);
    CHECK_REL(dv.read(), v, kForwardTol);
  }
}

TEST_CASE("sum of squares and scale", "[ops]") {
  CpuBackend k;
  std::mt19937 rng(9);
  const size_t n = 1001;  // not a multiple of the 8 lanes
  Vec x = random_vec(n, rng);
  DeviceVec dx(k, x);
  const Vec xf = dx.read();
  double ref = 0.0;
  for (double v : xf) ref += v * v;
  const double got = k.sum_squares(dx.get(), n);
  CHECK(std::abs(got - ref) <= 1e-12 * ref);
  CHECK(k.sum_squares(dx.get(), n) == got);  // deterministic
  k.scale(dx.get(), 0.5f, n);
  Vec half(n);
  for (size_t i = 0; i < n; ++i) half[i] = 0.5 * xf[i];
  CHECK(dx.read() == half);  // scaling by a power of two is exact
}

TEST_CASE("online softmax accumulators merge to the direct sum", "[ops]") {
  std::mt19937 rng(10);
  const Vec x = random_vec(37, rng, -20.0, 20.0);
  double mx = -1e300;
  for (double v : x) mx = std::max(mx, v);
  double ref = 0.0;
  for (double v : x) ref += std::exp(v - mx);
  // Stream the first 20 into one accumulator and the rest into another, then merge.
  auto a = xtrain::math::online_softmax_init(), b = xtrain::math::online_softmax_init();
  for (size_t i = 0; i < x.size(); ++i) {
    auto& acc = i < 20 ? a : b;
    acc = xtrain::math::online_softmax_push(acc, static_cast<float>(x[i]));
  }
  const auto m = xtrain::math::online_softmax_merge(a, b);
  CHECK(m.max == static_cast<float>(mx));
  CHECK(std::abs(m.sum - ref) <= 1e-5 * ref);
  const auto e = xtrain::math::online_softmax_merge(xtrain::math::online_softmax_init(), m);
  CHECK(e.sum == m.sum);
}
