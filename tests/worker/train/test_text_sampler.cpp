// The trainer's closing sample (worker/train/text_sampler.hpp) ends where generate ends one: at the
// end-of-text token, which it does not return. Checked against the same sample drawn without an
// end token, on one model and seed: the draws before the end token are that sample's, bit for bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "tests/worker/gpt_test_util.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/model/gpt.hpp"
#include "worker/train/text_sampler.hpp"

using namespace xtrain;

TEST_CASE("the closing sample ends at the end token, without it, and is otherwise the sample drawn without one",
          "[sample]") {
  CpuBackend backend{Precision::fp32};
  GPT gpt{test::model_spec(2, 2, 32, 16, 70), backend, 1};
  std::vector<float> params(gpt.layout().total());
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (auto& x : params) x = normal(rng);
  gpt.set_params(params.data());

  const std::vector<std::int32_t> prompt = {3, 14, 15};
  SampleOptions o;
  o.tokens = 24;  // past the context of 16: the window slides
  o.temperature = 1.0;
  o.top_k = 0;
  o.seed = 9;
  const std::vector<std::int32_t> full = sample_tokens(gpt, prompt, o);
  REQUIRE(full.size() == 24);

  // An end token first drawn at position k: the sample is the first k tokens.
  const auto first = std::find(full.begin(), full.end(), full[12]);
  o.end_token = full[12];
  CHECK(sample_tokens(gpt, prompt, o) == std::vector<std::int32_t>(full.begin(), first));
  o.end_token = full[0];
  CHECK(sample_tokens(gpt, prompt, o).empty());
  // One never drawn changes nothing.
  std::int32_t absent = 0;
  while (std::find(full.begin(), full.end(), absent) != full.end()) ++absent;
  REQUIRE(absent < 70);
  o.end_token = absent;
  CHECK(sample_tokens(gpt, prompt, o) == full);
}
