#include "cuda/interp/warp_matrix.hpp"

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "worker/math/bf16.hpp"

namespace xtrain::interp {

namespace {

constexpr int kLanes = 32;

struct RowCol {
  int row, col;
};

// With g = lane / 4 (groupID) and t = lane % 4 (threadID_in_group), element i of a fragment is
// half i % 2 of register i / 2 ("low to high"). PTX ISA, "Matrix Fragments for mma.m16n8k16 with
// floating point type":
//   A (16x16), a0..a7: row g for a0, a1, a4, a5, else g + 8; col 2t + (i & 1), + 8 for i >= 4.
constexpr RowCol mma_a_element(int lane, int i) {
  return {lane / 4 + 8 * ((i / 2) & 1), 2 * (lane % 4) + (i & 1) + 8 * (i / 4)};
}
//   B (16x8), b0..b3: row (k) 2t + (i & 1), + 8 for i >= 2; col (n) g.
constexpr RowCol mma_b_element(int lane, int i) { return {2 * (lane % 4) + (i & 1) + 8 * (i / 2), lane / 4}; }
//   C and D (16x8), c0..c3, one fp32 per register: row g for i < 2, else g + 8; col 2t + (i & 1).
constexpr RowCol mma_cd_element(int lane, int i) { return {lane / 4 + 8 * (i / 2), 2 * (lane % 4) + (i & 1)}; }

float bf16_half(std::uint32_t reg, int half) {
  return math::float_from_bf16_bits(static_cast<std::uint16_t>(reg >> (16 * half)));
}

// PTX ISA, "Warp-level matrix load instruction: ldmatrix" (its figure of the fragment layout):
// a group of four lanes receives one row, lane L its elements 2(L % 4) and 2(L % 4) + 1 of row
// L / 4 in the low and high half; with .trans the matrix is read column-major, so the same lane
// gets rows 2(L % 4) and 2(L % 4) + 1 of column L / 4.
constexpr RowCol ldmatrix_element(int lane, int half, bool trans) {
  const int along = 2 * (lane % 4) + half, across = lane / 4;
  return trans ? RowCol{along, across} : RowCol{across, along};
}

[[noreturn]] void refuse(int lane, const void* addr, const char* why) {
  char where[32];
  std::snprintf(where, sizeof where, "%p", addr);
  throw std::logic_error("ldmatrix: lane " + std::to_string(lane) + "'s row address " + where + " " + why);
}

}  // namespace

void mma_m16n8k16_bf16(const std::uint32_t (&a)[32][4], const std::uint32_t (&b)[32][2], const float (&c)[32][4],
                       float (&d)[32][4]) {
  float A[16][16], B[16][8], acc[16][8];  // (M,K), (K,N), (M,N): C, then D
  for (int lane = 0; lane < kLanes; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const RowCol e = mma_a_element(lane, i);
      A[e.row][e.col] = bf16_half(a[lane][i / 2], i % 2);
    }
    for (int i = 0; i < 4; ++i) {
      const RowCol e = mma_b_element(lane, i);
      B[e.row][e.col] = bf16_half(b[lane][i / 2], i % 2);
    }
    for (int i = 0; i < 4; ++i) {
      const RowCol e = mma_cd_element(lane, i);
      acc[e.row][e.col] = c[lane][i];
    }
  }
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n)
      for (int k = 0; k < 16; ++k) {
        // The product is exact, so a compiler that fuses this into an fma gets the same bits.
        const float product = A[m][k] * B[k][n];
        acc[m][n] += product;
      }
  // All of C was read above, so writing d over c is safe.
  for (int lane = 0; lane < kLanes; ++lane)
    for (int i = 0; i < 4; ++i) {
      const RowCol e = mma_cd_element(lane, i);
      d[lane][i] = acc[e.row][e.col];
    }
}

void ldmatrix(int matrices, bool trans, const void* const (&row_addr)[32], std::uint32_t (&out)[32][4]) {
  if (matrices != 1 && matrices != 2 && matrices != 4)
    throw std::logic_error("ldmatrix: .x" + std::to_string(matrices) + " does not exist (x1, x2 or x4)");
  // "The matrix addresses must be naturally aligned": four lanes load a 16-byte row together.
  for (int lane = 0; lane < 8 * matrices; ++lane) {
    if (row_addr[lane] == nullptr) refuse(lane, row_addr[lane], "is null");
    if (reinterpret_cast<std::uintptr_t>(row_addr[lane]) % 16 != 0)
      refuse(lane, row_addr[lane], "is not 16-byte aligned");
  }
  for (int lane = 0; lane < kLanes; ++lane)
    for (int m = 0; m < matrices; ++m) {
      std::uint32_t reg = 0;
      for (int half = 0; half < 2; ++half) {
        const RowCol e = ldmatrix_element(lane, half, trans);
        std::uint16_t element;  // memcpy: shared memory holds bf16 (or any b16), not uint16_t objects
        std::memcpy(&element, static_cast<const unsigned char*>(row_addr[8 * m + e.row]) + 2 * e.col, sizeof element);
        reg |= static_cast<std::uint32_t>(element) << (16 * half);
      }
      out[lane][m] = reg;
    }
}

}  // namespace xtrain::interp
