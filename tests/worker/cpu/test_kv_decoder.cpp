// The KV-cached decoder against the model's full-window forward (GPT on the CPU backend, fp32) on
// the same weights and tokens: the logits of every position, one token at a time and after a
// prompt; the work it saves (one position per token) and the slide past the context. And the
// GPT decoder (worker/model/gpt_decoder.hpp, GPT's forward and steps on any backend, what runs on
// a GPU): the same window as the KV decoder's through prompts and slides, the same logits, one
// position of work per token, and a forward of the window again when other work ran on the model;
// with several rows (samples side by side), each row the logits of a one-row decoder on its tokens
// (the KV decoder's rows bit for bit, on any number of threads); a prompt every row shares runs
// once and is copied to the others, which then part as one-row decoders would.
// And what both return (StepLogits): fp32 rows read in place, bf16 rows the floats of their bits,
// converted a row at a time on whichever threads ask.
//
// Tolerance: both are fp32 with the same per-element math; they differ in summation order only
// (sgemv against sgemm, a direct softmax against flash attention's online one, expf against
// exp_fast in attention). Measured: at most 3.3e-7 of the largest logit here; the check is 2e-5
// of max(1, the largest |logit|), a hundred times below the gap that would change a sampled token
// in practice and far above fp32 rounding noise.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/worker/gpt_test_util.hpp"
#include "tests/worker/wrapped_backend.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/cpu/kv_decoder.hpp"
#include "worker/math/bf16.hpp"
#include "worker/model/gpt.hpp"
#include "worker/model/gpt_decoder.hpp"

using namespace xtrain;

namespace {

struct Model {
  ModelSpec spec = test::model_spec(2, 4, 32, 16, 70);
  CpuBackend backend{Precision::fp32};
  GPT gpt{spec, backend, 1};
  std::vector<float> params;

  Model() {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 0.2f);
    params.resize(gpt.layout().total());
    for (auto& x : params) x = normal(rng);
    const ModelDims& d = gpt.dims();
    std::fill(params.begin() + static_cast<long>(gpt.layout().wte() + static_cast<size_t>(d.V) * d.C),
              params.begin() + static_cast<long>(gpt.layout().wte() + static_cast<size_t>(d.Vp) * d.C), 0.0f);
    gpt.set_params(params.data());
  }

  // The full forward's logits (T, Vp) of `tokens` (at most T; the rest of the window is filler,
  // which a causal model never lets the earlier positions see).
  std::vector<float> full_logits(std::vector<int32_t> tokens) {
    const ModelDims& d = gpt.dims();
    tokens.resize(static_cast<size_t>(d.T), 0);
    gpt.forward(tokens.data(), nullptr, 1);
    std::vector<float> out(static_cast<size_t>(d.T) * d.Vp);
    backend.download(out.data(), gpt.logits(), out.size());
    return out;
  }
};

// Largest |a - b| over the V real logits, relative to max(1, max |b|).
double relative_error(std::span<const float> a, const float* b, int V) {
  double diff = 0.0, scale = 1.0;
  for (int j = 0; j < V; ++j) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[static_cast<size_t>(j)] - b[j])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[j])));
  }
  return diff / scale;
}

constexpr double kTolerance = 2e-5;

}  // namespace

TEST_CASE("KV-cached logits equal the full-window forward's, token by token and after a prompt", "[kv]") {
  Model m;
  const ModelDims& d = m.gpt.dims();
  const std::vector<int32_t> tokens = test::random_tokens(static_cast<size_t>(d.T), d.V, 5);
  const std::vector<float> full = m.full_logits(tokens);

  for (const int prompt : {1, 5, d.T}) {
    KvDecoder decoder(m.gpt.layout(), m.params);
    std::span<const float> logits = decoder.append(std::span(tokens).first(static_cast<size_t>(prompt))).row(0);
    CHECK(relative_error(logits, full.data() + static_cast<size_t>(prompt - 1) * d.Vp, d.V) < kTolerance);
    for (int p = prompt; p < d.T; ++p) {
      logits = decoder.append(std::span(tokens).subspan(static_cast<size_t>(p), 1)).row(0);
      INFO("prompt " << prompt << ", position " << p);
      CHECK(relative_error(logits, full.data() + static_cast<size_t>(p) * d.Vp, d.V) < kTolerance);
    }
    // The cache is what made this cheap: one position per token, the prompt once.
    CHECK(decoder.positions_computed() == static_cast<uint64_t>(d.T));
    CHECK(decoder.position() == d.T);
  }
}

