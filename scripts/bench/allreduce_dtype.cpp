// What a bf16 gradient all-reduce would cost in accuracy: a 2-rank training run emulated in one
// process on the CPU backend, once with the gradients averaged in fp32 (what xtrain does) and once
// as a bf16 all-reduce would (each rank's gradient rounded to bf16, summed, the sum rounded to
// bf16, then halved), from the same weights and batches. A third run, one rank with the whole
// batch, differs from the fp32 one only by the order of fp32 sums (~1e-7): how far it drifts is
// the chaos any perturbation causes over the run, the yardstick for the bf16 run's drift. Prints
// each run's losses, how far apart the final parameters are (relative to how far training moved
// them), and the bytes each all-reduce moves per step for GPT-2 124M.
// Usage: xtrain-bench-allreduce-dtype --data FILE [--layers N] [--heads N] [--embd N] [--seq N]
//                                     [--vocab N] [--batch N] [--steps N] [--precision bf16|fp32]
// (--batch is per rank; defaults: configs/demo.json's model, 8 sequences per rank, 300 steps,
// its learning-rate schedule, compute in bf16).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "scripts/bench/bench_options.hpp"
#include "worker/train/adamw.hpp"
#include "worker/data/batch_sampler.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/cpu/openblas_core.hpp"
#include "worker/model/gpt.hpp"
#include "worker/train/lr_schedule.hpp"
#include "worker/math/bf16.hpp"
#include "worker/model/param_layout.hpp"
#include "worker/data/token_source.hpp"

namespace {

using namespace xtrain;

constexpr int kWorld = 2;

struct Options : bench::BenchShape {
  Options() : BenchShape{4, 4, 128, 64, 256, 8, 300, 0} {}
  std::string data;
  std::string precision = "bf16";
};

Options parse(int argc, char** argv) {
  Options o;
  bench::parse_bench_flags("xtrain-bench-allreduce-dtype", argc, argv, o, [&](int& i) {
    if (i + 1 >= argc) return false;
    if (std::strcmp(argv[i], "--data") == 0) o.data = argv[++i];
    else if (std::strcmp(argv[i], "--precision") == 0) o.precision = argv[++i];
    else return false;
    return true;
  }, "--data FILE [--precision bf16|fp32]");
  if (o.data.empty() || o.steps < 1 || o.batch < 1 || (o.precision != "bf16" && o.precision != "fp32")) {
    std::fprintf(stderr, "xtrain-bench-allreduce-dtype: --data FILE is required, --steps and --batch >= 1, "
                         "--precision bf16 or fp32\n");
    std::exit(2);
  }
  return o;
}

enum class Reduce { fp32, bf16, one_rank };

// out = average of the two ranks' gradients, as the all-reduce computes it.
void average(const std::vector<float>& g0, const std::vector<float>& g1, Reduce r, std::vector<float>& out) {
  for (size_t i = 0; i < out.size(); ++i) {
    if (r == Reduce::fp32) {
      out[i] = (g0[i] + g1[i]) * 0.5f;
    } else {
      const float sum = math::round_to_bf16(g0[i]) + math::round_to_bf16(g1[i]);
      out[i] = math::round_to_bf16(sum) * 0.5f;  // halving a bf16 value is exact
    }
  }
}

struct Run {
  std::vector<double> losses;  // per step, the mean over both ranks
  double first_grad_error = 0; // the first step's averaged gradient against the fp32 average (L2, relative)
  double val_loss = 0;
  std::vector<float> params;
};

Run train(const Options& o, const DataSplit& data, Precision precision, Reduce reduce, std::vector<float>& init) {
  const ModelSpec m = o.model();
  TrainSpec t;  // configs/demo.json's schedule
  t.steps = o.steps;
  t.lr = 3e-3;
  t.min_lr = 3e-4;
  t.warmup_steps = 100;
  t.weight_decay = 0.1;
  t.grad_clip = 1.0;
  CpuBackend backend(precision);
  GPT gpt(m, backend, kWorld * o.batch);
  gpt.init_weights(m.init_seed);
  AdamW adamw(backend, gpt.layout(), AdamWConfig::from(t));
  BatchSampler sampler(data.train, m.seq_len, 42);
  const size_t P = gpt.layout().total(), bt = static_cast<size_t>(kWorld * o.batch) * m.seq_len;
  std::vector<float> grads[kWorld] = {std::vector<float>(P), std::vector<float>(P)}, avg(P);
  std::vector<std::int32_t> inputs(bt), targets(bt);
  init.resize(P);
  backend.download(init.data(), gpt.params(), P);

  Run run;
  for (int step = 0; step < o.steps; ++step) {
    const std::vector<std::uint64_t> starts = sampler.draw(kWorld * o.batch);
    double loss = 0;
    if (reduce == Reduce::one_rank) {
      gather_micro_batch(data.train, m.seq_len, starts, 0, 1, 0, kWorld * o.batch, inputs.data(), targets.data());
      gpt.zero_grads();
      gpt.forward(inputs.data(), targets.data(), kWorld * o.batch);
      gpt.backward(1.0f);
      loss = gpt.take_loss();
    } else {
      for (int rank = 0; rank < kWorld; ++rank) {
        gather_micro_batch(data.train, m.seq_len, starts, rank, kWorld, 0, o.batch, inputs.data(), targets.data());
        gpt.zero_grads();
        gpt.forward(inputs.data(), targets.data(), o.batch);
        gpt.backward(1.0f);
        loss += gpt.take_loss() / kWorld;
        backend.download(grads[rank].data(), gpt.grads(), P);
      }
      average(grads[0], grads[1], reduce, avg);
      backend.upload(gpt.grads(), avg.data(), P);
      if (step == 0) {
        std::vector<float> exact(P);
        average(grads[0], grads[1], Reduce::fp32, exact);
        double num = 0, den = 0;
        for (size_t i = 0; i < P; ++i) {
          num += (static_cast<double>(avg[i]) - exact[i]) * (static_cast<double>(avg[i]) - exact[i]);
          den += static_cast<double>(exact[i]) * exact[i];
        }
        run.first_grad_error = std::sqrt(num / den);
      }
    }
    const double norm = grad_norm(backend, gpt.grads(), P);
    adamw.step(gpt, static_cast<float>(learning_rate(t, step)), clip_scale(norm, t.grad_clip));
    run.losses.push_back(loss);
  }
  const std::vector<std::uint64_t> val = validation_starts(data.val, m.seq_len, 4 * kWorld * o.batch);
  for (size_t first = 0; first < val.size(); first += static_cast<size_t>(o.batch)) {
    const std::vector<std::uint64_t> window(val.begin() + static_cast<long>(first),
                                            val.begin() + static_cast<long>(first) + o.batch);
    gather_micro_batch(data.val, m.seq_len, window, 0, 1, 0, o.batch, inputs.data(), targets.data());
    gpt.forward(inputs.data(), targets.data(), o.batch);
  }
  run.val_loss = gpt.take_loss();
  run.params.resize(P);
  backend.download(run.params.data(), gpt.params(), P);
  return run;
}

double mean_tail(const std::vector<double>& v, size_t n) {
  n = std::min(n, v.size());
  double s = 0;
  for (size_t i = v.size() - n; i < v.size(); ++i) s += v[i];
  return s / static_cast<double>(n);
}

// How far `r` drifted from `ref`: the largest per-step loss difference, the validation loss
// difference (both relative) and the parameter distance relative to ref's movement from init.
struct Drift {
  double step_loss = 0, val_loss = 0, params = 0;
};

Drift drift(const Run& r, const Run& ref, const std::vector<float>& init) {
  Drift d;
  double moved = 0, apart = 0;
  for (size_t i = 0; i < init.size(); ++i) {
    const double m = static_cast<double>(ref.params[i]) - init[i], a = static_cast<double>(r.params[i]) - ref.params[i];
    moved += m * m;
    apart += a * a;
  }
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    d.step_loss = std::max(d.step_loss, std::abs(r.losses[i] - ref.losses[i]) / ref.losses[i]);
  }
  d.val_loss = std::abs(r.val_loss - ref.val_loss) / ref.val_loss;
  d.params = std::sqrt(apart / moved);
  return d;
}

}  // namespace

