// The worker's choice of OpenBLAS kernels (worker/cpu/openblas_core.hpp): the rule on its own, then a
// real run through xlaunch with OPENBLAS_VERBOSE=2, which makes OpenBLAS print "Core: NAME" each
// time it loads, so the output shows which kernels each image of the worker ran with.
#include <cblas.h>

#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/worker/e2e_job.hpp"
#include "worker/cpu/openblas_core.hpp"

using namespace xtrain;
using namespace xtrain::test;

namespace {

const std::string kDynamic = "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Prescott MAX_THREADS=64";

CpuFeatures cpu(bool avx2_fma, bool avx512) {
  CpuFeatures f;
  f.avx2_fma = avx2_fma;
  f.avx512 = avx512;
  return f;
}

std::vector<std::string> cores_loaded(const std::string& output) {
  std::vector<std::string> cores;
  const std::regex core_line(R"(Core: (\w+))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), core_line); it != std::sregex_iterator(); ++it)
    cores.push_back((*it)[1]);
  return cores;
}

// Runs a two-step job on one CPU rank with `env` and OPENBLAS_CORETYPE as this process has it.
Outcome run_worker(const char* name, const std::map<std::string, std::string>& env) {
  Job job(name);
  job.spec()["train"]["steps"] = 2;
  std::map<std::string, std::string> all = env;
  all["OPENBLAS_VERBOSE"] = "2";
  return job.launch("r", 1, {}, all);
}

// The kernels `output` shows loaded: OpenBLAS's own choice, then the worker's where OpenBLAS fell
// back to Prescott, with the line that says so; otherwise once, and no such line.
void check_auto_choice(const std::string& output) {
  const std::vector<std::string> cores = cores_loaded(output);
  REQUIRE(!cores.empty());
  const std::string expected =
      openblas_core_to_choose(cores[0], openblas_get_config(), nullptr, CpuFeatures::of_this_cpu());
  if (expected.empty()) {
    CHECK(cores.size() == 1);
    CHECK(output.find("running with OPENBLAS_CORETYPE") == std::string::npos);
  } else {
    REQUIRE(cores.size() == 2);
    CHECK(cores[1] == expected);
    CHECK(output.find("running with OPENBLAS_CORETYPE=" + expected) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("a core is chosen only for OpenBLAS's Prescott fallback on a CPU with better kernels") {
  CHECK(openblas_core_to_choose("Prescott", kDynamic, nullptr, cpu(true, true)) == "SkylakeX");
  CHECK(openblas_core_to_choose("Prescott", kDynamic, nullptr, cpu(true, false)) == "Haswell");
  CHECK(openblas_core_to_choose("Prescott", kDynamic, nullptr, cpu(false, false)).empty());
  // OpenBLAS knew the CPU.
  for (const char* known : {"Haswell", "SkylakeX", "Cooperlake", "Zen", "Sandybridge"})
    CHECK(openblas_core_to_choose(known, kDynamic, nullptr, cpu(true, true)).empty());
  // The user's setting wins, whatever it is.
  for (const char* user : {"Prescott", "Haswell", ""})
    CHECK(openblas_core_to_choose("Prescott", kDynamic, user, cpu(true, true)).empty());
  // A library built for one target cannot change its kernels.
  CHECK(openblas_core_to_choose("Prescott", "OpenBLAS 0.3.21 NO_LAPACKE Prescott MAX_THREADS=64", nullptr,
                                cpu(true, true))
            .empty());
}

TEST_CASE("the worker runs with the chosen core, said in one line, and the user's OPENBLAS_CORETYPE wins", "[e2e]") {
  // This test's own environment must not choose for the worker.
  ::unsetenv("OPENBLAS_CORETYPE");

  SECTION("no OPENBLAS_CORETYPE: OpenBLAS's choice, or the worker's where OpenBLAS fell back") {
    const Outcome o = run_worker("openblas-auto", {});
    INFO(o.output);
    REQUIRE(o.exit_code == 0);
    check_auto_choice(o.output);
  }

  SECTION("eval chooses as training does: its forwards are OpenBLAS's products too") {
    Job job("openblas-eval");
    job.spec()["train"]["steps"] = 1;
    require_ok(job.launch("r", 1));
    const pid_t pid = spawn({std::string(XTRAIN_BIN_DIR) + "/xtrain-worker", "eval", job.run_dir("r").string(),
                             "--data", job.spec()["data"]["train"].get<std::string>(), "--device", "cpu"},
                            job.dir() / "eval.out", {{"OPENBLAS_VERBOSE", "2"}});
    CHECK(wait_for(pid, 60s) == 0);
    const std::string output = read_text(job.dir() / "eval.out");
    INFO(output);
    check_auto_choice(output);
  }

  SECTION("the user's OPENBLAS_CORETYPE, even Prescott, is kept") {
    const Outcome o = run_worker("openblas-user", {{"OPENBLAS_CORETYPE", "Prescott"}});
    INFO(o.output);
    REQUIRE(o.exit_code == 0);
    CHECK(cores_loaded(o.output) == std::vector<std::string>{"Prescott"});
    CHECK(o.output.find("running with OPENBLAS_CORETYPE") == std::string::npos);
  }
}
