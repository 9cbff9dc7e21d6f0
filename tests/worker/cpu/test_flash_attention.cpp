// The CPU flash attention (worker/cpu/flash_attention.*) against three references:
// - the attention it replaced, which stores the (T,T) probabilities
//   (tests/worker/attention_reference.hpp), in fp32;
// - a double-precision re-implementation of the same algorithm with the same bf16 rounding
//   points (worker/math/flash_attention.hpp), for the bf16 emulation;
// - itself: determinism (also across thread counts), and the size of what it keeps.
// And a decoder's attention step (CpuBackend::attention_step) against the double reference's row
// at its position.
// Finite differences through a double attention are in test_ops_fd.cpp with the other operations
// (through CpuBackend, whose attention this is).
//
// Error measure: max |got - want| / max |want| per tensor (out, dq, dk, dv), see
// tests/worker/flash_attention_util.hpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "tests/worker/attention_reference.hpp"
#include "tests/worker/flash_attention_util.hpp"
#include "worker/cpu/cpu_backend.hpp"

using namespace xtrain;
using namespace xtrain::test;

namespace {

// Shapes for every test: one query, shorter than a block, exactly a block, one past a block,
// several blocks with a tail; head sizes 4 and 12 (not a multiple of the 16-column tile), 32, 64, 128.
const AttentionShape kShapes[] = {
    {1, 1, 8, 2},     {2, 7, 64, 2},   {3, 64, 128, 4}, {2, 65, 24, 2},
    {2, 100, 192, 3}, {1, 130, 128, 1}, {2, 200, 64, 2},
};

// ---- fp32: against the attention it replaced --------------------------------------------------------------
// Both are fp32 with sums in different orders (sgemm over up to T keys vs 64-key tiles and an online
// softmax): the measured differences are up to 1.6e-6 (inputs with sd 3, whose large scores
// amplify the fp32 error of each score in exp), and 1e-5 is the bound. A wrong mask,
// a missed block or a missing rescale gives errors of order 1e-2 to 1.
constexpr double kVsTodayTol = 1e-5;

AttentionResult replaced_attention(const std::vector<float>& qkv, const std::vector<float>& dout,
                                 const AttentionShape& s) {
  AttentionResult r{std::vector<float>(dout.size()), {}, std::vector<float>(qkv.size())};
  std::vector<float> probs(reference_attention_probs_floats(s)), scratch(reference_attention_scratch_floats(s));
  reference_attention_forward(r.out.data(), probs.data(), qkv.data(), s);
  reference_attention_backward(r.dqkv.data(), dout.data(), qkv.data(), probs.data(), scratch.data(), s);
  return r;
}

// ---- bf16 emulation: a double reference with the same rounding points ------------------------------

// x rounded to the nearest bf16 value (8 significant bits, ties to even), in double.
double bf16(double x) {
  if (x == 0.0 || !std::isfinite(x)) return x;
  int e = 0;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  const double ulp = std::ldexp(1.0, std::max(e - 8, -133));
  return std::nearbyint(x / ulp) * ulp;
}

struct DoubleResult {
  std::vector<double> out, dqkv;
};

// Forward and backward of one causal attention in double, rounding where the float version rounds
// when `round` is set; the structure of worker/math/flash_attention.hpp, row by row.
DoubleResult double_flash_attention(const std::vector<float>& qkv, const std::vector<float>& dout,
                                    const AttentionShape& s, bool round) {
  const int T = s.T, C = s.C, hs = s.hs();
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  auto rb = [&](double x) { return round ? bf16(x) : x; };
  DoubleResult r{std::vector<double>(dout.size()), std::vector<double>(qkv.size())};
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.NH; ++h) {
      auto q = [&](int t, int d) { return static_cast<double>(qkv[(static_cast<size_t>(b) * T + t) * 3 * C + h * hs + d]); };
      auto k = [&](int t, int d) { return q(t, d + C); };
      auto v = [&](int t, int d) { return q(t, d + 2 * C); };
      auto at = [&](int t, int d) { return (static_cast<size_t>(b) * T + t) * C + h * hs + d; };
      auto x = [&](int i, int j) {
        double dot = 0.0;
        for (int d = 0; d < hs; ++d) dot += q(i, d) * k(j, d);
        return dot * scale;
      };
      std::vector<double> lse(T);
      for (int i = 0; i < T; ++i) {
        double m = -INFINITY, l = 0.0;
        std::vector<double> acc(hs, 0.0);
        for (int c0 = 0; c0 <= i; c0 += math::kFlashKeyBlock) {
          const int c1 = std::min(c0 + math::kFlashKeyBlock, i + 1);
          double m_new = m;
          for (int j = c0; j < c1; ++j) m_new = std::max(m_new, x(i, j));
          const double alpha = std::exp(m - m_new);
          l *= alpha;
          for (double& a : acc) a *= alpha;
          for (int j = c0; j < c1; ++j) {
            const double p = std::exp(x(i, j) - m_new);
            l += p;
            for (int d = 0; d < hs; ++d) acc[d] += rb(p) * v(j, d);
          }
          m = m_new;
        }
        for (int d = 0; d < hs; ++d) r.out[at(i, d)] = rb(acc[d] / l);
        lse[i] = m + std::log(l);
      }
      std::vector<double> dq(static_cast<size_t>(T) * hs, 0.0), dk(dq.size(), 0.0), dv(dq.size(), 0.0);
      for (int i = 0; i < T; ++i) {
        double D = 0.0;
        for (int d = 0; d < hs; ++d) D += static_cast<double>(dout[at(i, d)]) * r.out[at(i, d)];
        for (int j = 0; j <= i; ++j) {
          const double p = std::exp(x(i, j) - lse[i]);
          double dp = 0.0;
          for (int d = 0; d < hs; ++d) dp += dout[at(i, d)] * v(j, d);
          const double ds = rb(p * (dp - D));
          for (int d = 0; d < hs; ++d) {
            dv[j * hs + d] += rb(p) * dout[at(i, d)];
            dq[i * hs + d] += ds * k(j, d);
            dk[j * hs + d] += ds * q(i, d);
          }
        }
      }
      for (int t = 0; t < T; ++t) {
        for (int d = 0; d < hs; ++d) {
          const size_t row = (static_cast<size_t>(b) * T + t) * 3 * C + h * hs + d;
          r.dqkv[row] = rb(dq[t * hs + d] * scale);
          r.dqkv[row + C] = rb(dk[t * hs + d] * scale);
          r.dqkv[row + 2 * C] = rb(dv[t * hs + d]);
        }
      }
    }
  }
  return r;
}

