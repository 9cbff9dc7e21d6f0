// Every CUDA backend operation against the CPU backend on fresh random inputs ([gpu]), in each
// precision against the CPU in the matching one: fp32 and tf32 against the CPU's fp32, bf16
// against the CPU's bf16 emulation (its inputs bf16 values, as stored).
//
// Tolerances, as ||cuda - cpu|| / ||cpu||, and why:
//   bitwise equal   embedding forward, position gradient, residual, scale: the same float
//                   additions and multiplications in the same order (and in bf16 one rounding
//                   of the same fp32 result);
//   1e-6            token gradient: a token's positions in the CPU's order, but a frequent
//                   token's sum grouped by chunks of the sorted positions (cuda/kernels/embedding.cuh);
//   1e-6            GELU, AdamW: per-element math shared with the CPU; CUDA's tanhf/sqrtf and
//                   fused multiply-adds differ from glibc by an ulp or two;
//   1e-5            layernorm, softmax + cross-entropy, strict-fp32 products, and attention with
//                   fp32 activations (the flash attention's fp32 kernels, in tf32 too): the same
//                   math with reductions summed in another order (rounding grows like
//                   sqrt(terms) * 6e-8, ~2e-6 for 768 terms); also every fp32 output in bf16
//                   (statistics, losses, bias and layernorm-parameter gradients);
//   2e-3            products with TF32 tensor cores: operands rounded to 10 mantissa bits (unit
//                   roundoff 4.9e-4), accumulated in fp32;
//   1e-4            bf16 products' parameter gradients (bf16 x bf16 into fp32): the products of
//                   bf16 values are exact in fp32, but tensor cores add them in blocks whose
//                   internal accumulation is not IEEE fp32 addition in our order;
//   one bf16 ulp    every activation stored in bf16 (tests/worker/bf16_check.hpp): both backends
//                   round the same exact value with the same rounding (proved bit-identical in
//                   test_cuda_bf16.cpp), so they agree except where their ~1e-7 fp32 differences
//                   straddle a rounding boundary, one ulp (2^-8 relative) apart; plus 1e-5 of the
//                   output's RMS for elements near zero out of cancelling sums, and equal in at
//                   least 90% of elements (expected: all but ~1e-7 / 2^-8 ~ 1e-4 of them);
//   1e-12           sum of squares: exact squares summed in double in another order.
// Outputs that an operation writes are poisoned with NaN first (an unwritten element fails);
// outputs that accumulate start from random values (so "+=" is checked, not "=").
// Attention in bf16: as test_cuda_flash_attention.cpp bounds its kernels against the CPU's
// emulation (tests/worker/flash_attention_util.hpp, Bf16Agreement): each tensor within 2^-7 of its
// largest value and at most 3% of elements differing (p and ds round inside, so a flip there moves
// an output by less than an ulp of the largest value, but can move a small element by more).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "cuda/cuda_api.hpp"
#include "tests/cuda/cuda_test_util.hpp"
#include "tests/worker/flash_attention_util.hpp"
#include "tests/worker/bf16_check.hpp"
#include "worker/cpu/cpu_backend.hpp"

using namespace xtrain;
using namespace xtrain::test;

namespace {

constexpr double kPerElement = 1e-6;
constexpr double kReduction = 1e-5;
constexpr double kBf16ProductGrad = 1e-4;
constexpr double kBf16FloorOfRms = 1e-5;
constexpr double kBf16MinEqualShare = 0.9;
constexpr double kBf16AttentionMaxRel = 0x1p-7;
constexpr double kBf16AttentionMaxMismatch = 0.03;
double product_tol(const GpuMode& p) { return p.tf32() ? 2e-3 : 1e-5; }

bool is_bf16(const GpuMode& p) { return p.precision == Precision::bf16; }

// The CPU reference of a precision: fp32, or the bf16 emulation.
CpuBackend reference(const GpuMode& p) { return CpuBackend(is_bf16(p) ? Precision::bf16 : Precision::fp32); }

// An activation the GPU stored against the CPU's: one bf16 ulp in bf16, `fp32_tol` otherwise.
void check_stored(const GpuMode& p, const std::vector<float>& got, const std::vector<float>& want, double fp32_tol) {
  if (is_bf16(p)) {
    check_bf16_close(got, want, kBf16FloorOfRms, kBf16MinEqualShare);
  } else {
    CHECK(rel_err(got, want) < fp32_tol);
  }
}

struct OpsTest : Seeded {
  // Inputs as the precision stores them: bf16 values in bf16.
  std::vector<float> normal(const GpuMode& p, size_t n, float sd = 1.0f) {
    std::vector<float> v = rnd.normal(n, sd);
    if (is_bf16(p)) reference(p).convert(v.data(), v.data(), n);
    return v;
  }
};

}  // namespace