TEST_CASE("Past the context the decoder keeps the newest half of the window and runs it again", "[kv]") {
  Model m;
  const ModelDims& d = m.gpt.dims();
  const std::vector<int32_t> tokens = test::random_tokens(static_cast<size_t>(d.T) + 3, d.V, 8);
  KvDecoder decoder(m.gpt.layout(), m.params);
  decoder.append(std::span(tokens).first(static_cast<size_t>(d.T)));
  const std::span<const float> logits = decoder.append(std::span(tokens).subspan(static_cast<size_t>(d.T), 1)).row(0);

  const std::vector<int32_t> kept(tokens.begin() + d.T / 2, tokens.begin() + d.T + 1);
  CHECK(decoder.window() == kept);
  CHECK(decoder.positions_computed() == static_cast<uint64_t>(d.T + d.T / 2 + 1));
  const std::vector<float> full = m.full_logits(kept);
  CHECK(relative_error(logits, full.data() + (kept.size() - 1) * static_cast<size_t>(d.Vp), d.V) < kTolerance);

  // And from there one position per token again.
  decoder.append(std::span(tokens).subspan(static_cast<size_t>(d.T) + 1, 1));
  CHECK(decoder.positions_computed() == static_cast<uint64_t>(d.T + d.T / 2 + 2));
}

TEST_CASE("The decoder gives the same logits, bit for bit, on any number of threads", "[kv]") {
  Model m;  // 4 heads and products of 70-128 rows: 3 and 5 threads split them unevenly
  const ModelDims& d = m.gpt.dims();
  const std::vector<int32_t> tokens = test::random_tokens(static_cast<size_t>(d.T) + 4, d.V, 9);
  const auto run = [&](int threads) {
    KvDecoder decoder(m.gpt.layout(), m.params, threads);
    REQUIRE(decoder.threads() == threads);
    std::vector<float> all;
    const auto keep = [&](const StepLogits& logits) {
      const std::span<const float> row = logits.row(0);
      all.insert(all.end(), row.begin(), row.end());
    };
    keep(decoder.append(std::span(tokens).first(5)));  // a prompt
    for (size_t p = 5; p < tokens.size(); ++p) keep(decoder.append(std::span(tokens).subspan(p, 1)));  // and a slide
    return all;
  };
  const std::vector<float> one = run(1);
  for (const int threads : {2, 3, 5}) {
    INFO(threads << " threads");
    const std::vector<float> many = run(threads);
    REQUIRE(many.size() == one.size());
    CHECK(std::memcmp(many.data(), one.data(), one.size() * sizeof(float)) == 0);
  }
  CHECK_THROWS_AS(KvDecoder(m.gpt.layout(), m.params, 0), std::invalid_argument);
}

