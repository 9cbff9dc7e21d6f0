// Causal attention on the CPU: the flash attention (worker/cpu/flash_attention.*) next to the attention
// it replaced, which keeps the (B,NH,T,T) probabilities (tests/worker/attention_reference.hpp), on
// the same inputs, one after the other. Prints a Markdown table: forward and backward time of one
// layer (median of --reps), and the memory a model of L layers holds for attention (L layers of
// saved state plus the one scratch buffer all layers share). Both run on the calling thread
// (OpenBLAS limited to one), and the time is that thread's CPU time: on a shared machine, the time
// other processes take the core from us does not count. With --threads N (> 1) a row of the flash
// attention on a team of N threads follows, and every row is wall time instead (a team's work is
// on several threads). The (T,T) attention's products are sgemm, with the OpenBLAS kernels
// xtrain-worker chooses (worker/cpu/openblas_core.hpp).
// Usage: xtrain-bench-attention-cpu [--reps N] [--avx2] [--threads N]
//   (scripts/bench/attention_cpu.sh; OpenBLAS on one thread)
//   --avx2: flash attention's AVX2 tile product even where the CPU has AVX-512
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "tests/worker/attention_reference.hpp"
#include "worker/cpu/flash_attention.hpp"
#include "worker/cpu/openblas_core.hpp"

namespace {

using xtrain::AttentionShape;

struct Case {
  const char* name;
  int L;  // layers: memory is for the whole model, time for one layer
  AttentionShape s;
};

const Case kCases[] = {
    {"demo: 4L 128C NH4, T64 B4", 4, {4, 64, 128, 4}},
    {"demo shape, T128 B8", 4, {8, 128, 128, 4}},
    {"mid: 6L 384C NH6, T256 B4", 6, {4, 256, 384, 6}},
    {"GPT-2 small: 12L 768C NH12, T1024 B4", 12, {4, 1024, 768, 12}},
};

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double wall_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median_ms(int reps, double (*clock_ms)(), const std::function<void()>& f) {
  f();  // warm the caches and fault in the pages
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const double t0 = clock_ms();
    f();
    ms.push_back(clock_ms() - t0);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Timing {
  double forward_ms, backward_ms;
  size_t memory_bytes;  // L * saved + scratch
};

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  xtrain::init_logging("xtrain-bench-attention-cpu");
  if (const std::string line = xtrain::choose_openblas_core(argv); !line.empty()) spdlog::info("{}", line);
  int reps = 5;
  int threads = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--avx2") == 0) {
      xtrain::flash_attention_use_avx512(false);
    } else {
      std::fprintf(stderr, "xtrain-bench-attention-cpu: unknown or incomplete argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (reps < 1 || threads < 1) {
    std::fprintf(stderr, "xtrain-bench-attention-cpu: --reps and --threads must be >= 1\n");
    return 2;
  }
  openblas_set_num_threads(1);
  double (*const clock_ms)() = threads > 1 ? wall_ms : thread_cpu_ms;
  std::printf("time: %s\n\n", threads > 1 ? "wall" : "the calling thread's CPU time");
  xtrain::ThreadTeam one(1), team(threads);
  std::printf("| shape | attention | forward (1 layer) | backward (1 layer) | memory (L layers) |\n");
  std::printf("| --- | --- | --- | --- | --- |\n");
  for (const Case& c : kCases) {
    const AttentionShape& s = c.s;
    const size_t btc = static_cast<size_t>(s.B) * s.T * s.C;
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> qkv(3 * btc), dout(btc), out(btc), dqkv(3 * btc);
    for (float& x : qkv) x = normal(rng);
    for (float& x : dout) x = normal(rng);

    std::vector<float> probs(xtrain::test::reference_attention_probs_floats(s));
    std::vector<float> scratch(xtrain::test::reference_attention_scratch_floats(s));
    const Timing old_t{
        median_ms(reps, clock_ms,
                  [&] { xtrain::test::reference_attention_forward(out.data(), probs.data(), qkv.data(), s); }),
        median_ms(reps, clock_ms,
                  [&] {
                    xtrain::test::reference_attention_backward(dqkv.data(), dout.data(), qkv.data(), probs.data(),
                                                               scratch.data(), s);
                  }),
        (c.L * probs.size() + scratch.size()) * sizeof(float)};
    std::printf("| %s | (T,T) stored | %.2f ms | %.2f ms | %s |\n", c.name, old_t.forward_ms, old_t.backward_ms,
                mib(old_t.memory_bytes).c_str());

    std::vector<float> lse(xtrain::flash_attention_saved_floats(s));
    auto flash = [&](xtrain::ThreadTeam& on) {
      std::vector<float> fscratch(xtrain::flash_attention_scratch_floats(s, on.members()));
      return Timing{
          median_ms(reps, clock_ms,
                    [&] {
                      xtrain::flash_attention_forward(out.data(), lse.data(), qkv.data(), fscratch.data(), s, false,
                                                      on);
                    }),
          median_ms(reps, clock_ms,
                    [&] {
                      xtrain::flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(),
                                                       fscratch.data(), s, false, on);
                    }),
          (c.L * lse.size() + fscratch.size()) * sizeof(float)};
    };
    auto print_flash = [&](const std::string& label, const Timing& t) {
      std::printf("| | %s | %.2f ms (%.2fx) | %.2f ms (%.2fx) | %s (%.0fx less) |\n", label.c_str(), t.forward_ms,
                  old_t.forward_ms / t.forward_ms, t.backward_ms, old_t.backward_ms / t.backward_ms,
                  mib(t.memory_bytes).c_str(),
                  static_cast<double>(old_t.memory_bytes) / static_cast<double>(t.memory_bytes));
    };
    print_flash("flash", flash(one));
    if (threads > 1) print_flash("flash, " + std::to_string(threads) + " threads", flash(team));
    std::fflush(stdout);
  }
  return 0;
}
