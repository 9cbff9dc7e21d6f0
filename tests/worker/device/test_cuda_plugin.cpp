// The CUDA plugin's boundary, on any machine: which device each `device` value chooses and why,
// every way loading the plugin can fail (absent, not a library, no entry point, another ABI or
// interface), CUDA's answers (no driver, no GPU, a GPU too old for bf16), all through stand-in
// plugins (fake_cuda_plugin.cpp); and, where this build has CUDA, the real plugin: it loads here
// (its CUDA libraries are installed even without a GPU), exports nothing but its entry point,
// and takes its NCCL from XTRAIN_NCCL_LIBRARY when set.
#include <cblas.h>
#include <dlfcn.h>
#include <link.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "common/bad_input.hpp"
#include "common/job_spec.hpp"
#include "tests/worker/e2e_job.hpp"
#include "tests/worker/test_files.hpp"
#include "worker/device/cuda_plugin_loader.hpp"
#include "worker/device/device_choice.hpp"

using namespace xtrain;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;

namespace {

const std::string kFake = std::string(XTRAIN_FAKE_PLUGIN_DIR) + "/libfake-cuda-plugin-entry.so";
const std::string kNoEntry = std::string(XTRAIN_FAKE_PLUGIN_DIR) + "/libfake-cuda-plugin-no-entry.so";

// Sets XTRAIN_FAKE_CUDA for one test case.
class Pretend {
 public:
  explicit Pretend(const std::string& what) { ::setenv("XTRAIN_FAKE_CUDA", what.c_str(), 1); }
  ~Pretend() { ::unsetenv("XTRAIN_FAKE_CUDA"); }
};

JobSpec spec_on(const std::string& device) {
  JobSpec spec;
  spec.device = device;
  return spec;
}

DeviceProbe gpu_machine(const std::string& plugin) { return {2, plugin}; }

std::string choice_error(const std::string& device, const DeviceProbe& probe) {
  return test::error_message<SpecError>([&] { choose_device(spec_on(device), 0, probe); });
}

bool is_loaded(const std::string& path) { return dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD) != nullptr; }

}  // namespace

TEST_CASE("device cpu looks at nothing of CUDA", "[plugin]") {
  // The line names the threads: OpenBLAS's pool, which the CPU backend's own team matches.
  const int threads_before = openblas_get_num_threads();
  openblas_set_num_threads(3);
  const DeviceChoice choice = choose_device(spec_on("cpu"), 0, gpu_machine(kFake));
  CHECK(choice.cuda == nullptr);
  CHECK(choice.summary == "device cpu: training on the CPU; fp32; 3 threads");
  CHECK_FALSE(choice.degraded);
  CHECK_FALSE(is_loaded(kFake));
  // CPU ranks have no path without a fixed order: asking for one is answered, not ignored.
  openblas_set_num_threads(1);
  JobSpec spec = spec_on("cpu");
  spec.train.deterministic = false;
  CHECK(choose_device(spec, 0, gpu_machine(kFake)).summary ==
        "device cpu: training on the CPU; fp32; 1 thread; train.deterministic false changes nothing here (only bf16 "
        "on CUDA has a path without a fixed order)");
  openblas_set_num_threads(threads_before);
}

TEST_CASE("device auto without NVIDIA GPUs loads no CUDA library and says so", "[plugin]") {
  const DeviceChoice choice = choose_device(spec_on("auto"), 0, {0, kFake});
  CHECK(choice.cuda == nullptr);
  CHECK_THAT(choice.summary, StartsWith("device auto: training on the CPU (no NVIDIA GPU on this machine"));
  CHECK_FALSE(choice.degraded);
  CHECK_FALSE(is_loaded(kFake));
}

