// 20 training steps through the real xlaunch and xtrain-worker on GPUs ([gpu]): world 1, and 2
// and 4 over NCCL where there are that many GPUs, against the CPU backend's loss trajectory on
// the same global batch.
//
// Tolerances on each step's loss, relative: GPU vs CPU 1e-4 (the worker trains in strict fp32;
// kernels and products sum in other orders than the CPU, ~1e-6 per step, which 20 AdamW steps
// amplify); GPU world 2 or 4 vs world 1: 1e-5, as between CPU world sizes (the same math with
// the batch split across ranks). Every rank ends with the same parameter digest, two runs of one
// world give the same losses bit for bit, and so does a run resumed from a checkpoint.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cuda/cuda_api.hpp"
#include "tests/cuda/training_job.hpp"

using nlohmann::json;
using xtrain::test::TrainingJob;

namespace {

TrainingJob gpu_job() {
  const json spec = {
      {"name", "gpu-e2e"},
      {"launcher", {{"term_timeout_s", 5}, {"timeout_s", 240}}},
      {"nodes", {{"rdzv_timeout_s", 60}}},
      {"model", {{"n_layer", 2}, {"n_head", 4}, {"n_embd", 64}, {"seq_len", 32}, {"vocab_size", 256}, {"init_seed", 5}}},
      {"train",
       {{"steps", 20},
        {"batch_size", 8},
        {"micro_batch_size", 2},
        {"lr", 3e-3},
        {"min_lr", 3e-4},
        {"warmup_steps", 3},
        {"log_every", 1},
        {"seed", 11},
        {"precision", "fp32"}}},  // the CPU-trajectory tolerance assumes strict fp32
      {"checkpoint", {{"every", 0}, {"resume", "never"}}},
  };
  // A corpus with structure to learn: numbered lines of a repeating phrase.
  return TrainingJob("gpu-e2e", spec, 4000,
                     [](int i) { return "line " + std::to_string(i % 97) + ": the gpu trains the same model as the cpu."; });
}

auto on(const std::string& device) {
  return [device](json& s) { s["device"] = device; };
}

void check_close(const std::map<long, double>& got, const std::map<long, double>& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (const auto& [step, loss] : want) {
    INFO("step " << step << ": " << got.at(step) << " vs " << loss);
    CHECK(std::abs(got.at(step) - loss) <= rel * std::abs(loss));
  }
}

}  // namespace

TEST_CASE("20 steps through xlaunch on GPUs follow the CPU backend's losses", "[gpu][e2e]") {
  const int gpus = xtrain::cuda::visible_device_count();
  REQUIRE(gpus > 0);
  TrainingJob job = gpu_job();
  job.launch("cpu", 1, on("cpu"));
  const auto cpu = job.losses("cpu");
  REQUIRE(cpu.size() == 20);
  CHECK(cpu.at(20) < cpu.at(1));

  job.launch("gpu1", 1, on("cuda"));
  const auto gpu1 = job.losses("gpu1");
  check_close(gpu1, cpu, 1e-4);

  job.launch("gpu1-again", 1, [](json& s) {
    s["device"] = "cuda";
    s["checkpoint"]["every"] = 10;
  });
  CHECK(job.losses("gpu1-again") == gpu1);
  CHECK(job.digest("gpu1-again", 0) == job.digest("gpu1", 0));

  // Resumed from step 10's checkpoint, written and read through pinned memory a piece at a time:
  // steps 11-20 and the parameters bit for bit.
  job.check_resumes("gpu1-resumed", "gpu1-again", "step-00000010", 10);

  for (const int world : {2, 4}) {
    if (world > gpus) {
      WARN("only " << gpus << " GPU(s): world " << world << " over NCCL not run");
      continue;
    }
    const std::string run = "gpu" + std::to_string(world);
    INFO("world " << world);
    job.launch(run, world, on("cuda"));
    check_close(job.losses(run), gpu1, 1e-5);
    for (int r = 1; r < world; ++r) CHECK(job.digest(run, r) == job.digest(run, 0));
  }
}
