// Every CUDA backend operation against the CPU backend on fresh random inputs ([gpu]).
//
// Tolerances, as ||cuda - cpu|| / ||cpu||, and why:
//   bitwise equal   embedding forward/backward, residual, scale: the same float additions and
//                   multiplications in the same order (embedding backward adds each position
//                   in the CPU's order by design);
//   1e-6            GELU, AdamW: per-element math shared with the CPU; CUDA's tanhf/sqrtf and
//                   fused multiply-adds differ from glibc by an ulp or two;
//   1e-5            layernorm, softmax + cross-entropy, and strict-fp32 products and attention:
//                   the same math with reductions summed in another order (rounding grows like
//                   sqrt(terms) * 6e-8, ~2e-6 for 768 terms);
//   2e-3 / 3e-3     products / attention with TF32 tensor cores: operands rounded to 10 mantissa
//                   bits (unit roundoff 4.9e-4), accumulated in fp32;
//   1e-12           sum of squares: exact squares summed in double in another order.
// Outputs that an operation writes are poisoned with NaN first (an unwritten element fails);
// outputs that accumulate start from random values (so "+=" is checked, not "=").
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "cuda/cuda_api.hpp"
#include "tests/cuda/cuda_test_util.hpp"
#include "worker/cpu_backend.hpp"

using namespace xtrain;
using namespace xtrain::test;

namespace {

constexpr double kPerElement = 1e-6;
constexpr double kReduction = 1e-5;
double product_tol(const GpuMode& p) { return p.tf32() ? 2e-3 : 1e-5; }
double attention_tol(const GpuMode& p) { return p.tf32() ? 3e-3 : 1e-5; }

struct OpsTest : Seeded {
  CpuBackend cpu;  // the reference
};

}  // namespace

TEST_CASE_METHOD(OpsTest, "cuda embedding forward and backward equal the CPU's bit for bit", "[gpu][ops]") {
  INFO("seed " << seed);
  auto gpu = cuda::make_backend(0, Precision::fp32);
  struct Shape { int B, T, C, V; };
  for (const Shape s : {Shape{3, 41, 72, 29}, Shape{8, 256, 768, 50257}}) {
    INFO("B " << s.B << " T " << s.T << " C " << s.C << " V " << s.V);
    const size_t btc = static_cast<size_t>(s.B) * s.T * s.C;
    const auto tokens = rnd.ints(static_cast<size_t>(s.B) * s.T, s.V);
    const auto wte = rnd.normal(static_cast<size_t>(s.V) * s.C), wpe = rnd.normal(static_cast<size_t>(s.T) * s.C);
    const auto dout = rnd.normal(btc);
    auto dwte = rnd.normal(wte.size()), dwpe = rnd.normal(wpe.size());

    std::vector<float> out(btc);
    cpu.embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), s.B, s.T, s.C);
    DeviceInts d_tokens(*gpu, tokens);
    DeviceFloats d_wte(*gpu, wte), d_wpe(*gpu, wpe), d_dout(*gpu, dout), d_dwte(*gpu, dwte), d_dwpe(*gpu, dwpe);
    auto d_out = DeviceFloats::poisoned(*gpu, btc);
    gpu->embedding_forward(d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), s.B, s.T, s.C);
    CHECK(d_out.host() == out);

    cpu.embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), s.B, s.T, s.C);
    gpu->embedding_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(), s.B, s.T, s.C);
    CHECK(d_dwte.host() == dwte);
    CHECK(d_dwpe.host() == dwpe);
  }
}