TEST_CASE_METHOD(OpsTest, "cuda embedding forward and backward match the CPU, frequent tokens too",
                 "[gpu][ops][bf16]") {
  INFO("seed " << seed);
  for (const GpuMode& p : {kStrictFp32, kBf16}) {
    CpuBackend cpu = reference(p);
    auto gpu = cuda::make_backend(0, p.precision);
    // every: one position in `every` is token 3. C 44: bf16 rows not whole packs (the element path).
    struct Shape { int B, T, C, V; int every; };
    for (const Shape s : sizes_for_this_device<Shape>({{3, 41, 72, 29, 0}, {2, 1000, 40, 10, 1}, {3, 5, 44, 29, 0}},
                                                      {{8, 256, 768, 50257, 0}, {8, 1024, 768, 50257, 2}},
                                                      {{1, 7, 72, 50257, 0}, {2, 65, 64, 50257, 2}})) {
      INFO(p.name << ": B " << s.B << " T " << s.T << " C " << s.C << " V " << s.V << " every " << s.every);
      const size_t btc = static_cast<size_t>(s.B) * s.T * s.C;
      auto tokens = rnd.ints(static_cast<size_t>(s.B) * s.T, s.V);
      for (size_t i = 0; s.every > 0 && i < tokens.size(); i += static_cast<size_t>(s.every)) tokens[i] = 3;
      const auto wte = normal(p, static_cast<size_t>(s.V) * s.C), wpe = normal(p, static_cast<size_t>(s.T) * s.C);
      const auto dout = normal(p, btc);
      auto dwte = rnd.normal(wte.size()), dwpe = rnd.normal(wpe.size());
      DeviceInts d_tokens(*gpu, tokens);
      DeviceActs d_wte(*gpu, wte), d_wpe(*gpu, wpe), d_dout(*gpu, dout);
      DeviceFloats d_dwte(*gpu, dwte), d_dwpe(*gpu, dwpe);
      auto d_out = DeviceActs::poisoned(*gpu, btc);

      std::vector<float> out(btc);
      cpu.embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), s.B, s.T, s.C);
      gpu->embedding_forward(d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), s.B, s.T, s.C);
      CHECK(d_out.host() == out);

      cpu.embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), s.B, s.T, s.C);
      gpu->embedding_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(), s.B, s.T, s.C);
      // A row of dwte sums every position that holds its token (2,000 of them where every
      // position is token 3), in chunks and runs rather than the CPU's one loop: a reduction.
      CHECK(rel_err(d_dwte.host(), dwte) < kReduction);
      CHECK(d_dwpe.host() == dwpe);
    }
  }
}