int main(int argc, char** argv) try {
  // The kernels xtrain-worker runs with (worker/cpu/openblas_core.hpp), not OpenBLAS's fallback.
  if (const std::string line = xtrain::choose_openblas_core(argv); !line.empty()) {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  const Options o = parse(argc, argv);
  DataSpec spec;
  spec.train = o.data;
  const DataSplit data = load_data(spec, o.model(), /*need_val=*/true);
  const Precision precision = o.precision == "bf16" ? Precision::bf16 : Precision::fp32;
  std::vector<float> init;
  const Run f = train(o, data, precision, Reduce::fp32, init);
  const Run b = train(o, data, precision, Reduce::bf16, init);
  const Run one = train(o, data, precision, Reduce::one_rank, init);
  ModelSpec gpt2;
  gpt2.n_layer = 12, gpt2.n_head = 12, gpt2.n_embd = 768, gpt2.seq_len = 1024, gpt2.vocab_size = 50257;
  const double gpt2_params = static_cast<double>(ParamLayout(ModelDims::from(gpt2)).total());

  std::printf("2 ranks x %d sequences, %d steps, %dL %dC T%d, compute in %s; drift is against the fp32 all-reduce\n",
              o.batch, o.steps, o.layers, o.embd, o.seq, o.precision.c_str());
  std::printf("| run | loss, last 20 steps | validation loss | largest step-loss drift | validation drift | "
              "parameter drift | bytes per all-reduce, GPT-2 124M |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  std::printf("| fp32 all-reduce | %.4f | %.4f | | | | %.0f MB |\n", mean_tail(f.losses, 20), f.val_loss,
              gpt2_params * 4 / 1e6);
  const struct {
    const char* name;
    const Run& run;
    double bytes_per_param;
  } others[] = {{"bf16 all-reduce", b, 2}, {"one rank, fp32 sums reordered", one, 0}};
  for (const auto& r : others) {
    const Drift d = drift(r.run, f, init);
    char bytes[32] = "no all-reduce";
    if (r.bytes_per_param > 0) std::snprintf(bytes, sizeof bytes, "%.0f MB", gpt2_params * r.bytes_per_param / 1e6);
    std::printf("| %s | %.4f | %.4f | %.2e | %.2e | %.2e | %s |\n", r.name, mean_tail(r.run.losses, 20),
                r.run.val_loss, d.step_loss, d.val_loss, d.params, bytes);
  }
  std::printf("the bf16 all-reduce's average at the first step is %.2e from the fp32 average (relative L2)\n",
              b.first_grad_error);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "xtrain-bench-allreduce-dtype: %s\n", e.what());
  return 1;
}
