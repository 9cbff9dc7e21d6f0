// Interpret mode: the warp-level matrix instructions as one lane calls them (the spelling of
// cuda/kernels/portable.cuh). Each is a warp collective: the executor gathers the 32 lanes'
// operands and warp_matrix.hpp computes every lane's result from them.
#pragma once

#include <cstdint>

namespace xtrain::interp {

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {d}, {a}, {b}, {d}
void mma_m16n8k16_bf16_lane(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);

// ldmatrix.sync.aligned.m8n8.x{MATRICES}{.trans}.shared.b16 {out}, [row]: this lane's row address
// (read only from lanes below 8 * MATRICES, each of which must give a 16-byte aligned address in
// shared memory; its 16 bytes are checked as this lane's read) and its MATRICES registers.
template <int MATRICES, bool TRANS>
void ldmatrix_lane(uint32_t (&out)[MATRICES], const void* row);

}  // namespace xtrain::interp