// The shapes take both of cuda/kernels/layernorm.cuh's paths: the row path (C a multiple of 16
// bytes, aligned: fp32 at C 100, both at C 768; at C 1600 the forward in both and the backward in
// bf16, its widest row) and the element path (bf16 at C 100, every pointer off by one element;
// fp32's backward at C 1600, wider than its registers hold; C 2304, wider than the row path holds).
TEST_CASE_METHOD(OpsTest, "cuda layernorm forward, fused residual add and backward match the CPU, aligned or not",
                 "[gpu][ops][bf16]") {
  INFO("seed " << seed);
  for (const GpuMode& p : {kStrictFp32, kBf16}) {
    CpuBackend cpu = reference(p);
    auto gpu = cuda::make_backend(0, p.precision);
    struct Shape { int N, C; size_t offset; };
    for (const Shape s : {Shape{333, 100, 0}, Shape{2048, 768, 0}, Shape{67, 768, 1}, Shape{24, 1600, 0},
                             Shape{40, 2304, 0}}) {
      INFO(p.name << ": N " << s.N << " C " << s.C << " offset " << s.offset);
      const size_t nc = static_cast<size_t>(s.N) * s.C, o = s.offset;
      auto inp = rnd.normal(nc + o, 2.0f);
      for (size_t i = 0; i < nc; i += 7) inp[o + i] += 10.0f;  // rows with a large mean
      if (is_bf16(p)) cpu.convert(inp.data(), inp.data(), nc + o);
      const auto w = normal(p, s.C + o), b = normal(p, s.C + o), dout = normal(p, nc + o);
      const auto other = normal(p, nc + o, 0.5f);
      auto dinp = normal(p, nc + o), dw = rnd.normal(s.C), db = rnd.normal(s.C);
      DeviceActs d_inp(*gpu, inp), d_w(*gpu, w), d_b(*gpu, b), d_dout(*gpu, dout), d_dinp(*gpu, dinp);
      DeviceActs d_other(*gpu, other);
      DeviceFloats d_dw(*gpu, dw), d_db(*gpu, db);
      auto d_out = DeviceActs::poisoned(*gpu, nc + o), d_res = DeviceActs::poisoned(*gpu, nc + o);
      auto d_mean = DeviceFloats::poisoned(*gpu, s.N), d_rstd = DeviceFloats::poisoned(*gpu, s.N);
      auto tail = [&](const std::vector<float>& v) { return std::vector<float>(v.begin() + o, v.end()); };

      std::vector<float> out(nc + o), mean(s.N), rstd(s.N);
      cpu.layernorm_forward(out.data() + o, mean.data(), rstd.data(), inp.data() + o, w.data() + o, b.data() + o, s.N,
                            s.C);
      gpu->layernorm_forward(d_out.get() + o, d_mean.get(), d_rstd.get(), d_inp.get() + o, d_w.get() + o,
                             d_b.get() + o, s.N, s.C);
      check_stored(p, tail(d_out.host()), tail(out), kReduction);
      CHECK(rel_err(d_mean.host(), mean) < kReduction);
      CHECK(rel_err(d_rstd.host(), rstd) < kReduction);

      // Fused: residual = inp + other, bitwise the CPU's (one rounding of the same sum), and its
      // layernorm as above. The CPU's default composes residual_forward and layernorm_forward.
      std::vector<float> res(nc + o), res_out(nc + o);
      cpu.residual_layernorm_forward(res.data() + o, res_out.data() + o, mean.data(), rstd.data(), inp.data() + o,
                                     other.data() + o, w.data() + o, b.data() + o, s.N, s.C);
      gpu->residual_layernorm_forward(d_res.get() + o, d_out.get() + o, d_mean.get(), d_rstd.get(), d_inp.get() + o,
                                      d_other.get() + o, d_w.get() + o, d_b.get() + o, s.N, s.C);
      CHECK(tail(d_res.host()) == tail(res));
      check_stored(p, tail(d_out.host()), tail(res_out), kReduction);
      CHECK(rel_err(d_mean.host(), mean) < kReduction);
      CHECK(rel_err(d_rstd.host(), rstd) < kReduction);

      // Backward (of the plain layernorm) from the CPU's saved statistics on both, so only
      // backward is compared.
      cpu.layernorm_forward(out.data() + o, mean.data(), rstd.data(), inp.data() + o, w.data() + o, b.data() + o, s.N,
                            s.C);
      DeviceFloats d_mean_ref(*gpu, mean), d_rstd_ref(*gpu, rstd);
      cpu.layernorm_backward(dinp.data() + o, dw.data(), db.data(), dout.data() + o, inp.data() + o, w.data() + o,
                             mean.data(), rstd.data(), s.N, s.C);
      gpu->layernorm_backward(d_dinp.get() + o, d_dw.get(), d_db.get(), d_dout.get() + o, d_inp.get() + o,
                              d_w.get() + o, d_mean_ref.get(), d_rstd_ref.get(), s.N, s.C);
      check_stored(p, tail(d_dinp.host()), tail(dinp), kReduction);
      CHECK(rel_err(d_dw.host(), dw) < kReduction);
      CHECK(rel_err(d_db.host(), db) < kReduction);
    }
  }
}

TEST_CASE_METHOD(OpsTest, "cuda matmul forward and backward match the CPU in strict fp32, tf32 and bf16",
                 "[gpu][ops][bf16]") {
  INFO("seed " << seed);
  for (const GpuMode& p : {kStrictFp32, kTf32, kBf16}) {
    CpuBackend cpu = reference(p);
    auto gpu = cuda::make_backend(0, p.precision);
    // bias_offset: the bias that many elements off 16-byte alignment, added by broadcast.
    struct Shape { int N, C, OC; bool bias; size_t bias_offset; };
    for (const Shape s : sizes_for_this_device<Shape>(
             {{257, 96, 200, true, 0}, {33, 17, 5, true, 1}, {64, 40, 48, true, 3}},
             {{1024, 768, 2304, true, 0}, {512, 768, 384, false, 0}}, {{130, 64, 192, false, 0}})) {
      INFO(p.name << ": N " << s.N << " C " << s.C << " OC " << s.OC << (s.bias ? " with bias" : "")
                  << " at offset " << s.bias_offset);
      const auto inp = normal(p, static_cast<size_t>(s.N) * s.C);
      const auto w = normal(p, static_cast<size_t>(s.OC) * s.C, 0.05f);
      const auto bias = normal(p, s.OC + s.bias_offset);
      const auto dout = normal(p, static_cast<size_t>(s.N) * s.OC);
      DeviceActs d_inp(*gpu, inp), d_w(*gpu, w), d_bias(*gpu, bias), d_dout(*gpu, dout);
      auto d_out = DeviceActs::poisoned(*gpu, static_cast<size_t>(s.N) * s.OC);
      const ConstActPtr b = s.bias ? ConstActPtr(d_bias.get() + s.bias_offset) : nullptr;

      std::vector<float> out(static_cast<size_t>(s.N) * s.OC);
      cpu.matmul_forward(out.data(), inp.data(), w.data(), s.bias ? bias.data() + s.bias_offset : nullptr, s.N, s.C,
                         s.OC);
      gpu->matmul_forward(d_out.get(), d_inp.get(), d_w.get(), b, s.N, s.C, s.OC);
      check_stored(p, d_out.host(), out, product_tol(p));

      // Scale 1 is GPT's for every bias: in bf16 the bias gradient comes from the weight-gradient
      // product's epilogue (BGRADB) then, a column sum kernel otherwise.
      for (const float dout_scale : {0.37f, 1.0f}) {
        INFO("dout_scale " << dout_scale);
        auto dw = rnd.normal(w.size()), db = rnd.normal(s.OC);
        DeviceFloats d_dw(*gpu, dw), d_db(*gpu, db);
        auto d_dinp = DeviceActs::poisoned(*gpu, inp.size());
        std::vector<float> dinp(inp.size());
        cpu.matmul_backward(dinp.data(), dw.data(), s.bias ? db.data() : nullptr, dout.data(), inp.data(), w.data(),
                            s.N, s.C, s.OC, dout_scale);
        gpu->matmul_backward(d_dinp.get(), d_dw.get(), s.bias ? d_db.get() : nullptr, d_dout.get(), d_inp.get(),
                             d_w.get(), s.N, s.C, s.OC, dout_scale);
        check_stored(p, d_dinp.host(), dinp, product_tol(p));
        CHECK(rel_err(d_dw.host(), dw) < (is_bf16(p) ? kBf16ProductGrad : product_tol(p)));
        CHECK(rel_err(d_db.host(), db) < kReduction);  // bias gradient: a column sum, no products
      }
    }
  }
}

