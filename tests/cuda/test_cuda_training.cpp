// Whole training steps of GPT on the CUDA backend against the CPU backend, and determinism
// ([gpu]). The model is small but has every layer kind, a padded vocabulary (300 -> 384) and
// several heads.
//
// The reference is the CPU in fp32 for strict fp32 and tf32, and the CPU's bf16 emulation for
// bf16 (the same roundings at the same points). Tolerances (relative, per quantity or per
// parameter tensor in the L2 norm):
//   strict fp32: loss 1e-5; gradients 1e-4 (each op agrees to ~1e-6, backward chains about ten
//                of them per layer); losses of the following AdamW steps 1e-4;
//   tf32:        loss 2e-3, gradients 3e-2, later losses 5e-3 (each product rounds its operands
//                to 10 mantissa bits, ~5e-4 relative per product);
//   bf16:        loss 1e-3, gradients 4e-3, later losses 2e-3: the two runs store the same
//                values except where ~1e-7 differences in fp32 sums straddle a bf16 rounding
//                boundary (a share ~1e-4 of elements, one ulp = 2^-8 each), a perturbation of
//                ~4e-5 per tensor compounded over ~10 stores per layer (tests/cuda/test_cuda_ops.cpp).
//                The same with dQ summed by atomics (train.deterministic false): its sums in
//                another order are such fp32 differences too.
// Determinism: two runs from the same seed and batches give bitwise the same losses and
// parameters, in every precision; so do runs whose layers are recorded as CUDA graphs and
// replayed (GPT::set_replay), against runs that launch every kernel.
// Decoder steps (GPT::forward_step, generate's work on a GPU): after a prompt's forward, every
// later position's logits against the CPU's steps: strict fp32 1e-5 (measured 2.3e-7); bf16 1e-2,
// since a step's k and v stay in the cache for every later step, so one stored value that rounds
// the other way (2^-8 relative) moves all the logits after it by up to about that much (measured
// 0 to 2.3e-3 over 26 seeds). And against the same backend's forward of every position (as
// tests/worker/model/test_gpt.cpp on the CPU): 1e-5 and 1e-2 again, the step's attention not
// rounding p to bf16. The same for a GPT built for inference (generate's); replayed as one CUDA
// graph: bitwise eager work's. A GPT decoder's rows (generate's) are those logits, converted
// from bf16 by the decoder, bit for bit; a prompt its rows share runs once and is copied (device
// to device), and each row's steps then give a one-row decoder's logits on its tokens (1e-5, 1e-2:
// the rows' products differ from one row's in their shapes only).
// Profile: xtrain-bench-gpu --profile's wrapper (scripts/bench/op_profile.hpp with CUDA events)
// changes no bit of a step, counts every operation, and its times fit in the steps' wall time.
// Memory: GPT, AdamW and the trainer's step scalars allocate exactly the memory plan's bytes
// (worker/model/memory_plan.hpp), the backend's own buffers (cuBLASLt's workspace, the norm's partials,
// the scratch) are the plan's too, CUB's radix sort fits the plan's allowance on this GPU, and
// nothing grows during a step; a GPT built for inference holds the inference plan (no scratch for
// backward), and a forward grows none.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "cuda/cuda_api.hpp"
#include "cuda/cuda_backend.hpp"
#include "scripts/bench/cuda_event_clock.hpp"
#include "tests/cuda/cuda_test_util.hpp"
#include "worker/train/adamw.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/model/gpt.hpp"
#include "worker/model/gpt_decoder.hpp"
#include "worker/model/memory_plan.hpp"
#include "tests/worker/gpt_test_util.hpp"

using namespace xtrain;
using namespace xtrain::test;