std::vector<float> to_float(const std::vector<double>& x) { return {x.begin(), x.end()}; }

}  // namespace

TEST_CASE("flash attention matches the (T,T) attention it replaced in fp32, forward and every gradient", "[ops][attention]") {
  std::mt19937_64 rng(11);
  for (const AttentionShape& s : kShapes) {
    for (const float sd : {1.0f, 3.0f}) {  // 3: peaked softmax rows, where the online rescaling matters
      INFO(describe(s) << " input sd " << sd);
      const AttentionInputs in = random_inputs(s, rng, false, sd);
      const AttentionResult got = cpu_flash_attention(in.qkv, in.dout, s, false);
      const AttentionResult want = replaced_attention(in.qkv, in.dout, s);
      CHECK(max_rel_error(got.out, want.out) < kVsTodayTol);
      const std::vector<double> errors = gradient_errors(got.dqkv, want.dqkv, s);
      for (int part = 0; part < 3; ++part) {
        INFO("gradient of " << "qkv"[part] << ": error " << errors[part]);
        CHECK(errors[part] < kVsTodayTol);
      }
    }
  }
}

TEST_CASE("flash attention's bf16 emulation rounds where the double reference does", "[ops][attention]") {
  // Inputs are bf16 values. The double reference rounds at the same points; where the float
  // computation lands within its own error of a bf16 tie, the two round to neighbouring bf16
  // values. The float error is ~1e-7 relative for most values, but ds = p (dp - D) cancels, so its
  // relative error (and its flips) grow where dp ~ D: the flips concentrate in dq and dk.
  // Bounds: each tensor within two bf16 ulps of its largest value (2^-7), and at most 2% of all
  // compared elements differing at all. Measured: at most 1.2e-3 (2.9e-3 with other seeds), 0.2% of
  // all elements (the worst single tensor 6.6%: dq of the T = 7 shape, 28 of 448). Leaving out any
  // one rounding point (tried for each of the seven) makes 22-100% of some tensor differ.
  constexpr double kMaxMismatch = 0.02;
  std::mt19937_64 rng(12);
  Bf16Agreement agreement(0x1p-7);
  for (const AttentionShape& s : kShapes) {
    INFO(describe(s));
    const AttentionInputs in = random_inputs(s, rng, true);
    const AttentionResult got = cpu_flash_attention(in.qkv, in.dout, s, true);
    const DoubleResult want = double_flash_attention(in.qkv, in.dout, s, true);
    CHECK(all_bf16(got.out));
    CHECK(all_bf16(got.dqkv));
    agreement.compare(got.out, got.dqkv, to_float(want.out), to_float(want.dqkv), s);
  }
  INFO(agreement.summary());
  CHECK(agreement.mismatch_fraction() <= kMaxMismatch);
}

