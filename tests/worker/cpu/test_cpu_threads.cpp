// The CPU backend splits its attention heads and its loops over a team of as many threads as
// OpenBLAS's pool (worker/cpu/cpu_backend.hpp). Every operation that does not go through sgemm
// must give the same bits on one thread and on several: each element is computed by the same
// code whoever computes it, and the sums over rows (layernorm's weight and bias gradients, the
// bias gradients of the products) are split by columns, each summed over the rows in order.
// Sizes are above the backend's grain (32768 elements a thread), so that the parts are real:
// a boundary that skips or repeats an element, or two threads writing one, changes the bits.
// The operations' values themselves are checked against references in test_ops_fd.cpp.
#include <catch2/catch.hpp>

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "worker/cpu/cpu_backend.hpp"
#include "worker/math/gelu.hpp"

using namespace xtrain;

namespace {

using Vec = std::vector<float>;

Vec random_vec(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  Vec v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST_CASE("The CPU backend's loops and attention give the same bits on one thread and on three", "[ops][team]") {
  {
    const Precision precision = GENERATE(Precision::fp32, Precision::bf16);
    INFO(precision_name(precision));
    // Two backends that differ only in their thread count (OpenBLAS's pool when each is made).
    const int before = openblas_get_num_threads();
    openblas_set_num_threads(1);
    CpuBackend one(precision);
    openblas_set_num_threads(3);
    CpuBackend three(precision);
    openblas_set_num_threads(before);
    std::mt19937 rng(31);
    // Runs op on both backends from the same inputs (every buffer a copy) and compares outputs.
    auto same_bits = [&](std::vector<Vec> buffers, const auto& op) {
      std::vector<Vec> on_three = buffers;
      op(one, buffers);
      op(three, on_three);
      for (size_t i = 0; i < buffers.size(); ++i) {
        INFO("buffer " << i);
        CHECK(buffers[i] == on_three[i]);
      }
    };

    const int N = 512, C = 384, OC = 1536;
    const size_t nc = static_cast<size_t>(N) * C;
    // The inputs of bf16 operations hold bf16 values, as bf16 storage would.
    auto input = [&](size_t n, float lo = -1.0f, float hi = 1.0f) {
      Vec v = random_vec(n, rng, lo, hi);
      one.convert(v.data(), v.data(), n);
      return v;
    };

    SECTION("layernorm forward and backward") {
      // 0 out, 1 mean, 2 rstd, 3 inp, 4 weight, 5 bias; then 6 dinp (accumulates), 7 dweight, 8 dbias, 9 dout
      same_bits({Vec(nc), Vec(N), Vec(N), input(nc, -2, 3), input(C, 0.5, 1.5), input(C), input(nc),
                 random_vec(C, rng), random_vec(C, rng), input(nc)},
                [&](CpuBackend& k, std::vector<Vec>& b) {
                  k.layernorm_forward(b[0].data(), b[1].data(), b[2].data(), b[3].data(), b[4].data(), b[5].data(), N,
                                      C);
                  k.layernorm_backward(b[6].data(), b[7].data(), b[8].data(), b[9].data(), b[3].data(), b[4].data(),
                                       b[1].data(), b[2].data(), N, C);
                });
    }
    SECTION("GELU, residual, scale") {
      const size_t n = static_cast<size_t>(N) * OC;
      same_bits({Vec(n), input(n, -4, 4), Vec(n), input(n), Vec(n)}, [&](CpuBackend& k, std::vector<Vec>& b) {
        k.gelu_forward(b[0].data(), b[1].data(), n);
        k.gelu_backward(b[2].data(), b[1].data(), b[3].data(), n);
        k.residual_forward(b[4].data(), b[0].data(), b[2].data(), n);
        k.scale(b[4].data(), 0.37f, n);
      });
    }
    SECTION("softmax with cross-entropy") {
      const int V = 250, Vp = 256;
      std::vector<int32_t> targets(N);
      for (auto& t : targets) t = static_cast<int32_t>(rng() % V);
      same_bits({input(static_cast<size_t>(N) * Vp, -5, 5), random_vec(N, rng)},
                [&](CpuBackend& k, std::vector<Vec>& b) {
                  k.softmax_cross_entropy(b[0].data(), b[1].data(), targets.data(), 1.0f / N, N, V, Vp);
                });
    }
    SECTION("AdamW with the bf16 weight copy") {
      const size_t n = 300001;  // not a multiple of a cache line
      AdamWHyper h;
      h.lr = 1e-3f;
      h.weight_decay = 0.1f;
      h.grad_scale = 0.8f;
      h.bias_correction1 = 0.1f;
      h.bias_correction2 = 0.05f;
      same_bits({random_vec(n, rng), Vec(n), random_vec(n, rng), random_vec(n, rng, 0, 0.1f),
                 random_vec(n, rng, 0, 0.01f)},
                [&](CpuBackend& k, std::vector<Vec>& b) {
                  k.adamw_update(b[0].data(), b[1].data(), b[2].data(), b[3].data(), b[4].data(), n, h);
                });
    }
    SECTION("a product's bias gradient, and GELU on a product's output") {
      // The products' own bits may differ between thread counts (OpenBLAS splits their sums), so
      // only what the backend's loops compute is compared: the bias gradient, a sum of dout's rows,
      // and that the GELU'd output is gelu of the stored pre-activation in every element.
      same_bits({Vec(nc), random_vec(static_cast<size_t>(OC) * C, rng), random_vec(OC, rng), input(static_cast<size_t>(N) * OC),
                 input(nc), input(static_cast<size_t>(OC) * C)},
                [&](CpuBackend& k, std::vector<Vec>& b) {
                  k.matmul_backward(b[0].data(), b[1].data(), b[2].data(), b[3].data(), b[4].data(), b[5].data(), N,
                                    C, OC, 0.5f);
                  b[0].clear();  // dinp and dweight are sgemm's
                  b[1].clear();
                });
      // In fp32 only: in bf16 out is GELU of the unrounded sum, and pre is that sum rounded.
      if (precision == Precision::fp32) {
        const Vec inp = input(nc), weight = input(static_cast<size_t>(OC) * C), bias = input(OC);
        for (CpuBackend* k : {&one, &three}) {
          Vec out(static_cast<size_t>(N) * OC), pre(out.size());
          k->matmul_gelu_forward(out.data(), pre.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
          // Within 4 ulps (1 in 2^21), not bit for bit: this file is built without the backend's
          // FMA, so its gelu rounds differently; an element left out is 0 or stale, far off.
          size_t wrong = 0;
          for (size_t i = 0; i < out.size(); ++i) {
            wrong += !(std::abs(out[i] - math::gelu(pre[i])) <= 0x1p-21f * std::max(std::abs(pre[i]), 1.0f));
          }
          CHECK(wrong == 0);
        }
      }
    }
    SECTION("attention") {
      const int B = 4, T = 64, AC = 128, NH = 4;
      const size_t btc = static_cast<size_t>(B) * T * AC;
      const size_t saved = one.attention_saved_floats(B, T, AC, NH);
      same_bits({Vec(btc), Vec(saved), input(3 * btc), Vec(3 * btc), input(btc)},
                [&](CpuBackend& k, std::vector<Vec>& b) {
                  Vec scratch(k.attention_scratch_floats(B, T, AC, NH));
                  k.attention_forward(b[0].data(), b[1].data(), b[2].data(), scratch.data(), B, T, AC, NH);
                  k.attention_backward(b[3].data(), b[4].data(), b[2].data(), b[0].data(), b[1].data(),
                                       scratch.data(), B, T, AC, NH);
                });
    }
  }
}
