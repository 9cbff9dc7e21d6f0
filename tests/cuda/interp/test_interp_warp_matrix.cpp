// Interpret mode's warp matrix instructions (cuda/interp/warp_matrix.*). What must be right is
// the contract with our kernels, so the mma operands are built from row-major tiles by plain
// per-lane loads (the fragment layouts written out, as cuda/kernels/flash_attention_bf16.cuh loaded
// them before it used ldmatrix, and its a_from_accumulators) and, independently, with ldmatrix; D is then read the
// way the kernels read accumulators and compared at every lane and register with a product in
// double. ldmatrix itself is checked against the PTX ISA's element mapping with tagged elements.
// (A relabelling of k applied to both A and B leaves every product unchanged, so no mma test can
// see one; the element-by-element check of where each half lands is ldmatrix's.)
#include <catch2/catch.hpp>

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "cuda/interp/warp_matrix.hpp"

namespace {

using xtrain::interp::ldmatrix;
using xtrain::interp::mma_m16n8k16_bf16;

using FragA = std::uint32_t[32][4];  // (lane, register)
using FragB = std::uint32_t[32][2];
using FragC = float[32][4];

// Shared rows as the kernels pad them: 8 extra bf16 (16 bytes), so every row stays 16-byte aligned.
constexpr int kStride = 16 + 8;

struct alignas(16) Tile {
  std::uint16_t bits[16 * kStride] = {};  // (16, kStride) bf16 bit patterns, row-major
  std::uint16_t* row(int r) { return bits + r * kStride; }
};

// Two bf16 as one register: a 32-bit load (p[0] in the low half), or two 16-bit ones a column apart.
std::uint32_t pair_at(const std::uint16_t* p) { return p[0] | static_cast<std::uint32_t>(p[1]) << 16; }
std::uint32_t pair_down(const std::uint16_t* p, int stride) {
  return p[0] | static_cast<std::uint32_t>(p[stride]) << 16;
}

// The per-lane address arithmetic of those loads (row0 = col0 = 0), with g = lane / 4, t = lane % 4.
void kernel_load_a(const Tile& tile, FragA& a) {  // A(m, k) = tile[m][k]
  for (int lane = 0; lane < 32; ++lane) {
    const std::uint16_t* p = tile.bits + (lane / 4) * kStride + 2 * (lane % 4);
    const std::uint32_t regs[4] = {pair_at(p), pair_at(p + 8 * kStride), pair_at(p + 8), pair_at(p + 8 * kStride + 8)};
    std::memcpy(a[lane], regs, sizeof regs);
  }
}
void kernel_load_b_transposed(const Tile& tile, FragB& b) {  // B(k, n) = tile[n][k]
  for (int lane = 0; lane < 32; ++lane) {
    const std::uint16_t* p = tile.bits + (lane / 4) * kStride + 2 * (lane % 4);
    b[lane][0] = pair_at(p);
    b[lane][1] = pair_at(p + 8);
  }
}
void kernel_load_b(const Tile& tile, FragB& b) {  // B(k, n) = tile[k][n]
  for (int lane = 0; lane < 32; ++lane) {
    const std::uint16_t* p = tile.bits + 2 * (lane % 4) * kStride + lane / 4;
    b[lane][0] = pair_down(p, kStride);
    b[lane][1] = pair_down(p + 8 * kStride, kStride);
  }
}

// How the kernels read an accumulator: register e of a lane holds row g + 8 (e / 2), column
// 2t + e % 2 (the masks and stores of flash_attention_bf16.cuh index it so).
int acc_row(int lane, int e) { return lane / 4 + 8 * (e >> 1); }
int acc_col(int lane, int e) { return 2 * (lane % 4) + (e & 1); }

std::uint32_t pack_bf16(float lo, float hi) {  // flash_attention_bf16.cuh's pack_bf16
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  std::uint32_t r;
  std::memcpy(&r, &v, sizeof r);
  return r;
}
// a_from_accumulators: columns 0-7 of A as one accumulator tile, 8-15 as the next.
void kernel_a_from_accumulators(const double (&A)[16][16], FragA& a) {
  for (int lane = 0; lane < 32; ++lane) {
    float lo[4], hi[4];
    for (int e = 0; e < 4; ++e) {
      lo[e] = static_cast<float>(A[acc_row(lane, e)][acc_col(lane, e)]);
      hi[e] = static_cast<float>(A[acc_row(lane, e)][acc_col(lane, e) + 8]);
    }
    const std::uint32_t regs[4] = {pack_bf16(lo[0], lo[1]), pack_bf16(lo[2], lo[3]), pack_bf16(hi[0], hi[1]),
                                   pack_bf16(hi[2], hi[3])};
    std::memcpy(a[lane], regs, sizeof regs);
  }
}

// ldmatrix over row-major tiles: lane L names row L % 8 of matrix L / 8.
void ldmatrix_a_x4(const Tile& tile, FragA& a) {  // matrices: rows 0-7 / 8-15 x k 0-7, then k 8-15
  const void* rows[32];
  for (int lane = 0; lane < 32; ++lane) {
    const int m = lane / 8;
    rows[lane] = tile.bits + ((m & 1) * 8 + lane % 8) * kStride + (m >> 1) * 8;
  }
  ldmatrix(4, false, rows, a);
}
void ldmatrix_b_x2(const Tile& tile, bool trans, FragB& b) {
  const void* rows[32] = {};  // lanes 16-31 name nothing: .x2 reads lanes 0-15 only
  for (int lane = 0; lane < 16; ++lane) {
    const int m = lane / 8, r = lane % 8;
    // .trans over the KxN tile: matrix m = k rows 8m..8m+7; plain over the NxK tile: k columns 8m..
    rows[lane] = trans ? tile.bits + (8 * m + r) * kStride : tile.bits + r * kStride + 8 * m;
  }
  std::uint32_t out[32][4];
  ldmatrix(2, trans, rows, out);
  for (int lane = 0; lane < 32; ++lane) std::memcpy(b[lane], out[lane], sizeof b[lane]);
}

// One product's operands: values in double (all exactly bf16), tiles in the layouts above.
struct Operands {
  double A[16][16], B[16][8], C[16][8];  // (M,K), (K,N), (M,N)
  Tile a_tile, kn_tile, nk_tile;         // A row-major; B as KxN row-major; B^T (NxK) row-major
  FragC c;
};

template <class Draw>
Operands make_operands(Draw draw) {
  Operands o;
  auto bf16 = [&](double& value, std::uint16_t& bits) {
    bits = __bfloat16_as_ushort(__float2bfloat16_rn(draw()));
    value = __bfloat162float(__ushort_as_bfloat16(bits));
  };
  for (int m = 0; m < 16; ++m)
    for (int k = 0; k < 16; ++k) bf16(o.A[m][k], o.a_tile.row(m)[k]);
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) {
      bf16(o.B[k][n], o.kn_tile.row(k)[n]);
      o.nk_tile.row(n)[k] = o.kn_tile.row(k)[n];
    }
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) o.C[m][n] = draw();
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 4; ++e) o.c[lane][e] = static_cast<float>(o.C[acc_row(lane, e)][acc_col(lane, e)]);
  return o;
}