// The MLP's fused products (GELU in the fc product's epilogue, its gradient in fc_proj's dinp
// product), shaped as GPT uses them: fc (N,C) -> (N,H), fc_proj (N,H) -> (N,C), H a multiple of 8.
// Interpret mode runs the GELU of worker/math/gelu.hpp, the CPU's, so the tolerances are the
// products'; a GPU runs cuBLASLt's own GELU, whose formula NVIDIA does not publish (a tanh.approx
// would be 2^-11 relative): there kGeluEpilogue bounds the fp32 outputs that pass through it.
TEST_CASE_METHOD(OpsTest, "cuda fused matmul + GELU forward and backward match the CPU in fp32, tf32 and bf16",
                 "[gpu][ops][bf16]") {
  INFO("seed " << seed);
  constexpr double kGeluEpilogue = kInterpreted ? 0.0 : 1e-3;
  for (const GpuMode& p : {kStrictFp32, kTf32, kBf16}) {
    CpuBackend cpu = reference(p);
    auto gpu = cuda::make_backend(0, p.precision);
    // bias_offset: the fc bias that many elements off 16-byte alignment (broadcast, GELU_AUX).
    struct Shape { int N, C, H; bool bias; size_t bias_offset; };
    for (const Shape s : sizes_for_this_device<Shape>({{257, 40, 160, true, 0}, {33, 24, 8, true, 3},
                                                       {70, 16, 64, false, 0}},
                                                      {{1024, 768, 3072, true, 0}}, {{130, 64, 256, true, 0}})) {
      INFO(p.name << ": N " << s.N << " C " << s.C << " H " << s.H << (s.bias ? " with bias" : "")
                  << " at offset " << s.bias_offset);
      const size_t nc = static_cast<size_t>(s.N) * s.C, nh = static_cast<size_t>(s.N) * s.H;
      const auto inp = normal(p, nc);                                              // (N,C)
      const auto w_fc = normal(p, static_cast<size_t>(s.H) * s.C, 0.3f);           // (H,C)
      const auto bias = normal(p, s.H + s.bias_offset);                            // (H) after the offset
      const auto w_proj = normal(p, static_cast<size_t>(s.C) * s.H, 0.1f);         // (C,H)
      const auto dout = normal(p, nc);                                             // (N,C)
      auto dw = rnd.normal(w_proj.size()), db = rnd.normal(s.C);                   // accumulate
      const float dout_scale = 0.37f;
      DeviceActs d_inp(*gpu, inp), d_w_fc(*gpu, w_fc), d_bias(*gpu, bias), d_w_proj(*gpu, w_proj),
          d_dout(*gpu, dout);
      DeviceFloats d_dw(*gpu, dw), d_db(*gpu, db);
      auto d_gelu = DeviceActs::poisoned(*gpu, nh), d_pre = DeviceActs::poisoned(*gpu, nh);
      auto d_dinp = DeviceActs::poisoned(*gpu, nh);
      const ConstActPtr b = s.bias ? ConstActPtr(d_bias.get() + s.bias_offset) : nullptr;

      std::vector<float> gelu(nh), pre(nh), dinp(nh);
      cpu.matmul_gelu_forward(gelu.data(), pre.data(), inp.data(), w_fc.data(),
                              s.bias ? bias.data() + s.bias_offset : nullptr, s.N, s.C, s.H);
      gpu->matmul_gelu_forward(d_gelu.get(), d_pre.get(), d_inp.get(), d_w_fc.get(), b, s.N, s.C, s.H);
      check_stored(p, d_pre.host(), pre, product_tol(p));
      check_stored(p, d_gelu.host(), gelu, product_tol(p) + kGeluEpilogue);

      // Backward from the CPU's forward on both, so only backward is compared.
      DeviceActs d_gelu_ref(*gpu, gelu), d_pre_ref(*gpu, pre);
      cpu.matmul_gelu_backward(dinp.data(), dw.data(), db.data(), dout.data(), gelu.data(), w_proj.data(), pre.data(),
                               s.N, s.H, s.C, dout_scale);
      gpu->matmul_gelu_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_gelu_ref.get(), d_w_proj.get(),
                                d_pre_ref.get(), s.N, s.H, s.C, dout_scale);
      check_stored(p, d_dinp.host(), dinp, product_tol(p) + kGeluEpilogue);
      CHECK(rel_err(d_dw.host(), dw) < (is_bf16(p) ? kBf16ProductGrad : product_tol(p)));
      CHECK(rel_err(d_db.host(), db) < kReduction);
    }
  }
}

