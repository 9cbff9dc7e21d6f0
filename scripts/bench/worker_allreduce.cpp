// How much of a data-parallel step the gradient all-reduce costs at 2 CPU ranks over Gloo, with
// the per-layer buckets overlapping backward (what xtrain-worker does) and without (every bucket
// issued after backward has finished). Built and run by worker_allreduce.sh.
//
// Two ranks are forked processes meeting through a FileStore, one OpenBLAS thread each, like
// xlaunch runs them on a 2-core machine. Per model size: 2 warm-up rounds, then `steps` rounds
// of one step in each mode; the fastest round per mode is reported. "compute" has no communication at
// all and is the floor the others are measured against: all-reduce share = (mode - compute) / mode.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <cblas.h>
#include <gloo/rendezvous/file_store.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/job_spec.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/cpu/openblas_core.hpp"
#include "worker/comm/gloo_communicator.hpp"
#include "worker/model/gpt.hpp"

using namespace xtrain;
using Clock = std::chrono::steady_clock;

namespace {

struct Size {
  const char* name;
  int L, NH, C, T, B;
};

enum class Mode { kCompute, kAllReduceAlone, kNoOverlap, kOverlap };
constexpr int kModes = 4;

// The fastest round: on a shared 2-core machine other processes only ever add time, so the
// minimum is the closest to an undisturbed step (the median moves with the machine's load).
double fastest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

// One step of `mode` on this rank, in ms: forward + backward (+ the all-reduce), between two
// barriers so that it starts together and ends when the slower rank is done.
double time_step(GPT& model, Communicator& comm, Mode mode, const std::vector<int32_t>& tokens) {
  const ParamLayout& layout = model.layout();
  float* grads = model.grads();
  const auto start = [&](Span s) { comm.start_all_reduce_average(GradBucket{grads + s.offset, s.count}); };
  const int B = model.max_batch();
  const int T = model.dims().T;
  comm.barrier();
  const auto t0 = Clock::now();
  if (mode == Mode::kAllReduceAlone) {
    comm.all_reduce_average(grads, layout.total());
  } else {
    model.zero_grads();
    model.forward(tokens.data(), tokens.data() + B * T, B);
    if (mode == Mode::kOverlap) {
      model.backward(1.0f, start);
    } else {
      model.backward(1.0f);
      if (mode == Mode::kNoOverlap) {
        for (int l = model.dims().L - 1; l >= 0; --l) start(layout.layer_span(l));
        start(layout.embedding_span());
      }
    }
    comm.finish_all_reduces();
    model.take_loss();  // as the trainer does once per step
  }
  comm.barrier();
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

void run_rank(int rank, const std::string& store, const std::vector<Size>& sizes, int steps) {
  gloo::rendezvous::FileStore file_store(store);
  GlooOptions options;
  options.store_name = store;
  options.prefix = "bench";
  GlooCommunicator comm(rank, 2, file_store, options);
  CpuBackend backend;
  if (rank == 0) {
    std::printf("| model | params | tokens/step/rank | compute ms | all-reduce alone ms (MB/s) | "
                "no overlap ms (all-reduce share) | overlap ms (all-reduce share) |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
  }
  for (const Size& s : sizes) {
    ModelSpec m;
    m.n_layer = s.L;
    m.n_head = s.NH;
    m.n_embd = s.C;
    m.seq_len = s.T;
    m.vocab_size = 256;
    GPT model(m, backend, s.B);
    model.init_weights(1);
    std::vector<int32_t> tokens(2 * static_cast<size_t>(s.B) * s.T);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 2654435761u + rank) % 256);
    // The modes take turns, step by step, so that a change in the machine's load over the run
    // touches all of them alike.
    std::vector<std::vector<double>> ms(kModes);
    for (int i = 0; i < steps + 2; ++i) {
      for (int m = 0; m < kModes; ++m) {
        const double t = time_step(model, comm, static_cast<Mode>(m), tokens);
        if (i >= 2) ms[static_cast<size_t>(m)].push_back(t);
      }
    }
    const double compute = fastest(ms[0]), alone = fastest(ms[1]), serial = fastest(ms[2]), overlap = fastest(ms[3]);
    if (rank == 0) {
      const double mb = static_cast<double>(model.layout().total()) * 4 / 1e6;
      std::printf("| %s | %.2fM | %d | %.1f | %.1f (%.0f) | %.1f (%.0f%%) | %.1f (%.0f%%) |\n", s.name,
                  static_cast<double>(model.layout().total()) / 1e6, s.B * s.T, compute, alone, mb / alone * 1e3,
                  serial, 100 * (serial - compute) / serial, overlap, 100 * (overlap - compute) / overlap);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // The kernels xtrain-worker runs with (worker/cpu/openblas_core.hpp): on a CPU that OpenBLAS does
  // not know, its fallback kernels would make "compute" 3-4x what a rank spends.
  const std::string openblas_choice = choose_openblas_core(argv);
  std::printf("# OpenBLAS kernels: %s\n", openblas_choice.empty() ? openblas_get_corename() : openblas_choice.c_str());
  std::fflush(stdout);  // before the ranks fork, or they print it again
  const int steps = argc > 1 ? std::atoi(argv[1]) : 10;
  const std::vector<Size> sizes = {
      {"4L 128C T64 (demo)", 4, 4, 128, 64, 16},
      {"6L 256C T128", 6, 8, 256, 128, 8},
      {"8L 512C T64", 8, 8, 512, 64, 4},
  };
  const std::string store = std::filesystem::temp_directory_path() / ("xtrain-bench-" + std::to_string(::getpid()));
  std::filesystem::create_directories(store);
  std::vector<pid_t> children;
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        run_rank(rank, store, sizes, steps);
        std::_Exit(0);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        std::_Exit(1);
      }
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    failed |= !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::filesystem::remove_all(store);
  return failed;
}
