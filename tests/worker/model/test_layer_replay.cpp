// Recorded layers (GPT::set_replay, what train.cuda_graph turns on) on the CPU, through
// tests/worker/wrapped_backend.hpp: a backend that records operations as closures and replays
// them, refusing host transfers and allocations while recording as the CUDA backend's stream
// capture does. What GPT must get right is the same on both: which work is recorded (a forward
// without targets included, with a head of its own, and a decoder's step whole), that the
// first run of each layer is eager, that replays reproduce eager work bit for bit, that gradient
// buckets still leave between the layers (NCCL's overlap), that a changed loss scale records
// again, and what a layer that cannot be recorded does. The CUDA graphs themselves are checked
// bitwise against eager work in tests/cuda/test_cuda_training.cpp ([gpu]); auto's rule and the
// spec key here too.
#include <catch2/catch.hpp>

#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "tests/worker/gpt_test_util.hpp"
#include "tests/worker/wrapped_backend.hpp"
#include "worker/train/adamw.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/model/cuda_graphs.hpp"
#include "worker/model/gpt.hpp"

using namespace xtrain;
using xtrain::test::model_spec;
using xtrain::test::random_tokens;
using xtrain::test::tiny_model;
using xtrain::test::WrappedBackend;
using Catch::Matchers::Contains;

namespace {

constexpr int kBatch = 2;

// A model with its optimizer over a watching backend, stepping as the trainer does.
struct Replica {
  explicit Replica(WrappedBackend::Options options, Precision precision = Precision::bf16)
      : cpu(precision), watched(cpu, std::move(options)), gpt(tiny_model(), watched, kBatch),
        adamw(watched, gpt.layout(), AdamWConfig{}) {
    gpt.init_weights(11);
  }
  // One step of `micro` micro-steps, each backward scaled by 1/micro; the buckets' layers, and
  // the replays done by the time each bucket left, are kept.
  double step(int index, int micro = 1) {
    gpt.zero_grads();
    double loss = 0.0;
    for (int i = 0; i < micro; ++i) {
      const size_t n = static_cast<size_t>(kBatch) * tiny_model().seq_len;
      const auto tokens = random_tokens(n, 50, 100u + 7u * static_cast<unsigned>(index) + static_cast<unsigned>(i));
      const auto targets = random_tokens(n, 50, 900u + 7u * static_cast<unsigned>(index) + static_cast<unsigned>(i));
      gpt.forward(tokens.data(), targets.data(), kBatch);
      bucket_replays.clear();
      gpt.backward(1.0f / static_cast<float>(micro), [&](Span) { bucket_replays.push_back(watched.replays()); });
      loss += gpt.take_loss();
    }
    adamw.step(gpt, 1e-2f, clip_scale(grad_norm(watched, gpt.grads(), gpt.layout().total()), 1.0));
    return loss;
  }
  std::vector<float> params() {
    std::vector<float> v(gpt.layout().total());
    watched.download(v.data(), gpt.params(), v.size());
    return v;
  }
  CpuBackend cpu;
  WrappedBackend watched;
  GPT gpt;
  AdamW adamw;
  std::vector<int> bucket_replays;
};

WrappedBackend::Options recording(std::string fail_at = "") {
  WrappedBackend::Options o;
  o.records = true;
  o.fail_recording_at = std::move(fail_at);
  return o;
}

}  // namespace

TEST_CASE("replayed layers train to bitwise the same parameters as eager work", "[replay]") {
  for (const Precision precision : {Precision::fp32, Precision::bf16}) {
    INFO(precision_name(precision));
    Replica eager(recording(), precision), replayed(recording(), precision);
    replayed.gpt.set_replay(GPT::Replay::kRequired);
    const int L = tiny_model().n_layer;
    const int per_pass = L + 2;  // the embeddings, every block, the head
    for (int s = 0; s < 4; ++s) {
      INFO("step " << s);
      CHECK(replayed.step(s) == eager.step(s));
      CHECK(replayed.params() == eager.params());
      // Step 0 runs every layer eagerly (warm-up); step 1 records each and replays it; then replays.
      CHECK(replayed.watched.replays() == (s == 0 ? 0 : s * 2 * per_pass));
    }
    CHECK(eager.watched.replays() == 0);
    CHECK(replayed.gpt.replay() == GPT::Replay::kRequired);

    // Sampling (no targets, a smaller batch) runs eagerly between the replays and changes nothing.
    const auto prompt = random_tokens(static_cast<size_t>(tiny_model().seq_len), 50, 5);
    const int before = replayed.watched.replays();
    replayed.gpt.forward(prompt.data(), nullptr, 1);
    CHECK(replayed.watched.replays() == before);
    CHECK(replayed.step(4) == eager.step(4));
    CHECK(replayed.params() == eager.params());
  }
}