namespace {

// In interpret mode smaller still, with a tail (T 33: no tile of any kernel divides it).
ModelSpec small_model() {
  return kInterpreted ? model_spec(2, 2, 64, 33, 300) : model_spec(2, 4, 128, 64, 300);
}

constexpr int kBatch = 4;
constexpr std::int64_t kInitSeed = 1234;

struct Tolerances {
  double loss, grads, later_losses;
};
Tolerances tolerances(const GpuMode& p) {
  if (p.precision == Precision::bf16) return Tolerances{1e-3, 4e-3, 2e-3};
  return p.tf32() ? Tolerances{2e-3, 3e-2, 5e-3} : Tolerances{1e-5, 1e-4, 1e-4};
}

// A model with its optimizer on one backend, stepping as the trainer does: forward, backward,
// global norm, clip to 1.0, AdamW.
struct Replica {
  Replica(Backend& b, const ModelSpec& m) : gpt(m, b, kBatch), adamw(b, gpt.layout(), AdamWConfig{}) {
    gpt.init_weights(kInitSeed);
  }
  double forward_backward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets) {
    gpt.zero_grads();
    gpt.forward(tokens.data(), targets.data(), kBatch);
    gpt.backward(1.0f);
    return gpt.take_loss();
  }
  void update(float lr) {
    const double norm = grad_norm(gpt.backend(), gpt.grads(), gpt.layout().total());
    adamw.step(gpt, lr, clip_scale(norm, 1.0));
  }
  std::vector<float> download(const float* p) {
    std::vector<float> v(gpt.layout().total());
    gpt.backend().download(v.data(), p, v.size());
    return v;
  }
  GPT gpt;
  AdamW adamw;
};

struct Batch {
  std::vector<int32_t> tokens, targets;
};

std::vector<Batch> random_batches(Random& rnd, int count, const ModelSpec& m) {
  std::vector<Batch> out;
  for (int i = 0; i < count; ++i) {
    const size_t n = static_cast<size_t>(kBatch) * m.seq_len;
    out.push_back({rnd.ints(n, m.vocab_size), rnd.ints(n, m.vocab_size)});
  }
  return out;
}

}  // namespace

TEST_CASE_METHOD(Seeded, "a cuda training step matches the CPU's: loss, every gradient, and the next steps",
                 "[gpu][train]") {
  INFO("seed " << seed);
  const ModelSpec m = small_model();
  const auto batches = random_batches(rnd, 4, m);
  for (const GpuMode& p : {kStrictFp32, kTf32, kBf16, kBf16AtomicDq}) {
    INFO(p.name);
    const Tolerances tol = tolerances(p);
    CpuBackend cpu(p.precision == Precision::bf16 ? Precision::bf16 : Precision::fp32);
    auto gpu = cuda::make_backend(0, p.precision, p.deterministic);
    Replica ref(cpu, m), dut(*gpu, m);
    REQUIRE(dut.download(dut.gpt.params()) == ref.download(ref.gpt.params()));  // same init, host-generated

    const float ref_loss = ref.forward_backward(batches[0].tokens, batches[0].targets);
    const float dut_loss = dut.forward_backward(batches[0].tokens, batches[0].targets);
    CHECK(std::abs(dut_loss - ref_loss) <= tol.loss * std::abs(ref_loss));
    const auto ref_grads = ref.download(ref.gpt.grads()), dut_grads = dut.download(dut.gpt.grads());
    for (const ParamTensor& t : ref.gpt.layout().tensors()) {
      INFO(t.name);
      const auto begin = static_cast<std::ptrdiff_t>(t.offset), end = static_cast<std::ptrdiff_t>(t.offset + t.count);
      const std::vector<float> want(ref_grads.begin() + begin, ref_grads.begin() + end);
      const std::vector<float> got(dut_grads.begin() + begin, dut_grads.begin() + end);
      CHECK(rel_err(got, want) < tol.grads);
    }

    ref.update(1e-3f);
    dut.update(1e-3f);
    for (size_t i = 1; i < batches.size(); ++i) {
      INFO("step " << i + 1);
      const float r = ref.forward_backward(batches[i].tokens, batches[i].targets);
      const float d = dut.forward_backward(batches[i].tokens, batches[i].targets);
      CHECK(std::abs(d - r) <= tol.later_losses * std::abs(r));
      ref.update(1e-3f);
      dut.update(1e-3f);
    }
  }
}