TEST_CASE_METHOD(OpsTest, "cuda layernorm forward and backward match the CPU", "[gpu][ops]") {
  INFO("seed " << seed);
  auto gpu = cuda::make_backend(0, Precision::fp32);
  struct Shape { int N, C; };
  for (const Shape s : {Shape{333, 100}, Shape{2048, 768}}) {
    INFO("N " << s.N << " C " << s.C);
    const size_t nc = static_cast<size_t>(s.N) * s.C;
    auto inp = rnd.normal(nc, 2.0f);
    for (size_t i = 0; i < nc; i += 7) inp[i] += 10.0f;  // rows with a large mean
    const auto w = rnd.normal(s.C), b = rnd.normal(s.C), dout = rnd.normal(nc);
    auto dinp = rnd.normal(nc), dw = rnd.normal(s.C), db = rnd.normal(s.C);
    std::vector<float> out(nc), mean(s.N), rstd(s.N);
    cpu.layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), s.N, s.C);

    DeviceFloats d_inp(*gpu, inp), d_w(*gpu, w), d_b(*gpu, b), d_dout(*gpu, dout);
    auto d_out = DeviceFloats::poisoned(*gpu, nc);
    auto d_mean = DeviceFloats::poisoned(*gpu, s.N), d_rstd = DeviceFloats::poisoned(*gpu, s.N);
    gpu->layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_w.get(), d_b.get(), s.N, s.C);
    CHECK(rel_err(d_out.host(), out) < kReduction);
    CHECK(rel_err(d_mean.host(), mean) < kReduction);
    CHECK(rel_err(d_rstd.host(), rstd) < kReduction);

    // Backward from the CPU's saved statistics on both, so only backward is compared.
    DeviceFloats d_mean_ref(*gpu, mean), d_rstd_ref(*gpu, rstd), d_dinp(*gpu, dinp), d_dw(*gpu, dw), d_db(*gpu, db);
    cpu.layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                           rstd.data(), s.N, s.C);
    gpu->layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(), d_w.get(),
                            d_mean_ref.get(), d_rstd_ref.get(), s.N, s.C);
    CHECK(rel_err(d_dinp.host(), dinp) < kReduction);
    CHECK(rel_err(d_dw.host(), dw) < kReduction);
    CHECK(rel_err(d_db.host(), db) < kReduction);
  }
}

TEST_CASE_METHOD(OpsTest, "cuda matmul forward and backward match the CPU in strict fp32 and tf32", "[gpu][ops]") {
  INFO("seed " << seed);
  for (const GpuMode& p : {kStrictFp32, kTf32}) {
    auto gpu = cuda::make_backend(0, p.precision);
    struct Shape { int N, C, OC; bool bias; };
    for (const Shape s : {Shape{257, 96, 200, true}, Shape{1024, 768, 2304, true}, Shape{512, 768, 384, false},
                          Shape{33, 17, 5, true}}) {
      INFO(p.name << ": N " << s.N << " C " << s.C << " OC " << s.OC << (s.bias ? " with bias" : ""));
      const auto inp = rnd.normal(static_cast<size_t>(s.N) * s.C);
      const auto w = rnd.normal(static_cast<size_t>(s.OC) * s.C, 0.05f);
      const auto bias = rnd.normal(s.OC);
      const auto dout = rnd.normal(static_cast<size_t>(s.N) * s.OC);
      auto dw = rnd.normal(w.size()), db = rnd.normal(s.OC);
      const float dout_scale = 0.37f;
      std::vector<float> out(static_cast<size_t>(s.N) * s.OC), dinp(inp.size());
      cpu.matmul_forward(out.data(), inp.data(), w.data(), s.bias ? bias.data() : nullptr, s.N, s.C, s.OC);

      DeviceFloats d_inp(*gpu, inp), d_w(*gpu, w), d_bias(*gpu, bias), d_dout(*gpu, dout), d_dw(*gpu, dw),
          d_db(*gpu, db);
      auto d_out = DeviceFloats::poisoned(*gpu, out.size());
      auto d_dinp = DeviceFloats::poisoned(*gpu, inp.size());
      gpu->matmul_forward(d_out.get(), d_inp.get(), d_w.get(), s.bias ? d_bias.get() : nullptr, s.N, s.C, s.OC);
      CHECK(rel_err(d_out.host(), out) < product_tol(p));

      cpu.matmul_backward(dinp.data(), dw.data(), s.bias ? db.data() : nullptr, dout.data(), inp.data(), w.data(),
                          s.N, s.C, s.OC, dout_scale);
      gpu->matmul_backward(d_dinp.get(), d_dw.get(), s.bias ? d_db.get() : nullptr, d_dout.get(), d_inp.get(),
                           d_w.get(), s.N, s.C, s.OC, dout_scale);
      CHECK(rel_err(d_dinp.host(), dinp) < product_tol(p));
      CHECK(rel_err(d_dw.host(), dw) < product_tol(p));
      CHECK(rel_err(d_db.host(), db) < kReduction);  // bias gradient: a column sum, no products
    }
  }
}

