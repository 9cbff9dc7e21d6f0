// The memory plan (worker/model/memory_plan.hpp) against what the worker really allocates, the fit
// check that refuses a model too big for the GPU, and GPT-2 124M's plan against its 40 GiB goal;
// the inference plan against what a GPT built for inference allocates, and GPT-2 XL's eval.
//
// The allocations are watched through tests/worker/wrapped_backend.hpp over the CPU backend:
// every alloc_* call counted by kind, in elements. In fp32 activations the whole Trainer is
// built (GPT, AdamW, the step's scalars); in bf16 activations (which the CPU stores as fp32, so
// the wrapper reports bf16 and no operation may run) GPT and AdamW alone.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "common/bad_input.hpp"
#include "common/number_format.hpp"
#include "tests/worker/gpt_test_util.hpp"
#include "tests/worker/wrapped_backend.hpp"
#include "worker/train/adamw.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/model/gpt.hpp"
#include "worker/model/memory_plan.hpp"
#include "worker/train/run_report.hpp"
#include "worker/train/trainer.hpp"

namespace fs = std::filesystem;
using namespace xtrain;
using xtrain::test::gpt2_124m;
using xtrain::test::model_spec;
using xtrain::test::WrappedBackend;
using Catch::Matchers::Contains;

namespace {

constexpr size_t kGiB = size_t{1} << 30;

// Every layer kind, several heads, a padded vocabulary (300 -> 384).
ModelSpec small_model() {
  return model_spec(3, 4, 64, 32, 300);
}

struct TextJob {
  TextJob() {
    dir = fs::temp_directory_path() /
          ("xtrain-memory-plan-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    fs::create_directories(dir);
    std::ofstream text(dir / "train.txt");
    for (int i = 0; i < 400; ++i) text << "line " << i << " of a small training text.\n";
    spec.name = "plan";
    spec.run_dir = (dir / "run").string();
    spec.model = small_model();
    spec.model.vocab_size = 256;  // byte-level data
    spec.data.train = (dir / "train.txt").string();
    spec.train.steps = 1;
    spec.train.batch_size = 6;
    spec.train.micro_batch_size = 3;
  }
  ~TextJob() { fs::remove_all(dir); }
  fs::path dir;
  JobSpec spec;
};

// Bytes of the plan's elements, kind by kind, as the items must add up to.
size_t element_bytes(const MemoryPlan& p) {
  return (p.floats + p.ints) * 4 + p.acts * dtype_bytes(p.act_dtype) + p.backend_bytes;
}

}  // namespace

TEST_CASE("the memory plan is what GPT, AdamW and the trainer allocate, element by element (fp32 activations)",
          "[memory]") {
  for (const Precision precision : {Precision::fp32, Precision::bf16}) {
    INFO(precision_name(precision));
    TextJob job;
    CpuBackend cpu(precision);
    WrappedBackend watched(cpu);
    RunReport report{0, "", "", ""};
    Trainer trainer(job.spec, job.spec.run_dir, 0, 1, watched, report);

    const ModelDims d = ModelDims::from(job.spec.model);
    const int B = job.spec.train.micro_batch_size;
    const MemoryPlan plan = plan_memory(job.spec.model, B, 1, backend_memory(watched, d, B));
    CHECK(plan.act_dtype == DType::f32);  // the CPU stores fp32, rounding where the GPU stores bf16
    CHECK(plan.complete);
    CHECK(watched.live().floats == plan.floats);
    CHECK(watched.live().acts == plan.acts);
    CHECK(watched.live().ints == plan.ints);
    CHECK(plan.backend_bytes == 0);
    // bf16 keeps the weights' copy: an item of its own.
    const bool copy = std::any_of(plan.items.begin(), plan.items.end(),
                                  [](const MemoryItem& i) { return i.name == "weights' copy"; });
    CHECK(copy == (precision == Precision::bf16));
    CHECK(plan.total_bytes() == element_bytes(plan));
  }
}

TEST_CASE("the memory plan is what GPT and AdamW allocate for a backend that stores bf16", "[memory]") {
  const ModelSpec m = small_model();
  const ModelDims d = ModelDims::from(m);
  constexpr int B = 4;
  CpuBackend cpu(Precision::bf16);
  WrappedBackend::Options bf16_storage;
  bf16_storage.reported = DType::bf16;
  WrappedBackend watched(cpu, bf16_storage);
  GPT gpt(m, watched, B);
  AdamW adamw(watched, gpt.layout(), AdamWConfig{});

  for (const int world : {1, 4}) {
    INFO("world " << world);
    const MemoryPlan plan = plan_memory(m, B, world, backend_memory(watched, d, B));
    CHECK(plan.act_dtype == DType::bf16);
    // The trainer adds its step's scalars: [loss, stop flag, each rank's busy time], then the
    // gradient norm's sum of squares (a double: two floats).
    CHECK(watched.live().floats + 2 + static_cast<size_t>(world) + 2 == plan.floats);
    CHECK(watched.live().acts == plan.acts);
    CHECK(watched.live().ints == plan.ints);
    CHECK(plan.total_bytes() == element_bytes(plan));
  }
  // The same model stored in fp32 needs more: every activation twice the bytes.
  const MemoryPlan bf16 = plan_memory(m, B, 1, cuda_backend_memory(d, B, Precision::bf16, true));
  const MemoryPlan fp32 = plan_memory(m, B, 1, cuda_backend_memory(d, B, Precision::fp32, true));
  CHECK(bf16.act_dtype == DType::bf16);
  CHECK(fp32.act_dtype == DType::f32);
  CHECK(fp32.acts + gpt.layout().total() == bf16.acts);  // bf16 adds the weights' copy
  CHECK(fp32.floats == bf16.floats);
  CHECK(bf16.total_bytes() < fp32.total_bytes());
  // train.deterministic false: the bf16 attention backward's fp32 dQ sum (B x T x C floats, after
  // D rounded up to 4 floats), shared by the layers; fp32 storage keeps its deterministic kernels.
  const MemoryPlan bf16_atomic = plan_memory(m, B, 1, cuda_backend_memory(d, B, Precision::bf16, false));
  const size_t rows = static_cast<size_t>(B) * d.NH * d.T;
  CHECK(bf16_atomic.floats == bf16.floats + (rows + 3) / 4 * 4 - rows + static_cast<size_t>(B) * d.T * d.C);
  CHECK(plan_memory(m, B, 1, cuda_backend_memory(d, B, Precision::fp32, false)).floats == fp32.floats);
}

TEST_CASE("GPT-2 124M at T 1024, 16 sequences per GPU, bf16, fits in 40 GiB", "[memory]") {
  const ModelSpec m = gpt2_124m();
  const ModelDims d = ModelDims::from(m);
  for (const int world : {1, 8}) {
    INFO("world " << world);
    const MemoryPlan plan = plan_memory(m, 16, world, cuda_backend_memory(d, 16, Precision::bf16, true));
    INFO(plan.summary());
    CHECK(plan.complete);
    CHECK(plan.total_bytes() == element_bytes(plan));
    CHECK(plan.total_bytes() + memory_headroom_bytes(world) < 40 * kGiB);
    // The shares that dominate, from their formulas: 4 fp32 copies of the parameters (weights,
    // gradients, m, v) plus the bf16 copy; (B*T, Vp) bf16 logits.
    const size_t P = ParamLayout(d).total();
    CHECK(plan.items.front().name == "parameters");
    CHECK(plan.items.front().bytes == P * 4);
    const size_t BT = 16 * 1024;
    CHECK(plan.acts * 2 > BT * static_cast<size_t>(d.Vp) * 2);
    CHECK_NOTHROW(check_memory_fit(m, 16, world, Precision::bf16, true, {"GPU 0 (40 GiB)", 40 * kGiB, 40 * kGiB}));
  }
}

TEST_CASE("a model that does not fit the GPU is refused with the field, the plan and the GPU's memory",
          "[memory]") {
  const ModelSpec m = gpt2_124m();
  const GpuMemory small_gpu{"GPU 0 (test card)", 6 * kGiB, 8 * kGiB};
  try {
    check_memory_fit(m, 16, 1, Precision::bf16, true, small_gpu);
    FAIL("no error");
  } catch (const SpecError& e) {
    const std::string what = e.what();
    CHECK(e.path() == "train.micro_batch_size");
    CHECK_THAT(what, Contains("16 sequences of 1024 tokens per micro-step do not fit GPU 0 (test card)"));
    CHECK_THAT(what, Contains("parameters 474."));  // MiB: 124.4M padded parameters in fp32
    CHECK_THAT(what, Contains("activations"));
    CHECK_THAT(what, Contains("6.00 GiB free of 8.00 GiB"));
    CHECK_THAT(what, Contains("sequences would fit"));
    CHECK(what.find('\n') == std::string::npos);  // one line
  }
  // The advice is the largest micro-batch that fits: it passes, one more does not.
  const ModelDims d = ModelDims::from(m);
  int largest = 0;
  for (int B = 1; B <= 16; ++B) {
    const MemoryPlan p = plan_memory(m, B, 1, cuda_backend_memory(d, B, Precision::bf16, true));
    if (p.total_bytes() + memory_headroom_bytes(1) <= small_gpu.free_bytes) largest = B;
  }
  REQUIRE(largest >= 1);
  REQUIRE(largest < 16);
  CHECK_NOTHROW(check_memory_fit(m, largest, 1, Precision::bf16, true, small_gpu));
  CHECK_THROWS_WITH(check_memory_fit(m, largest + 1, 1, Precision::bf16, true, small_gpu),
                    Contains("; " + std::to_string(largest) + " sequences would fit"));
  // Nothing fits: the error says what to shrink, and in fp32 that bf16 would help.
  CHECK_THROWS_WITH(check_memory_fit(m, 1, 1, Precision::fp32, true, {"GPU 0 (tiny)", kGiB / 2, kGiB}),
                    Contains("not even 1 sequence fits") && Contains("train.precision"));
  // Several ranks keep NCCL's buffers free too.
  CHECK(memory_headroom_bytes(8) > memory_headroom_bytes(1));
}

TEST_CASE("CPU ranks that do not fit the machine's memory together are refused with the plan and the ranks",
          "[memory]") {
  const ModelSpec m = gpt2_124m();
  const ModelDims d = ModelDims::from(m);
  const auto total = [&](int B, int world) {
    return plan_memory(m, B, world, cpu_backend_memory(d, B, Precision::fp32)).total_bytes();
  };
  const auto peak = [&](int B) { return total(B, 4); };
  // Four ranks of 8 sequences: room for exactly that passes, a byte less does not.
  CHECK_NOTHROW(check_host_memory_fit(m, 8, 4, 4, Precision::fp32, 4 * peak(8)));
  try {
    check_host_memory_fit(m, 8, 4, 4, Precision::fp32, 4 * peak(8) - 1);
    FAIL("no error");
  } catch (const SpecError& e) {
    const std::string what = e.what();
    CHECK(e.path() == "train.micro_batch_size");
    CHECK_THAT(what, Contains("8 sequences of 1024 tokens per micro-step do not fit this machine's memory"));
    CHECK_THAT(what, Contains("needs 4 CPU ranks x " + format_bytes(peak(8))));
    CHECK_THAT(what, Contains("parameters 474."));
    CHECK_THAT(what, Contains("the processes here may use " + format_bytes(4 * peak(8) - 1)));
    CHECK_THAT(what, Contains("; 7 sequences would fit (4 CPU ranks x " + format_bytes(peak(7)) + ")"));
    CHECK(what.find('\n') == std::string::npos);  // one line
  }
  // One rank says no "ranks"; a machine too small for even one sequence says what to change.
  CHECK_THROWS_WITH(check_host_memory_fit(m, 2, 1, 1, Precision::fp32, peak(1) / 2),
                    Contains("needs " + format_bytes(total(2, 1)) + " (") &&
                        Contains("not even 1 sequence fits") && Contains("train.precision"));
}

TEST_CASE("the plan's summary names every part with its units", "[memory]") {
  const ModelSpec m = gpt2_124m();
  const MemoryPlan plan = plan_memory(m, 16, 2, cuda_backend_memory(ModelDims::from(m), 16, Precision::bf16, true));
  const std::string s = plan.summary();
  for (const char* part : {"memory plan (cuda, bf16 activations): ", "parameters: ", "weights' copy: ", "gradients: ",
                           "AdamW moments: ", "activations: ", "logits: ", "backward scratch: ", "backend buffers: ",
                           "GiB"}) {
    CHECK_THAT(s, Contains(part));
  }
  const nlohmann::json j = plan.to_json();
  CHECK(j["total_bytes"] == plan.total_bytes());
  CHECK(j["items"].size() == plan.items.size());
  CHECK_FALSE(j.contains("startup_bytes"));  // the replica checks compare CRCs: no copy of the weights
  CHECK(j["activation_dtype"] == "bf16");
  CHECK(format_bytes(96) == "96 B");
  CHECK(format_bytes(12 * 1024) == "12.0 KiB");
  CHECK(format_bytes(3 * kGiB / 2) == "1.50 GiB");
}

TEST_CASE("the inference and decoding plans are what a GPT built for them allocates, element by element",
          "[memory]") {
  const ModelSpec m = small_model();
  const ModelDims d = ModelDims::from(m);
  constexpr int B = 3;
  struct Storage {
    Precision precision;
    DType reported;  // bf16: the wrapper reports bf16 storage, and no operation may run
  };
  for (const ModelUse use : {ModelUse::kInference, ModelUse::kDecoding}) {
    for (const Storage s : {Storage{Precision::fp32, DType::f32}, Storage{Precision::bf16, DType::f32},
                            Storage{Precision::bf16, DType::bf16}}) {
      const bool decoding = use == ModelUse::kDecoding;
      INFO((decoding ? "decoding, " : "inference, ") << precision_name(s.precision) << " stored as "
                                                       << dtype_name(s.reported));
      CpuBackend cpu(s.precision);
      WrappedBackend::Options storage;
      storage.reported = s.reported;
      WrappedBackend watched(cpu, storage);
      GPT gpt(m, watched, B, use);
      const MemoryPlan plan = plan_inference_memory(m, B, backend_memory(watched, d, B), use);
      INFO(plan.summary());
      CHECK(watched.live().floats == plan.floats);
      CHECK(watched.live().acts == plan.acts);
      CHECK(watched.live().ints == plan.ints);
      CHECK(plan.total_bytes() == element_bytes(plan));
      CHECK(plan.items.front().name == "weights");
      CHECK(plan.items.front().bytes == gpt.layout().total() * (s.precision == Precision::bf16 ? dtype_bytes(s.reported) : 4));
      if (s.reported == DType::f32) {  // a forward (a decoder's window and step) allocates nothing more
        const auto tokens = xtrain::test::random_tokens(static_cast<size_t>(B) * d.T, m.vocab_size, 4);
        if (decoding) {
          gpt.forward_window(tokens.data(), B, 5);
          gpt.forward_step(std::vector<std::int32_t>(B, 1), 6);
        } else {
          gpt.forward(tokens.data(), tokens.data(), B);
        }
        CHECK(watched.live().floats == plan.floats);
        CHECK(watched.live().acts == plan.acts);
        CHECK(watched.live().ints == plan.ints);
      }
    }
  }
  // Decoding keeps a step's rows where inference keeps the logits of B x T positions.
  const BackendMemory gpu = cuda_backend_memory(d, B, Precision::bf16, true);
  const MemoryPlan inference = plan_inference_memory(m, B, gpu);
  const MemoryPlan decoding = plan_inference_memory(m, B, gpu, ModelUse::kDecoding);
  INFO(inference.summary() << "\n" << decoding.summary());
  REQUIRE(decoding.items[3].name == "decoder rows");
  CHECK(inference.total_bytes() - decoding.total_bytes() + decoding.items[3].bytes >=
        static_cast<size_t>(B) * d.T * d.Vp * 2);
  CHECK_THROWS_AS(plan_inference_memory(m, B, gpu, ModelUse::kTraining), std::invalid_argument);
}

// What the eval command holds for GPT-2 XL (4 windows of 1024 per forward, bf16, on a GPU): the
// inference plan (5.27 GiB: bf16 weights 2.90, KV cache 1.76, the logits 0.38, one layer 0.20)
// against a GPT built for training (the trainer's plan less AdamW's moments), which eval and
// generate held before (24.48 GiB).
TEST_CASE("GPT-2 XL's eval fits in under a quarter of the training model's memory", "[memory]") {
  const ModelSpec xl = model_spec(48, 25, 1600, 1024, 50257);
  const ModelDims d = ModelDims::from(xl);
  const BackendMemory gpu = cuda_backend_memory(d, 4, Precision::bf16, true);
  const MemoryPlan inference = plan_inference_memory(xl, 4, gpu);
  const MemoryPlan training = plan_memory(xl, 4, 1, gpu);
  INFO(inference.summary() << "\n" << training.summary());
  size_t moments = 0;
  for (const MemoryItem& i : training.items) moments += i.name == "AdamW moments" ? i.bytes : 0;
  CHECK(moments > 0);
  CHECK(inference.total_bytes() < (training.total_bytes() - moments) / 4);
  // The two largest items, from their formulas: the bf16 weights and L x (4 x 1024, 3C) of bf16.
  CHECK(inference.items[0].bytes == ParamLayout(d).total() * 2);
  CHECK(inference.items[1].name == "KV cache");
  CHECK(inference.items[1].bytes == size_t{48} * 4 * 1024 * 3 * 1600 * 2);
}

TEST_CASE("a command's model on the CPU runs as many sequences at once as this process's memory takes, or is refused",
          "[memory]") {
  const ModelSpec m = gpt2_124m();
  const ModelDims d = ModelDims::from(m);
  const size_t weights = ParamLayout(d).total() * sizeof(float);
  const auto plan = [&](int B, Precision precision) {
    return plan_inference_memory(m, B, cpu_backend_memory(d, B, precision)).total_bytes();
  };
  // The weights are read into the backend's memory (fp32 in place, bf16 a piece at a time into
  // its copy): the plan alone counts, no headroom (as training's CPU check).
  for (const Precision precision : {Precision::fp32, Precision::bf16}) {
    INFO(precision_name(precision));
    const size_t two = plan(2, precision);
    CHECK(plan(1, precision) > weights);  // the CPU keeps bf16 values in floats
    CHECK(fit_host_inference_batch(m, 4, 1, precision, two) == 2);
    CHECK(fit_host_inference_batch(m, 4, 1, precision, two - 1) == 1);
    CHECK(fit_host_inference_batch(m, 4, 1, precision, 64 * kGiB) == 4);
    CHECK(fit_host_inference_batch(m, 4, 2, precision, two) == 2);
  }
  try {
    fit_host_inference_batch(m, 4, 3, Precision::bf16, plan(3, Precision::bf16) - 1);
    FAIL("no error");
  } catch (const BadInput& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Matchers::StartsWith("--device: the memory this process may use (the machine's, or its "
                                                 "cgroup's limit) is " +
                                                 format_bytes(plan(3, Precision::bf16) - 1) + ", and "));
    CHECK_THAT(what, Contains("the model (12 x 768, vocabulary 50257) in bf16 needs " +
                              format_bytes(plan(3, Precision::bf16)) +
                              " for 3 sequences of 1024 tokens at once on the CPU (weights "));
    CHECK_THAT(what, Contains("): run it on a GPU (--device cuda) or a machine with more memory"));
    CHECK(what.find('\n') == std::string::npos);
  }
  CHECK_THROWS_WITH(fit_host_inference_batch(m, 4, 1, Precision::fp32, weights),
                    Contains("fp32 needs " + format_bytes(plan(1, Precision::fp32)) + " for 1 sequence of 1024"));
}

