// Interpret mode: the device side of CUDA C++ for the host compiler. Qualifiers vanish (every
// function is a host function), the built-in indices read the running fiber's position, and
// barriers, warp collectives and shared memory go to the executor (executor.hpp). Included by
// cuda_runtime.h; the kernels' portable spellings (cuda/kernels/portable.cuh) build on it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda/interp/executor.hpp"
#include "cuda_runtime_api.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
// The host compiler keeps no trace of a kernel's launch bounds, so interpret mode cannot check a
// launch against them (docs/interpret-mode.md says so).
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

#define threadIdx (::xtrain::interp::this_thread().thread_idx)
#define blockIdx (::xtrain::interp::this_thread().block_idx)
#define blockDim (::xtrain::interp::this_thread().block_dim)
#define gridDim (::xtrain::interp::this_thread().grid_dim)

inline void __syncthreads() { ::xtrain::interp::sync_threads(); }
inline void __syncwarp(unsigned mask = 0xFFFFFFFFu) { ::xtrain::interp::sync_warp(mask); }

// CUDA's overloads of min and max for device code.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline unsigned __float_as_uint(float x) {
  unsigned u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

namespace xtrain::interp {

// Shuffles: each lane's source, by CUDA's rules for `width`-wide subsections (the Programming
// Guide's "Warp Shuffle Functions"); a lane outside the subsection's range keeps its own value.
enum class ShuffleKind { index, up, down, butterfly };
std::string shuffle_combine_index(WarpLanes& w);
std::string shuffle_combine_up(WarpLanes& w);
std::string shuffle_combine_down(WarpLanes& w);
std::string shuffle_combine_xor(WarpLanes& w);
std::string vote_combine_all(WarpLanes& w);
std::string vote_combine_any(WarpLanes& w);
std::string vote_combine_ballot(WarpLanes& w);

template <class T>
T shuffle(const char* name, WarpCombine combine, unsigned mask, T v, int arg, int width) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= kCollectiveBytes, "shuffles move small values");
  T out;
  warp_collective(name, combine, mask, &v, sizeof(T), arg, width, &out, sizeof(T));
  return out;
}

inline unsigned vote(const char* name, WarpCombine combine, unsigned mask, int predicate) {
  unsigned out = 0;
  const int p = predicate != 0;
  warp_collective(name, combine, mask, &p, sizeof p, 0, 32, &out, sizeof out);
  return out;
}

}  // namespace xtrain::interp

template <class T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  return ::xtrain::interp::shuffle("__shfl_sync", ::xtrain::interp::shuffle_combine_index, mask, v, src_lane, width);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::xtrain::interp::shuffle("__shfl_up_sync", ::xtrain::interp::shuffle_combine_up, mask, v,
                                   static_cast<int>(delta), width);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::xtrain::interp::shuffle("__shfl_down_sync", ::xtrain::interp::shuffle_combine_down, mask, v,
                                   static_cast<int>(delta), width);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return ::xtrain::interp::shuffle("__shfl_xor_sync", ::xtrain::interp::shuffle_combine_xor, mask, v, lane_mask,
                                   width);
}
inline int __all_sync(unsigned mask, int p) {
  return static_cast<int>(::xtrain::interp::vote("__all_sync", ::xtrain::interp::vote_combine_all, mask, p));
}
inline int __any_sync(unsigned mask, int p) {
  return static_cast<int>(::xtrain::interp::vote("__any_sync", ::xtrain::interp::vote_combine_any, mask, p));
}
inline unsigned __ballot_sync(unsigned mask, int p) {
  return ::xtrain::interp::vote("__ballot_sync", ::xtrain::interp::vote_combine_ballot, mask, p);
}

// Atomics: the block's threads run one at a time between switch points, so a read-modify-write
// is atomic as it is; it is checked as an access that does not race.
template <class T, class F>
T xtrain_interp_atomic(T* p, F&& f) {
  ::xtrain::interp::check_atomic_access(p, sizeof(T));
  const T old = *p;
  *p = f(old);
  return old;
}
// Float adds are also recorded: their order is free, so the race check allows a word that only
// they wrote to differ between schedules by what reordering them can make (device_memory.hpp).
inline float atomicAdd(float* p, float v) { return ::xtrain::interp::float_atomic_add(p, v); }
inline double atomicAdd(double* p, double v) { return xtrain_interp_atomic(p, [v](double o) { return o + v; }); }
inline int atomicAdd(int* p, int v) { return xtrain_interp_atomic(p, [v](int o) { return o + v; }); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return xtrain_interp_atomic(p, [v](unsigned o) { return o + v; }); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return xtrain_interp_atomic(p, [v](unsigned long long o) { return o + v; });
}
inline int atomicMax(int* p, int v) { return xtrain_interp_atomic(p, [v](int o) { return o > v ? o : v; }); }
inline int atomicMin(int* p, int v) { return xtrain_interp_atomic(p, [v](int o) { return o < v ? o : v; }); }
inline unsigned atomicMax(unsigned* p, unsigned v) {
  return xtrain_interp_atomic(p, [v](unsigned o) { return o > v ? o : v; });
}
inline unsigned atomicMin(unsigned* p, unsigned v) {
  return xtrain_interp_atomic(p, [v](unsigned o) { return o < v ? o : v; });
}
inline int atomicExch(int* p, int v) { return xtrain_interp_atomic(p, [v](int) { return v; }); }
inline int atomicCAS(int* p, int compare, int v) {
  return xtrain_interp_atomic(p, [compare, v](int o) { return o == compare ? v : o; });
}

namespace xtrain::interp {

// One launch's kernel and a copy of its arguments, converted to the parameter types as a launch
// does; every thread runs the kernel on its own copy of them (by-value parameters).
template <class... Params>
class KernelCall final : public KernelBody {
 public:
  template <class... Args>
  explicit KernelCall(void (*kernel)(Params...), Args&&... args) : kernel_(kernel), params_(std::forward<Args>(args)...) {}
  void run_thread() const override { std::apply(kernel_, params_); }
  const void* storage() const override { return this; }
  size_t storage_bytes() const override { return sizeof(*this); }
#if defined(__SANITIZE_THREAD__)
  bool instrumented() const override { return true; }
#else
  bool instrumented() const override { return false; }
#endif

 private:
  void (*kernel_)(Params...);
  std::tuple<std::decay_t<Params>...> params_;
};

// Runs (or, while `stream` is being captured, records) the launch; a refused launch or a fault
// becomes the error cudaGetLastError returns, as on a GPU.
void launch(const void* kernel, dim3 grid, dim3 block, size_t dynamic_shared_bytes, cudaStream_t stream,
            std::shared_ptr<const KernelBody> body);

}  // namespace xtrain::interp

// The kernels' portable spellings (cuda/kernels/portable.cuh) in interpret mode. The alias names
// the array (or, with empty dims, the scalar) type, so one reference declaration serves both.
#define XTRAIN_SHARED(type, name, dims)                         \
  using name##_shared_type = type dims;                         \
  name##_shared_type& name = *static_cast<name##_shared_type*>( \
      ::xtrain::interp::static_shared(#name, sizeof(name##_shared_type), alignof(name##_shared_type)))
#define XTRAIN_DYNAMIC_SHARED(type, name) \
  type* const name = static_cast<type*>(::xtrain::interp::dynamic_shared())