TEST_CASE_METHOD(OpsTest, "cuda causal attention forward and backward match the CPU in strict fp32 and tf32",
                 "[gpu][ops]") {
  INFO("seed " << seed);
  for (const GpuMode& p : {kStrictFp32, kTf32}) {
    auto gpu = cuda::make_backend(0, p.precision);
    struct Shape { int B, T, C, NH; };
    for (const Shape s : {Shape{2, 37, 96, 3}, Shape{4, 256, 768, 12}, Shape{1, 1, 8, 2}}) {
      INFO(p.name << ": B " << s.B << " T " << s.T << " C " << s.C << " NH " << s.NH);
      const size_t btc = static_cast<size_t>(s.B) * s.T * s.C;
      const auto qkv = rnd.normal(3 * btc);
      const auto dout = rnd.normal(btc);
      std::vector<float> out(btc), dqkv(3 * btc);
      std::vector<float> saved(cpu.attention_saved_floats(s.B, s.T, s.C, s.NH));
      std::vector<float> scratch(cpu.attention_scratch_floats(s.B, s.T, s.C, s.NH));
      cpu.attention_forward(out.data(), saved.data(), qkv.data(), scratch.data(), s.B, s.T, s.C, s.NH);
      cpu.attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), saved.data(), scratch.data(), s.B,
                             s.T, s.C, s.NH);

      DeviceFloats d_qkv(*gpu, qkv), d_dout(*gpu, dout);
      auto d_out = DeviceFloats::poisoned(*gpu, btc);
      auto d_dqkv = DeviceFloats::poisoned(*gpu, 3 * btc);
      auto d_saved = DeviceFloats::poisoned(*gpu, gpu->attention_saved_floats(s.B, s.T, s.C, s.NH));
      auto d_scratch = DeviceFloats::poisoned(*gpu, gpu->attention_scratch_floats(s.B, s.T, s.C, s.NH));
      gpu->attention_forward(d_out.get(), d_saved.get(), d_qkv.get(), d_scratch.get(), s.B, s.T, s.C, s.NH);
      CHECK(rel_err(d_out.host(), out) < attention_tol(p));
      gpu->attention_backward(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_saved.get(), d_scratch.get(),
                              s.B, s.T, s.C, s.NH);
      CHECK(rel_err(d_dqkv.host(), dqkv) < attention_tol(p));
    }
  }
}

TEST_CASE_METHOD(OpsTest, "cuda gelu, residual and scale match the CPU, aligned or not, in place or not",
                 "[gpu][ops]") {
  INFO("seed " << seed);
  auto gpu = cuda::make_backend(0, Precision::fp32);
  for (const size_t offset : {size_t{0}, size_t{1}}) {  // 1: every pointer misaligned for 16-byte access
    const size_t n = 100003;
    INFO("offset " << offset << " n " << n);
    const auto x = rnd.normal(n + offset, 3.0f), y = rnd.normal(n + offset);
    DeviceFloats d_x(*gpu, x), d_y(*gpu, y);

    std::vector<float> g(n + offset, 0.0f), dg(n + offset, 0.0f), sum(n + offset, 0.0f);
    cpu.gelu_forward(g.data() + offset, x.data() + offset, n);
    auto d_g = DeviceFloats::poisoned(*gpu, n + offset);
    gpu->gelu_forward(d_g.get() + offset, d_x.get() + offset, n);
    auto got = d_g.host();
    CHECK(rel_err({got.begin() + offset, got.end()}, {g.begin() + offset, g.end()}) < kPerElement);

    // backward in place: dinp aliases dout
    std::vector<float> dinout = y;
    cpu.gelu_backward(dinout.data() + offset, x.data() + offset, dinout.data() + offset, n);
    DeviceFloats d_dinout(*gpu, y);
    gpu->gelu_backward(d_dinout.get() + offset, d_x.get() + offset, d_dinout.get() + offset, n);
    got = d_dinout.host();
    CHECK(rel_err({got.begin() + offset, got.end()}, {dinout.begin() + offset, dinout.end()}) < kPerElement);

    // residual in place (out aliases a) and scale: exact
    std::vector<float> acc = x;
    cpu.residual_forward(acc.data() + offset, acc.data() + offset, y.data() + offset, n);
    cpu.scale(acc.data() + offset, 0.731f, n);
    DeviceFloats d_acc(*gpu, x);
    gpu->residual_forward(d_acc.get() + offset, d_acc.get() + offset, d_y.get() + offset, n);
    gpu->scale(d_acc.get() + offset, 0.731f, n);
    CHECK(d_acc.host() == acc);
  }
}