TEST_CASE_METHOD(Seeded, "cuda training is deterministic: two runs give the same bits",
                 "[gpu][train][determinism]") {
  INFO("seed " << seed);
  const ModelSpec m = small_model();
  const auto batches = random_batches(rnd, 3, m);
  for (const GpuMode& p : {kStrictFp32, kTf32, kBf16}) {
    INFO(p.name);
    auto run = [&](std::vector<float>& losses) {
      auto gpu = cuda::make_backend(0, p.precision);
      Replica r(*gpu, m);
      for (const Batch& b : batches) {
        losses.push_back(r.forward_backward(b.tokens, b.targets));
        r.update(1e-3f);
      }
      return r.download(r.gpt.params());
    };
    std::vector<float> losses_a, losses_b;
    const auto params_a = run(losses_a);
    const auto params_b = run(losses_b);
    CHECK(losses_a == losses_b);
    CHECK(params_a == params_b);
  }
}

TEST_CASE_METHOD(Seeded, "the per-operation profile of cuda steps changes no bit, counts every call and times it",
                 "[gpu][train][profile]") {
  INFO("seed " << seed);
  const ModelSpec m = small_model();
  const auto batches = random_batches(rnd, 3, m);
  cuda::CudaBackend plain_gpu(0, Precision::bf16, true), profiled_gpu(0, Precision::bf16, true);
  bench::CudaEventClock clock(profiled_gpu.stream());
  bench::OpProfile profile(profiled_gpu, clock);
  Replica plain(plain_gpu, m), profiled(profile, m);
  profile.set_enabled(false);  // the first step untimed, as the bench's timed steps are
  CHECK(profiled.forward_backward(batches[0].tokens, batches[0].targets) ==
        plain.forward_backward(batches[0].tokens, batches[0].targets));
  plain.update(1e-3f);
  profiled.update(1e-3f);

  profile.set_enabled(true);
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 1; i < batches.size(); ++i) {
    CHECK(profiled.forward_backward(batches[i].tokens, batches[i].targets) ==
          plain.forward_backward(batches[i].tokens, batches[i].targets));
    plain.update(1e-3f);
    profiled.update(1e-3f);
  }
  profile.settle();
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  CHECK(profiled.download(profiled.gpt.params()) == plain.download(plain.gpt.params()));

  constexpr int kSteps = 2;
  const std::string table = profile.table(kSteps);
  INFO(table);
  // Per step: every layer's attention once each way, a layernorm backward per layernorm
  // (2 per layer and the final one), the products at their shapes.
  const std::string qkv = std::to_string(kBatch * m.seq_len) + "x" + std::to_string(m.n_embd) + "->" +
                          std::to_string(3 * m.n_embd);
  const std::string layers = std::to_string(m.n_layer);
  for (const std::string& row : std::vector<std::string>{"| attention_forward | " + layers + " |",
                                                         "| attention_backward | " + layers + " |",
                                                         "| layernorm_backward | " +
                                                             std::to_string(2 * m.n_layer + 1) + " |",
                                                         "| matmul_forward " + qkv + " | " + layers + " |",
                                                         "| matmul_backward " + qkv + " | " + layers + " |"}) {
    CHECK_THAT(table, Catch::Contains(row));
  }
  CHECK(profile.total_ms() > 0.0);
  CHECK(profile.total_ms() <= wall_ms);  // one stream: the operations' intervals do not overlap
}

