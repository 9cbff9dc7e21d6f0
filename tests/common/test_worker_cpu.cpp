// The worker's CPU requirement: the error's wording. Whether the detection sees a CPU without
// x86-64-v3 is tests/launcher/worker_cpu_test.sh's, on emulated CPUs.
#include <catch2/catch.hpp>

#include "common/worker_cpu.hpp"

using namespace xtrain;

TEST_CASE("the missing CPU features are listed in one sentence with what the worker needs", "[worker_cpu]") {
  const std::string one = describe_missing_cpu_features({"MOVBE"});
  CHECK(one.rfind("this CPU lacks MOVBE, which xtrain-worker is built for (x86-64-v3", 0) == 0);
  CHECK(describe_missing_cpu_features({"AVX2", "FMA"}).rfind("this CPU lacks AVX2 and FMA, which", 0) == 0);
  CHECK(describe_missing_cpu_features({"AVX2", "FMA", "BMI2"}).rfind("this CPU lacks AVX2, FMA and BMI2, which", 0) ==
        0);
  CHECK(one.find("-cpu host") != std::string::npos);
}

TEST_CASE("this machine, which runs the CPU backend's tests, has every feature the worker needs", "[worker_cpu]") {
  CHECK(missing_worker_cpu_features().empty());
}
