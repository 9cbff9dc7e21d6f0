// GPT on the CPU backend at unit level: initialisation, the gradient-bucket order of backward,
// gradient accumulation through loss_scale, and a tiny model overfitting one batch.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "tests/worker/gpt_test_util.hpp"
#include "tests/worker/wrapped_backend.hpp"
#include "worker/train/adamw.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/model/gpt.hpp"
#include "worker/train/lr_schedule.hpp"

using namespace xtrain;
using xtrain::test::random_tokens;
using xtrain::test::tiny_model;

namespace {

std::vector<float> download(Backend& k, const float* p, size_t n) {
  std::vector<float> v(n);
  k.download(v.data(), p, n);
  return v;
}

// A schedule of `steps` steps: a warmup of `warmup` to `lr`, then a cosine decay to `min_lr`.
TrainSpec schedule(double lr, double min_lr, int warmup, int steps) {
  TrainSpec t;
  t.lr = lr;
  t.min_lr = min_lr;
  t.warmup_steps = warmup;
  t.steps = steps;
  return t;
}

}  // namespace

TEST_CASE("init_weights follows GPT-2's scheme and depends on the seed alone", "[model]") {
  CpuBackend k;
  const ModelSpec m = tiny_model();
  GPT a(m, k, 1), b(m, k, 2), c(m, k, 1);
  a.init_weights(7);
  b.init_weights(7);
  c.init_weights(8);
  const size_t P = a.layout().total();
  const auto pa = download(k, a.params(), P), pb = download(k, b.params(), P), pc = download(k, c.params(), P);
  CHECK(pa == pb);
  CHECK(pa != pc);
  const ModelDims& d = a.dims();
  for (const ParamTensor& t : a.layout().tensors()) {
    INFO(t.name);
    double sum = 0.0, sq = 0.0;
    const size_t n = t.offset == a.layout().wte() ? static_cast<size_t>(d.V) * d.C : t.count;
    for (size_t i = 0; i < n; ++i) {
      sum += pa[t.offset + i];
      sq += pa[t.offset + i] * pa[t.offset + i];
    }
    if (t.shape.size() == 2) {
      const double expected = t.name.ends_with("c_proj.weight") ? 0.02 / std::sqrt(2.0 * d.L) : 0.02;
      const double sd = std::sqrt(sq / n - (sum / n) * (sum / n));
      CHECK(std::abs(sd - expected) < 0.1 * expected);  // >= 1024 samples: within 10%
    } else {
      const float want = t.name.ends_with(".weight") ? 1.0f : 0.0f;
      for (size_t i = 0; i < t.count; ++i) REQUIRE(pa[t.offset + i] == want);
    }
  }
  for (size_t i = static_cast<size_t>(d.V) * d.C; i < static_cast<size_t>(d.Vp) * d.C; ++i) {
    REQUIRE(pa[a.layout().wte() + i] == 0.0f);  // padded vocabulary rows
  }
}

TEST_CASE("backward hands out each layer's span from the last layer down, then the embeddings", "[model]") {
  CpuBackend k;
  GPT gpt(tiny_model(), k, 2);
  gpt.init_weights(1);
  const size_t BT = 2 * static_cast<size_t>(gpt.dims().T);
  const auto tok = random_tokens(BT, gpt.dims().V, 1), tgt = random_tokens(BT, gpt.dims().V, 2);
  gpt.forward(tok.data(), tgt.data(), 2);
  std::vector<Span> spans;
  std::vector<std::vector<float>> at_ready;
  gpt.backward(1.0f, [&](Span s) {
    spans.push_back(s);
    at_ready.push_back(download(k, gpt.grads() + s.offset, s.count));
  });
  const int L = gpt.dims().L;
  REQUIRE(spans.size() == static_cast<size_t>(L) + 1);
  size_t covered = 0;
  for (int i = 0; i < L; ++i) {
    CHECK(spans[i].offset == gpt.layout().layer_span(L - 1 - i).offset);
    CHECK(spans[i].count == gpt.layout().layer_span(L - 1 - i).count);
    covered += spans[i].count;
  }
  CHECK(spans[L].offset == gpt.layout().embedding_span().offset);
  CHECK(spans[L].count == gpt.layout().embedding_span().count);
  covered += spans[L].count;
  CHECK(covered == gpt.layout().total());
  // A span is final when handed out: nothing later in backward changes it.
  for (size_t i = 0; i < spans.size(); ++i) {
    CHECK(download(k, gpt.grads() + spans[i].offset, spans[i].count) == at_ready[i]);
  }
}

