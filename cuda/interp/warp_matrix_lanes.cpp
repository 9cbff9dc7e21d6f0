#include "cuda/interp/warp_matrix_lanes.hpp"

#include <cstring>
#include <stdexcept>
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

// .aligned, as for mma; each variant is its own combine, so lanes at different variants are
// reported as meeting at different collectives.
template <int MATRICES, bool TRANS>
std::string ldmatrix_combine(WarpLanes& w) {
  if (w.mask != 0xFFFFFFFFu) return "ldmatrix.sync.aligned needs all 32 lanes of the warp";
  const void* rows[32];
  for (int lane = 0; lane < 32; ++lane) std::memcpy(&rows[lane], w.in[lane], sizeof rows[lane]);
  uint32_t out[32][4];
  try {
    ldmatrix(MATRICES, TRANS, rows, out);
  } catch (const std::logic_error& e) {
    return e.what();
  }
  for (int lane = 0; lane < 32; ++lane) std::memcpy(w.out[lane], out[lane], sizeof(uint32_t) * MATRICES);
  return {};
}

}  // namespace

template <int MATRICES, bool TRANS>
void ldmatrix_lane(uint32_t (&out)[MATRICES], const void* row) {
  if (this_lane() < 8 * MATRICES) check_matrix_row(TRANS ? "ldmatrix.trans" : "ldmatrix", row, 16);
  warp_collective(TRANS ? "ldmatrix.trans" : "ldmatrix", ldmatrix_combine<MATRICES, TRANS>, 0xFFFFFFFFu, &row,
                  sizeof row, MATRICES, 32, out, sizeof out);
}

template void ldmatrix_lane<1, false>(uint32_t (&)[1], const void*);
template void ldmatrix_lane<1, true>(uint32_t (&)[1], const void*);
template void ldmatrix_lane<2, false>(uint32_t (&)[2], const void*);
template void ldmatrix_lane<2, true>(uint32_t (&)[2], const void*);
template void ldmatrix_lane<4, false>(uint32_t (&)[4], const void*);
template void ldmatrix_lane<4, true>(uint32_t (&)[4], const void*);

void mma_m16n8k16_bf16_lane(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  MmaOperands op;
  std::memcpy(op.a, a, sizeof op.a);
  std::memcpy(op.b, b, sizeof op.b);
  std::memcpy(op.c, d, sizeof op.c);
  warp_collective("mma.sync.m16n8k16", mma_combine, 0xFFFFFFFFu, &op, sizeof op, 0, 32, d, sizeof d);
}

}  // namespace xtrain::interp
