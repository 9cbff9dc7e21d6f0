// Times full training steps of GPT on the CPU backend in one process: zero grads, forward,
// backward, global gradient norm, clipped AdamW, exactly the per-step work of xtrain-worker at
// world size 1 without data loading, with the OpenBLAS kernels the worker chooses
// (worker/cpu/openblas_core.hpp). Prints one JSON line with the median step time, wall and CPU
// (scripts/bench/worker_cpu.py reads it).
// Usage: xtrain-bench-cpu [--layers N] [--heads N] [--embd N] [--seq N] [--vocab N] [--batch N]
//                         [--steps N] [--warmup N] [--threads N] [--precision fp32|bf16] [--profile]
// (bf16: the emulation of the GPU's storage, to measure what its rounding passes cost; --profile:
// the time of each operation over the timed steps, a Markdown table on stderr)
#include <cblas.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "scripts/bench/bench_options.hpp"
#include "common/log.hpp"
#include "scripts/bench/op_profile.hpp"
#include "worker/train/adamw.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/model/gpt.hpp"
#include "worker/train/lr_schedule.hpp"
#include "worker/cpu/openblas_core.hpp"

namespace {

struct Options : xtrain::bench::BenchShape {
  Options() : BenchShape{4, 4, 128, 64, 256, 4, 10, 2} {}
  int threads = 2;
  std::string precision = "fp32";
  bool profile = false;
};

Options parse(int argc, char** argv) {
  Options o;
  xtrain::bench::parse_bench_flags("xtrain-bench-cpu", argc, argv, o, [&](int& i) {
    if (std::strcmp(argv[i], "--profile") == 0) return o.profile = true;
    if (i + 1 >= argc) return false;
    if (std::strcmp(argv[i], "--threads") == 0) o.threads = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--precision") == 0) o.precision = argv[++i];
    else return false;
    return true;
  }, "[--threads N] [--precision fp32|bf16] [--profile]");
  if (o.steps < 1 || o.warmup < 0 || o.threads < 1 || o.batch < 1 ||
      (o.precision != "fp32" && o.precision != "bf16")) {
    std::fprintf(stderr, "xtrain-bench-cpu: --steps, --threads and --batch must be >= 1, --warmup >= 0, "
                         "--precision fp32 or bf16\n");
    std::exit(2);
  }
  return o;
}

double process_cpu_ms() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
}

double median_of(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

}  // namespace

int main(int argc, char** argv) try {
  using namespace xtrain;
  init_logging("xtrain-bench-cpu");
  // The kernels xtrain-worker runs with.
  if (const std::string line = choose_openblas_core(argv); !line.empty()) spdlog::info("{}", line);
  const Options o = parse(argc, argv);
  openblas_set_num_threads(o.threads);
  const ModelSpec m = o.model();
  TrainSpec t;
  t.steps = o.warmup + o.steps;

  CpuBackend cpu(o.precision == "bf16" ? Precision::bf16 : Precision::fp32);
  bench::ThreadCpuClock clock;
  bench::OpProfile profile(cpu, clock);
  Backend& backend = o.profile ? static_cast<Backend&>(profile) : cpu;
  GPT gpt(m, backend, o.batch);
  gpt.init_weights(0);
  AdamW adamw(backend, gpt.layout(), AdamWConfig::from(t));
  // One fixed random batch, as the PyTorch side uses.
  std::mt19937 rng(1);
  std::vector<int32_t> data(static_cast<size_t>(o.batch) * (o.seq + 1));
  for (auto& x : data) x = static_cast<int32_t>(rng() % o.vocab);
  std::vector<int32_t> tokens, targets;
  for (int b = 0; b < o.batch; ++b) {
    const auto row = data.begin() + static_cast<long>(b) * (o.seq + 1);
    tokens.insert(tokens.end(), row, row + o.seq);
    targets.insert(targets.end(), row + 1, row + o.seq + 1);
  }

  double loss = 0.0;
  auto step = [&](int s) {
    gpt.zero_grads();
    gpt.forward(tokens.data(), targets.data(), o.batch);
    gpt.backward(1.0f);
    loss = gpt.take_loss();
    const double norm = grad_norm(backend, gpt.grads(), gpt.layout().total());
    adamw.step(gpt, static_cast<float>(learning_rate(t, s)), clip_scale(norm, t.grad_clip));
  };
  for (int s = 0; s < o.warmup; ++s) step(s);
  profile.reset();
  // The median step, robust to the odd step slowed by another process on a shared machine; and
  // the median of the process's CPU time per step, which time spent waiting for a core does not
  // inflate (all threads' time, so at one thread it is the step's work).
  std::vector<double> ms, cpu_ms;
  for (int s = 0; s < o.steps; ++s) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = process_cpu_ms();
    step(o.warmup + s);
    cpu_ms.push_back(process_cpu_ms() - cpu_start);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  if (o.profile) std::fputs(profile.table(o.steps).c_str(), stderr);
  const double median = median_of(ms);
  std::printf(
      "{\"impl\": \"xtrain-cpu\", \"precision\": \"%s\", \"threads\": %d, \"steps\": %d, \"ms_per_step\": %.3f, "
      "\"cpu_ms_per_step\": %.3f, \"tokens_per_s\": %.1f, \"loss\": %.6f, \"params\": %zu, \"openblas_core\": \"%s\"}\n",
      o.precision.c_str(), openblas_get_num_threads(), o.steps, median, median_of(cpu_ms),
      static_cast<double>(o.batch) * o.seq * 1000.0 / median, loss, gpt.layout().total(),
      openblas_get_corename());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "xtrain-bench-cpu: %s\n", e.what());
  return 1;
}
