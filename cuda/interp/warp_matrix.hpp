// Interpret mode: the warp-level matrix instructions our kernels use, as pure functions over one
// warp's 32 lanes. The executor collects every lane's operands (index = %laneid), calls one of
// these when all 32 have arrived, and hands each lane its row of the result. Layouts are the PTX
// ISA's (section "Warp Level Matrix Multiply-Accumulate Instructions"); the .cpp cites each one.
//
// cp.async is not here: it is a per-thread copy whose completion is tracked per thread
// (commit_group / wait_group), not a warp collective, so it lives with the executor's per-thread
// state (executor.hpp, async_copy_16).
#pragma once

#include <cstdint>

namespace xtrain::interp {

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 d, a, b, c: D (16x8) = A (16x16) B (16x8)
// + C (16x8). a[lane] = the lane's four .b32 registers of A (two bf16 each, the lower-index
// element in the low half), b[lane] its two of B, c[lane] and d[lane] its four fp32 of C and D.
// Each bf16 x bf16 product is exact in fp32 (8 x 8 significant bits), unless it leaves fp32's
// normal range; the products are added onto C in increasing k, one fp32 rounding per add. The
// PTX ISA leaves the accumulation order and rounding unspecified ("at least single precision"),
// so this is one conforming choice, not a claim about the hardware's bits. d may alias c.
void mma_m16n8k16_bf16(const std::uint32_t (&a)[32][4], const std::uint32_t (&b)[32][2], const float (&c)[32][4],
                       float (&d)[32][4]);

// ldmatrix.sync.aligned.m8n8.x{matrices}{.trans}.shared.b16: loads `matrices` (1, 2 or 4) 8x8
// matrices of 16-bit elements. Lane L supplies row_addr[L], the start of row L % 8 of matrix
// L / 8; only lanes below 8 * matrices are read, and each of those addresses must be 16-byte
// aligned (a row is 16 bytes), else std::logic_error naming the lane and the address. out[L][m]
// is lane L's register holding its fragment of matrix m; out[L][m] for m >= matrices is left
// as it was. Any other std::logic_error: matrices not 1, 2 or 4, or a null row address.
void ldmatrix(int matrices, bool trans, const void* const (&row_addr)[32], std::uint32_t (&out)[32][4]);

}  // namespace xtrain::interp
