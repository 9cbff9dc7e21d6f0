// Interpret mode (cuda/interp/): bfloat16 as CUDA's cuda_bf16.h names it, for the host compiler.
// Everything is host code here, so there are no __device__ qualifiers. The facts are the CUDA
// Math API's ("Bfloat16 Precision Conversion and Data Movement"):
//   - float -> bf16 (__float2bfloat16_rn, __float2bfloat16, the constructor from float) rounds to
//     nearest, ties to even; +-0 and +-inf are kept. "NaN returns NaN": the docs do not fix which
//     NaN. We give the canonical 0x7FFF for every NaN, as worker/math/bf16.hpp does (the rounding
//     the CPU backend uses, and the one a [gpu] test checks against the real intrinsic).
//   - bf16 -> float is exact (bf16 is the top half of an fp32), NaN payloads included.
//   - __floats2bfloat162_rn(a, b): a in the LOW 16 bits (.x), b in the high (.y).
// Only what the project's CUDA code uses is here. Two deliberate differences from CUDA, both
// turning a silent divergence into a compile error:
//   - the conversion to float is explicit (static_cast<float>(h) works, `float f = h` does not),
//     because CUDA's bf16 arithmetic operators are not provided and an implicit conversion would
//     make `h1 + h2` a float sum here where CUDA rounds it to bf16;
//   - construction from anything but float is deleted: CUDA rounds ints and doubles directly to
//     bf16, and going through float first would round twice.
#pragma once

#include <bit>
#include <type_traits>

#include "worker/math/bf16.hpp"

// .x is the low half of a __nv_bfloat162's 32 bits only on a little-endian host (CUDA's layout).
static_assert(std::endian::native == std::endian::little, "interpret mode needs a little-endian host");

struct __nv_bfloat16 {
  __nv_bfloat16() = default;  // trivial, as CUDA's: __nv_bfloat16{} is +0, a plain declaration is not set
  __nv_bfloat16(float f) : bits_(xtrain::math::bf16_bits_from_float(f)) {}  // round to nearest even
  template <class T>
  __nv_bfloat16(T) = delete;  // see the header comment: only float converts
  explicit operator float() const { return xtrain::math::float_from_bf16_bits(bits_); }

 private:
  friend unsigned short __bfloat16_as_ushort(__nv_bfloat16 h);
  friend __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits);
  unsigned short bits_;
};

struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x;  // low 16 bits
  __nv_bfloat16 y;  // high 16 bits
  __nv_bfloat162() = default;
  __nv_bfloat162(__nv_bfloat16 lo, __nv_bfloat16 hi) : x(lo), y(hi) {}
};

static_assert(sizeof(__nv_bfloat16) == 2 && alignof(__nv_bfloat16) == 2);
static_assert(sizeof(__nv_bfloat162) == 4);
static_assert(std::is_trivially_copyable_v<__nv_bfloat16> && std::is_trivially_copyable_v<__nv_bfloat162>);

inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits_; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits) {
  __nv_bfloat16 h;
  h.bits_ = bits;
  return h;
}

inline __nv_bfloat16 __float2bfloat16_rn(float a) { return __nv_bfloat16(a); }
inline __nv_bfloat16 __float2bfloat16(float a) { return __nv_bfloat16(a); }  // also nearest even (Math API)
inline float __bfloat162float(__nv_bfloat16 a) { return static_cast<float>(a); }

inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline float __low2float(__nv_bfloat162 a) { return static_cast<float>(a.x); }
inline float __high2float(__nv_bfloat162 a) { return static_cast<float>(a.y); }