TEST_CASE_METHOD(OpsTest, "cuda causal attention forward and backward match the CPU in every precision",
                 "[gpu][ops][bf16]") {
  INFO("seed " << seed);
  for (const GpuMode& p : {kStrictFp32, kTf32, kBf16}) {
    CpuBackend cpu = reference(p);
    auto gpu = cuda::make_backend(0, p.precision);
    Bf16Agreement agreement(kBf16AttentionMaxRel);
    struct Shape { int B, T, C, NH; };
    for (const Shape s : sizes_for_this_device<Shape>({{2, 37, 96, 3}, {1, 1, 32, 2}}, {{4, 256, 768, 12}},
                                                      {{1, 70, 256, 2}})) {
      INFO(p.name << ": B " << s.B << " T " << s.T << " C " << s.C << " NH " << s.NH);
      const size_t btc = static_cast<size_t>(s.B) * s.T * s.C;
      const auto qkv = normal(p, 3 * btc);
      const auto dout = normal(p, btc);
      std::vector<float> out(btc), dqkv(3 * btc);
      std::vector<float> saved(cpu.attention_saved_floats(s.B, s.T, s.C, s.NH));
      std::vector<float> scratch(cpu.attention_scratch_floats(s.B, s.T, s.C, s.NH));
      cpu.attention_forward(out.data(), saved.data(), qkv.data(), scratch.data(), s.B, s.T, s.C, s.NH);
      cpu.attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), saved.data(), scratch.data(), s.B,
                             s.T, s.C, s.NH);

      DeviceActs d_qkv(*gpu, qkv), d_dout(*gpu, dout);
      auto d_out = DeviceActs::poisoned(*gpu, btc);
      auto d_dqkv = DeviceActs::poisoned(*gpu, 3 * btc);
      auto d_saved = DeviceFloats::poisoned(*gpu, gpu->attention_saved_floats(s.B, s.T, s.C, s.NH));
      auto d_scratch = DeviceFloats::poisoned(*gpu, gpu->attention_scratch_floats(s.B, s.T, s.C, s.NH));
      gpu->attention_forward(d_out.get(), d_saved.get(), d_qkv.get(), d_scratch.get(), s.B, s.T, s.C, s.NH);
      gpu->attention_backward(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_saved.get(), d_scratch.get(),
                              s.B, s.T, s.C, s.NH);
      if (is_bf16(p)) {
        agreement.compare(d_out.host(), d_dqkv.host(), out, dqkv, {s.B, s.T, s.C, s.NH});
      } else {
        CHECK(rel_err(d_out.host(), out) < kReduction);
        CHECK(rel_err(d_dqkv.host(), dqkv) < kReduction);
      }
    }
    INFO(agreement.summary());
    CHECK(agreement.mismatch_fraction() <= kBf16AttentionMaxMismatch);
  }
}

