// The interpret-mode switch (common/cuda_interpret.hpp) from a user's side: xlaunch --check with
// XTRAIN_CUDA_INTERPRET set, each misuse one error line naming the switch or the field, exit 2,
// before any rank starts; and a plan that resolves device "cuda" without a GPU, reducing with Gloo
// or, when the spec names it, interpret mode's NCCL.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include "tests/launcher/harness.hpp"

namespace fs = std::filesystem;

namespace {

struct Outcome {
  int code;
  std::string output;
};

// xlaunch `flags` on a two-rank demo-sized spec with device "cuda" and `backend`, under `env`.
Outcome xlaunch(const std::string& env, const std::string& backend, const std::string& flags) {
  const fs::path dir = fs::temp_directory_path() / ("xtrain-interp-switch-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "corpus.txt") << std::string(20000, 'x');
  std::ofstream(dir / "job.json") << R"({"name": "switch", "device": "cuda", "backend": ")" << backend
                                  << R"(", "nproc_per_node": 2,
    "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "seq_len": 16, "vocab_size": 256},
    "data": {"train": ")" << (dir / "corpus.txt").string()
                                  << R"("}, "train": {"steps": 1, "batch_size": 2, "micro_batch_size": 1}})";
  const std::string cmd = "env " + env + " '" + xtrain::test::bin_path("xlaunch") + "' '" + (dir / "job.json").string() +
                          "' --run-dir '" + (dir / "run").string() + "' " + flags + " > '" + (dir / "out").string() +
                          "' 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream in(dir / "out");
  std::stringstream text;
  text << in.rdbuf();
  fs::remove_all(dir);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.str()};
}

// xlaunch --check under `env`: exit 2, one line with `message`, no rank started.
void check_refused(const std::string& env, const std::string& backend, const std::string& message) {
  const Outcome o = xlaunch(env, backend, "--check");
  INFO(env);
  CHECK(o.code == 2);
  CHECK_THAT(o.output, Catch::Contains(message));
  CHECK(o.output.find("[rank") == std::string::npos);
}

}  // namespace

TEST_CASE("interpret mode: device cuda without a GPU plans two ranks that reduce with Gloo", "[interp][switch]") {
  const Outcome o = xlaunch("XTRAIN_CUDA_INTERPRET=1", "auto", "--dry-run");
  INFO(o.output);
  CHECK(o.code == 0);
  CHECK_THAT(o.output, Catch::Contains("\"backend\": \"gloo\"") && Catch::Contains("\"device\": \"cuda\""));
}

TEST_CASE("interpret mode plans its own NCCL when the spec names it, with no libnccl", "[interp][switch]") {
  const Outcome o = xlaunch("XTRAIN_CUDA_INTERPRET=1 XTRAIN_NCCL_LIBRARY=/nonexistent/libnccl.so.2", "nccl",
                            "--dry-run");
  INFO(o.output);
  CHECK(o.code == 0);
  CHECK_THAT(o.output, Catch::Contains("\"backend\": \"nccl\"") &&
                           Catch::Contains("\"library\": \"the CUDA interpret plugin's\"") &&
                           Catch::Contains("\"found_by\": \"XTRAIN_CUDA_INTERPRET\""));
}

TEST_CASE("interpret mode refuses NCCL across nodes, a bad switch value and a build without it, before any rank "
          "starts",
          "[interp][switch]") {
  const Outcome across = xlaunch("XTRAIN_CUDA_INTERPRET=1", "nccl",
                                 "--check --nnodes 2 --rdzv-endpoint 127.0.0.1:29400 --node-rank 0 --rdzv-id switch");
  INFO(across.output);
  CHECK(across.code == 2);
  CHECK_THAT(across.output, Catch::Contains("backend: \"nccl\" in CUDA interpret mode (XTRAIN_CUDA_INTERPRET=1) "
                                            "joins the ranks of one machine, but nodes.nnodes is 2"));
  check_refused("XTRAIN_CUDA_INTERPRET=yes", "auto",
                "XTRAIN_CUDA_INTERPRET: expected 1 (interpret mode) or 0, got \"yes\"");
  check_refused("XTRAIN_CUDA_INTERPRET=1 XTRAIN_CUDA_PLUGIN=/nonexistent/libx.so", "auto",
                "XTRAIN_CUDA_INTERPRET: 1 asks for CUDA interpret mode, but /nonexistent/libx.so is not there");
}

TEST_CASE("interpret mode refuses a setting that is not a whole number in range, naming it", "[interp][switch]") {
  check_refused("XTRAIN_CUDA_INTERPRET=1 XTRAIN_INTERP_SCHEDULES=three", "auto",
                "XTRAIN_INTERP_SCHEDULES: expected a whole number from 1 to 64, got \"three\"");
  check_refused("XTRAIN_CUDA_INTERPRET=1 XTRAIN_INTERP_DEVICE_MIB=0", "auto",
                "XTRAIN_INTERP_DEVICE_MIB: expected a whole number from 1 to 1048576, got \"0\"");
  // With the switch off the settings are not read (the tests' own environment has it on).
  CHECK(xlaunch("XTRAIN_CUDA_INTERPRET=0 XTRAIN_INTERP_DEVICE_MIB=0", "auto", "--dry-run")
            .output.find("XTRAIN_INTERP_DEVICE_MIB") == std::string::npos);
}