TEST_CASE("two half-batches with loss_scale 1/2 accumulate the gradient of the full batch", "[model]") {
  CpuBackend k;
  GPT gpt(tiny_model(), k, 4);
  gpt.init_weights(3);
  const size_t half = 2 * static_cast<size_t>(gpt.dims().T);
  const auto tok = random_tokens(2 * half, gpt.dims().V, 3), tgt = random_tokens(2 * half, gpt.dims().V, 4);
  const size_t P = gpt.layout().total();

  gpt.zero_grads();
  gpt.forward(tok.data(), tgt.data(), 4);
  gpt.backward(1.0f);
  const double full_loss = gpt.take_loss();
  const auto full = download(k, gpt.grads(), P);

  gpt.zero_grads();
  for (int i = 0; i < 2; ++i) {
    gpt.forward(tok.data() + i * half, tgt.data() + i * half, 2);
    gpt.backward(0.5f);
  }
  const double accumulated_loss = gpt.take_loss();  // the mean over both halves
  const auto acc = download(k, gpt.grads(), P);
  CHECK(std::abs(accumulated_loss - full_loss) < 1e-6 * full_loss);
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < P; ++i) {
    num += (acc[i] - full[i]) * static_cast<double>(acc[i] - full[i]);
    den += full[i] * static_cast<double>(full[i]);
  }
  CHECK(std::sqrt(num / den) < 1e-5);  // float summation order only
}

TEST_CASE("forward and backward reject misuse", "[model]") {
  CpuBackend k;
  GPT gpt(tiny_model(), k, 2);
  const auto tok = random_tokens(3 * static_cast<size_t>(gpt.dims().T), gpt.dims().V, 5);
  CHECK_THROWS_AS(gpt.forward(tok.data(), nullptr, 3), std::invalid_argument);
  auto bad_tok = tok;
  bad_tok[5] = gpt.dims().V;  // a padded-vocabulary id is not a token
  CHECK_THROWS_AS(gpt.forward(bad_tok.data(), nullptr, 1), std::out_of_range);
  bad_tok[5] = -1;
  CHECK_THROWS_AS(gpt.forward(tok.data(), bad_tok.data(), 1), std::out_of_range);
  gpt.forward(tok.data(), nullptr, 1);
  CHECK_THROWS_AS(gpt.backward(1.0f), std::logic_error);
  CHECK_THROWS_AS(gpt.take_loss(), std::logic_error);
  ModelSpec bad = tiny_model();
  bad.n_head = 3;
  CHECK_THROWS_AS(GPT(bad, k, 1), std::invalid_argument);
}

TEST_CASE("a tiny model overfits one batch to near-zero loss", "[model][train]") {
  CpuBackend k;
  ModelSpec m = tiny_model();
  GPT gpt(m, k, 2);
  gpt.init_weights(11);
  TrainSpec t;
  t.steps = 150;
  t.lr = 1e-2;
  t.min_lr = 1e-3;
  t.warmup_steps = 10;
  t.weight_decay = 0.0;
  t.grad_clip = 1.0;
  AdamW adamw(k, gpt.layout(), AdamWConfig::from(t));
  const size_t BT = 2 * static_cast<size_t>(gpt.dims().T);
  const auto tok = random_tokens(BT, m.vocab_size, 6), tgt = random_tokens(BT, m.vocab_size, 7);
  float first = 0.0f, last = 0.0f;
  for (int s = 0; s < t.steps; ++s) {
    gpt.zero_grads();
    gpt.forward(tok.data(), tgt.data(), 2);
    gpt.backward(1.0f);
    last = static_cast<float>(gpt.take_loss());
    if (s == 0) first = last;
    const double norm = grad_norm(k, gpt.grads(), gpt.layout().total());
    adamw.step(gpt, static_cast<float>(learning_rate(t, s)), clip_scale(norm, t.grad_clip));
  }
  INFO("loss " << first << " -> " << last);
  CHECK(std::abs(first - std::log(static_cast<float>(m.vocab_size))) < 0.1f);  // uniform at init
  CHECK(last < 0.05f);
  CHECK(adamw.step_count() == t.steps);
}

TEST_CASE("the learning-rate schedule warms up linearly and decays to min_lr", "[model]") {
  TrainSpec t = schedule(1.0, 0.1, 4, 14);
  CHECK(learning_rate(t, 0) == Approx(0.25));
  CHECK(learning_rate(t, 3) == Approx(1.0));
  CHECK(learning_rate(t, 4) == Approx(1.0));
  CHECK(learning_rate(t, 9) == Approx(0.55));   // halfway through the decay
  CHECK(learning_rate(t, 14) == Approx(0.1));
  CHECK(learning_rate(t, 100) == Approx(0.1));
  t.warmup_steps = 0;
  CHECK(learning_rate(t, 0) == Approx(1.0));
}