// A decoder's step: the embedding at a position read from device memory (bitwise: the same sums),
// and the attention of one new position over a KV cache: the new row lands in the cache bitwise,
// the output within the reduction tolerance (fp32: the same math, sums in another order and CUDA's
// expf) or one bf16 ulp. Offset 1 misaligns the cache and the new row: the kernel's element path.
TEST_CASE_METHOD(OpsTest,
                 "cuda decoder step operations match the CPU: the embedding at a position and the attention step",
                 "[gpu][ops][bf16]") {
  INFO("seed " << seed);
  for (const GpuMode& p : {kStrictFp32, kBf16}) {
    CpuBackend cpu = reference(p);
    auto gpu = cuda::make_backend(0, p.precision);
    const int V = 29, C = 64, T = 12;
    const auto wte = normal(p, static_cast<size_t>(V) * C), wpe = normal(p, static_cast<size_t>(T) * C);
    const auto tokens = rnd.ints(2, V);
    DeviceActs d_wte(*gpu, wte), d_wpe(*gpu, wpe);
    DeviceInts d_tokens(*gpu, tokens);
    for (const int first : {0, 5, T - 2}) {
      INFO(p.name << ": embedding from position " << first);
      DeviceInts d_first(*gpu, std::vector<int32_t>{first});
      auto d_out = DeviceActs::poisoned(*gpu, 2 * static_cast<size_t>(C));
      std::vector<float> out(2 * static_cast<size_t>(C));
      cpu.embedding_forward_at(out.data(), tokens.data(), wte.data(), wpe.data(), &first, 1, 2, C);
      gpu->embedding_forward_at(d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), d_first.get(), 1, 2, C);
      CHECK(d_out.host() == out);
    }

    struct Shape { int B, T, C, NH; };
    for (const Shape s : sizes_for_this_device<Shape>({{2, 37, 96, 3}, {1, 9, 256, 2}}, {{1, 1024, 768, 12}},
                                                      {{1, 70, 128, 2}})) {
      for (const size_t offset : {size_t{0}, size_t{1}}) {
        const size_t row = 3 * static_cast<size_t>(s.C), cache_n = static_cast<size_t>(s.B) * s.T * row;
        const auto cache0 = normal(p, cache_n + offset), fresh = normal(p, s.B * row + offset);
        DeviceActs d_fresh(*gpu, fresh);
        for (const int pos : {0, s.T / 2, s.T - 1}) {
          INFO(p.name << ": B " << s.B << " T " << s.T << " C " << s.C << " NH " << s.NH << " position " << pos
                      << " offset " << offset);
          DeviceActs d_cache(*gpu, cache0);
          DeviceInts d_pos(*gpu, std::vector<int32_t>{pos});
          auto d_out = DeviceActs::poisoned(*gpu, static_cast<size_t>(s.B) * s.C);
          std::vector<float> cache = cache0, out(static_cast<size_t>(s.B) * s.C);
          cpu.attention_step(out.data(), cache.data() + offset, fresh.data() + offset, &pos, s.B, s.T, s.C, s.NH);
          gpu->attention_step(d_out.get(), d_cache.get() + offset, d_fresh.get() + offset, d_pos.get(), s.B, s.T,
                              s.C, s.NH);
          CHECK(d_cache.host() == cache);
          check_stored(p, d_out.host(), out, kReduction);
        }
      }
    }
  }
}

TEST_CASE_METHOD(OpsTest, "cuda gelu, residual, scale and convert match the CPU, aligned or not, in place or not",
                 "[gpu][ops][bf16]") {
  INFO("seed " << seed);
  for (const GpuMode& p : {kStrictFp32, kBf16}) {
    CpuBackend cpu = reference(p);
    auto gpu = cuda::make_backend(0, p.precision);
    for (const size_t offset : {size_t{0}, size_t{1}}) {  // 1: every pointer misaligned for 16-byte access
      const size_t n = 100003;
      INFO(p.name << ": offset " << offset << " n " << n);
      const auto x = normal(p, n + offset, 3.0f), y = normal(p, n + offset);
      DeviceActs d_x(*gpu, x), d_y(*gpu, y), d_dinout(*gpu, y), d_acc(*gpu, x);
      auto d_g = DeviceActs::poisoned(*gpu, n + offset);
      auto tail = [&](const std::vector<float>& v) { return std::vector<float>(v.begin() + offset, v.end()); };

      std::vector<float> g(n + offset, 0.0f);
      cpu.gelu_forward(g.data() + offset, x.data() + offset, n);
      gpu->gelu_forward(d_g.get() + offset, d_x.get() + offset, n);
      check_stored(p, tail(d_g.host()), tail(g), kPerElement);

      std::vector<float> dinout = y;  // backward in place: dinp aliases dout
      cpu.gelu_backward(dinout.data() + offset, x.data() + offset, dinout.data() + offset, n);
      gpu->gelu_backward(d_dinout.get() + offset, d_x.get() + offset, d_dinout.get() + offset, n);
      check_stored(p, tail(d_dinout.host()), tail(dinout), kPerElement);

      std::vector<float> acc = x;  // residual in place (out aliases a): exact
      cpu.residual_forward(acc.data() + offset, acc.data() + offset, y.data() + offset, n);
      gpu->residual_forward(d_acc.get() + offset, d_acc.get() + offset, d_y.get() + offset, n);
      CHECK(d_acc.host() == acc);

      std::vector<float> grads = rnd.normal(n + offset);  // scale: fp32 gradients in every precision
      DeviceFloats d_grads(*gpu, grads);
      cpu.scale(grads.data() + offset, 0.731f, n);
      gpu->scale(d_grads.get() + offset, 0.731f, n);
      CHECK(d_grads.host() == grads);

      const std::vector<float> master = rnd.normal(n + offset);  // convert: the weights' copy, one rounding
      DeviceFloats d_master(*gpu, master);
      auto d_copy = DeviceActs::poisoned(*gpu, n + offset);
      std::vector<float> copy(n + offset);
      cpu.convert(copy.data() + offset, master.data() + offset, n);
      gpu->convert(d_copy.get() + offset, d_master.get() + offset, n);
      CHECK(tail(d_copy.host()) == tail(copy));
    }
  }
}