TEST_CASE_METHOD(OpsTest, "cuda softmax cross-entropy matches the CPU and keeps the padding out", "[gpu][ops]") {
  INFO("seed " << seed);
  auto gpu = cuda::make_backend(0, Precision::fp32);
  struct Shape { int N, V, Vp; };
  for (const Shape s : {Shape{67, 1000, 1024}, Shape{8, 50257, 50304}, Shape{5, 3, 128}}) {
    INFO("N " << s.N << " V " << s.V << " Vp " << s.Vp);
    auto logits = rnd.normal(static_cast<size_t>(s.N) * s.Vp, 3.0f);
    for (int n = 0; n < s.N; ++n) {
      for (int j = s.V; j < s.Vp; ++j) logits[static_cast<size_t>(n) * s.Vp + j] = 1e4f;  // would win if counted
    }
    const auto targets = rnd.ints(s.N, s.V);
    const float dloss = 1.0f / static_cast<float>(s.N);
    DeviceFloats d_logits(*gpu, logits);
    DeviceInts d_targets(*gpu, targets);
    auto d_losses = DeviceFloats::poisoned(*gpu, s.N);
    std::vector<float> losses(s.N);
    cpu.softmax_cross_entropy(logits.data(), losses.data(), targets.data(), dloss, s.N, s.V, s.Vp);
    gpu->softmax_cross_entropy(d_logits.get(), d_losses.get(), d_targets.get(), dloss, s.N, s.V, s.Vp);
    CHECK(rel_err(d_losses.host(), losses) < kReduction);
    const auto grad = d_logits.host();
    CHECK(rel_err(grad, logits) < kReduction);
    for (int n = 0; n < s.N; ++n) {
      for (int j = s.V; j < s.Vp; ++j) REQUIRE(grad[static_cast<size_t>(n) * s.Vp + j] == 0.0f);
    }
  }
}

TEST_CASE_METHOD(OpsTest, "cuda AdamW with a clip scale matches the CPU", "[gpu][ops]") {
  INFO("seed " << seed);
  auto gpu = cuda::make_backend(0, Precision::fp32);
  const size_t n = 100001;
  auto params = rnd.normal(n), m = rnd.normal(n, 0.01f), v = rnd.uniform(n, 0.0f, 1e-3f);
  const auto grads = rnd.normal(n);
  AdamWHyper h;
  h.lr = 1e-3f;
  h.weight_decay = 0.1f;
  h.grad_scale = 0.42f;
  h.bias_correction1 = 1.0f - std::pow(h.beta1, 3.0f);
  h.bias_correction2 = 1.0f - std::pow(h.beta2, 3.0f);
  DeviceFloats d_params(*gpu, params), d_grads(*gpu, grads), d_m(*gpu, m), d_v(*gpu, v);
  cpu.adamw_update(params.data(), nullptr, grads.data(), m.data(), v.data(), n, h);
  gpu->adamw_update(d_params.get(), nullptr, d_grads.get(), d_m.get(), d_v.get(), n, h);
  CHECK(rel_err(d_params.host(), params) < kPerElement);
  CHECK(rel_err(d_m.host(), m) < kPerElement);
  CHECK(rel_err(d_v.host(), v) < kPerElement);
}

