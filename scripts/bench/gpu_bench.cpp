// Times full training steps of GPT on the CUDA backend, exactly the per-step work of
// xtrain-worker (zero grads, forward, backward with per-layer gradient buckets, all-reduce,
// global norm, clipped AdamW) without data loading, and on several ranks (under xlaunch, with
// worker.command set to this program) what the gradient all-reduce costs and how much of it
// backward hides:
//   step      the real step, buckets all-reduced on NCCL's stream while backward continues
//   compute   the same step with no communication at all
//   allreduce the same buckets all-reduced alone, nothing else running
//   hidden    1 - (step - compute) / allreduce: the share of the all-reduce time that the
//             overlap took off the step (1 = fully hidden, 0 = fully exposed)
// Each is the median over --steps steps after --warmup. Rank 0 prints one JSON line (and writes
// it to --out FILE when given); scripts/bench/gpu_bench.py and gpu_scaling.py read it.
// With --cuda-graph on, each layer's forward and backward is recorded once as a CUDA graph and
// replayed (GPT::set_replay, as train.cuda_graph "on" does in the worker); the JSON line says
// which ("cuda_graph": "on" or "off"), so the same shape timed both ways shows what replay gains
// (at least two warm-up steps then: one eager, one recording). --deterministic off is
// train.deterministic false (the bf16 attention backward sums dQ by atomics): the same shape timed
// both ways is what determinism costs. --profile FILE: after the timed steps, as many more with
// CUDA events around every backend call (scripts/bench/op_profile.hpp), and rank 0 writes their
// per-operation table to FILE (Markdown): which products, attention and memory-bound passes the
// step's time goes to. The timed steps go through the same wrapper with its clock off.
// memory_mib (what the device lost to the run, cudaMemGetInfo) sits next to memory_plan_mib
// (worker/model/memory_plan.hpp's count for this rank), so a GPU run checks the plan too.
// Usage: xtrain-bench-gpu [--layers N] [--heads N] [--embd N] [--seq N] [--vocab N] [--batch N]
//                         [--steps N] [--warmup N] [--precision bf16|tf32|fp32] [--cuda-graph on|off]
//                         [--deterministic on|off] [--profile FILE] [--out FILE]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/worker_env.hpp"
#include "cuda/cuda_api.hpp"
#include "cuda/cuda_backend.hpp"
#include "scripts/bench/cuda_event_clock.hpp"
#include "worker/formats/file_io.hpp"
#include "worker/train/adamw.hpp"
#include "worker/model/backend.hpp"
#include "worker/comm/communicator.hpp"
#include "worker/model/gpt.hpp"
#include "worker/model/memory_plan.hpp"
#include "worker/comm/single_communicator.hpp"
#include "scripts/bench/bench_options.hpp"

