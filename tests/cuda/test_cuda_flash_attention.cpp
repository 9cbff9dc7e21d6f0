// The CUDA flash attention (cuda/flash_attention.hpp) against the CPU flash attention
// (worker/cpu/flash_attention.hpp) of the same precision ([gpu]): fp32 storage against the CPU in
// fp32, bf16 storage against the CPU's bf16 emulation, which rounds at the same points (and so
// does bf16 with dQ summed by atomics, train.deterministic false)
// (worker/math/flash_attention.hpp). Every head size with a kernel, T = 1, T not a multiple of
// any block (65, 200, 300), several heads, B > 1, and GPT-2 small's attention.
//
// Error measure: max |gpu - cpu| / max |cpu| per tensor (out, lse, and the q, k, v parts of
// dqkv), tests/worker/flash_attention_util.hpp. Tolerances:
//   fp32: 1e-5. Both are fp32 with sums in other orders and CUDA's expf against the CPU's
//         polynomial exp (an ulp or two); the CPU against today's attention and a double
//         reference measures 1e-6 to 1.6e-6 at these input scales.
//   bf16: each tensor within two bf16 ulps of its largest value (2^-7) and at most 3% of all
//         compared elements differing. The products see the same bf16 inputs and p and ds are
//         rounded at the same points, so most elements are equal; a value computed within fp32
//         error of a bf16 tie rounds to the other neighbour on one side (the CPU against a double
//         reference of the same points: 0.2% of elements, worst tensor 6.6%, at most 0.75 ulp).
//         Tensor cores accumulate in fp32 in their own order, so allow more flips than that. A
//         skipped rounding point makes 22-100% of some tensor differ.
// Outputs start as NaN (an unwritten element fails).
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cuda/check.hpp"
#include "cuda/flash_attention.hpp"
#include "tests/cuda/cuda_test_util.hpp"
#include "tests/worker/flash_attention_util.hpp"

using namespace xtrain;
using namespace xtrain::test;

namespace {

constexpr double kFp32Tol = 1e-5;
constexpr double kBf16MaxRel = 0x1p-7;
constexpr double kBf16MaxMismatch = 0.03;

// Device memory of n elements of S (float or bf16), filled with NaN.
template <class S>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    XTRAIN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(S)));
    XTRAIN_CUDA_CHECK(cudaMemset(p_, 0xff, n * sizeof(S)));  // all-ones bits: NaN in float and bf16
  }
  DeviceBuffer(const std::vector<float>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  S* get() { return p_; }
  // Values as floats; bf16 storage holds the top half of each float (the values are bf16 already).
  void upload(const std::vector<float>& host) {
    if constexpr (sizeof(S) == sizeof(float)) {
      XTRAIN_CUDA_CHECK(cudaMemcpy(p_, host.data(), n_ * sizeof(S), cudaMemcpyHostToDevice));
    } else {
      std::vector<std::uint16_t> bits(n_);
      for (size_t i = 0; i < n_; ++i) {
        std::uint32_t u;
        std::memcpy(&u, &host[i], sizeof(u));
        bits[i] = static_cast<std::uint16_t>(u >> 16);
      }
      XTRAIN_CUDA_CHECK(cudaMemcpy(p_, bits.data(), n_ * sizeof(S), cudaMemcpyHostToDevice));
    }
  }
  std::vector<float> host() const {
    std::vector<float> out(n_);
    if constexpr (sizeof(S) == sizeof(float)) {
      XTRAIN_CUDA_CHECK(cudaMemcpy(out.data(), p_, n_ * sizeof(S), cudaMemcpyDeviceToHost));
    } else {
      std::vector<std::uint16_t> bits(n_);
      XTRAIN_CUDA_CHECK(cudaMemcpy(bits.data(), p_, n_ * sizeof(S), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < n_; ++i) {
        const std::uint32_t u = static_cast<std::uint32_t>(bits[i]) << 16;
        std::memcpy(&out[i], &u, sizeof(u));
      }
    }
    return out;
  }

 private:
  S* p_ = nullptr;
  size_t n_;
};

// atomic_dq: bf16's backward with dQ summed by atomics (train.deterministic false).
template <class S>
AttentionResult gpu_flash_attention(const std::vector<float>& qkv, const std::vector<float>& dout,
                                    const AttentionShape& s, bool atomic_dq = false) {
  XTRAIN_CUDA_CHECK(cudaSetDevice(0));
  DeviceBuffer<S> d_qkv(qkv), d_dout(dout), d_out(dout.size()), d_dqkv(qkv.size());
  DeviceBuffer<float> d_lse(cuda::flash_attention_saved_floats(s)),
      d_scratch(cuda::flash_attention_scratch_floats(s, atomic_dq));
  cuda::flash_attention_forward(nullptr, d_out.get(), d_lse.get(), d_qkv.get(), s);
  if constexpr (std::is_same_v<S, float>) {
    cuda::flash_attention_backward(nullptr, d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(),
                                   d_scratch.get(), s);
  } else {
    cuda::flash_attention_backward(nullptr, d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(),
                                   d_scratch.get(), s, atomic_dq);
  }
  XTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
  return {d_out.host(), d_lse.host(), d_dqkv.host()};
}

// Every head size with a kernel, each at T = 1 (one key), 65 (a block and one) and 200 (several
// blocks and a tail), 300 at head size 64 (three of the 128-row tiles, the middle one full, whose
// walks cross both of its neighbours), plus GPT-2 small's heads at T = 1024 (not in interpret
// mode: kInterpreted).
std::vector<AttentionShape> shapes() {
  std::vector<AttentionShape> v;
  for (const int hs : {16, 32, 64, 128}) {
    v.push_back({2, 1, 2 * hs, 2});
    v.push_back({2, 65, 2 * hs, 2});
    v.push_back({1, 200, 3 * hs, 3});
  }
  v.push_back({1, 300, 64, 1});
  if (!kInterpreted) v.push_back({2, 1024, 768, 12});
  return v;
}

}  // namespace