TEST_CASE("The decoder's rows side by side are one-row decoders' logits, bit for bit, on any threads", "[kv]") {
  Model m;
  const ModelDims& d = m.gpt.dims();
  constexpr int kRows = 3;
  std::vector<std::vector<int32_t>> streams;
  for (int r = 0; r < kRows; ++r) {
    streams.push_back(test::random_tokens(3 * static_cast<size_t>(d.T), d.V, 40 + static_cast<unsigned>(r)));
  }
  // A prompt, steps, several tokens at once, steps past a slide, a prompt that slides at once.
  const std::vector<std::pair<size_t, size_t>> calls = {{0, 5}, {5, 1}, {6, 1}, {7, 4}, {11, 1}, {12, 1},
                                                        {13, 1}, {14, 1}, {15, 1}, {16, 1}, {17, 12}, {29, 1}};
  const auto piece_of = [&](const std::vector<int>& rows, size_t from, size_t count) {
    std::vector<int32_t> piece;
    for (const int r : rows) {
      const std::vector<int32_t>& s = streams[static_cast<size_t>(r)];
      piece.insert(piece.end(), s.begin() + static_cast<long>(from), s.begin() + static_cast<long>(from + count));
    }
    return piece;
  };
  for (const int threads : {1, 2, 3}) {
    INFO(threads << " threads");
    KvDecoder side_by_side(m.gpt.layout(), m.params, threads, kRows);
    std::vector<std::unique_ptr<KvDecoder>> singles;
    for (int r = 0; r < kRows; ++r) singles.push_back(std::make_unique<KvDecoder>(m.gpt.layout(), m.params));
    for (const auto& [from, count] : calls) {
      const StepLogits got = side_by_side.append(piece_of({0, 1, 2}, from, count));
      REQUIRE(got.rows() == kRows);
      for (int r = 0; r < kRows; ++r) {
        INFO("tokens [" << from << ", " << from + count << ") of row " << r);
        const std::span<const float> want = singles[static_cast<size_t>(r)]->append(piece_of({r}, from, count)).row(0);
        REQUIRE(side_by_side.window(r) == singles[static_cast<size_t>(r)]->window());
        CHECK(std::memcmp(got.row(r).data(), want.data(), want.size_bytes()) == 0);
      }
    }
    CHECK(side_by_side.position() < d.T);  // the calls slid
    // Rows with the same window (a prompt given to every sample, then the same tokens) run once
    // and are copied; rows that part run each their own, from the copied caches.
    side_by_side.reset();
    for (const auto& s : singles) s->reset();
    for (const auto& [from, count, same] : {std::tuple{size_t{0}, size_t{5}, true}, {5, 1, true}, {6, 2, false},
                                           {8, 1, false}, {9, 1, true}}) {
      const std::vector<int32_t> piece = same ? piece_of({0, 0, 0}, from, count) : piece_of({0, 1, 2}, from, count);
      const StepLogits got = side_by_side.append(piece);
      for (int r = 0; r < kRows; ++r) {
        INFO("tokens [" << from << ", " << from + count << ") of row " << r << (same ? ", every row's the same" : ""));
        const auto mine = std::span(piece).subspan(static_cast<size_t>(r) * count, count);
        const std::span<const float> want = singles[static_cast<size_t>(r)]->append(mine).row(0);
        CHECK(std::memcmp(got.row(r).data(), want.data(), want.size_bytes()) == 0);
      }
    }
    // Fewer rows from then on, each window empty: a fresh row 1 is the fresh single decoder's.
    side_by_side.set_rows(2);
    CHECK(side_by_side.rows() == 2);
    CHECK(side_by_side.position() == 0);
    KvDecoder fresh(m.gpt.layout(), m.params);
    const StepLogits two = side_by_side.append(piece_of({2, 1}, 0, 6));
    const std::span<const float> want = fresh.append(piece_of({1}, 0, 6)).row(0);
    CHECK(std::memcmp(two.row(1).data(), want.data(), want.size_bytes()) == 0);
    CHECK_THROWS_AS(side_by_side.set_rows(kRows + 1), std::invalid_argument);
    CHECK_THROWS_AS(side_by_side.set_rows(0), std::invalid_argument);
  }
  CHECK_THROWS_AS(KvDecoder(m.gpt.layout(), m.params, 1, 0), std::invalid_argument);
}