TEST_CASE_METHOD(Seeded, "cuda graph replay trains to bitwise the same parameters as eager work",
                 "[gpu][train][determinism][graphs]") {
  INFO("seed " << seed);
  const ModelSpec m = small_model();
  const auto batches = random_batches(rnd, 5, m);
  for (const GpuMode& p : {kStrictFp32, kTf32, kBf16}) {
    INFO(p.name);
    auto run = [&](GPT::Replay replay, std::vector<float>& losses) {
      auto gpu = cuda::make_backend(0, p.precision);
      Replica r(*gpu, m);
      r.gpt.set_replay(replay);
      for (size_t s = 0; s < batches.size(); ++s) {
        // Steps 3 and 4 accumulate two micro-steps at scale 1/2: backward is recorded again.
        const int micro = s >= 3 ? 2 : 1;
        r.gpt.zero_grads();
        for (int i = 0; i < micro; ++i) {
          const Batch& b = batches[(s + static_cast<size_t>(i)) % batches.size()];
          r.gpt.forward(b.tokens.data(), b.targets.data(), kBatch);
          r.gpt.backward(1.0f / static_cast<float>(micro));
          losses.push_back(static_cast<float>(r.gpt.take_loss()));
        }
        r.update(1e-3f);
      }
      CHECK(r.gpt.replay() == replay);  // required: no layer fell back
      return r.download(r.gpt.params());
    };
    std::vector<float> eager_losses, replay_losses;
    const auto eager = run(GPT::Replay::kOff, eager_losses);
    const auto replayed = run(GPT::Replay::kRequired, replay_losses);
    CHECK(replay_losses == eager_losses);
    CHECK(replayed == eager);
  }
}

TEST_CASE_METHOD(Seeded, "cuda decoder steps give the CPU's logits, and replayed as a graph eager work's bits",
                 "[gpu][train][graphs]") {
  INFO("seed " << seed);
  const ModelSpec m = small_model();
  const auto tokens = rnd.ints(static_cast<size_t>(m.seq_len), m.vocab_size);
  constexpr int kPrompt = 4;
  const auto steps = [&](Backend& k, GPT::Replay replay, ModelUse use) {
    GPT gpt(m, k, kBatch, use);
    gpt.init_weights(kInitSeed);
    if (replay != GPT::Replay::kOff) gpt.set_replay(replay);
    const int Vp = gpt.dims().Vp;
    auto window = tokens;
    std::fill(window.begin() + kPrompt, window.end(), 0);
    // A model built for decoding has no logits of every position: its window is forward_window's,
    // and its steps are held to the other models' (the caller's checks).
    std::vector<float> forward;
    if (use == ModelUse::kDecoding) {
      gpt.forward_window(window.data(), 1, kPrompt - 1);
    } else {
      gpt.forward(tokens.data(), nullptr, 1);
      forward.resize(static_cast<size_t>(m.seq_len) * Vp);
      k.download(forward.data(), gpt.logits(), forward.size());
      forward.erase(forward.begin(), forward.begin() + static_cast<long>(kPrompt) * Vp);
      gpt.forward(window.data(), nullptr, 1);
    }
    std::vector<float> out;
    std::vector<float> logits(static_cast<size_t>(Vp));
    for (int pos = kPrompt; pos < m.seq_len; ++pos) {
      gpt.forward_step(tokens[static_cast<size_t>(pos)], pos);
      k.download(logits.data(), gpt.step_logits(), logits.size());
      out.insert(out.end(), logits.begin(), logits.end());
    }
    CHECK(gpt.replay() == replay);  // required: the step was recorded
    if (!forward.empty()) CHECK(rel_err(out, forward) < (k.precision() == Precision::bf16 ? 1e-2 : 1e-5));
    return out;
  };
  for (const GpuMode& p : {kStrictFp32, kBf16}) {
    INFO(p.name);
    const double tolerance = p.precision == Precision::bf16 ? 1e-2 : 1e-5;
    CpuBackend cpu(p.precision);
    const auto want = steps(cpu, GPT::Replay::kOff, ModelUse::kTraining);
    auto gpu = cuda::make_backend(0, p.precision);
    const auto eager = steps(*gpu, GPT::Replay::kOff, ModelUse::kTraining);
    CHECK(rel_err(eager, want) < tolerance);
    // generate's model: built for inference, one layer's activations reused by every layer.
    auto gpu_inference = cuda::make_backend(0, p.precision);
    const auto inference = steps(*gpu_inference, GPT::Replay::kOff, ModelUse::kInference);
    CHECK(rel_err(inference, want) < tolerance);
    auto gpu_replayed = cuda::make_backend(0, p.precision);
    CHECK(steps(*gpu_replayed, GPT::Replay::kRequired, ModelUse::kInference) == inference);
    // generate's model: built for decoding, its window's head on the last position only. The same
    // layers on the same values: the same cache, so the same steps, bit for bit.
    auto gpu_decoding = cuda::make_backend(0, p.precision);
    CHECK(steps(*gpu_decoding, GPT::Replay::kOff, ModelUse::kDecoding) == inference);
    auto gpu_decoding_replayed = cuda::make_backend(0, p.precision);
    CHECK(steps(*gpu_decoding_replayed, GPT::Replay::kRequired, ModelUse::kDecoding) == inference);
  }
}