TEST_CASE("a plugin that cannot be used: auto trains on the CPU, cuda is an error naming device and the cause",
          "[plugin]") {
  test::ScratchDir dir;
  const std::string not_elf = dir / kCudaPluginFileName;
  test::write_bytes(not_elf, "not a shared library\n");
  struct Case {
    std::string name, plugin, pretend, cause;
  };
  const std::vector<Case> cases = {
      {"absent", dir / "lib/none.so", "", "the CUDA plugin " + dir / "lib/none.so" + " is not there"},
      {"not a shared library", not_elf, "", "the CUDA plugin " + not_elf + " cannot be loaded: " + not_elf + ":"},
      {"no entry point", kNoEntry, "", "has no entry point: " + kNoEntry + ": undefined symbol: xtrain_cuda_plugin"},
      {"another ABI version", kFake, "abi",
       "has ABI version " + std::to_string(kCudaPluginAbiVersion + 1) + ", this xtrain-worker expects " +
           std::to_string(kCudaPluginAbiVersion)},
      {"other interface headers", kFake, "digest", "was built from other interface headers (digest 0000000000000000"},
      {"a driver older than the runtime", kFake, "no-driver",
       "CUDA cannot count the GPUs: cudaGetDeviceCount: cudaErrorInsufficientDriver (CUDA driver version is "
       "insufficient for CUDA runtime version); driver CUDA 12.2, runtime CUDA 13.0"},
      {"a driver without GPUs", kFake, "no-gpu", "CUDA sees no GPU (driver CUDA 12.8, runtime CUDA 13.0)"},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      Pretend pretend(c.pretend);
      const std::string error = choice_error("cuda", gpu_machine(c.plugin));
      CHECK_THAT(error, StartsWith("device: \"cuda\" asked for, but ") && Contains(c.cause));
      CHECK(error.find('\n') == std::string::npos);

      const DeviceChoice fallback = choose_device(spec_on("auto"), 0, gpu_machine(c.plugin));
      CHECK(fallback.cuda == nullptr);
      CHECK(fallback.degraded);
      CHECK_THAT(fallback.summary, StartsWith("device auto: training on the CPU (") && Contains(c.cause));
      if (c.plugin == kFake || c.plugin == kNoEntry) {
        CHECK(is_loaded(c.plugin) == (c.pretend == "no-driver" || c.pretend == "no-gpu"));  // refused: unloaded
      }
    }
  }
}

TEST_CASE("a GPU: the one of LOCAL_RANK, the spec's precision, one line with the device and the versions",
          "[plugin]") {
  Pretend pretend("h200");
  JobSpec spec = spec_on("cuda");
  spec.train.precision = "fp32";
  const DeviceChoice choice = choose_device(spec, 1, gpu_machine(kFake));
  REQUIRE(choice.cuda != nullptr);
  CHECK(choice.gpu == 1);
  CHECK(choice.precision == Precision::fp32);
  CHECK_FALSE(choice.degraded);
  CHECK_THAT(choice.summary, StartsWith("device cuda: training on GPU 1: NVIDIA H200, sm_90, 132 SMs, 139.0 of 140.0 GiB free; "
                                        "driver CUDA 12.8, runtime CUDA 13.0; NCCL ") &&
                                 Contains("; fp32"));
  CHECK_THROWS_WITH(make_backend(choice), "fake CUDA plugin: no backend (GPU 1, fp32)");
  // "auto" on the same machine is the same GPU.
  CHECK(choose_device(spec_on("auto"), 1, gpu_machine(kFake)).cuda == choice.cuda);

  // train.deterministic false reaches the backend, and in bf16 the line says what it changes.
  spec.train.deterministic = false;
  CHECK_THROWS_WITH(make_backend(choose_device(spec, 1, gpu_machine(kFake))),
                    "fake CUDA plugin: no backend (GPU 1, fp32, not deterministic)");
  // fp32 has no such path, and the line says the setting changes nothing
  CHECK_THAT(choose_device(spec, 1, gpu_machine(kFake)).summary,
             EndsWith("; fp32; train.deterministic false changes nothing here (only bf16 on CUDA has a path without "
                      "a fixed order)"));
  spec.train.precision = "bf16";
  CHECK_THAT(choose_device(spec, 1, gpu_machine(kFake)).summary,
             EndsWith("; bf16; train.deterministic false: the attention backward sums dQ by atomics "
                      "(not bitwise reproducible)"));
}