TEST_CASE("a resume's schedule change names the first step whose learning rate moves", "[model]") {
  TrainSpec then = schedule(1.0, 0.1, 4, 14);
  TrainSpec now = then;
  SECTION("at once") {
    now.lr = 0.5;  // at step 11 (index 10, p = 0.6): 0.1 + 0.4 * (1 + cos(0.6 pi)) / 2, against 0.9's
    CHECK(schedule_change(then, now, 10) == "step 11 takes a learning rate of 0.238 (it was 0.411 on the old schedule)");
  }
  SECTION("while warming up, the rates part where the decays do") {
    now.steps = 28;  // step 6 (p = 1/24 against 1/10)
    CHECK(schedule_change(then, now, 2) ==
          "step 3 keeps its learning rate of 0.75; from step 6 on the rates change (0.996 there, 0.978 on the old "
          "schedule)");
  }
  SECTION("a warmup as long as the run: the decay's first step keeps the full rate") {
    then = schedule(0.001, 0.0001, 10, 10);
    now = then;
    now.steps = 20;
    CHECK(schedule_change(then, now, 10) == "step 11 keeps its learning rate of 0.001; from step 12 on the rates "
                                            "change (0.000978 there, 0.0001 on the old schedule)");
  }
  SECTION("a constant rate: nothing moves") {
    then.min_lr = then.lr;
    now = then;
    now.steps = 20;
    CHECK(schedule_change(then, now, 10) == "steps 11 to 20 keep the old schedule's learning rates (1 at step 11)");
    CHECK(schedule_change(then, now, 19) == "step 20, the last, keeps its learning rate of 1");
  }
  SECTION("a change below the three digits printed is none") {
    now.min_lr = 0.1001;  // step 14: 0.12210 against 0.12202
    CHECK(schedule_change(then, now, 13) == "step 14, the last, keeps its learning rate of 0.122");
    now.min_lr = 0.11;  // 0.1318
    CHECK(schedule_change(then, now, 13) == "step 14 takes a learning rate of 0.132 (it was 0.122 on the old schedule)");
  }
}

// A step reads its keys and values from the qkv rows that the forward before it left, so its
// logits are the forward's at that position on the same tokens. fp32: the same per-element math,
// sums in another order (a 1-row product, a direct softmax against the flash attention's online
// one): 1e-5 of max(1, the largest |logit|) (measured 6e-8). bf16 (the CPU's emulation): every
// stored activation rounds to bf16, and the forward rounds the attention's p to bf16 where the
// step does not, so an ulp-sized difference (2^-8) in a layer's output moves the logits by about
// such an ulp: 1e-2 (measured 2.0e-3).
TEST_CASE("a decoder's step gives the forward's logits at its position, from the forward's qkv rows", "[model]") {
  for (const Precision precision : {Precision::fp32, Precision::bf16}) {
    INFO(precision_name(precision));
    const double tolerance = precision == Precision::fp32 ? 1e-5 : 1e-2;
    CpuBackend k(precision);
    GPT gpt(tiny_model(), k, 2);
    gpt.init_weights(3);
    const ModelDims& d = gpt.dims();
    const auto tokens = random_tokens(static_cast<size_t>(d.T), d.V, 9);
    gpt.forward(tokens.data(), nullptr, 1);  // every position: what the steps are compared with
    std::vector<float> full(static_cast<size_t>(d.T) * d.Vp);
    k.download(full.data(), gpt.logits(), full.size());
    // A window of 5 tokens, filler after them (a decoder's prompt), then steps at 5, 6, ... T-1.
    auto window = tokens;
    std::fill(window.begin() + 5, window.end(), 0);
    gpt.forward(window.data(), nullptr, 1);
    const std::uint64_t forwards = gpt.forwards();
    for (int pos = 5; pos < d.T; ++pos) {
      INFO("position " << pos);
      gpt.forward_step(tokens[static_cast<size_t>(pos)], pos);
      std::vector<float> got(static_cast<size_t>(d.Vp));
      k.download(got.data(), gpt.step_logits(), got.size());
      double worst = 0.0, scale = 1.0;
      for (int v = 0; v < d.V; ++v) {
        const float want = full[static_cast<size_t>(pos) * d.Vp + static_cast<size_t>(v)];
        worst = std::max(worst, static_cast<double>(std::fabs(got[static_cast<size_t>(v)] - want)));
        scale = std::max(scale, static_cast<double>(std::fabs(want)));
      }
      CHECK(worst / scale < tolerance);
    }
    CHECK(gpt.forwards() == forwards + static_cast<std::uint64_t>(d.T - 5));

    CHECK_THROWS_AS(gpt.forward_step(d.V, 3), std::out_of_range);
    CHECK_THROWS_AS(gpt.forward_step(1, d.T), std::out_of_range);
    CHECK_THROWS_AS(gpt.forward_step(1, -1), std::out_of_range);
    // A step rewrote a row that backward would read: a forward with targets must come first.
    gpt.forward(tokens.data(), tokens.data(), 1);
    gpt.forward_step(1, 2);
    CHECK_THROWS_AS(gpt.backward(1.0f), std::logic_error);
  }
}