TEST_CASE_METHOD(OpsTest, "cuda softmax cross-entropy matches the CPU in fp32 and bf16 and keeps the padding out",
                 "[gpu][ops][bf16]") {
  INFO("seed " << seed);
  for (const GpuMode& p : {kStrictFp32, kBf16}) {
    CpuBackend cpu = reference(p);
    auto gpu = cuda::make_backend(0, p.precision);
    struct Shape { int N, V, Vp; };  // Vp 45: rows not 16-byte aligned (the element path); V 50257: a tail
    for (const Shape s : {Shape{67, 1000, 1024}, Shape{8, 50257, 50304}, Shape{5, 3, 128}, Shape{4, 37, 45}}) {
      INFO(p.name << ": N " << s.N << " V " << s.V << " Vp " << s.Vp);
      auto logits = normal(p, static_cast<size_t>(s.N) * s.Vp, 3.0f);
      for (int n = 0; n < s.N; ++n) {
        for (int j = s.V; j < s.Vp; ++j) logits[static_cast<size_t>(n) * s.Vp + j] = 1e4f;  // would win if counted
      }
      const auto targets = rnd.ints(s.N, s.V);
      const float dloss = 1.0f / static_cast<float>(s.N);
      auto losses = rnd.normal(s.N);  // the losses accumulate
      DeviceActs d_logits(*gpu, logits);
      DeviceInts d_targets(*gpu, targets);
      DeviceFloats d_losses(*gpu, losses);
      cpu.softmax_cross_entropy(logits.data(), losses.data(), targets.data(), dloss, s.N, s.V, s.Vp);
      gpu->softmax_cross_entropy(d_logits.get(), d_losses.get(), d_targets.get(), dloss, s.N, s.V, s.Vp);
      CHECK(rel_err(d_losses.host(), losses) < kReduction);
      const auto grad = d_logits.host();
      check_stored(p, grad, logits, kReduction);
      for (int n = 0; n < s.N; ++n) {
        for (int j = s.V; j < s.Vp; ++j) REQUIRE(grad[static_cast<size_t>(n) * s.Vp + j] == 0.0f);
      }
    }
  }
}

TEST_CASE_METHOD(OpsTest, "cuda AdamW with a clip scale matches the CPU, refreshing the bf16 copy in bf16, aligned or not",
                 "[gpu][ops][bf16]") {
  INFO("seed " << seed);
  for (const GpuMode& p : {kStrictFp32, kBf16}) {
    const bool bf16 = is_bf16(p);
    CpuBackend cpu = reference(p);
    auto gpu = cuda::make_backend(0, p.precision);
    for (const size_t o : {size_t{0}, size_t{1}}) {  // 1: every pointer misaligned for 16-byte access
      INFO(p.name << ": offset " << o);
      const size_t n = 100001;  // a tail past the last whole pack
      auto params = rnd.normal(n + o), m = rnd.normal(n + o, 0.01f), v = rnd.uniform(n + o, 0.0f, 1e-3f);
      const auto grads = rnd.normal(n + o);
      AdamWHyper h;
      h.lr = 1e-3f;
      h.weight_decay = 0.1f;
      h.grad_scale = 0.42f;
      h.bias_correction1 = 1.0f - std::pow(h.beta1, 3.0f);
      h.bias_correction2 = 1.0f - std::pow(h.beta2, 3.0f);
      DeviceFloats d_params(*gpu, params), d_grads(*gpu, grads), d_m(*gpu, m), d_v(*gpu, v);
      auto d_copy = DeviceActs::poisoned(*gpu, bf16 ? n + o : 0);
      std::vector<float> copy(bf16 ? n + o : 0);
      cpu.adamw_update(params.data() + o, bf16 ? copy.data() + o : nullptr, grads.data() + o, m.data() + o,
                       v.data() + o, n, h);
      gpu->adamw_update(d_params.get() + o, bf16 ? d_copy.get() + o : nullptr, d_grads.get() + o, d_m.get() + o,
                        d_v.get() + o, n, h);
      const auto master = d_params.host();
      CHECK(rel_err(master, params) < kPerElement);
      CHECK(rel_err(d_m.host(), m) < kPerElement);
      CHECK(rel_err(d_v.host(), v) < kPerElement);
      if (bf16) {
        const std::vector<float> all = d_copy.host();
        const std::vector<float> got(all.begin() + o, all.end());
        std::vector<float> own(master.begin() + o, master.end());  // the GPU's own master rounded, in the same pass
        cpu.convert(own.data(), own.data(), n);
        CHECK(got == own);
        check_bf16_close(got, std::vector<float>(copy.begin() + o, copy.end()), kBf16FloorOfRms, kBf16MinEqualShare);
      }
    }
  }
}

