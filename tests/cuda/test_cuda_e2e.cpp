// 20 training steps through the real xlaunch and xtrain-worker on GPUs ([gpu]): world 1, and 2
// and 4 over NCCL where there are that many GPUs, against the CPU backend's loss trajectory on
// the same global batch.
//
// Tolerances on each step's loss, relative: GPU vs CPU 1e-4 (the worker trains in strict fp32;
// kernels and products sum in other orders than the CPU, ~1e-6 per step, which 20 AdamW steps
// amplify); GPU world 2 or 4 vs world 1: 1e-5, as between CPU world sizes (the same math with
// the batch split across ranks). Every rank ends with the same parameter digest, and two runs
// of one world give the same losses bit for bit.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "tests/launcher/harness.hpp"
#include "tests/worker/run_metrics.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <unistd.h>

#include "cuda/cuda_api.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using xtrain::test::bin_path;

namespace {

class GpuJob {
 public:
  GpuJob() {
    dir_ = fs::temp_directory_path() / ("xtrain-gpu-e2e-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // A corpus with structure to learn: numbered lines of a repeating phrase.
    std::ofstream corpus(dir_ / "corpus.txt");
    for (int i = 0; i < 4000; ++i) corpus << "line " << i % 97 << ": the gpu trains the same model as the cpu.\n";
    spec_ = {
        {"name", "gpu-e2e"},
        {"launcher", {{"term_timeout_s", 5}, {"timeout_s", 240}}},
        {"nodes", {{"rdzv_timeout_s", 60}}},
        {"model",
         {{"n_layer", 2}, {"n_head", 4}, {"n_embd", 64}, {"seq_len", 32}, {"vocab_size", 256}, {"init_seed", 5}}},
        {"data", {{"train", (dir_ / "corpus.txt").string()}}},
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
  }
  ~GpuJob() { fs::remove_all(dir_); }

  fs::path run_dir(const std::string& run) const { return dir_ / "runs" / run; }

  // xlaunch with `device` on `nproc` ranks, which must succeed (its output is shown if not).
  void launch(const std::string& run, const std::string& device, int nproc) {
    json spec = spec_;
    spec["device"] = device;
    const fs::path spec_path = dir_ / (run + ".json");
    std::ofstream(spec_path) << spec.dump(2);
    const fs::path out = dir_ / (run + ".out");
    const std::string cmd = "timeout -k 10 300 '" + bin_path("xlaunch") + "' '" + spec_path.string() +
                            "' --run-dir '" + run_dir(run).string() + "' --nproc-per-node " + std::to_string(nproc) +
                            " --tee rank0 > '" + out.string() + "' 2>&1";
    const int status = std::system(cmd.c_str());
    std::ifstream in(out);
    std::stringstream log;
    log << in.rdbuf();
    INFO("xlaunch output (run " << run << "):\n" << log.str());
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
  }

  std::map<long, double> losses(const std::string& run) const { return xtrain::test::read_losses(run_dir(run)); }

  std::string digest(const std::string& run, int rank) const {
    std::ifstream in(run_dir(run) / "ranks" / ("rank-" + std::to_string(rank) + ".json"));
    return json::parse(in).at("param_digest").get<std::string>();
  }

 private:
  fs::path dir_;
  json spec_;
};

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
  GpuJob job;
  job.launch("cpu", "cpu", 1);
  const auto cpu = job.losses("cpu");
  REQUIRE(cpu.size() == 20);
  CHECK(cpu.at(20) < cpu.at(1));

  job.launch("gpu1", "cuda", 1);
  const auto gpu1 = job.losses("gpu1");
  check_close(gpu1, cpu, 1e-4);

  job.launch("gpu1-again", "cuda", 1);
  CHECK(job.losses("gpu1-again") == gpu1);
  CHECK(job.digest("gpu1-again", 0) == job.digest("gpu1", 0));

  for (const int world : {2, 4}) {
    if (world > gpus) {
      WARN("only " << gpus << " GPU(s): world " << world << " over NCCL not run");
      continue;
    }
    const std::string run = "gpu" + std::to_string(world);
    INFO("world " << world);
    job.launch(run, "cuda", world);
    check_close(job.losses(run), gpu1, 1e-5);
    for (int r = 1; r < world; ++r) CHECK(job.digest(run, r) == job.digest(run, 0));
  }
}