// A decoder's window runs forward()'s layers and the head on one position a sequence, each its
// own one-row product (sgemv on the CPU, where forward() multiplies all rows at once): the sums
// in another order only. fp32: 1e-5 of max(1, the largest |logit|); bf16 (the CPU's emulation):
// both round the same products to bf16, so an order-sized difference can cross one rounding
// boundary: 1e-2, about 2 ulps at the logits' scale.
TEST_CASE("a decoder's window gives forward()'s logits at its last position, for every sequence", "[model]") {
  for (const Precision precision : {Precision::fp32, Precision::bf16}) {
    INFO(precision_name(precision));
    const double tolerance = precision == Precision::fp32 ? 1e-5 : 1e-2;
    CpuBackend k(precision);
    GPT gpt(tiny_model(), k, 3, ModelUse::kInference);
    gpt.init_weights(5);
    const ModelDims& d = gpt.dims();
    const auto tokens = random_tokens(3 * static_cast<size_t>(d.T), d.V, 17);
    gpt.forward(tokens.data(), nullptr, 3);
    std::vector<float> full(3 * static_cast<size_t>(d.T) * d.Vp);
    k.download(full.data(), gpt.logits(), full.size());
    // The largest difference over the vocabulary of row `row` of step_logits() from forward()'s
    // logits of sequence b at `position`, relative to max(1, the largest |logit|).
    const auto relative_error = [&](int row, int b, int position) {
      std::vector<float> got(static_cast<size_t>(row + 1) * d.Vp);
      k.download(got.data(), gpt.step_logits(), got.size());
      double worst = 0.0, scale = 1.0;
      for (int v = 0; v < d.V; ++v) {
        const float want = full[(static_cast<size_t>(b) * d.T + position) * d.Vp + static_cast<size_t>(v)];
        worst = std::max(worst, static_cast<double>(std::fabs(got[static_cast<size_t>(row) * d.Vp + v] - want)));
        scale = std::max(scale, static_cast<double>(std::fabs(want)));
      }
      return worst / scale;
    };
    for (const int B : {2, 3}) {
      for (const int last : {0, 6, d.T - 1}) {
        INFO(B << " sequences, position " << last);
        const std::uint64_t forwards = gpt.forwards();
        gpt.forward_window(tokens.data(), B, last);
        CHECK(gpt.forwards() == forwards + 1);
        for (int b = 0; b < B; ++b) CHECK(relative_error(b, b, last) < tolerance);
      }
    }
    // Its steps read the window's qkv rows, as after forward() (the step's test's tolerance).
    gpt.forward_window(tokens.data(), 1, 6);
    gpt.forward_step(tokens[7], 7);
    CHECK(relative_error(0, 0, 7) < tolerance);
    CHECK_THROWS_AS(gpt.forward_window(tokens.data(), 4, 0), std::invalid_argument);
    CHECK_THROWS_AS(gpt.forward_window(tokens.data(), 1, d.T), std::out_of_range);
    CHECK_THROWS_AS(gpt.forward_window(tokens.data(), 1, -1), std::out_of_range);

    // A GPT built for decoding, without the logits of every position: the same window and step,
    // the same bits; forward() is refused.
    GPT decoding(tiny_model(), k, 3, ModelUse::kDecoding);
    decoding.init_weights(5);
    const auto window_and_step = [&](GPT& model) {
      model.forward_window(tokens.data(), 3, 9);
      std::vector<float> out(3 * static_cast<size_t>(d.Vp));
      k.download(out.data(), model.step_logits(), out.size());
      model.forward_step(std::vector<std::int32_t>(3, tokens[10]), 10);
      std::vector<float> step_out(out.size());
      k.download(step_out.data(), model.step_logits(), step_out.size());
      out.insert(out.end(), step_out.begin(), step_out.end());
      return out;
    };
    CHECK(window_and_step(decoding) == window_and_step(gpt));
    CHECK_THROWS_AS(decoding.forward(tokens.data(), nullptr, 1), std::logic_error);
  }
}