TEST_CASE_METHOD(OpsTest, "cuda sum of squares matches the CPU and is deterministic", "[gpu][ops]") {
  INFO("seed " << seed);
  auto gpu = cuda::make_backend(0, Precision::fp32);
  for (const size_t n : {size_t{1}, size_t{1000}, size_t{3'000'017}}) {
    INFO("n " << n);
    const auto x = rnd.normal(n);
    DeviceFloats d_x(*gpu, x);
    const double want = cpu.sum_squares(x.data(), n);
    const double got = gpu->sum_squares(d_x.get(), n);
    CHECK(std::abs(got - want) <= 1e-12 * want);
    CHECK(gpu->sum_squares(d_x.get(), n) == got);
  }
}

TEST_CASE_METHOD(OpsTest, "cuda backward operations give the same bits on every call", "[gpu][ops][determinism]") {
  INFO("seed " << seed);
  for (const GpuMode& p : {kStrictFp32, kTf32}) {
    INFO(p.name);
    auto gpu = cuda::make_backend(0, p.precision);
    const int B = 4, T = 128, C = 256, NH = 4, OC = 768, V = 300;
    const size_t btc = static_cast<size_t>(B) * T * C;
    const auto qkv = rnd.normal(3 * btc), x = rnd.normal(btc), dx = rnd.normal(btc);
    const auto w = rnd.normal(static_cast<size_t>(OC) * C, 0.05f), dy = rnd.normal(static_cast<size_t>(B) * T * OC);
    const auto lnw = rnd.normal(C);
    const auto tokens = rnd.ints(static_cast<size_t>(B) * T, V);
    DeviceFloats d_qkv(*gpu, qkv), d_x(*gpu, x), d_dx(*gpu, dx), d_w(*gpu, w), d_dy(*gpu, dy), d_lnw(*gpu, lnw);
    DeviceInts d_tokens(*gpu, tokens);

    auto zeros = [&](size_t n) { return DeviceFloats(*gpu, std::vector<float>(n)); };
    // One backward pass of each kind into fresh zeroed gradients; returns every output.
    auto run = [&] {
      std::vector<std::vector<float>> outs;
      auto out = zeros(btc), dqkv = zeros(3 * btc);
      auto saved = zeros(gpu->attention_saved_floats(B, T, C, NH));
      auto scratch = zeros(gpu->attention_scratch_floats(B, T, C, NH));
      gpu->attention_forward(out.get(), saved.get(), d_qkv.get(), scratch.get(), B, T, C, NH);
      gpu->attention_backward(dqkv.get(), d_dx.get(), d_qkv.get(), out.get(), saved.get(), scratch.get(), B, T, C, NH);
      outs.push_back(dqkv.host());

      auto dinp = zeros(btc), dw = zeros(w.size()), db = zeros(OC);
      gpu->matmul_backward(dinp.get(), dw.get(), db.get(), d_dy.get(), d_x.get(), d_w.get(), B * T, C, OC, 1.0f);
      for (auto* a : {&dinp, &dw, &db}) outs.push_back(a->host());

      auto ln = zeros(btc), mean = zeros(B * T), rstd = zeros(B * T);
      auto ldinp = zeros(btc), ldw = zeros(C), ldb = zeros(C);
      gpu->layernorm_forward(ln.get(), mean.get(), rstd.get(), d_x.get(), d_lnw.get(), d_lnw.get(), B * T, C);
      gpu->layernorm_backward(ldinp.get(), ldw.get(), ldb.get(), d_dx.get(), d_x.get(), d_lnw.get(), mean.get(),
                              rstd.get(), B * T, C);
      for (auto* a : {&ldinp, &ldw, &ldb}) outs.push_back(a->host());

      auto dwte = zeros(static_cast<size_t>(V) * C), dwpe = zeros(static_cast<size_t>(T) * C);
      gpu->embedding_backward(dwte.get(), dwpe.get(), d_dx.get(), d_tokens.get(), B, T, C);
      for (auto* a : {&dwte, &dwpe}) outs.push_back(a->host());
      return outs;
    };
    const auto first = run();
    const auto second = run();
    REQUIRE(first.size() == second.size());
    for (size_t i = 0; i < first.size(); ++i) {
      INFO("output " << i);
      CHECK(first[i] == second[i]);
    }
  }
}
