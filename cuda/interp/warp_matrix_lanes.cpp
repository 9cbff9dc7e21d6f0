#include "cuda/interp/warp_matrix_lanes.hpp"

#include <cstring>
#include <string>

#include "cuda/interp/executor.hpp"
#include "cuda/interp/warp_matrix.hpp"

namespace xtrain::interp {
namespace {

struct MmaOperands {
  uint32_t a[4];
  uint32_t b[2];
  float c[4];
};
static_assert(sizeof(MmaOperands) <= kCollectiveBytes, "one lane's mma operands fit a collective");

// .aligned: every lane of the warp executes the same mma (the PTX ISA: undefined otherwise).
std::string mma_combine(WarpLanes& w) {
  if (w.mask != 0xFFFFFFFFu) return "mma.sync.aligned needs all 32 lanes of the warp";
  uint32_t a[32][4], b[32][2];
  float c[32][4], d[32][4];
  for (int lane = 0; lane < 32; ++lane) {
    MmaOperands op;
    std::memcpy(&op, w.in[lane], sizeof op);
    std::memcpy(a[lane], op.a, sizeof op.a);
    std::memcpy(b[lane], op.b, sizeof op.b);
    std::memcpy(c[lane], op.c, sizeof op.c);
  }
  mma_m16n8k16_bf16(a, b, c, d);
  for (int lane = 0; lane < 32; ++lane) std::memcpy(w.out[lane], d[lane], sizeof d[lane]);
  return {};
}

}  // namespace

void mma_m16n8k16_bf16_lane(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  MmaOperands op;
  std::memcpy(op.a, a, sizeof op.a);
  std::memcpy(op.b, b, sizeof op.b);
  std::memcpy(op.c, d, sizeof op.c);
  warp_collective("mma.sync.m16n8k16", mma_combine, 0xFFFFFFFFu, &op, sizeof op, 0, 32, d, sizeof d);
}

}  // namespace xtrain::interp
