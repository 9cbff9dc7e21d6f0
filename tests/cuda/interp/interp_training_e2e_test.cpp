// The demo-shaped model (4 layers, 4 heads, 128 wide, T 64, bytes) trained 50 steps in bf16
// through the real xlaunch and xtrain-worker with device "cuda" in interpret mode: every kernel,
// product and graph of the CUDA backend runs, on the CPU.
//
// - against the CPU backend's bf16 emulation on the same batches: each step's loss within 2e-3
//   relative. Both round at the same points, so they differ only where an fp32 sum in another
//   order (OpenBLAS's blocking for the products, the kernels' fixed reduction trees) lands on the
//   other side of a bf16 rounding; over 50 steps of AdamW that has stayed below 5e-4 here
//   (measured: the largest difference is printed), so 2e-3 leaves room without hiding a wrong
//   kernel, which moves the first step's loss by far more.
// - CUDA graphs on and off: the same losses and parameters, bit for bit (the same launches).
// - resumed from step 25's checkpoint: steps 26-50 and the parameters bit for bit.
// - two ranks reducing with Gloo (the emulated device memory is host memory): within 2e-3 of one
//   rank, for the same reason as the CPU bound (the batch split changes the products' shapes).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <unistd.h>

#include "tests/launcher/harness.hpp"
#include "tests/worker/run_metrics.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

class DemoJob {
 public:
  DemoJob() : dir_(fs::temp_directory_path() / ("xtrain-interp-e2e-" + std::to_string(::getpid()))) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream corpus(dir_ / "corpus.txt");
    for (int i = 0; i < 3000; ++i) corpus << "fortune " << i % 89 << ": the interpreter trains what the gpu would.\n";
    spec_ = {
        {"name", "interp-e2e"},
        {"launcher", {{"term_timeout_s", 5}, {"timeout_s", 600}}},
        {"nodes", {{"rdzv_timeout_s", 60}}},
        {"model",
         {{"n_layer", 4}, {"n_head", 4}, {"n_embd", 128}, {"seq_len", 64}, {"vocab_size", 256}, {"init_seed", 1337}}},
        {"data", {{"train", (dir_ / "corpus.txt").string()}}},
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
  }
  ~DemoJob() { fs::remove_all(dir_); }

  fs::path run_dir(const std::string& run) const { return dir_ / "runs" / run; }

  // xlaunch on `nproc` ranks with the spec changed by `edit`; it must succeed.
  void launch(const std::string& run, int nproc, const std::function<void(json&)>& edit) {
    json spec = spec_;
    edit(spec);
    const fs::path spec_path = dir_ / (run + ".json");
    std::ofstream(spec_path) << spec.dump(2);
    const fs::path out = dir_ / (run + ".out");
    const std::string cmd = "timeout -k 10 600 '" + xtrain::test::bin_path("xlaunch") + "' '" + spec_path.string() +
                            "' --run-dir '" + run_dir(run).string() + "' --nproc-per-node " + std::to_string(nproc) +
                            " > '" + out.string() + "' 2>&1";
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
  DemoJob job;
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
  const double vs_cpu = largest_difference(graphs, cpu);
  WARN("interpret mode vs the CPU's bf16 emulation: largest relative loss difference " << vs_cpu);
  CHECK(vs_cpu < 2e-3);

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