TEST_CASE("a forward without targets at the full batch replays the same layers and a head of its own", "[replay]") {
  for (const Precision precision : {Precision::fp32, Precision::bf16}) {
    INFO(precision_name(precision));
    Replica eager(recording(), precision), replayed(recording(), precision);
    replayed.gpt.set_replay(GPT::Replay::kRequired);
    const int L = tiny_model().n_layer;
    const auto tokens = random_tokens(static_cast<size_t>(kBatch) * tiny_model().seq_len, 50, 3);
    const auto logits = [&](Replica& r) {  // (kBatch, T, Vp): what a decoder reads
      r.gpt.forward(tokens.data(), nullptr, kBatch);
      std::vector<float> out(tokens.size() * static_cast<size_t>(r.gpt.dims().Vp));
      r.watched.download(out.data(), r.gpt.logits(), out.size());
      return out;
    };
    for (int call = 0; call < 3; ++call) {
      INFO("call " << call);
      CHECK(logits(replayed) == logits(eager));
      CHECK(replayed.watched.replays() == call * (L + 2));  // warm-up, then recorded and replayed
    }
    // A training step after it replays the layers it shares (the embeddings and every block, not
    // the head, which computes the loss); its own head and backward warm up. Same bits throughout.
    CHECK(replayed.step(0) == eager.step(0));
    CHECK(replayed.watched.replays() == 2 * (L + 2) + (L + 1));
    CHECK(replayed.params() == eager.params());
    CHECK(logits(replayed) == logits(eager));  // the new weights, through the same recordings
    CHECK(replayed.watched.replays() == 3 * (L + 2) + (L + 1));
  }
}

TEST_CASE("a decoder's step is one recording, replayed at every position with eager work's bits", "[replay]") {
  for (const Precision precision : {Precision::fp32, Precision::bf16}) {
    INFO(precision_name(precision));
    Replica eager(recording(), precision), replayed(recording(), precision);
    replayed.gpt.set_replay(GPT::Replay::kRequired);
    const int T = tiny_model().seq_len;
    const auto tokens = random_tokens(static_cast<size_t>(T), 50, 4);
    const auto steps = [&](Replica& r) {  // a prompt of 3 tokens, then a step at every later position
      auto window = tokens;
      std::fill(window.begin() + 3, window.end(), 0);
      r.gpt.forward(window.data(), nullptr, 1);  // a smaller batch than kBatch: eager
      std::vector<float> out;
      for (int pos = 3; pos < T; ++pos) {
        r.gpt.forward_step(tokens[static_cast<size_t>(pos)], pos);
        std::vector<float> logits(static_cast<size_t>(r.gpt.dims().Vp));
        r.watched.download(logits.data(), r.gpt.step_logits(), logits.size());
        out.insert(out.end(), logits.begin(), logits.end());
      }
      return out;
    };
    CHECK(steps(replayed) == steps(eager));
    // The first step warms up, the second is recorded and replayed, and so is every one after it.
    CHECK(replayed.watched.replays() == T - 3 - 1);
    CHECK(steps(replayed) == steps(eager));
    CHECK(replayed.watched.replays() == 2 * (T - 3) - 1);
    // Training afterwards: the steps left nothing that its replays or its bits depend on.
    CHECK(replayed.step(0) == eager.step(0));
    CHECK(replayed.params() == eager.params());
  }

  Replica required(recording("attention_step"));
  required.gpt.set_replay(GPT::Replay::kRequired);
  required.gpt.forward_step(1, 0);  // warm-up: eager
  CHECK_THROWS_WITH(required.gpt.forward_step(2, 1), Contains("train.cuda_graph \"on\"") &&
                                                        Contains("decoder's step could not be recorded"));
}

TEST_CASE("with replayed layers each gradient bucket still leaves as soon as its layer is done", "[replay]") {
  Replica r(recording());
  r.gpt.set_replay(GPT::Replay::kPreferred);
  r.step(0);
  r.step(1);
  const int L = tiny_model().n_layer;
  const int before_backward = r.watched.replays();
  r.step(2);
  // Backward replays the head, then block L-1 .. 0, then the embeddings: block l's bucket goes out
  // after L - l + 1 of them, before the next layer's replay, so its all-reduce overlaps the rest.
  const int forward = L + 2;
  REQUIRE(r.bucket_replays.size() == static_cast<size_t>(L + 1));
  for (int j = 0; j < L; ++j) CHECK(r.bucket_replays[static_cast<size_t>(j)] - before_backward == forward + 1 + j + 1);
  CHECK(r.bucket_replays.back() - before_backward == forward + L + 2);
}

