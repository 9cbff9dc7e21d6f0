// A [gpu] check of worker/math/bf16.hpp against the hardware: every fp32 bit pattern rounded by
// __float2bfloat16_rn and by the shared bf16_bits_from_float, both on the GPU.
#pragma once

#include <cstdint>

namespace xtrain::test {

struct Bf16RoundingMismatches {
  unsigned long long count = 0;
  std::uint32_t first = 0;  // the smallest mismatching bit pattern, when count > 0
};

Bf16RoundingMismatches bf16_rounding_mismatches_on_gpu();

}  // namespace xtrain::test
