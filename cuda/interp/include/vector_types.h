// Interpret mode (cuda/interp/): CUDA's vector types with their alignments (a float4 or uint4 is
// one 16-byte access, which the access checks see as such) and dim3.
#pragma once

struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned int x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
struct uint3 {
  unsigned int x, y, z;
};

inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) { return {x, y, z, w}; }

struct dim3 {
  unsigned int x = 1, y = 1, z = 1;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr operator uint3() const { return {x, y, z}; }
};
