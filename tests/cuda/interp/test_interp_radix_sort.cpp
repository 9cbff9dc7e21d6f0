// Interpret mode's cub::DeviceRadixSort::SortKeys against std::stable_sort on the masked keys (the
// sort is stable, so the whole output is determined), for several bit ranges and sizes, CUB's
// temporary-storage protocol, and the embedding backward's own keys and storage allowance.
#include <catch2/catch.hpp>
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "tests/cuda/interp/interp_test_util.hpp"
#include "worker/model/cuda_buffers.hpp"

namespace {

using Catch::Matchers::Contains;
using xtrain::interp::test::DeviceBuffer;
using Key = unsigned long long;

size_t sort_bytes(int n, int begin, int end) {
  size_t bytes = 0;
  REQUIRE(cub::DeviceRadixSort::SortKeys(nullptr, bytes, static_cast<Key*>(nullptr), static_cast<Key*>(nullptr), n,
                                         begin, end, cudaStream_t{}) == cudaSuccess);
  return bytes;
}

// Sorts `keys` on bits [begin, end) through CUB's protocol (ask, allocate, sort) and checks the
// result against std::stable_sort on the masked keys.
void check_sort(const std::vector<Key>& keys, int begin, int end) {
  const int n = static_cast<int>(keys.size());
  DeviceBuffer in(keys.size() * sizeof(Key)), out(keys.size() * sizeof(Key));
  if (n > 0) std::memcpy(in.get(), keys.data(), in.bytes());
  size_t bytes = sort_bytes(n, begin, end);
  DeviceBuffer temp(bytes);
  REQUIRE(cub::DeviceRadixSort::SortKeys(temp.get(), bytes, in.as<Key>(), out.as<Key>(), n, begin, end,
                                         cudaStream_t{}) == cudaSuccess);
  xtrain::interp::test::synchronize();
  const Key mask = (end - begin == 64 ? ~Key{0} : ((Key{1} << (end - begin)) - 1)) << begin;
  std::vector<Key> expected = keys;
  std::stable_sort(expected.begin(), expected.end(), [&](Key x, Key y) { return (x & mask) < (y & mask); });
  INFO("n " << n << ", bits [" << begin << ", " << end << ")");
  CHECK(std::equal(expected.begin(), expected.end(), out.as<Key>()));
  CHECK(std::equal(keys.begin(), keys.end(), in.as<Key>()));  // the input is left as it was
}

std::vector<Key> random_keys(size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<Key> keys(n);
  for (Key& k : keys) k = rng();
  return keys;
}

}  // namespace

TEST_CASE("interp radix sort: stable on the bit range, as std::stable_sort on masked keys", "[interp][cub]") {
  const std::pair<int, int> ranges[] = {{0, 64}, {0, 13}, {5, 17}, {40, 64}, {63, 64}, {9, 9}};
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{100000}}) {
    const std::vector<Key> keys = random_keys(n, static_cast<unsigned>(n) + 1);
    for (const auto& [begin, end] : ranges) check_sort(keys, begin, end);
  }
  // Few distinct sort bits, many equal keys under the mask: stability decides the order.
  std::vector<Key> dup = random_keys(5000, 3);
  for (Key& k : dup) k = (k & ~Key{0xF0}) | ((k >> 60) << 4);
  check_sort(dup, 4, 8);
}

TEST_CASE("interp radix sort: the embedding's keys, within the memory plan's allowance", "[interp][cub]") {
  // cuda/kernels/embedding.cuh: key = token << position_bits | position, bits [0, position_bits + 31).
  const int BT = 4096, position_bits = 12;
  std::mt19937 rng(5);
  std::vector<Key> keys(BT);
  for (int i = 0; i < BT; ++i) keys[i] = (static_cast<Key>(rng() % 50257) << position_bits) | static_cast<Key>(i);
  check_sort(keys, 0, position_bits + 31);
  for (int n : {0, 1, 1000, BT, 1 << 20}) {
    CHECK(sort_bytes(n, 0, 64) <= xtrain::cuda_buffers::embedding_sort_allowance_bytes(n));
  }
}

TEST_CASE("interp radix sort refuses too little storage, bad bit ranges and host keys", "[interp][cub]") {
  const std::vector<Key> keys = random_keys(300, 9);
  DeviceBuffer in(keys.size() * sizeof(Key)), out(keys.size() * sizeof(Key));
  std::memcpy(in.get(), keys.data(), in.bytes());
  std::memset(out.get(), 0, out.bytes());
  const int n = static_cast<int>(keys.size());
  const size_t needed = sort_bytes(n, 0, 64);
  DeviceBuffer temp(needed);
  auto untouched = [&] { return std::all_of(out.as<Key>(), out.as<Key>() + n, [](Key k) { return k == 0; }); };
  SECTION("temporary storage one byte short") {
    size_t bytes = needed - 1;
    CHECK(cub::DeviceRadixSort::SortKeys(temp.get(), bytes, in.as<Key>(), out.as<Key>(), n, 0, 64, cudaStream_t{}) ==
          cudaErrorInvalidValue);
    CHECK_THAT(xtrain::interp::last_sort_detail(), Contains("needed"));
  }
  SECTION("a bit range outside the key") {
    size_t bytes = needed;
    CHECK(cub::DeviceRadixSort::SortKeys(temp.get(), bytes, in.as<Key>(), out.as<Key>(), n, 8, 65, cudaStream_t{}) ==
          cudaErrorInvalidValue);
    CHECK(cub::DeviceRadixSort::SortKeys(temp.get(), bytes, in.as<Key>(), out.as<Key>(), n, 9, 8, cudaStream_t{}) ==
          cudaErrorInvalidValue);
  }
  SECTION("keys in host memory") {
    std::vector<Key> host(keys);  // heap memory, never a device allocation
    size_t bytes = needed;
    CHECK(cub::DeviceRadixSort::SortKeys(temp.get(), bytes, host.data(), out.as<Key>(), n, 0, 64, cudaStream_t{}) ==
          cudaErrorInvalidValue);
    CHECK_THAT(xtrain::interp::last_sort_detail(), Contains("device"));
  }
  SECTION("output overlapping the input") {
    size_t bytes = needed;
    CHECK(cub::DeviceRadixSort::SortKeys(temp.get(), bytes, in.as<Key>(), in.as<Key>(), n, 0, 64, cudaStream_t{}) ==
          cudaErrorInvalidValue);
    CHECK(std::equal(keys.begin(), keys.end(), in.as<Key>()));
  }
  CHECK(untouched());
}