TEST_CASE_METHOD(Seeded, "a GPT decoder's rows on the GPU are the step's logits, read where the download left them",
                 "[gpu][train]") {
  INFO("seed " << seed);
  const ModelSpec m = small_model();
  constexpr int kRows = 2, kPrompt = 5;
  for (const GpuMode& p : {kStrictFp32, kBf16}) {
    INFO(p.name);
    auto gpu = cuda::make_backend(0, p.precision);
    GPT gpt(m, *gpu, kRows, ModelUse::kDecoding);
    gpt.init_weights(kInitSeed);
    const ModelDims& d = gpt.dims();
    GptDecoder decoder(gpt, kRows);
    // The rows' floats against the step's logits downloaded and converted by the backend itself,
    // after a window (the prompt) and after a step.
    const auto check = [&](const StepLogits& logits) {
      std::vector<std::vector<float>> rows;
      for (int r = 0; r < kRows; ++r) rows.emplace_back(logits.row(r).begin(), logits.row(r).end());
      std::vector<float> want(static_cast<size_t>(kRows) * d.Vp);
      gpu->download(want.data(), gpt.step_logits(), want.size());
      for (int r = 0; r < kRows; ++r) {
        INFO("row " << r);
        REQUIRE(rows[static_cast<size_t>(r)].size() == static_cast<size_t>(d.V));
        CHECK(std::memcmp(rows[static_cast<size_t>(r)].data(), want.data() + static_cast<size_t>(r) * d.Vp,
                          static_cast<size_t>(d.V) * sizeof(float)) == 0);
      }
    };
    check(decoder.append(rnd.ints(static_cast<size_t>(kRows) * kPrompt, m.vocab_size)));
    check(decoder.append(rnd.ints(kRows, m.vocab_size)));
    CHECK(decoder.positions_computed() == static_cast<std::uint64_t>(d.T) + 1);  // the second was a step
  }
}

TEST_CASE_METHOD(Seeded,
                 "a prompt the GPU decoder's rows share runs once, and each row then steps as a one-row decoder",
                 "[gpu][train]") {
  INFO("seed " << seed);
  const ModelSpec m = small_model();
  constexpr int kRows = 3, kPrompt = 5, kSteps = 4;
  for (const GpuMode& p : {kStrictFp32, kBf16}) {
    INFO(p.name);
    const double tolerance = p.precision == Precision::bf16 ? 1e-2 : 1e-5;
    auto gpu = cuda::make_backend(0, p.precision);
    GPT wide(m, *gpu, kRows, ModelUse::kDecoding);
    wide.init_weights(kInitSeed);
    GptDecoder rows(wide, kRows);
    std::vector<std::unique_ptr<GPT>> models;
    std::vector<std::unique_ptr<GptDecoder>> singles;
    for (int r = 0; r < kRows; ++r) {
      models.push_back(std::make_unique<GPT>(m, *gpu, 1, ModelUse::kDecoding));
      models.back()->init_weights(kInitSeed);
      singles.push_back(std::make_unique<GptDecoder>(*models.back()));
    }
    // A step's logits are valid until the next call on the backend: each row is copied out first.
    const auto compare = [&](const StepLogits& got, const std::vector<std::int32_t>& tokens, int each) {
      std::vector<std::vector<float>> mine;
      for (int r = 0; r < kRows; ++r) mine.emplace_back(got.row(r).begin(), got.row(r).end());
      for (int r = 0; r < kRows; ++r) {
        INFO("row " << r);
        const StepLogits one =
            singles[static_cast<size_t>(r)]->append(std::span(tokens).subspan(static_cast<size_t>(r * each), each));
        CHECK(rel_err(mine[static_cast<size_t>(r)], std::vector<float>(one.row(0).begin(), one.row(0).end())) <
              tolerance);
      }
    };
    const std::vector<std::int32_t> prompt = rnd.ints(kPrompt, m.vocab_size);
    std::vector<std::int32_t> shared;
    for (int r = 0; r < kRows; ++r) shared.insert(shared.end(), prompt.begin(), prompt.end());
    compare(rows.append(shared), shared, kPrompt);
    for (int n = 0; n < kSteps; ++n) {
      const std::vector<std::int32_t> step = rnd.ints(kRows, m.vocab_size);
      compare(rows.append(step), step, 1);
    }
    CHECK(rows.positions_computed() == static_cast<std::uint64_t>(m.seq_len) + kSteps);  // one window, then steps
  }
}