TEST_CASE("a command's model on a GPU runs as many sequences at once as its free memory takes, or is refused",
          "[memory]") {
  const ModelSpec m = gpt2_124m();
  const ModelDims d = ModelDims::from(m);
  const size_t headroom = memory_headroom_bytes(1);
  const auto need = [&](int B, Precision precision) {
    return plan_inference_memory(m, B, cuda_backend_memory(d, B, precision, true)).total_bytes() + headroom;
  };
  const GpuMemory two{"GPU 0 (test card)", need(2, Precision::bf16), 8 * kGiB};  // exactly two sequences' worth
  CHECK(fit_inference_batch(m, 4, 1, Precision::bf16, true, two) == 2);
  CHECK(fit_inference_batch(m, 1, 1, Precision::bf16, true, two) == 1);
  CHECK(fit_inference_batch(m, 4, 2, Precision::bf16, true, two) == 2);
  try {
    fit_inference_batch(m, 4, 3, Precision::bf16, true, two);
    FAIL("no error");
  } catch (const BadInput& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Matchers::StartsWith("--device: GPU 0 (test card) has "));
    CHECK_THAT(what, Contains("the model (12 x 768, vocabulary 50257) in bf16 needs " +
                              format_bytes(need(3, Precision::bf16) - headroom) + " for 3 sequences of 1024 tokens at once (weights "));
    CHECK_THAT(what, Contains("KV cache") && Contains("+ 256.0 MiB headroom: run it on the CPU (--device cpu)"));
    CHECK(what.find("--precision") == std::string::npos);  // bf16 already
    CHECK(what.find('\n') == std::string::npos);
  }
  // fp32 needs more (its weights in fp32) and the error says bf16 would need less.
  CHECK(need(1, Precision::fp32) > need(1, Precision::bf16));
  const GpuMemory one_bf16{"GPU 0 (test card)", need(1, Precision::bf16), 8 * kGiB};
  CHECK(fit_inference_batch(m, 4, 1, Precision::bf16, true, one_bf16) == 1);
  CHECK_THROWS_WITH(fit_inference_batch(m, 4, 1, Precision::fp32, true, one_bf16),
                    Contains("for 1 sequence of 1024") && Contains("or in bf16 (--precision bf16)"));
}