// D from every way of building A and B; `check(m, n, got, lane, e)` judges each element.
template <class Check>
void for_every_fragment_path(const Operands& o, Check check) {
  FragA a[3];
  kernel_load_a(o.a_tile, a[0]);
  ldmatrix_a_x4(o.a_tile, a[1]);
  kernel_a_from_accumulators(o.A, a[2]);
  FragB b[4];
  kernel_load_b(o.kn_tile, b[0]);
  kernel_load_b_transposed(o.nk_tile, b[1]);
  ldmatrix_b_x2(o.kn_tile, true, b[2]);
  ldmatrix_b_x2(o.nk_tile, false, b[3]);
  const char* a_names[] = {"load_a", "ldmatrix.x4", "a_from_accumulators"};
  const char* b_names[] = {"load_b", "load_b_transposed", "ldmatrix.x2.trans", "ldmatrix.x2"};
  for (int ia = 0; ia < 3; ++ia)
    for (int ib = 0; ib < 4; ++ib) {
      INFO("A by " << a_names[ia] << ", B by " << b_names[ib]);
      FragC d;
      mma_m16n8k16_bf16(a[ia], b[ib], o.c, d);
      for (int lane = 0; lane < 32; ++lane)
        for (int e = 0; e < 4; ++e) check(acc_row(lane, e), acc_col(lane, e), d[lane][e], lane, e);
    }
}

}  // namespace

TEST_CASE("interp mma m16n8k16 bf16 on the kernels' fragments is A B + C at every lane and register", "[interp][mma]") {
  std::mt19937 rng(20261202);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  for (int trial = 0; trial < 20; ++trial) {
    const Operands o = make_operands([&] { return value(rng); });
    // 17 terms (c and 16 exact products) summed in fp32 in some order: each add rounds once
    // (relative error u = 2^-24), so |D - exact| <= gamma_16 (|c| + sum_k |a_k b_k|), gamma_n =
    // n u / (1 - n u) (Higham, recursive summation); any order the PTX ISA allows meets it.
    const double u = std::ldexp(1.0, -24), gamma16 = 16 * u / (1 - 16 * u);
    for_every_fragment_path(o, [&](int m, int n, float got, int lane, int e) {
      double exact = o.C[m][n], magnitude = std::fabs(o.C[m][n]);
      for (int k = 0; k < 16; ++k) {
        exact += o.A[m][k] * o.B[k][n];  // exact: bf16 products and sums of them fit double
        magnitude += std::fabs(o.A[m][k] * o.B[k][n]);
      }
      INFO("trial " << trial << " lane " << lane << " register " << e << " = D(" << m << ", " << n << ")");
      CHECK(std::fabs(got - exact) <= gamma16 * magnitude);
    });
  }
}