TEST_CASE("flash attention in fp32 matches the double reference without rounding", "[ops][attention]") {
  // The same double reference with its rounding off: the fp32 path is exact up to fp32 sums
  // (measured up to 1.5e-6), so the reference itself is checked against an independent path too.
  std::mt19937_64 rng(13);
  for (const AttentionShape& s : kShapes) {
    INFO(describe(s));
    const AttentionInputs in = random_inputs(s, rng, false);
    const AttentionResult got = cpu_flash_attention(in.qkv, in.dout, s, false);
    const DoubleResult want = double_flash_attention(in.qkv, in.dout, s, false);
    CHECK(max_rel_error(got.out, to_float(want.out)) < kVsTodayTol);
    for (const double e : gradient_errors(got.dqkv, to_float(want.dqkv), s)) CHECK(e < kVsTodayTol);
  }
}

// The step of position P over a cache holding rows [0, P) is row P of the whole sequence's
// attention: fp32 within kVsTodayTol (a direct softmax in fp32 against double; measured below
// 1e-6); in bf16 its output is bf16 values within 2^-8 of the unrounded reference (a half-ulp
// rounding, 2^-9, plus fp32 noise; the step does not round p as the forward's product does).
TEST_CASE("the CPU's attention step is the reference's row at its position, and writes that row into the cache",
          "[ops][attention]") {
  std::mt19937_64 rng(17);
  for (const AttentionShape& s : kShapes) {
    const AttentionInputs in = random_inputs(s, rng, true);  // bf16 values: inputs for both precisions
    const DoubleResult want = double_flash_attention(in.qkv, in.dout, s, false);
    const size_t row = 3 * static_cast<size_t>(s.C);
    for (const int P : {0, s.T / 2, s.T - 1}) {
      INFO(describe(s) << " position " << P);
      std::vector<float> fresh(static_cast<size_t>(s.B) * row), want_row(static_cast<size_t>(s.B) * s.C);
      std::vector<float> cache = in.qkv;
      for (int b = 0; b < s.B; ++b) {
        const size_t at = (static_cast<size_t>(b) * s.T + P) * row;
        std::copy_n(in.qkv.begin() + static_cast<long>(at), row, fresh.begin() + static_cast<long>(b * row));
        std::fill_n(cache.begin() + static_cast<long>(at), row, 1e9f);  // the step must write the row
        for (int c = 0; c < s.C; ++c) {
          want_row[static_cast<size_t>(b) * s.C + c] =
              static_cast<float>(want.out[(static_cast<size_t>(b) * s.T + P) * s.C + c]);
        }
      }
      for (const Precision precision : {Precision::fp32, Precision::bf16}) {
        INFO(precision_name(precision));
        CpuBackend k(precision);
        std::vector<float> got(want_row.size(), NAN), stepped = cache;
        k.attention_step(got.data(), stepped.data(), fresh.data(), &P, s.B, s.T, s.C, s.NH);
        CHECK(stepped == in.qkv);
        if (precision == Precision::fp32) {
          CHECK(max_rel_error(got, want_row) < kVsTodayTol);
        } else {
          CHECK(all_bf16(got));
          CHECK(max_rel_error(got, want_row) < 0x1p-8);
        }
      }
    }
  }
  CpuBackend k;
  std::vector<float> cache(3 * 8 * 4), out(8), fresh(3 * 8);
  const int past = 4;
  CHECK_THROWS_AS(k.attention_step(out.data(), cache.data(), fresh.data(), &past, 1, 4, 8, 2), std::out_of_range);
}

