// HostAccess (worker/model/host_access.*): host memory in place, a GPU's a piece at a time.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "common/work_progress.hpp"
#include "tests/worker/piecewise_memory.hpp"
#include "worker/model/host_access.hpp"

using namespace xtrain;

TEST_CASE("reads and fills go once in place, else in pieces at their offsets, each fill followed by progress",
          "[host_access]") {
  std::vector<float> src(250);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.5f;
  test::PiecewiseMemory device(100);
  const HostAccess host;
  int progress = 0;  // WorkProgress's hook runs at every advance, of any size
  const WorkProgress counting([&] { ++progress; }, 1);
  for (const HostAccess* memory : {&host, &device.access()}) {
    const int pieces = memory == &host ? 1 : 3;
    progress = 0;
    std::vector<size_t> offsets;
    std::vector<float> seen;
    memory->read(src.data(), src.size(), [&](const float* piece, size_t offset, size_t n) {
      offsets.push_back(offset);
      seen.insert(seen.end(), piece, piece + n);
    });
    CHECK(seen == src);
    CHECK(offsets == (memory == &host ? std::vector<size_t>{0} : std::vector<size_t>{0, 100, 200}));
    CHECK(progress == 0);  // a read's consumer counts what it reads

    std::vector<float> dst(src.size(), std::nanf(""));
    offsets.clear();
    memory->fill(dst.data(), dst.size(), [&](float* piece, size_t offset, size_t n) {
      offsets.push_back(offset);
      std::copy(src.begin() + static_cast<long>(offset), src.begin() + static_cast<long>(offset + n), piece);
    });
    CHECK(dst == src);
    CHECK(offsets == (memory == &host ? std::vector<size_t>{0} : std::vector<size_t>{0, 100, 200}));
    CHECK(progress == pieces);
    memory->fill_whole(dst.data(), dst.size(), [&](float* all) { std::copy(src.begin(), src.end(), all); });
    CHECK(dst == src);
    CHECK(progress == pieces + 1);
  }
  CHECK(device.views == std::vector<size_t>{100, 100, 50});
  CHECK(device.stores == std::vector<size_t>{100, 100, 50, 250});
}