// A bf16 model built for inference keeps no fp32 weights: they are drawn or loaded a piece
// (HostAccess::kPiece floats) at a time, each rounded into the copy as it is stored, never as a
// host copy of the model. Its fc weight, 4 x 576 x 576 floats, crosses a piece boundary inside the
// tensor; the copy must be the training model's rounding of its fp32 weights, bit for bit.
TEST_CASE("a bf16 model without master weights loads a piece at a time, the training model's rounding", "[model]") {
  const ModelSpec spec = test::model_spec(1, 9, 576, 8, 256);
  CpuBackend k(Precision::bf16);
  GPT training(spec, k, 1);
  training.init_weights(3);
  test::WrappedBackend watched(k);
  GPT inference(spec, watched, 1, ModelUse::kInference);
  REQUIRE(inference.params() == nullptr);
  const int before = watched.calls("upload");
  inference.init_weights(3);
  const size_t total = training.layout().total();
  REQUIRE(4 * 576 * 576 > HostAccess::kPiece);
  // One upload per tensor, and one more for each piece boundary crossed inside a tensor.
  size_t pieces = 0;
  for (const ParamTensor& t : training.layout().tensors()) {
    pieces += (t.count + HostAccess::kPiece - 1) / HostAccess::kPiece;
  }
  CHECK(static_cast<size_t>(watched.calls("upload") - before) == pieces);
  CHECK(pieces > training.layout().tensors().size());
  std::vector<float> want(total), got(total);
  k.download(want.data(), training.weight_copy(), total);
  k.download(got.data(), inference.weight_copy(), total);
  CHECK(std::memcmp(want.data(), got.data(), total * sizeof(float)) == 0);
}

// A GPT built for inference runs the same operations on the same values as the training model,
// only in other memory (one layer's activations reused, no master in bf16, the weights uploaded
// straight into their copy with the same rounding): every logit, loss and step the same bits.
TEST_CASE("a GPT built for inference computes the training model's bits, and refuses backward", "[model]") {
  for (const Precision precision : {Precision::fp32, Precision::bf16}) {
    INFO(precision_name(precision));
    CpuBackend k(precision);
    GPT training(tiny_model(), k, 2);
    training.init_weights(11);
    GPT inference(tiny_model(), k, 2, ModelUse::kInference);
    inference.init_weights(11);
    CHECK(inference.use() == ModelUse::kInference);
    CHECK(inference.grads() == nullptr);
    CHECK((inference.params() == nullptr) == (precision == Precision::bf16));
    const ModelDims& d = training.dims();
    const size_t BT = 2 * static_cast<size_t>(d.T);
    const auto tokens = random_tokens(BT, d.V, 21);
    const auto targets = random_tokens(BT, d.V, 22);
    struct Outputs {
      std::vector<float> logits, steps;
      double loss = 0.0;
    };
    const auto run = [&](GPT& gpt) {
      Outputs o;
      gpt.forward(tokens.data(), targets.data(), 2);
      o.loss = gpt.take_loss();
      gpt.forward(tokens.data(), nullptr, 2);
      o.logits.resize(BT * static_cast<size_t>(d.Vp));
      k.download(o.logits.data(), gpt.logits(), o.logits.size());
      std::vector<float> row(static_cast<size_t>(d.Vp));
      for (int pos = 3; pos < 6; ++pos) {
        gpt.forward_step(tokens[static_cast<size_t>(pos)], pos);
        k.download(row.data(), gpt.step_logits(), row.size());
        o.steps.insert(o.steps.end(), row.begin(), row.end());
      }
      return o;
    };
    const Outputs want = run(training);
    const Outputs got = run(inference);
    CHECK(got.loss == want.loss);
    CHECK(got.logits == want.logits);
    CHECK(got.steps == want.steps);
    inference.forward(tokens.data(), targets.data(), 2);
    CHECK_THROWS_WITH(inference.backward(1.0f), Catch::Matchers::Contains("built for inference"));
    CHECK_THROWS_AS(inference.zero_grads(), std::logic_error);
  }
}