TEST_CASE("a new loss scale records backward again and keeps the bits of eager work", "[replay]") {
  Replica eager(recording()), replayed(recording());
  replayed.gpt.set_replay(GPT::Replay::kRequired);
  // 1 micro-step, then 2 (scale 1/2): the head's product folds the scale in, so it is new work.
  const int micro[] = {1, 1, 2, 2, 1};
  for (int s = 0; s < 5; ++s) {
    INFO("step " << s);
    CHECK(replayed.step(s, micro[s]) == eager.step(s, micro[s]));
    CHECK(replayed.params() == eager.params());
  }
  CHECK(replayed.watched.replays() > 0);
}

TEST_CASE("a layer that cannot be recorded: preferred falls back to eager work, required is an error",
          "[replay]") {
  Replica eager(recording());
  Replica preferred(recording("attention_backward"));
  preferred.gpt.set_replay(GPT::Replay::kPreferred);
  for (int s = 0; s < 3; ++s) {
    CHECK(preferred.step(s) == eager.step(s));
    CHECK(preferred.params() == eager.params());
  }
  CHECK(preferred.gpt.replay() == GPT::Replay::kOff);  // given up, with a warning, for the rest of the run

  Replica required(recording("attention_backward"));
  required.gpt.set_replay(GPT::Replay::kRequired);
  required.step(0);  // warm-up: eager
  CHECK_THROWS_WITH(required.step(1), Contains("train.cuda_graph \"on\"") && Contains("backward of layer 1") &&
                                          Contains("attention_backward cannot be recorded"));

  // The errors name the part: a block by its layer, or the head, or the embeddings.
  for (const auto& [op, part] : {std::pair{"softmax_cross_entropy", "forward of the head"},
                                 std::pair{"embedding_backward", "backward of the embeddings"}}) {
    Replica r(recording(op));
    r.gpt.set_replay(GPT::Replay::kRequired);
    r.step(0);
    CHECK_THROWS_WITH(r.step(1), Contains(part));
  }

  Replica plain(WrappedBackend::Options{});
  CHECK_THROWS_AS(plain.gpt.set_replay(GPT::Replay::kPreferred), std::invalid_argument);
}

TEST_CASE("train.cuda_graph: on is an error on CPU ranks, auto records where launches weigh", "[replay]") {
  TrainSpec train;
  ModelSpec small = model_spec(4, 4, 128, 128, 256);
  train.micro_batch_size = 8;

  train.cuda_graph = "on";
  CHECK_THROWS_AS(choose_cuda_graphs(train, small, "cpu", Precision::fp32), SpecError);
  try {
    choose_cuda_graphs(train, small, "cpu", Precision::fp32);
  } catch (const SpecError& e) {
    CHECK(e.path() == "train.cuda_graph");
  }
  const CudaGraphChoice on = choose_cuda_graphs(train, small, "cuda", Precision::bf16);
  CHECK(on.use);
  CHECK(on.required);

  train.cuda_graph = "auto";
  CHECK_FALSE(choose_cuda_graphs(train, small, "cpu", Precision::fp32).use);
  CHECK(choose_cuda_graphs(train, small, "cpu", Precision::fp32).why == "off (CPU ranks)");
  // A small model: microseconds of arithmetic per kernel, the host's launches dominate.
  const CudaGraphChoice small_auto = choose_cuda_graphs(train, small, "cuda", Precision::bf16);
  CHECK(small_auto.use);
  CHECK_FALSE(small_auto.required);
  CHECK(small_auto.host_ms >= kAutoShare * small_auto.device_ms);
  CHECK_THAT(small_auto.why, Contains("on (auto: ") && Contains("launches"));
  // GPT-2 124M at 16 x 1024 tokens: tens of milliseconds of products hide the launches.
  train.micro_batch_size = 16;
  const CudaGraphChoice big = choose_cuda_graphs(train, xtrain::test::gpt2_124m(), "cuda", Precision::bf16);
  CHECK_FALSE(big.use);
  CHECK(big.device_ms > 10.0);
  CHECK_THAT(big.why, Contains("off (auto: "));
  INFO(small_auto.why << "\n" << big.why);
  // Readable at both ends: a ratio, not a percentage in the millions; microseconds, not "0.00 ms".
  CHECK_THAT(small_auto.why, Contains(" times the ~") && Contains(" us its ") && Contains(" GFLOP take on the device"));
  CHECK_THAT(big.why, Contains("% of the ~") && Contains(" ms its 13.2 TFLOP take on the device at 495 TFLOP/s bf16"));

  train.cuda_graph = "off";
  CHECK_FALSE(choose_cuda_graphs(train, small, "cuda", Precision::bf16).use);
}