TEST_CASE("more local ranks than GPUs: one error naming LOCAL_RANK, the count and CUDA_VISIBLE_DEVICES", "[plugin]") {
  Pretend pretend("h200");  // CUDA sees 2 GPUs
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  for (const char* device : {"cuda", "auto"}) {  // "auto" must not share a GPU either
    CHECK(test::error_message<SpecError>([&] { choose_device(spec_on(device), 2, gpu_machine(kFake)); }) ==
          "LOCAL_RANK: 2 needs GPU 2, but CUDA sees 2 GPUs (CUDA_VISIBLE_DEVICES unset); run at most 2 ranks per "
          "node (nproc_per_node)");
  }
  ::setenv("CUDA_VISIBLE_DEVICES", "4,5", 1);
  CHECK(test::error_message<SpecError>([&] { choose_device(spec_on("cuda"), 3, gpu_machine(kFake)); }) ==
        "LOCAL_RANK: 3 needs GPU 3, but CUDA sees 2 GPUs (CUDA_VISIBLE_DEVICES=\"4,5\"); run at most 2 ranks per "
        "node (nproc_per_node)");
  ::unsetenv("CUDA_VISIBLE_DEVICES");
}

TEST_CASE("bf16 needs compute capability 8.0: an error naming train.precision and the GPU", "[plugin]") {
  const CudaDeviceInfo v100{"Tesla V100-SXM2-16GB", 7, 0, 80, 0, 0};
  const CudaDeviceInfo a100{"NVIDIA A100-SXM4-40GB", 8, 0, 108, 0, 0};
  CHECK(test::error_message<SpecError>([&] { require_precision_support(Precision::bf16, v100); }) ==
        "train.precision: \"bf16\" (what \"auto\" means on CUDA) needs a GPU of compute capability 8.0 or newer; "
        "Tesla V100-SXM2-16GB is 7.0 (use \"fp32\")");
  CHECK_NOTHROW(require_precision_support(Precision::bf16, a100));
  CHECK_NOTHROW(require_precision_support(Precision::tf32, v100));  // cuBLAS computes those in fp32 there
  CHECK_NOTHROW(require_precision_support(Precision::fp32, v100));

  Pretend pretend("sm70");  // the check runs in the choice, before any backend exists
  JobSpec spec = spec_on("cuda");  // precision "auto": bf16 on CUDA
  CHECK_THAT(test::error_message<SpecError>([&] { choose_device(spec, 0, gpu_machine(kFake)); }),
             StartsWith("train.precision: \"bf16\"") && Contains("Tesla V100-SXM2-16GB is 7.0"));
  spec.train.precision = "fp32";
  const DeviceChoice choice = choose_device(spec, 0, gpu_machine(kFake));
  CHECK(choice.gpu == 0);
  CHECK_THAT(choice.summary, Contains("Tesla V100-SXM2-16GB, sm_70"));
}

TEST_CASE("generate's and eval's --device and --precision: GPU 0, the spec's words, errors naming the flag",
          "[plugin]") {
  Pretend pretend("h200");
  const DeviceChoice gpu = choose_command_device("auto", "auto", "scoring", gpu_machine(kFake));
  REQUIRE(gpu.cuda != nullptr);
  CHECK(gpu.gpu == 0);
  CHECK(gpu.precision == Precision::bf16);
  CHECK(gpu.deterministic);
  CHECK(gpu.where == "device auto: scoring on GPU 0: NVIDIA H200, sm_90, 132 SMs, 139.0 of 140.0 GiB free");
  CHECK_THAT(gpu.summary, StartsWith(gpu.where + "; driver CUDA 12.8") && EndsWith("; bf16"));
  CHECK(choose_command_device("cuda", "tf32", "scoring", gpu_machine(kFake)).precision == Precision::tf32);
  const DeviceChoice cpu = choose_command_device("cpu", "bf16", "generating", gpu_machine(kFake));
  CHECK(cpu.cuda == nullptr);
  CHECK(cpu.precision == Precision::bf16);
  CHECK(cpu.where == "device cpu: generating on the CPU");

  // Each error names the flag, not the spec's field; the flags' words are checked first.
  CHECK(test::error_message<BadInput>([] { check_command_device_flags("gpu", "auto"); }) ==
        "--device: expected \"cpu\", \"cuda\" or \"auto\", got \"gpu\"");
  CHECK(test::error_message<BadInput>([] { check_command_device_flags("cuda", "fp16"); }) ==
        "--precision: expected \"auto\", \"fp32\", \"tf32\" or \"bf16\", got \"fp16\"");
  CHECK_THAT(test::error_message<BadInput>([&] { choose_command_device("cpu", "tf32", "scoring", gpu_machine(kFake)); }),
             StartsWith("--precision: \"tf32\" is a tensor-core mode of CUDA GPUs"));
  CHECK_THAT(test::error_message<BadInput>(
                 [&] { choose_command_device("cuda", "auto", "scoring", gpu_machine(kFake + ".missing")); }),
             StartsWith("--device: \"cuda\" asked for, but the CUDA plugin " + kFake + ".missing is not there"));
  Pretend old("sm70");
  CHECK_THAT(test::error_message<BadInput>([&] { choose_command_device("cuda", "bf16", "scoring", gpu_machine(kFake)); }),
             StartsWith("--precision: \"bf16\"") && Contains("Tesla V100-SXM2-16GB is 7.0"));
}