TEST_CASE("The decoder refuses ids outside the vocabulary and more tokens than the context", "[kv]") {
  Model m;
  const ModelDims& d = m.gpt.dims();
  KvDecoder decoder(m.gpt.layout(), m.params);
  const std::vector<int32_t> bad = {1, d.V};
  CHECK_THROWS_AS(decoder.append(bad), std::out_of_range);
  CHECK_THROWS_AS(decoder.append(std::vector<int32_t>(static_cast<size_t>(d.T) + 1, 0)), std::length_error);
  CHECK_THROWS_AS(decoder.append(std::span<const int32_t>()), std::out_of_range);
  CHECK(decoder.position() == 0);
}

TEST_CASE("The GPT decoder keeps the KV decoder's window through prompts and slides, and its logits", "[kv]") {
  Model m;
  const ModelDims& d = m.gpt.dims();
  const std::vector<int32_t> tokens = test::random_tokens(3 * static_cast<size_t>(d.T), d.V, 13);
  KvDecoder kv(m.gpt.layout(), m.params);
  GptDecoder window(m.gpt);
  // A prompt, single tokens past two slides, a prompt that slides at once, a reset and a full window.
  const std::vector<std::pair<size_t, size_t>> calls = {{0, 5},  {5, 1},  {6, 1},  {7, 9},  {16, 1}, {17, 1},
                                                        {18, 7}, {25, 1}, {26, 1}, {27, 14}, {41, 1}};
  // A single token after the decoder's own last call, its window grown by one, is a step of one
  // position; anything else (a prompt, a slide, several tokens) a forward of T positions.
  std::uint64_t positions = 0;
  int steps = 0;
  for (const auto& [from, count] : calls) {
    const auto piece = std::span(tokens).subspan(from, count);
    const std::span<const float> want = kv.append(piece).row(0);
    const int before = window.position();
    const StepLogits got = window.append(piece);
    const bool step = count == 1 && before > 0 && window.position() == before + 1;
    positions += step ? 1 : static_cast<std::uint64_t>(d.T);
    steps += step ? 1 : 0;
    INFO("tokens [" << from << ", " << from + count << ")");
    REQUIRE(window.window() == kv.window());
    REQUIRE(got.rows() == 1);
    REQUIRE(got.row(0).size() == static_cast<size_t>(d.V));
    CHECK(relative_error(got.row(0), want.data(), d.V) < kTolerance);
    CHECK(window.positions_computed() == positions);
  }
  CHECK(steps >= 4);  // the single tokens that did not slide
  CHECK(kv.window().size() < static_cast<size_t>(d.T));  // the calls slid

  // Other work on the model overwrites the rows the steps read: the next token runs the window again.
  m.full_logits(test::random_tokens(static_cast<size_t>(d.T), d.V, 14));
  const auto next = std::span(tokens).subspan(42, 1);
  const std::span<const float> want_after = kv.append(next).row(0);
  CHECK(relative_error(window.append(next).row(0), want_after.data(), d.V) < kTolerance);
  CHECK(window.positions_computed() == positions + static_cast<std::uint64_t>(d.T));
  kv.reset();
  window.reset();
  const auto full = std::span(tokens).first(static_cast<size_t>(d.T));
  const std::span<const float> want = kv.append(full).row(0);
  CHECK(relative_error(window.append(full).row(0), want.data(), d.V) < kTolerance);
  CHECK(window.position() == d.T);

  // The window's own checks are the KV decoder's: nothing appended on a refusal.
  const std::vector<int32_t> bad = {1, d.V};
  CHECK_THROWS_AS(window.append(bad), std::out_of_range);
  CHECK_THROWS_AS(window.append(std::span<const int32_t>()), std::out_of_range);
  CHECK_THROWS_AS(window.append(std::vector<int32_t>(static_cast<size_t>(d.T) + 1, 0)), std::length_error);
  CHECK(window.position() == d.T);
}