TEST_CASE_METHOD(Seeded, "the CUDA backend holds what the memory plan counts, and no step grows it", "[gpu][memory]") {
  INFO("seed " << seed);
  const ModelSpec m = small_model();
  const ModelDims d = ModelDims::from(m);
  const Batch b = random_batches(rnd, 1, m).front();
  for (const GpuMode& p : {kStrictFp32, kBf16, kBf16AtomicDq}) {
    INFO(p.name);
    cuda::CudaBackend gpu(0, p.precision, p.deterministic);
    Replica r(gpu, m);
    constexpr int kWorld = 1;
    float* scalars = gpu.alloc_floats(2 + kWorld + 2);  // the trainer's step scalars, then the norm's double

    const MemoryPlan plan = plan_memory(m, kBatch, kWorld, cuda_backend_memory(d, kBatch, p.precision, p.deterministic));
    INFO(plan.summary());
    CHECK(plan_memory(m, kBatch, kWorld, backend_memory(gpu, d, kBatch)).backend_bytes == plan.backend_bytes);
    const size_t element_bytes = (plan.floats + plan.ints) * 4 + plan.acts * dtype_bytes(plan.act_dtype);
    CHECK(gpu.allocated_bytes() == element_bytes);
    CHECK(gpu.own_bytes() == plan.backend_bytes);
    CHECK(gpu.allocated_bytes() + gpu.own_bytes() == plan.total_bytes());

    r.forward_backward(b.tokens, b.targets);
    r.update(1e-3f);
    gpu.synchronize();
    CHECK(gpu.allocated_bytes() == element_bytes);
    CHECK(gpu.own_bytes() == plan.backend_bytes);
    gpu.free(scalars);
  }
  // A GPT built for inference (the eval command) or decoding (generate) holds its plan.
  for (const ModelUse use : {ModelUse::kInference, ModelUse::kDecoding}) {
    for (const GpuMode& p : {kStrictFp32, kBf16}) {
      INFO(p.name << (use == ModelUse::kDecoding ? ", built for decoding" : ", built for inference"));
      cuda::CudaBackend gpu(0, p.precision, p.deterministic);
      GPT gpt(m, gpu, kBatch, use);
      const MemoryPlan plan =
          plan_inference_memory(m, kBatch, cuda_backend_memory(d, kBatch, p.precision, p.deterministic), use);
      INFO(plan.summary());
      const size_t element_bytes = (plan.floats + plan.ints) * 4 + plan.acts * dtype_bytes(plan.act_dtype);
      CHECK(gpu.allocated_bytes() == element_bytes);
      CHECK(gpu.own_bytes() == plan.backend_bytes);
      if (use == ModelUse::kDecoding) {
        gpt.forward_window(b.tokens.data(), kBatch, 3);
        gpt.forward_step(std::vector<std::int32_t>(kBatch, 1), 4);
      } else {
        gpt.forward(b.tokens.data(), b.targets.data(), kBatch);
      }
      gpu.synchronize();
      CHECK(gpu.allocated_bytes() == element_bytes);
      CHECK(gpu.own_bytes() == plan.backend_bytes);  // no operation of a forward grew the scratch
    }
  }
}
