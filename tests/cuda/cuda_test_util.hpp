// Helpers for the CUDA tests: device arrays owned through the Backend interface, fresh random
// inputs (the seed is printed, so a failure can be replayed with XTRAIN_TEST_SEED), and the
// relative error in the L2 norm, ||a - b|| / ||b||, accumulated in double (NaN never passes).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cuda/cuda_api.hpp"
#include "worker/model/backend.hpp"

namespace xtrain::test {

// Interpret mode (cuda/interp/) runs these cases on the CPU, kernels included, under three
// schedules, some 10^5 times slower than a GPU. Where a case has GPT-2-sized shapes, which test
// scale rather than indexing, it runs smaller ones there with the same kinds of tails
// (sizes_for_this_device): the small shapes every case has stay in both.
#if defined(XTRAIN_CUDA_INTERPRET)
inline constexpr bool kInterpreted = true;
#else
inline constexpr bool kInterpreted = false;
#endif

template <class S>
std::vector<S> sizes_for_this_device(std::vector<S> always, const std::vector<S>& on_gpu,
                                     const std::vector<S>& interpreted) {
  const std::vector<S>& extra = kInterpreted ? interpreted : on_gpu;
  always.insert(always.end(), extra.begin(), extra.end());
  return always;
}

// A seed per test case: XTRAIN_TEST_SEED when set, else fresh from the OS; always printed.
inline std::uint64_t fresh_seed() {
  if (const char* s = std::getenv("XTRAIN_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) | rd();
}

class Random {
 public:
  explicit Random(std::uint64_t seed) : rng_(seed) {}
  std::vector<float> normal(size_t n, float sd = 1.0f) {
    std::normal_distribution<float> d(0.0f, sd);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng_);
    return v;
  }
  std::vector<float> uniform(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng_);
    return v;
  }
  std::vector<int32_t> ints(size_t n, int below) {
    std::vector<int32_t> v(n);
    for (auto& x : v) x = static_cast<int32_t>(rng_() % static_cast<std::uint64_t>(below));
    return v;
  }

 private:
  std::mt19937_64 rng_;
};

// A test case's fresh inputs: each case prints `seed` (INFO) so a failure can be replayed.
struct Seeded {
  std::uint64_t seed = fresh_seed();
  Random rnd{seed};
};

inline double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    diff += d * d;
    ref += static_cast<double>(want[i]) * want[i];
  }
  const double err = std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
  return std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
}

// Backend memory holding a copy of a host vector (floats or ints), freed with the backend.
template <class T>
class DeviceArray {
 public:
  DeviceArray(Backend& b, const std::vector<T>& host) : b_(b), n_(host.size()) {
    if constexpr (std::is_same_v<T, float>) {
      p_ = b.alloc_floats(n_);
    } else {
      p_ = b.alloc_ints(n_);
    }
    b.upload(p_, host.data(), n_);
  }
  // Filled with NaN (floats): an output every element of which the operation must write.
  static DeviceArray poisoned(Backend& b, size_t n) {
    return DeviceArray(b, std::vector<T>(n, std::numeric_limits<T>::quiet_NaN()));
  }
  ~DeviceArray() { b_.free(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : b_(o.b_), p_(o.p_), n_(o.n_) { o.p_ = nullptr; }

  T* get() { return p_; }
  std::vector<T> host() const {
    std::vector<T> v(n_);
    b_.download(v.data(), p_, n_);
    return v;
  }

 private:
  Backend& b_;
  T* p_ = nullptr;
  size_t n_;
};

using DeviceFloats = DeviceArray<float>;
using DeviceInts = DeviceArray<int32_t>;

// Activations in the backend's activation dtype, crossing to and from the host as floats (an
// upload to bf16 rounds, as every bf16 store does).
class DeviceActs {
 public:
  DeviceActs(Backend& b, const std::vector<float>& host) : b_(b), n_(host.size()), p_(b.alloc_acts(n_)) {
    b.upload(p_, host.data(), n_);
  }
  static DeviceActs poisoned(Backend& b, size_t n) {
    return DeviceActs(b, std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()));
  }
  ~DeviceActs() { b_.free(p_.data()); }
  DeviceActs(const DeviceActs&) = delete;
  DeviceActs& operator=(const DeviceActs&) = delete;
  DeviceActs(DeviceActs&& o) noexcept : b_(o.b_), n_(o.n_), p_(o.p_) { o.p_ = nullptr; }

  ActPtr get() const { return p_; }
  std::vector<float> host() const {
    std::vector<float> v(n_);
    b_.download(v.data(), p_, n_);
    return v;
  }

 private:
  Backend& b_;
  size_t n_;
  ActPtr p_;
};

// The precisions the CUDA ops and training steps are checked in.
struct GpuMode {
  Precision precision;
  const char* name;
  bool deterministic = true;  // train.deterministic
  bool tf32() const { return precision == Precision::tf32; }
};
inline constexpr GpuMode kStrictFp32{Precision::fp32, "strict fp32"};
inline constexpr GpuMode kTf32{Precision::tf32, "tf32"};
inline constexpr GpuMode kBf16{Precision::bf16, "bf16"};
inline constexpr GpuMode kBf16AtomicDq{Precision::bf16, "bf16, dQ summed by atomics", false};

}  // namespace xtrain::test