TEST_CASE("The GPT decoder's rows are sequences side by side, each a KV decoder's logits on its tokens", "[kv]") {
  Model m;
  const ModelDims& d = m.gpt.dims();
  constexpr int kRows = 3;
  GPT wide(m.spec, m.backend, kRows, ModelUse::kInference);
  wide.set_params(m.params.data());
  GptDecoder rows(wide, kRows);
  std::vector<std::unique_ptr<KvDecoder>> singles;
  std::vector<std::vector<int32_t>> streams;
  for (int r = 0; r < kRows; ++r) {
    singles.push_back(std::make_unique<KvDecoder>(m.gpt.layout(), m.params));
    streams.push_back(test::random_tokens(3 * static_cast<size_t>(d.T), d.V, 20 + static_cast<unsigned>(r)));
  }
  // A prompt, steps, several tokens at once, steps past a slide, a prompt that slides at once.
  const std::vector<std::pair<size_t, size_t>> calls = {{0, 5}, {5, 1}, {6, 1}, {7, 4}, {11, 1}, {12, 1},
                                                        {13, 1}, {14, 1}, {15, 1}, {16, 1}, {17, 12}, {29, 1}};
  for (const auto& [from, count] : calls) {
    std::vector<int32_t> piece;
    for (const std::vector<int32_t>& s : streams) piece.insert(piece.end(), s.begin() + from, s.begin() + from + count);
    const StepLogits got = rows.append(piece);
    REQUIRE(got.rows() == kRows);
    for (int r = 0; r < kRows; ++r) {
      INFO("tokens [" << from << ", " << from + count << ") of row " << r);
      const std::span<const float> want =
          singles[static_cast<size_t>(r)]->append(std::span(streams[static_cast<size_t>(r)]).subspan(from, count)).row(0);
      REQUIRE(rows.window(r) == singles[static_cast<size_t>(r)]->window());
      CHECK(relative_error(got.row(r), want.data(), d.V) < kTolerance);
    }
  }
  CHECK(rows.position() < d.T);  // the calls slid
  // The same count for every row, and no more rows than the model holds sequences.
  CHECK_THROWS_AS(rows.append(std::vector<int32_t>(kRows + 1, 1)), std::invalid_argument);
  CHECK_THROWS_AS(GptDecoder(wide, kRows + 1), std::invalid_argument);
  CHECK_THROWS_AS(GptDecoder(wide, 0), std::invalid_argument);
  CHECK_THROWS_AS(wide.forward_step(std::vector<int32_t>(kRows + 1, 1), 0), std::invalid_argument);
}

TEST_CASE("The GPT decoder runs a prompt its rows share once, and the rows then part as one-row decoders", "[kv]") {
  Model m;
  const ModelDims& d = m.gpt.dims();
  constexpr int kRows = 3;
  test::WrappedBackend watched(m.backend);
  GPT wide(m.spec, watched, kRows, ModelUse::kInference);
  wide.set_params(m.params.data());
  GptDecoder rows(wide, kRows);
  const std::vector<int32_t> prompt = test::random_tokens(6, d.V, 30);
  std::vector<int32_t> shared;
  for (int r = 0; r < kRows; ++r) shared.insert(shared.end(), prompt.begin(), prompt.end());
  const StepLogits first = rows.append(shared);
  // Sequence 0 alone ran; its cache (each layer's qkv) and its logits went to sequences 1 and 2
  // in ceil(log2 3) doubling copies each.
  CHECK(watched.calls("copy") == (d.L + 1) * 2);
  CHECK(rows.positions_computed() == static_cast<std::uint64_t>(d.T));
  std::vector<std::unique_ptr<KvDecoder>> singles;
  for (int r = 0; r < kRows; ++r) {
    singles.push_back(std::make_unique<KvDecoder>(m.gpt.layout(), m.params));
    const std::span<const float> want = singles.back()->append(prompt).row(0);
    INFO("row " << r);
    CHECK(std::memcmp(first.row(r).data(), first.row(0).data(), static_cast<size_t>(d.V) * sizeof(float)) == 0);
    CHECK(relative_error(first.row(r), want.data(), d.V) < kTolerance);
  }
  // Each row its own tokens: steps that read the copied caches, then past the context a slide,
  // where the windows differ and all three sequences run.
  const std::vector<int32_t> own = test::random_tokens(static_cast<size_t>(kRows) * d.T, d.V, 31);
  for (int n = 0; n < d.T; ++n) {
    const std::span<const int32_t> step = std::span(own).subspan(static_cast<size_t>(n) * kRows, kRows);
    const StepLogits got = rows.append(step);
    for (int r = 0; r < kRows; ++r) {
      INFO("step " << n << " of row " << r);
      const std::span<const float> want = singles[static_cast<size_t>(r)]->append(step.subspan(r, 1)).row(0);
      REQUIRE(rows.window(r) == singles[static_cast<size_t>(r)]->window());
      CHECK(relative_error(got.row(r), want.data(), d.V) < kTolerance);
    }
  }
  CHECK(watched.calls("copy") == (d.L + 1) * 2);  // no window since was shared
}