TEST_CASE("a model too big for the GPU is refused before anything is allocated: one line, exit 2, no run dir",
          "[plugin][memory]") {
  test::ScratchDir dir;
  const fs::path corpus = fs::path(dir.path()) / "text.txt";
  test::write_corpus(corpus, 200000);
  auto run = [&](int micro_batch) {
    const fs::path job = fs::path(dir.path()) / ("job-" + std::to_string(micro_batch) + ".json");
    const fs::path run_dir = fs::path(dir.path()) / ("run-" + std::to_string(micro_batch));
    std::ofstream(job) << nlohmann::json{
        {"device", "cuda"},
        {"run_dir", run_dir.string()},
        {"model", {{"n_layer", 12}, {"n_head", 12}, {"n_embd", 768}, {"seq_len", 1024}, {"vocab_size", 50257}}},
        {"data", {{"train", corpus.string()}}},
        {"train", {{"batch_size", micro_batch}, {"micro_batch_size", micro_batch}, {"precision", "bf16"}}}};
    const fs::path log = fs::path(dir.path()) / "worker.log";
    const pid_t pid = test::spawn({std::string(XTRAIN_BIN_DIR) + "/xtrain-worker", "--job", job.string()}, log,
                                  {{kCudaPluginVariable, kFake}, {"XTRAIN_FAKE_CUDA", "busy"}});
    const int code = test::wait_for(pid, std::chrono::seconds(60));
    return std::make_tuple(code, test::read_text(log), fs::exists(run_dir));
  };
  const auto [code, output, wrote] = run(16);
  INFO(output);
  CHECK(code == 2);
  CHECK_FALSE(wrote);
  const std::string error = test::error_line(output);
  CHECK_THAT(error, StartsWith("error: train.micro_batch_size: 16 sequences of 1024 tokens per micro-step do not "
                               "fit GPU 0 (NVIDIA A100-SXM4-40GB): the model (12 x 768, vocabulary 50257) in bf16 "
                               "needs 8.") &&
                        Contains("parameters 474.8 MiB") && Contains("6.00 GiB free of 40.00 GiB") &&
                        Contains("sequences would fit"));
  // A micro-batch that fits passes the check and goes on to build the backend (which this
  // stand-in plugin cannot).
  const auto [fits_code, fits_output, fits_wrote] = run(4);
  INFO(fits_output);
  CHECK(fits_code == 1);
  CHECK_THAT(test::error_line(fits_output), Contains("fake CUDA plugin: no backend (GPU 0, bf16)"));
}

TEST_CASE("a worker whose LOCAL_RANK has no GPU of its own exits 2 with one line, before writing anything",
          "[plugin]") {
  test::ScratchDir dir;
  const fs::path corpus = fs::path(dir.path()) / "text.txt";
  test::write_corpus(corpus, 20000);
  const fs::path job = fs::path(dir.path()) / "job.json";
  const fs::path run_dir = fs::path(dir.path()) / "run";
  std::ofstream(job) << nlohmann::json{{"device", "cuda"},
                                       {"run_dir", run_dir.string()},
                                       {"data", {{"train", corpus.string()}}},
                                       {"train", {{"precision", "fp32"}}}};
  const fs::path log = fs::path(dir.path()) / "worker.log";
  const pid_t pid = test::spawn({std::string(XTRAIN_BIN_DIR) + "/xtrain-worker", "--job", job.string()}, log,
                                {{kCudaPluginVariable, kFake},
                                 {"XTRAIN_FAKE_CUDA", "h200"},
                                 {"LOCAL_RANK", "2"},
                                 {"CUDA_VISIBLE_DEVICES", "0,1"}});
  const int code = test::wait_for(pid, std::chrono::seconds(60));
  const std::string output = test::read_text(log);
  INFO(output);
  CHECK(code == 2);
  CHECK_FALSE(fs::exists(run_dir));
  CHECK(test::error_line(output) ==
        "error: LOCAL_RANK: 2 needs GPU 2, but CUDA sees 2 GPUs (CUDA_VISIBLE_DEVICES=\"0,1\"); run at most 2 ranks "
        "per node (nproc_per_node)");
}

