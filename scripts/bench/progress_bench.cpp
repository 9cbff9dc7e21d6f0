// What reporting progress costs a rank (worker/train/heartbeat.hpp): one phase update (plain stores
// into the shared mapping of the heartbeat file, and a vDSO clock read), one beat (the futimens
// the watchdog sees), and a training step (forward and backward) of a model with and without
// every layer reported, the two kinds of step interleaved so that drift and noise hit both alike.
// Prints a table. Usage: xtrain-bench-progress [--layers N ... --warmup N] [--threads N]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "scripts/bench/bench_options.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/cpu/openblas_core.hpp"
#include "worker/model/gpt.hpp"
#include "worker/train/heartbeat.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options : xtrain::bench::BenchShape {
  Options() : BenchShape{4, 4, 128, 64, 256, 16, 40, 3} {}  // the demo model, its micro-batch
  int threads = 1;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double ns_per_call(long calls, Clock::duration d) {
  return std::chrono::duration<double, std::nano>(d).count() / static_cast<double>(calls);
}

}  // namespace

int main(int argc, char** argv) try {
  // The kernels xtrain-worker runs with (worker/cpu/openblas_core.hpp), not OpenBLAS's fallback.
  if (const std::string line = xtrain::choose_openblas_core(argv); !line.empty()) {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  using namespace xtrain;
  Options o;
  bench::parse_bench_flags("xtrain-bench-progress", argc, argv, o, [&](int& i) {
    if (std::strcmp(argv[i], "--threads") != 0 || i + 1 >= argc) return false;
    o.threads = std::atoi(argv[++i]);
    return true;
  }, "[--threads N]");
  openblas_set_num_threads(o.threads);
  char path[] = "/tmp/xtrain-bench-progress-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  ::close(fd);
  Heartbeat beat(path);

  constexpr long kCalls = 10'000'000;
  auto t0 = Clock::now();
  for (long i = 0; i < kCalls; ++i) beat.phase(WorkerPhase::kBackward, static_cast<int>(i & 7));
  const double phase_ns = ns_per_call(kCalls, Clock::now() - t0);
  constexpr long kBeats = 100'000;
  t0 = Clock::now();
  for (long i = 0; i < kBeats; ++i) beat.beat();
  const double beat_ns = ns_per_call(kBeats, Clock::now() - t0);

  const ModelSpec m = o.model();
  CpuBackend backend;
  GPT gpt(m, backend, o.batch);
  gpt.init_weights(0);
  std::mt19937 rng(1);
  std::vector<std::int32_t> tokens(static_cast<size_t>(o.batch) * m.seq_len), targets(tokens.size());
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % m.vocab_size);
  for (auto& t : targets) t = static_cast<std::int32_t>(rng() % m.vocab_size);
  long updates = 0;
  const auto reported = [&](GPT::Pass pass, int layer) {
    beat.phase(pass == GPT::Pass::kForward ? WorkerPhase::kForward : WorkerPhase::kBackward, layer);
    ++updates;
  };
  const auto step_ms = [&](bool report) {
    gpt.set_layer_observer(report ? GPT::LayerObserver(reported) : GPT::LayerObserver());
    const auto s0 = Clock::now();
    gpt.zero_grads();
    gpt.forward(tokens.data(), targets.data(), o.batch);
    gpt.backward(1.0f);
    return std::chrono::duration<double, std::milli>(Clock::now() - s0).count();
  };
  for (int i = 0; i < o.warmup; ++i) step_ms(i % 2 == 0);
  std::vector<double> plain, with;
  updates = 0;
  for (int i = 0; i < o.steps; ++i) {
    plain.push_back(step_ms(false));
    with.push_back(step_ms(true));
  }
  const double per_step = static_cast<double>(updates) / o.steps;
  const double a = median(plain), b = median(with);
  const double a_min = *std::min_element(plain.begin(), plain.end());
  const double b_min = *std::min_element(with.begin(), with.end());
  std::printf("progress reporting: model %dL %dH %dC T=%d V=%d, micro-batch %d, %d thread(s), median of %d steps\n",
              m.n_layer, m.n_head, m.n_embd, m.seq_len, m.vocab_size, o.batch, o.threads, o.steps);
  std::printf("| what | median | best |\n| --- | --- | --- |\n");
  std::printf("| one phase update (shared mapping) | %.1f ns | |\n", phase_ns);
  std::printf("| one beat (futimens, once per step) | %.0f ns | |\n", beat_ns);
  std::printf("| forward + backward, layers not reported | %.3f ms | %.3f ms |\n", a, a_min);
  std::printf("| forward + backward, %.0f phase updates | %.3f ms | %.3f ms |\n", per_step, b, b_min);
  std::printf("| difference | %+.2f%% | %+.2f%% |\n", 100 * (b - a) / a, 100 * (b_min - a_min) / a_min);
  std::printf("expected from the updates alone: %.4f ms per step (%.4f%%)\n", per_step * phase_ns / 1e6,
              100 * per_step * phase_ns / 1e6 / a_min);
  ::unlink(path);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "xtrain-bench-progress: %s\n", e.what());
  return 1;
}