TEST_CASE("flash attention is deterministic and keeps O(B*NH*T) from forward to backward", "[ops][attention]") {
  std::mt19937_64 rng(14);
  const AttentionShape s{2, 150, 128, 2};
  for (const bool bf16 : {false, true}) {
    INFO((bf16 ? "bf16 emulation" : "fp32"));
    const AttentionInputs in = random_inputs(s, rng, bf16);
    const AttentionResult first = cpu_flash_attention(in.qkv, in.dout, s, bf16);
    const AttentionResult second = cpu_flash_attention(in.qkv, in.dout, s, bf16);
    CHECK(mismatch_fraction(first.out, second.out) == 0.0);
    CHECK(mismatch_fraction(first.lse, second.lse) == 0.0);
    CHECK(mismatch_fraction(first.dqkv, second.dqkv) == 0.0);
  }
  // Saved: one logsumexp per row. Scratch: a few (T,hs) arrays and fixed tiles, never T x T.
  for (const AttentionShape g : {AttentionShape{4, 1024, 768, 12}, AttentionShape{16, 4096, 768, 12}}) {
    INFO(describe(g));
    CHECK(flash_attention_saved_floats(g) == static_cast<size_t>(g.B) * g.NH * g.T);
    const size_t head = static_cast<size_t>(g.T) * g.hs();
    CHECK(flash_attention_scratch_floats(g, 1) <= 4 * head + 64 * (2 * 64 + g.hs() + 1) + 16);
    CHECK(flash_attention_scratch_floats(g, 1) < static_cast<size_t>(g.T) * g.T / 2);
    CHECK(flash_attention_scratch_floats(g, 4) == 4 * flash_attention_scratch_floats(g, 1));
  }
  CHECK_THROWS_WITH(flash_attention_scratch_floats(kShapes[0], 0), Catch::Contains("0 members"));
}

TEST_CASE("flash attention on a team of threads gives the same bits as on one", "[ops][attention]") {
  // Heads split over the members: more heads than members, fewer (members with nothing to do),
  // and shares of unequal size. Each head writes only its own channels, whoever runs it.
  std::mt19937_64 rng(16);
  for (const AttentionShape& s : {AttentionShape{2, 150, 128, 2}, AttentionShape{3, 65, 96, 4},
                                  AttentionShape{1, 70, 64, 2}}) {
    for (const bool bf16 : {false, true}) {
      const AttentionInputs in = random_inputs(s, rng, bf16);
      const AttentionResult alone = cpu_flash_attention(in.qkv, in.dout, s, bf16, 1);
      for (const int threads : {2, 3, 5}) {
        INFO(describe(s) << (bf16 ? " bf16 emulation, " : " fp32, ") << threads << " threads");
        const AttentionResult team = cpu_flash_attention(in.qkv, in.dout, s, bf16, threads);
        CHECK(mismatch_fraction(team.out, alone.out) == 0.0);
        CHECK(mismatch_fraction(team.lse, alone.lse) == 0.0);
        CHECK(mismatch_fraction(team.dqkv, alone.dqkv) == 0.0);
      }
    }
  }
}

TEST_CASE("flash attention's AVX-512 and AVX2 tile products give the same bits", "[ops][attention]") {
  // Same fused multiply-adds per element in the same order, whatever the vector width; head
  // sizes that are not a multiple of 16 take the AVX-512 path's scalar tail where AVX2 still has
  // a vector (40 = 32 + 8 scalar against 16 + 16 + 8; 12, 100).
  std::mt19937_64 rng(15);
  if (!flash_attention_use_avx512(true)) WARN("this CPU has no AVX-512: only the AVX2 product is checked");
  for (const AttentionShape& s : {AttentionShape{2, 70, 80, 2}, AttentionShape{2, 65, 24, 2},
                                  AttentionShape{1, 90, 200, 2}, AttentionShape{2, 130, 128, 4}}) {
    for (const bool bf16 : {false, true}) {
      INFO(describe(s) << (bf16 ? " bf16 emulation" : " fp32"));
      const AttentionInputs in = random_inputs(s, rng, bf16);
      const bool avx512 = flash_attention_use_avx512(true);
      const AttentionResult wide = cpu_flash_attention(in.qkv, in.dout, s, bf16);
      flash_attention_use_avx512(false);
      const AttentionResult narrow = cpu_flash_attention(in.qkv, in.dout, s, bf16);
      flash_attention_use_avx512(avx512);
      CHECK(mismatch_fraction(wide.out, narrow.out) == 0.0);
      CHECK(mismatch_fraction(wide.lse, narrow.lse) == 0.0);
      CHECK(mismatch_fraction(wide.dqkv, narrow.dqkv) == 0.0);
    }
  }
}

TEST_CASE("flash attention refuses a shape it cannot run", "[ops][attention]") {
  std::vector<float> buf(1024);
  ThreadTeam one(1);
  const AttentionShape bad{1, 4, 10, 3};  // 10 channels do not split into 3 heads
  CHECK_THROWS_WITH(flash_attention_forward(buf.data(), buf.data(), buf.data(), buf.data(), bad, false, one),
                    Catch::Contains("C a positive multiple of NH"));
}
