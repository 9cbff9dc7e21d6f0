// The demo-shaped model (4 layers, 4 heads, 128 wide, T 64, bytes) trained 50 steps in bf16
// through the real xlaunch and xtrain-worker with device "cuda" in interpret mode: every kernel,
// product and graph of the CUDA backend runs, on the CPU.
//
// - against the CPU backend's bf16 emulation on the same batches: the first step's loss within
//   1e-3 relative (the training tests' bf16 bound for one step: a wrong kernel moves it by far
//   more), every step's within 1e-2. Both round at the same points, so they differ only where an
//   fp32 sum in another order (OpenBLAS's blocking for the products, the kernels' fixed reduction
//   trees) lands on the other side of a bf16 rounding, and 50 AdamW steps (lr up to 3e-3) let
//   those flips grow: 3.8e-3 at worst here (measured; the test prints it).
// - CUDA graphs on and off: the same losses and parameters, bit for bit (the same launches).
// - resumed from step 25's checkpoint: steps 26-50 and the parameters bit for bit.
// - two ranks reducing with Gloo (the emulated device memory is host memory): within 2e-3 of one
//   rank, for the same reason as the CPU bound (the batch split changes the products' shapes).
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cuda/training_job.hpp"

using nlohmann::json;
using xtrain::test::TrainingJob;

namespace {

TrainingJob demo_job() {
  const json spec = {
      {"name", "interp-e2e"},
      {"launcher", {{"term_timeout_s", 5}, {"timeout_s", 600}}},
      {"nodes", {{"rdzv_timeout_s", 60}}},
      {"model",
       {{"n_layer", 4}, {"n_head", 4}, {"n_embd", 128}, {"seq_len", 64}, {"vocab_size", 256}, {"init_seed", 1337}}},
      {"train",
       {{"steps", 50},
        {"batch_size", 4},
        {"micro_batch_size", 4},
        {"lr", 3e-3},
        {"min_lr", 3e-4},
        {"warmup_steps", 10},
        {"weight_decay", 0.1},
        {"grad_clip", 1.0},
        {"log_every", 1},
        {"seed", 42},
        {"precision", "bf16"}}},
      {"checkpoint", {{"every", 0}, {"resume", "never"}}},
  };
  return TrainingJob("interp-e2e", spec, 3000, [](int i) {
    return "fortune " + std::to_string(i % 89) + ": the interpreter trains what the gpu would.";
  });
}

// The largest relative difference over the steps of `want`, which `got` must all have.
double largest_difference(const std::map<long, double>& got, const std::map<long, double>& want) {
  double worst = 0.0;
  for (const auto& [step, loss] : want) {
    REQUIRE(got.count(step) == 1);
    worst = std::max(worst, std::abs(got.at(step) - loss) / std::abs(loss));
  }
  return worst;
}

}  // namespace

TEST_CASE("interpret mode trains the demo-shaped model through xlaunch as the CPU's bf16 emulation does",
          "[interp_training]") {
  TrainingJob job = demo_job();
  job.launch("cpu", 1, [](json& s) { s["device"] = "cpu"; });
  job.launch("graphs", 1, [](json& s) {
    s["device"] = "cuda";
    s["train"]["cuda_graph"] = "on";
    s["checkpoint"]["every"] = 25;
  });
  const auto cpu = job.losses("cpu"), graphs = job.losses("graphs");
  REQUIRE(cpu.size() == 50);
  REQUIRE(graphs.size() == 50);
  CHECK(graphs.at(50) < graphs.at(1));
  CHECK(std::abs(graphs.at(1) - cpu.at(1)) < 1e-3 * cpu.at(1));
  const double vs_cpu = largest_difference(graphs, cpu);
  WARN("interpret mode vs the CPU's bf16 emulation: largest relative loss difference " << vs_cpu);
  CHECK(vs_cpu < 1e-2);

  job.launch("eager", 1, [](json& s) {
    s["device"] = "cuda";
    s["train"]["cuda_graph"] = "off";
  });
  CHECK(job.losses("eager") == graphs);
  CHECK(job.digest("eager", 0) == job.digest("graphs", 0));

  const std::string step25 = (job.run_dir("graphs") / "checkpoints" / "step-00000025").string();
  job.launch("resumed", 1, [&](json& s) {
    s["device"] = "cuda";
    s["checkpoint"]["resume"] = step25;
  });
  const auto resumed = job.losses("resumed");
  REQUIRE(resumed.size() == 25);
  for (const auto& [step, loss] : resumed) {
    INFO("step " << step);
    CHECK(loss == graphs.at(step));
  }
  CHECK(job.digest("resumed", 0) == job.digest("graphs", 0));

  job.launch("two-ranks", 2, [](json& s) {
    s["device"] = "cuda";
    s["train"]["steps"] = 10;
    s["train"]["micro_batch_size"] = 2;
  });
  const auto two = job.losses("two-ranks");
  std::map<long, double> first_ten(graphs.begin(), std::next(graphs.begin(), 10));
  CHECK(largest_difference(two, first_ten) < 2e-3);
  CHECK(job.digest("two-ranks", 1) == job.digest("two-ranks", 0));
}