TEST_CASE("A step's logits: fp32 rows read in place, bf16 rows converted bit for bit, each on the thread that asks",
          "[kv]") {
  constexpr int kRows = 3, kVp = 24, kV = 19;  // the padding past V is never read or written
  std::vector<std::uint16_t> bits(static_cast<size_t>(kRows) * kVp);
  std::mt19937 rng(3);
  for (std::uint16_t& b : bits) b = static_cast<std::uint16_t>(rng());
  // The values a logit can hold, and those it should not but might: zero of either sign, a
  // subnormal, the largest finite, infinities and NaN keep their bits.
  const std::vector<std::uint16_t> special = {0x0000, 0x8000, 0x0001, 0x7F7F, 0x7F80, 0xFF80, 0x7FC1, 0x3F80};
  std::copy(special.begin(), special.end(), bits.begin() + kVp);
  const float kUnwritten = -123.0f;
  std::vector<float> converted(bits.size(), kUnwritten);
  const StepLogits logits(bits.data(), converted.data(), kRows, kVp, kV);
  REQUIRE(logits.rows() == kRows);

  std::vector<std::span<const float>> rows(kRows);
  std::vector<std::thread> askers;
  for (int r = 0; r < kRows; ++r) askers.emplace_back([&, r] { rows[static_cast<size_t>(r)] = logits.row(r); });
  for (std::thread& t : askers) t.join();
  for (int r = 0; r < kRows; ++r) {
    INFO("row " << r);
    const std::span<const float> row = rows[static_cast<size_t>(r)];
    REQUIRE(row.size() == static_cast<size_t>(kV));
    CHECK(row.data() == converted.data() + static_cast<size_t>(r) * kVp);
    for (int j = 0; j < kV; ++j) {
      const float want = math::float_from_bf16_bits(bits[static_cast<size_t>(r) * kVp + static_cast<size_t>(j)]);
      CHECK(std::memcmp(&row[static_cast<size_t>(j)], &want, sizeof(float)) == 0);
    }
    for (int j = kV; j < kVp; ++j) CHECK(converted[static_cast<size_t>(r) * kVp + static_cast<size_t>(j)] == kUnwritten);
  }
  CHECK(std::isnan(rows[1][6]));
  CHECK(std::isinf(rows[1][4]));

  const std::vector<float> floats(static_cast<size_t>(kRows) * kVp, 0.5f);
  const StepLogits in_place(floats.data(), kRows, kVp, kV);
  CHECK(in_place.row(2).data() == floats.data() + 2 * kVp);
  CHECK(in_place.row(2).size() == static_cast<size_t>(kV));
  CHECK_THROWS_AS(in_place.row(kRows), std::out_of_range);
  CHECK_THROWS_AS(logits.row(-1), std::out_of_range);
}
