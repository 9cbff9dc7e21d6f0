// GPT-2's initial weights (worker/model/weight_init.hpp): one stream of normals per seed, the same
// values on any number of threads and in any chunks, and the same as the one-at-a-time sampler it
// replaced. The digests below are that sampler's (FNV-1a 64 of the fp32 parameters, seed 7),
// taken with it before the change on 2026-12-06: a new version that changes any drawn value
// changes every fresh run's weights, and must say so here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tests/worker/gpt_test_util.hpp"
#include "tests/worker/piecewise_memory.hpp"
#include "worker/model/weight_init.hpp"
#include "worker/train/run_report.hpp"

using namespace xtrain;

namespace {

std::vector<float> drawn(const ParamLayout& layout, int threads) {
  std::vector<float> out(layout.total(), -1.0f);
  draw_initial_weights(layout, 7, out.data(), threads);
  return out;
}

std::string digest(const std::vector<float>& v) { return fnv1a_hex(v.data(), v.size() * sizeof(float)); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("initial weights are the one-at-a-time sampler's, on any number of threads", "[model]") {
  const ParamLayout tiny(ModelDims::from(test::model_spec(2, 2, 24, 16, 71)));
  const std::vector<float> one = drawn(tiny, 1);
  CHECK(digest(one) == "1f9a6dad0940a1cb");
  for (int threads : {2, 3, 7}) {
    INFO(threads << " threads");
    CHECK(same_bits(drawn(tiny, threads), one));
  }
  // GPT-2 124M: chunks of 2^18 pairs, each split over the threads.
  const ParamLayout gpt2(ModelDims::from(test::gpt2_124m()));
  CHECK(digest(drawn(gpt2, 3)) == "1c7be5fda4550a4d");
}

TEST_CASE("initial weights drawn into a GPU's memory a piece at a time are the same bits", "[model]") {
  const ParamLayout tiny(ModelDims::from(test::model_spec(2, 2, 24, 16, 71)));
  const std::vector<float> in_place = drawn(tiny, 2);
  // 333 floats a piece: odd, so pieces end inside pairs, inside tensors and inside wte's padding.
  test::PiecewiseMemory device(333);
  std::vector<float> out(tiny.total(), -1.0f);
  draw_initial_weights(tiny, 7, out.data(), 2, device.access());
  CHECK(same_bits(out, in_place));
  CHECK(*std::max_element(device.stores.begin(), device.stores.end()) == 333);
}

TEST_CASE("a normal stream gives the same values in any pieces, chunks and threads", "[model]") {
  constexpr size_t kCount = 10007;  // odd: the last pair's sine is left for the next piece
  std::vector<float> whole(kCount + 3);
  NormalStream(11).fill(whole.data(), whole.size(), 0.5f, 1);
  // Odd pieces hand a pair's sine from one call to the next; chunks of 1 and 5 pairs and several
  // threads change nothing.
  for (const auto& [chunk, threads] : {std::pair<size_t, int>{1, 1}, {5, 3}, {4096, 2}, {1 << 18, 4}}) {
    INFO("chunks of " << chunk << " pairs, " << threads << " threads");
    NormalStream stream(11);
    std::vector<float> pieces(whole.size());
    size_t at = 0;
    for (const size_t n : {size_t{3}, size_t{0}, size_t{1}, kCount - 5, size_t{4}}) {
      stream.fill(pieces.data() + at, n, 0.5f, threads, chunk);
      at += n;
    }
    REQUIRE(at == whole.size());
    CHECK(same_bits(pieces, whole));
  }
  // Another seed, another stream; the scale multiplies each float sample.
  std::vector<float> other(kCount), unscaled(kCount);
  NormalStream(12).fill(other.data(), kCount, 0.5f, 1);
  NormalStream(11).fill(unscaled.data(), kCount, 1.0f, 1);
  CHECK_FALSE(same_bits(std::vector<float>(whole.begin(), whole.begin() + kCount), other));
  for (size_t i = 0; i < kCount; ++i) REQUIRE(whole[i] == 0.5f * unscaled[i]);
}