TEST_CASE("interp mma m16n8k16 bf16 on small integers is exact at every lane and register", "[interp][mma]") {
  // |a|, |b| <= 8 and |c| <= 100: every partial sum is an integer below 2^11, so fp32 rounds
  // nothing and any misplaced element shows as an exact mismatch.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> value(-8, 8);
  const Operands o = make_operands([&] { return static_cast<float>(value(rng)); });
  for_every_fragment_path(o, [&](int m, int n, float got, int lane, int e) {
    double exact = o.C[m][n];
    for (int k = 0; k < 16; ++k) exact += o.A[m][k] * o.B[k][n];
    INFO("lane " << lane << " register " << e << " = D(" << m << ", " << n << ")");
    CHECK(got == exact);
  });
}

TEST_CASE("interp mma m16n8k16 bf16 may write D over C", "[interp][mma]") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  const Operands o = make_operands([&] { return value(rng); });
  FragA a;
  FragB b;
  kernel_load_a(o.a_tile, a);
  kernel_load_b(o.kn_tile, b);
  FragC apart, in_place;
  std::memcpy(in_place, o.c, sizeof in_place);
  mma_m16n8k16_bf16(a, b, o.c, apart);
  mma_m16n8k16_bf16(a, b, in_place, in_place);
  CHECK(std::memcmp(apart, in_place, sizeof apart) == 0);
}

namespace {

// Four 8x8 matrices of tagged elements (matrix << 8 | row << 4 | col), their rows scattered
// through a buffer in 32-byte slots (rows need not be contiguous; the slots' second halves hold
// 0xFFFF, which no tag is).
struct TaggedRows {
  alignas(16) std::uint16_t slots[32][16];
  const void* rows[32];  // rows[8m + r]: the address of row r of matrix m
  TaggedRows() {
    for (auto& slot : slots)
      for (std::uint16_t& x : slot) x = 0xFFFF;
    for (int i = 0; i < 32; ++i) {
      const int m = i / 8, r = i % 8, slot = (5 * i + 3) % 32;
      for (int c = 0; c < 8; ++c) slots[slot][c] = static_cast<std::uint16_t>(m << 8 | r << 4 | c);
      rows[i] = slots[slot];
    }
  }
};

}  // namespace

TEST_CASE("interp ldmatrix x1 x2 x4 with and without trans give the PTX ISA's element mapping", "[interp][ldmatrix]") {
  const TaggedRows mem;
  for (const int matrices : {1, 2, 4})
    for (const bool trans : {false, true}) {
      INFO(".x" << matrices << (trans ? ".trans" : ""));
      const void* rows[32] = {};  // lanes past 8 * matrices name nothing: they must not be read
      for (int lane = 0; lane < 8 * matrices; ++lane) rows[lane] = mem.rows[lane];
      std::uint32_t out[32][4];
      std::memset(out, 0xAB, sizeof out);
      ldmatrix(matrices, trans, rows, out);
      for (int lane = 0; lane < 32; ++lane)
        for (int m = 0; m < 4; ++m) {
          INFO("lane " << lane << " register " << m);
          if (m >= matrices) {
            CHECK(out[lane][m] == 0xABABABABu);  // no such register: untouched
            continue;
          }
          for (int half = 0; half < 2; ++half) {
            INFO("half " << half);
            // PTX ISA, ldmatrix: four consecutive lanes hold one row, lane L elements 2(L % 4)
            // and +1 of row L / 4; .trans reads each matrix column-major.
            const int along = 2 * (lane % 4) + half, across = lane / 4;
            const int want_row = trans ? along : across, want_col = trans ? across : along;
            const unsigned tag = out[lane][m] >> (16 * half) & 0xFFFFu;
            CHECK(tag >> 8 == static_cast<unsigned>(m));
            CHECK((tag >> 4 & 15u) == static_cast<unsigned>(want_row));
            CHECK((tag & 15u) == static_cast<unsigned>(want_col));
          }
        }
    }
}

TEST_CASE("interp ldmatrix refuses a row address that is not 16-byte aligned, naming the lane", "[interp][ldmatrix]") {
  const TaggedRows mem;
  const void* rows[32];
  std::memcpy(rows, mem.rows, sizeof rows);
  std::uint32_t out[32][4];
  rows[3] = static_cast<const char*>(rows[3]) + 2;  // one element in: 2-byte, not 16-byte aligned
  CHECK_THROWS_WITH(ldmatrix(1, false, rows, out),
                    Catch::Matchers::Contains("lane 3") && Catch::Matchers::Contains("16-byte aligned"));
  CHECK_THROWS_AS(ldmatrix(4, true, rows, out), std::logic_error);
  std::memcpy(rows, mem.rows, sizeof rows);
  rows[31] = static_cast<const char*>(rows[31]) + 8;
  CHECK_NOTHROW(ldmatrix(2, false, rows, out));  // lane 31 is not read by .x2
  CHECK_THROWS_WITH(ldmatrix(4, false, rows, out), Catch::Matchers::Contains("lane 31"));
  CHECK_THROWS_AS(ldmatrix(3, false, mem.rows, out), std::logic_error);  // there is no .x3
}
