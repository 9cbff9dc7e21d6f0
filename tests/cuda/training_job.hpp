// A training job run through the real xlaunch and xtrain-worker, for the end-to-end tests of the
// CUDA backend (on GPUs, and in interpret mode): a spec of the test's, changed per run, each run
// in its own run directory under one temporary folder.
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/launcher/harness.hpp"
#include "tests/worker/run_metrics.hpp"

namespace xtrain::test {

class TrainingJob {
 public:
  // `corpus_line(i)`: line i of the training text the spec's data.train names.
  TrainingJob(const std::string& name, nlohmann::json spec, int corpus_lines,
              const std::function<std::string(int)>& corpus_line)
      : dir_(std::filesystem::temp_directory_path() / ("xtrain-" + name + "-" + std::to_string(::getpid()))),
        spec_(std::move(spec)) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::ofstream corpus(dir_ / "corpus.txt");
    for (int i = 0; i < corpus_lines; ++i) corpus << corpus_line(i) << "\n";
    spec_["data"]["train"] = (dir_ / "corpus.txt").string();
  }
  // The interpreted end-to-end tests' job: `n_layer` layers 32 wide, T 16, bytes, bf16, batch 4 in
  // micro-batches of 2, `steps` steps (2 of warmup), no checkpoints, on 400 lines of "line N" text;
  // a step takes about a second in interpret mode.
  static TrainingJob small_interpreted(const std::string& name, int n_layer, int steps) {
    const nlohmann::json spec = {
        {"name", name},
        {"device", "cuda"},
        {"launcher", {{"term_timeout_s", 5}, {"timeout_s", 600}}},
        {"nodes", {{"rdzv_timeout_s", 60}}},
        {"model", {{"n_layer", n_layer}, {"n_head", 2}, {"n_embd", 32}, {"seq_len", 16}, {"vocab_size", 256}}},
        {"train",
         {{"steps", steps}, {"batch_size", 4}, {"micro_batch_size", 2}, {"precision", "bf16"}, {"warmup_steps", 2}}},
        {"checkpoint", {{"every", 0}, {"resume", "never"}}},
    };
    return TrainingJob(name, spec, 400, [](int i) { return "line " + std::to_string(i % 31); });
  }
  ~TrainingJob() { std::filesystem::remove_all(dir_); }
  TrainingJob(const TrainingJob&) = delete;
  TrainingJob& operator=(const TrainingJob&) = delete;

  std::filesystem::path run_dir(const std::string& run) const { return dir_ / "runs" / run; }

  struct Outcome {
    int exit_code = -1;  // -1: xlaunch did not exit (a signal)
    std::string output;  // its console
  };

  // xlaunch on `nproc` ranks with the spec changed by `edit`, and `env` ("NAME=VALUE ...", for
  // the shell) in its environment; how it ended.
  Outcome run_xlaunch(const std::string& run, int nproc, const std::function<void(nlohmann::json&)>& edit,
                      const std::string& env = "") {
    nlohmann::json spec = spec_;
    edit(spec);
    const std::filesystem::path spec_path = dir_ / (run + ".json");
    std::ofstream(spec_path) << spec.dump(2);
    const std::filesystem::path out = dir_ / (run + ".out");
    const std::string cmd = env + " timeout -k 10 600 '" + bin_path("xlaunch") + "' '" + spec_path.string() +
                            "' --run-dir '" + run_dir(run).string() + "' --nproc-per-node " + std::to_string(nproc) +
                            " --tee rank0 > '" + out.string() + "' 2>&1";
    const int status = std::system(cmd.c_str());
    std::ifstream in(out);
    std::stringstream log;
    log << in.rdbuf();
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, log.str()};
  }

  // run_xlaunch, which must succeed (its output is shown if not).
  void launch(const std::string& run, int nproc, const std::function<void(nlohmann::json&)>& edit) {
    const Outcome o = run_xlaunch(run, nproc, edit);
    INFO("xlaunch output (run " << run << "):\n" << o.output);
    REQUIRE(o.exit_code == 0);
  }

  // `run`, two ranks of which rank 1 failed with exit 3 (XTRAIN_FAULT_EXIT=1:STEP:3) and took
  // rank 0 down with it: xlaunch exits 3, rank 1 is the root cause, rank 0 reports a lost peer.
  void check_rank_one_lost(const std::string& run, const Outcome& o) const {
    INFO(o.output);
    CHECK(o.exit_code == 3);
    std::ifstream in(run_dir(run) / "summary.json");
    const nlohmann::json summary = nlohmann::json::parse(in);
    CHECK(summary.at("root_cause").at("rank") == 1);
    CHECK(summary.at("ranks").at(0).at("result").at("failure_kind") == "peer_lost");
    CHECK(summary.at("ranks").at(1).at("result").at("failure_kind") == "primary");
  }

  std::map<long, double> losses(const std::string& run) const { return read_losses(run_dir(run)); }
  std::string digest(const std::string& run, int rank) const {
    std::ifstream in(run_dir(run) / "ranks" / ("rank-" + std::to_string(rank) + ".json"));
    return nlohmann::json::parse(in).at("param_digest").get<std::string>();
  }

  // Runs `run` on one CUDA rank resumed from `checkpoint` (a step-NNNNNNNN directory of run
  // `original`), and checks that it is the rest of `original` bit for bit: its `steps` losses and
  // the parameters at the end.
  void check_resumes(const std::string& run, const std::string& original, const std::string& checkpoint,
                     size_t steps) {
    const std::string dir = (run_dir(original) / "checkpoints" / checkpoint).string();
    launch(run, 1, [&](nlohmann::json& s) {
      s["device"] = "cuda";
      s["checkpoint"]["resume"] = dir;
    });
    const auto want = losses(original), got = losses(run);
    REQUIRE(got.size() == steps);
    for (const auto& [step, loss] : got) {
      INFO("step " << step);
      CHECK(loss == want.at(step));
    }
    CHECK(digest(run, 0) == digest(original, 0));
  }

 private:
  std::filesystem::path dir_;
  nlohmann::json spec_;
};

}  // namespace xtrain::test