TEST_CASE_METHOD(OpsTest, "cuda sum of squares matches the CPU and is deterministic", "[gpu][ops]") {
  INFO("seed " << seed);
  CpuBackend cpu;
  auto gpu = cuda::make_backend(0, Precision::fp32);
  for (const size_t n : {size_t{1}, size_t{1000}, size_t{3'000'017}}) {
    INFO("n " << n);
    const auto x = rnd.normal(n);
    DeviceFloats d_x(*gpu, x);
    const double want = cpu.sum_squares(x.data(), n);
    const double got = gpu->sum_squares(d_x.get(), n);
    CHECK(std::abs(got - want) <= 1e-12 * want);
    CHECK(gpu->sum_squares(d_x.get(), n) == got);
    // Left in device memory (at an odd float offset, as beside the training step's scalars), the
    // sum is the same double, bit for bit, on either backend.
    DeviceFloats d_out(*gpu, std::vector<float>(3, 0.0f));  // (3) a float, then the double's bytes
    gpu->sum_squares_into(d_out.get() + 1, d_x.get(), n);
    std::vector<float> out(3);  // (3)
    gpu->download(out.data(), d_out.get(), out.size());
    double left = 0;
    std::memcpy(&left, out.data() + 1, sizeof left);
    CHECK(left == got);
    float cpu_out[2] = {0, 0};
    cpu.sum_squares_into(cpu_out, x.data(), n);
    std::memcpy(&left, cpu_out, sizeof left);
    CHECK(left == want);
  }
}

TEST_CASE_METHOD(OpsTest, "cuda backward operations give the same bits on every call",
                 "[gpu][ops][determinism][bf16]") {
  INFO("seed " << seed);
  for (const GpuMode& p : {kStrictFp32, kTf32, kBf16}) {
    INFO(p.name);
    auto gpu = cuda::make_backend(0, p.precision);
    const int B = kInterpreted ? 2 : 4, T = kInterpreted ? 65 : 128, C = 256, NH = 4, OC = 768, V = 300;
    const size_t btc = static_cast<size_t>(B) * T * C;
    const auto qkv = normal(p, 3 * btc), x = normal(p, btc), dx = normal(p, btc);
    const auto w = normal(p, static_cast<size_t>(OC) * C, 0.05f), dy = normal(p, static_cast<size_t>(B) * T * OC);
    const auto lnw = normal(p, C);
    auto tokens = rnd.ints(static_cast<size_t>(B) * T, V);
    for (size_t i = 0; i < tokens.size(); i += 3) tokens[i] = 1;  // one token's run across chunks
    DeviceActs d_qkv(*gpu, qkv), d_x(*gpu, x), d_dx(*gpu, dx), d_w(*gpu, w), d_dy(*gpu, dy), d_lnw(*gpu, lnw);
    DeviceInts d_tokens(*gpu, tokens);

    auto zeros = [&](size_t n) { return DeviceFloats(*gpu, std::vector<float>(n)); };
    auto zero_acts = [&](size_t n) { return DeviceActs(*gpu, std::vector<float>(n)); };
    // One backward pass of each kind into fresh zeroed gradients; returns every output.
    auto run = [&] {
      std::vector<std::vector<float>> outs;
      auto out = zero_acts(btc), dqkv = zero_acts(3 * btc);
      auto saved = zeros(gpu->attention_saved_floats(B, T, C, NH));
      auto scratch = zeros(gpu->attention_scratch_floats(B, T, C, NH));
      gpu->attention_forward(out.get(), saved.get(), d_qkv.get(), scratch.get(), B, T, C, NH);
      gpu->attention_backward(dqkv.get(), d_dx.get(), d_qkv.get(), out.get(), saved.get(), scratch.get(), B, T, C, NH);
      outs.push_back(dqkv.host());
      auto dinp = zero_acts(btc);
      auto dw = zeros(w.size()), db = zeros(OC);
      gpu->matmul_backward(dinp.get(), dw.get(), db.get(), d_dy.get(), d_x.get(), d_w.get(), B * T, C, OC, 1.0f);
      outs.push_back(dinp.host());
      for (auto* a : {&dw, &db}) outs.push_back(a->host());

      auto ln = zero_acts(btc), ldinp = zero_acts(btc);
      auto mean = zeros(B * T), rstd = zeros(B * T), ldw = zeros(C), ldb = zeros(C);
      gpu->layernorm_forward(ln.get(), mean.get(), rstd.get(), d_x.get(), d_lnw.get(), d_lnw.get(), B * T, C);
      gpu->layernorm_backward(ldinp.get(), ldw.get(), ldb.get(), d_dx.get(), d_x.get(), d_lnw.get(), mean.get(),
                              rstd.get(), B * T, C);
      outs.push_back(ldinp.host());
      for (auto* a : {&ldw, &ldb}) outs.push_back(a->host());

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