TEST_CASE("the plugin's place: XTRAIN_CUDA_PLUGIN, else lib/ beside the executable's bin/", "[plugin]") {
  ::unsetenv(kCudaPluginVariable);
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe");
  CHECK(cuda_plugin_path() == (exe.parent_path().parent_path() / "lib" / "libxtrain-cuda.so").string());
  ::setenv(kCudaPluginVariable, "/opt/x/libxtrain-cuda.so", 1);
  CHECK(cuda_plugin_path() == "/opt/x/libxtrain-cuda.so");
  ::unsetenv(kCudaPluginVariable);
}

#ifdef XTRAIN_REAL_PLUGIN
namespace {

// The files of every loaded object whose name contains `part`.
std::vector<std::string> loaded_files(const std::string& part) {
  struct Search {
    std::string part;
    std::vector<std::string> files;
  } search{part, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (std::string(info->dlpi_name).find(s->part) != std::string::npos) s->files.push_back(info->dlpi_name);
        return 0;
      },
      &search);
  return search.files;
}

}  // namespace

TEST_CASE("the real plugin loads without a GPU, exports only its entry point, and counts honestly", "[plugin]") {
  const CudaPluginLoad load = load_cuda_plugin(XTRAIN_REAL_PLUGIN);
  INFO(load.failure);
  REQUIRE(load.plugin != nullptr);
  CHECK_THAT(load.nccl, StartsWith("NCCL 2."));
  void* handle = dlopen(XTRAIN_REAL_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  CHECK(dlsym(handle, "xtrain_cuda_plugin") != nullptr);
  CHECK(dlsym(handle, "_ZN6xtrain4cuda13count_devicesEv") == nullptr);  // xtrain::cuda::count_devices()
  CHECK(dlsym(handle, "_ZN6xtrain14encode_nccl_idERKSt5arrayIhLm128EE") == nullptr);  // from xtrain_common
  dlclose(handle);
  const CudaDeviceCount devices = load.plugin->device_count();
  if (!std::filesystem::exists("/dev/nvidiactl")) {
    CHECK(devices.count == 0);
    CHECK_THAT(devices.error, Contains("cudaErrorInsufficientDriver") && Contains("runtime CUDA"));
  } else {
    CHECK(devices.error.empty());
  }
}

// Run by the next case in a fresh process (nothing of NCCL loaded yet), as the worker starts.
TEST_CASE("(child) with XTRAIN_NCCL_LIBRARY set, that file is the only NCCL in the process", "[.][nccl-child]") {
  const char* chosen = std::getenv("XTRAIN_NCCL_LIBRARY");
  REQUIRE(chosen != nullptr);
  REQUIRE(loaded_files("libnccl").empty());
  const CudaPluginLoad load = load_cuda_plugin(XTRAIN_REAL_PLUGIN);
  INFO(load.failure);
  REQUIRE(load.plugin != nullptr);
  CHECK_THAT(load.nccl, Contains(std::string(" at ") + chosen + " (XTRAIN_NCCL_LIBRARY)"));
  CHECK(loaded_files("libnccl") == std::vector<std::string>{chosen});  // the plugin's NEEDED took it
}

TEST_CASE("XTRAIN_NCCL_LIBRARY: the plugin's communicators use that NCCL and no other", "[plugin][nccl]") {
  // A copy is another file to the loader (another inode), so it cannot pass for the installed one.
  test::ScratchDir dir;
  const std::string copy = dir / "libnccl.so.2";
  std::filesystem::copy_file(std::filesystem::canonical(XTRAIN_NCCL_FILE), copy);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setenv("XTRAIN_NCCL_LIBRARY", copy.c_str(), 1);
    ::execl("/proc/self/exe", "test_cuda_plugin", "[nccl-child]", "--reporter", "compact", nullptr);
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
#endif