namespace {

using namespace xtrain;
using Clock = std::chrono::steady_clock;

struct Options : bench::BenchShape {
  Options() : BenchShape{12, 12, 768, 1024, 50257, 8, 10, 3} {}
  std::string precision = "tf32";
  std::string cuda_graph = "off";
  std::string deterministic = "on";  // train.deterministic: "off" sums the bf16 attention's dQ by atomics
  std::string profile;               // the per-operation table's file; empty: no profile
  std::string out;
};

// Exits 2 naming the flag unless its value is one of `choices`.
void require_one_of(const char* flag, const std::string& value, std::initializer_list<const char*> choices) {
  for (const char* c : choices) {
    if (value == c) return;
  }
  std::string listed;  // "a, b or c"
  size_t left = choices.size();
  for (const char* c : choices) listed += c + std::string(--left > 1 ? ", " : left == 1 ? " or " : "");
  std::fprintf(stderr, "xtrain-bench-gpu: %s must be %s\n", flag, listed.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  const std::pair<const char*, std::string*> strings[] = {{"--precision", &o.precision},
                                                         {"--cuda-graph", &o.cuda_graph},
                                                         {"--deterministic", &o.deterministic},
                                                         {"--profile", &o.profile},
                                                         {"--out", &o.out}};
  bench::parse_bench_flags("xtrain-bench-gpu", argc, argv, o, [&](int& i) {
    for (const auto& [flag, field] : strings) {
      if (std::strcmp(argv[i], flag) == 0 && i + 1 < argc) {
        *field = argv[++i];
        return true;
      }
    }
    return false;
  }, "[--precision bf16|tf32|fp32 (tf32)] [--cuda-graph on|off (off)] [--deterministic on|off (on)] "
     "[--profile FILE] [--out FILE]");
  require_one_of("--precision", o.precision, {"bf16", "tf32", "fp32"});
  require_one_of("--cuda-graph", o.cuda_graph, {"on", "off"});
  require_one_of("--deterministic", o.deterministic, {"on", "off"});
  if (!o.profile.empty() && o.cuda_graph == "on") {
    std::fprintf(stderr, "xtrain-bench-gpu: --profile times each operation, which a replayed CUDA graph does not "
                         "show; use --cuda-graph off\n");
    std::exit(2);
  }
  // With graphs the first run of each layer is eager and the second records: neither is timed.
  if (o.cuda_graph == "on") o.warmup = std::max(o.warmup, 2);
  if (o.steps < 1 || o.warmup < 0) {
    std::fprintf(stderr, "xtrain-bench-gpu: --steps must be >= 1 and --warmup >= 0\n");
    std::exit(2);
  }
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

size_t device_bytes_in_use() {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return 0;
  return total_bytes - free_bytes;
}

// Milliseconds of each of `count` runs of `work` after `warmup` unmeasured ones; `work` ends
// with a value handed to the host (or a synchronize), so host time covers the device work.
std::vector<double> time_runs(int warmup, int count, const std::function<void()>& work) {
  for (int i = 0; i < warmup; ++i) work();
  std::vector<double> ms;
  for (int i = 0; i < count; ++i) {
    const auto t0 = Clock::now();
    work();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return ms;
}

// The profile's table under one line saying what it is: the shape, and the profiled steps' wall
// time against the timed steps' median (events cost the host a little) and the operations' sum
// (the rest is time the stream waited for the host).
void write_profile(const Options& o, const bench::OpProfile& profile, double step_ms, double profiled_step_ms) {
  char head[512];
  std::snprintf(head, sizeof head,
                "Per-operation GPU time of one xtrain step (xtrain-bench-gpu --profile): GPT %d x %d, T %d, %d "
                "sequences, %s, deterministic %s; CUDA events around each backend call on its stream, %d steps "
                "after the timed ones, per step. Timed steps' median %.2f ms; the profiled steps took %.2f ms of "
                "wall time each, %.2f ms of it inside operations (the rest: the stream waiting for the host).\n\n",
                o.layers, o.embd, o.seq, o.batch, o.precision.c_str(), o.deterministic.c_str(), o.steps, step_ms,
                profiled_step_ms, profile.total_ms() / o.steps);
  const std::string text = head + profile.table(o.steps);
  write_file_atomically(o.profile, [&](OutputFile& f) { f.write(text.data(), text.size()); });
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    const WorkerEnv env = read_worker_env();
    const int rank = env.where.rank, world = env.where.world_size;
    const int gpus = cuda::visible_device_count();
    if (gpus == 0) throw std::runtime_error("no GPU visible");
    const int device = env.where.local_rank % gpus;
    if (cudaSetDevice(device) != cudaSuccess) throw std::runtime_error("cannot select GPU " + std::to_string(device));
    const size_t bytes_before = device_bytes_in_use();  // the context only
    TrainSpec train;
    train.precision = o.precision;
    auto backend = cuda::make_backend(device, resolve_precision(train, "cuda"), o.deterministic == "on");
    // --profile: every call goes through the profile, timed only in the steps after the timed ones.
    bench::CudaEventClock clock(dynamic_cast<cuda::CudaBackend&>(*backend).stream());
    bench::OpProfile profile(*backend, clock);
    profile.set_enabled(false);
    Backend& used = o.profile.empty() ? *backend : profile;
    std::unique_ptr<Communicator> comm;
    if (world > 1) {
      comm = cuda::make_nccl_communicator(env, *backend, 120.0);
    } else {
      comm = std::make_unique<SingleCommunicator>();
    }

    GPT gpt(o.model(), used, o.batch);
    gpt.init_weights(1);
    // Required: a layer that cannot be recorded ends the run instead of timing eager work as "on".
    if (o.cuda_graph == "on") gpt.set_replay(GPT::Replay::kRequired);
    AdamW adamw(used, gpt.layout(), AdamWConfig{});
    std::mt19937 rng(static_cast<unsigned>(1000 + rank));
    const size_t bt = static_cast<size_t>(o.batch) * o.seq;
    std::vector<int32_t> tokens(bt), targets(bt);
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % static_cast<unsigned>(o.vocab));
    for (auto& t : targets) t = static_cast<int32_t>(rng() % static_cast<unsigned>(o.vocab));

    double loss = 0.0;
    auto step = [&](bool communicate) {
      gpt.zero_grads();
      gpt.forward(tokens.data(), targets.data(), o.batch);
      if (communicate) {
        gpt.backward(1.0f, [&](Span s) { comm->start_all_reduce_average({gpt.grads() + s.offset, s.count}); });
        comm->finish_all_reduces();
      } else {
        gpt.backward(1.0f);
      }
      loss = gpt.take_loss();
      const double norm = grad_norm(used, gpt.grads(), gpt.layout().total());
      adamw.step(gpt, 3e-4f, clip_scale(norm, 1.0));
    };
    auto allreduce_only = [&] {
      for (int l = o.layers - 1; l >= 0; --l) {
        const Span s = gpt.layout().layer_span(l);
        comm->start_all_reduce_average({gpt.grads() + s.offset, s.count});
      }
      const Span e = gpt.layout().embedding_span();
      comm->start_all_reduce_average({gpt.grads() + e.offset, e.count});
      comm->finish_all_reduces();
      backend->synchronize();
    };

    const double step_ms = median(time_runs(o.warmup, o.steps, [&] { step(true); }));
    const size_t bytes_used = device_bytes_in_use() - bytes_before;
    double compute_ms = step_ms, allreduce_ms = 0.0;
    if (world > 1) {
      compute_ms = median(time_runs(1, o.steps, [&] { step(false); }));
      allreduce_ms = median(time_runs(1, o.steps, allreduce_only));
      comm->barrier();
    }
    const double hidden =
        world > 1 && allreduce_ms > 0 ? std::clamp(1.0 - (step_ms - compute_ms) / allreduce_ms, 0.0, 1.0) : -1.0;

    if (!o.profile.empty()) {
      profile.set_enabled(true);
      const auto t0 = Clock::now();
      for (int i = 0; i < o.steps; ++i) step(true);
      profile.settle();
      const double wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (rank == 0) write_profile(o, profile, step_ms, wall_ms / o.steps);
    }

    const ModelDims& d = gpt.dims();
    const MemoryPlan plan = plan_memory(o.model(), o.batch, world, backend_memory(*backend, d, o.batch));
    // Parameters without the padded vocabulary rows (what the model has, not what we allocate).
    const double params = static_cast<double>(gpt.layout().total()) - static_cast<double>(d.Vp - d.V) * d.C;
    const double tokens_per_step = static_cast<double>(bt) * world;
    nlohmann::json r = {{"impl", "xtrain"},
                        {"precision", o.precision},
                        {"cuda_graph", o.cuda_graph},
                        {"deterministic", o.deterministic},
                        {"gpu", cuda::describe_device(device)},
                        {"world", world},
                        {"layers", o.layers},
                        {"heads", o.heads},
                        {"embd", o.embd},
                        {"seq", o.seq},
                        {"vocab", o.vocab},
                        {"batch_per_gpu", o.batch},
                        {"params", params},
                        {"steps", o.steps},
                        {"ms_per_step", step_ms},
                        {"tokens_per_s", tokens_per_step * 1000.0 / step_ms},
                        {"memory_mib", static_cast<double>(bytes_used) / (1024.0 * 1024.0)},
                        {"memory_plan_mib", static_cast<double>(plan.total_bytes()) / (1024.0 * 1024.0)},
                        {"compute_ms", compute_ms},
                        {"allreduce_ms", allreduce_ms},
                        {"hidden_share", hidden},
                        {"loss", loss}};
    if (rank == 0) {
      std::printf("%s\n", r.dump().c_str());
      std::fflush(stdout);
      if (!o.out.empty()) std::ofstream(o.out) << r.dump() << '\n';
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
