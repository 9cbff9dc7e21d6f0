// bf16 on the GPU ([gpu]): the rounding every bf16 store uses is the CPU emulation's, bit for
// bit, and activations cross to and from the host through it. The operations in bf16 against the
// CPU's emulation are in test_cuda_ops.cpp, a training step in test_cuda_training.cpp.
#include <catch2/catch.hpp>

#include <memory>
#include <stdexcept>
#include <vector>

#include "cuda/cuda_api.hpp"
#include "tests/cuda/bf16_rounding.hpp"
#include "tests/cuda/cuda_test_util.hpp"
#include "worker/math/bf16.hpp"

using namespace xtrain;
using namespace xtrain::test;

namespace {

std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = math::round_to_bf16(x);
  return v;
}

struct Bf16Test : Seeded {
  std::unique_ptr<Backend> gpu = cuda::make_backend(0, Precision::bf16);
};

}  // namespace

TEST_CASE("cuda bf16 rounding equals the shared CPU rounding on every fp32 bit pattern", "[gpu][bf16]") {
  const Bf16RoundingMismatches m = bf16_rounding_mismatches_on_gpu();
  INFO("first mismatch at bits 0x" << std::hex << m.first);
  CHECK(m.count == 0);
}

TEST_CASE_METHOD(Bf16Test, "cuda bf16 activations: upload rounds, download is exact, the backend says bf16",
                 "[gpu][bf16]") {
  INFO("seed " << seed);
  CHECK(gpu->act_dtype() == DType::bf16);
  const auto x = rnd.normal(1001, 5.0f);
  DeviceActs d(*gpu, x);
  CHECK(d.host() == rounded(x));
  CHECK_THROWS_AS(d.get().as<float>(), std::logic_error);  // bf16 memory is never read as fp32
}