TEST_CASE_METHOD(Seeded, "cuda flash attention in fp32 matches the CPU's", "[gpu][attention]") {
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (const AttentionShape& s : shapes()) {
    INFO(describe(s));
    const AttentionInputs in = random_inputs(s, rng, false);
    const AttentionResult want = cpu_flash_attention(in.qkv, in.dout, s, false);
    const AttentionResult got = gpu_flash_attention<float>(in.qkv, in.dout, s);
    CHECK(max_rel_error(got.out, want.out) < kFp32Tol);
    CHECK(max_rel_error(got.lse, want.lse) < kFp32Tol);
    const std::vector<double> errors = gradient_errors(got.dqkv, want.dqkv, s);
    for (int part = 0; part < 3; ++part) {
      INFO("gradient of " << "qkv"[part] << ": error " << errors[part]);
      CHECK(errors[part] < kFp32Tol);
    }
  }
}

// With dQ summed by atomics (train.deterministic false) the tolerances are the same, since dQ's
// sum over key tiles in another order moves it by fp32 rounding, far below a bf16 ulp, and the
// rounding points are the same. out, lse, dK and dV come from the same code as the deterministic
// backward's and must be its bits; dQ must be written everywhere (a missed part leaves NaN or a
// wrong value, which the CPU comparison catches).
TEST_CASE_METHOD(Seeded,
                 "cuda flash attention in bf16 matches the CPU's bf16 emulation, dQ summed in order or by atomics",
                 "[gpu][attention]") {
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  Bf16Agreement ordered_agreement(kBf16MaxRel), atomic_agreement(kBf16MaxRel);
  for (const AttentionShape& s : shapes()) {
    INFO(describe(s));
    const AttentionInputs in = random_inputs(s, rng, true);
    const AttentionResult want = cpu_flash_attention(in.qkv, in.dout, s, true);
    const AttentionResult ordered = gpu_flash_attention<__nv_bfloat16>(in.qkv, in.dout, s);
    const AttentionResult atomic = gpu_flash_attention<__nv_bfloat16>(in.qkv, in.dout, s, true);
    CHECK(max_rel_error(ordered.lse, want.lse) < kFp32Tol);  // fp32, from the same bf16 inputs
    ordered_agreement.compare(ordered.out, ordered.dqkv, want.out, want.dqkv, s);
    {
      INFO("dQ summed by atomics");
      atomic_agreement.compare(atomic.out, atomic.dqkv, want.out, want.dqkv, s);
      CHECK(mismatch_fraction(atomic.out, ordered.out) == 0.0);
      CHECK(mismatch_fraction(atomic.lse, ordered.lse) == 0.0);
      for (const int part : {1, 2}) {
        INFO("gradient of " << "qkv"[part]);
        CHECK(mismatch_fraction(qkv_part(atomic.dqkv, s, part), qkv_part(ordered.dqkv, s, part)) == 0.0);
      }
    }
  }
  INFO("in order: " << ordered_agreement.summary() << "; by atomics: " << atomic_agreement.summary());
  CHECK(ordered_agreement.mismatch_fraction() <= kBf16MaxMismatch);
  CHECK(atomic_agreement.mismatch_fraction() <= kBf16MaxMismatch);
}

TEST_CASE_METHOD(Seeded, "cuda flash attention gives the same bits on every call", "[gpu][attention][determinism]") {
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const AttentionShape s = kInterpreted ? AttentionShape{2, 100, 128, 2} : AttentionShape{4, 300, 256, 4};
  for (const bool bf16 : {false, true}) {
    INFO((bf16 ? "bf16" : "fp32"));
    const AttentionInputs in = random_inputs(s, rng, bf16);
    auto run = [&] {
      return bf16 ? gpu_flash_attention<__nv_bfloat16>(in.qkv, in.dout, s)
                  : gpu_flash_attention<float>(in.qkv, in.dout, s);
    };
    const AttentionResult first = run(), second = run();
    CHECK(mismatch_fraction(first.out, second.out) == 0.0);
    CHECK(mismatch_fraction(first.lse, second.lse) == 0.0);
    CHECK(mismatch_fraction(first.dqkv, second.dqkv) == 0.0);
  }
}

TEST_CASE("the CUDA attention refuses a head size it has no kernel for, by name", "[attention]") {
  CHECK_NOTHROW(cuda::check_flash_attention_shape({4, 1024, 768, 12}));
  CHECK_THROWS_WITH(cuda::check_flash_attention_shape({4, 64, 96, 2}),
                    Catch::Contains("model.n_embd / model.n_head") && Catch::Contains("16, 32, 64 and 128") &&
                        Catch::Contains("96 / 2 = 48"));
  CHECK_THROWS_WITH(cuda::check_flash_attention_shape({4, 64, 100, 3}), Catch::Contains("multiple of NH"));
}
