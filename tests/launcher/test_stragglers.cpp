// The straggler detector on synthetic busy times: exact lines and entries on a clean series, and on
// noisy series (seeded, many seeds each) how soon a slow rank is reported and recovers, and that
// noise alone is never reported.
#include <catch2/catch.hpp>

#include <optional>
#include <random>
#include <vector>

#include "launcher/agent/stragglers.hpp"

using namespace xtrain::launcher;

namespace {

constexpr double kBaseMs = 6.0;

struct Seen {
  long step;  // of the busy time that brought the change
  StragglerDetector::Change change;
};

// Feeds one step of every rank's busy time, rank 0 first, and keeps what changed. Step s is read at
// s * step_s seconds: by default 0.1 s, so that the window, not kMinSlowS, is what takes time.
struct Series {
  double step_s = 0.1;
  StragglerDetector detector;
  std::vector<Seen> seen;
  void step(long s, const std::vector<double>& busy) {
    for (int r = 0; r < static_cast<int>(busy.size()); ++r) {
      for (auto& change : detector.observe(r, s, busy[static_cast<size_t>(r)], static_cast<double>(s) * step_s)) {
        seen.push_back({s, change});
      }
    }
  }
  // The step of the first warning (or recovery) for `rank` at or after `from`.
  std::optional<long> first(int rank, bool warning, long from = 0) const {
    for (const Seen& x : seen) {
      if (x.change.rank == rank && x.change.warning == warning && x.step >= from) return x.step;
    }
    return std::nullopt;
  }
  size_t warnings() const {
    size_t n = 0;
    for (const Seen& x : seen) n += x.change.warning;
    return n;
  }
};

// A step of an unloaded rank: scheduling noise, and now and then (`spikes` of the steps) a step that
// is 1.6-3.8x slower, as a page fault, a timer or another process's burst makes it.
double normal_step(std::mt19937& rng, double spikes = 0.1) {
  std::uniform_real_distribution<double> noise(0.85, 1.2), spike(1.6, 3.8), coin(0, 1);
  return kBaseMs * (coin(rng) < spikes ? spike(rng) : noise(rng));
}

// A rank sharing its core, as measured with a busy loop there: single steps 1.6-3.8x, most of them
// near 1.6x; 1.7x on average.
double contended_step(std::mt19937& rng) {
  std::uniform_real_distribution<double> near(1.6, 1.65), far(1.65, 3.8), coin(0, 1);
  return kBaseMs * (coin(rng) < 0.9 ? near(rng) : far(rng));
}

}  // namespace

TEST_CASE("launcher/stragglers: a rank judged on its window median: one warning, one recovery, exact lines",
          "[stragglers]") {
  Series d;
  const auto step = [&](long s, double slow_ms) { d.step(s, {10.0, 10.0, slow_ms, 10.0}); };
  for (long s = 1; s <= 40; ++s) step(s, 10.0);
  for (long s = 41; s <= 56; ++s) step(s, 15.0);
  CHECK(d.seen.empty());  // 16 slow steps of 32: the median is halfway, 12.5 ms
  step(57, 15.0);         // the 17th: the median is a slow step
  REQUIRE(d.seen.size() == 1);
  CHECK(d.seen[0].change.warning);
  CHECK(d.seen[0].change.rank == 2);
  CHECK(d.seen[0].change.message == "rank 2 is a straggler: 50% slower than the other ranks since step 41 (median "
                                    "busy time 15.0 ms per step over its last 32 steps, theirs 10.0 ms)");
  for (long s = 58; s <= 99; ++s) step(s, 15.0);
  step(100, 10.0);  // single fast steps move nothing
  step(101, 15.0);
  for (long s = 102; s <= 123; ++s) step(s, 10.0);
  CHECK(d.seen.size() == 1);  // the median is fast again from step 117, but 23 fast steps of 32 are not yet 3/4
  step(124, 10.0);
  REQUIRE(d.seen.size() == 2);
  CHECK_FALSE(d.seen[1].change.warning);
  CHECK(d.seen[1].change.rank == 2);
  CHECK(d.seen[1].change.message == "rank 2 recovered at step 124: median busy time 10.0 ms per step over its last "
                                    "32 steps, the other ranks' 10.0 ms (a straggler since step 41, 50% slower)");
  for (long s = 125; s <= 200; ++s) step(s, 16.0);  // behind again: a second entry
  CHECK(d.warnings() == 2);
  const nlohmann::json json = d.detector.to_json();
  REQUIRE(json.size() == 2);
  CHECK(json[0]["rank"] == 2);
  CHECK(json[0]["first_step"] == 41);
  CHECK(json[0]["warned_step"] == 57);
  CHECK(json[0]["recovered_step"] == 124);
  CHECK(json[0]["slower_by"].get<double>() == Approx(0.5));  // the steps judged slow, not the halfway ones after
  CHECK(json[1]["first_step"] == 125);
  CHECK(json[1]["warned_step"] == 141);
  CHECK(json[1]["slower_by"].get<double>() == Approx(0.6));
  CHECK_FALSE(json[1].contains("recovered_step"));  // still behind
}

TEST_CASE("launcher/stragglers: short steps: a slowdown is reported once it has lasted kMinSlowS, a shorter one never",
          "[stragglers]") {
  Series d;
  d.step_s = 1.0 / 64;  // 15.6 ms steps (exact in binary): kMinSlowS is 64 steps
  const auto step = [&](long s, double slow_ms) { d.step(s, {10.0, slow_ms}); };
  for (long s = 1; s <= 100; ++s) step(s, 10.0);
  // 40 slow steps (0.62 s): the window median is slow from step 117 to 155, 0.86 s after the onset.
  for (long s = 101; s <= 140; ++s) step(s, 15.0);
  for (long s = 141; s <= 300; ++s) step(s, 10.0);
  CHECK(d.seen.empty());
  CHECK(d.detector.empty());  // recovered before it was reported: no entry either
  for (long s = 301; s <= 364; ++s) step(s, 15.0);
  CHECK(d.seen.empty());  // tipped at 317, slow for 63/64 s at 364
  step(365, 15.0);
  REQUIRE(d.seen.size() == 1);
  CHECK(d.seen[0].change.message == "rank 1 is a straggler: 50% slower than the other ranks since step 301 (median "
                                    "busy time 15.0 ms per step over its last 32 steps, theirs 10.0 ms)");
  for (long s = 366; s <= 400; ++s) step(s, 15.0);
  for (long s = 401; s <= 424; ++s) step(s, 10.0);
  REQUIRE(d.seen.size() == 2);
  CHECK(d.seen[1].step == 424);  // recovery as with long steps: 24 fast of 32
  const nlohmann::json json = d.detector.to_json();
  REQUIRE(json.size() == 1);
  CHECK(json[0]["first_step"] == 301);
  CHECK(json[0]["warned_step"] == 365);
  CHECK(json[0]["recovered_step"] == 424);
  CHECK(json[0]["slower_by"].get<double>() == Approx(0.5));  // judged from the tip at 317 on
}

TEST_CASE("launcher/stragglers: with two ranks each is judged against the other", "[stragglers]") {
  // 1.45x the other rank is 1.18x the mean of the two: judged against that, it would never be seen.
  Series d;
  for (long s = 1; s <= 40; ++s) d.step(s, {10.0, 14.5});
  REQUIRE(d.seen.size() == 1);
  CHECK(d.seen[0].change.rank == 1);
  CHECK(d.seen[0].step == 32);  // the first step with full windows
  CHECK(d.detector.to_json()[0]["first_step"] == 1);
}

TEST_CASE("launcher/stragglers: a rank slow at every other step is dated from its first slow step", "[stragglers]") {
  Series d;
  for (long s = 1; s <= 40; ++s) d.step(s, {10.0, 10.0});
  for (long s = 41; s <= 80; ++s) d.step(s, {10.0, s % 2 ? 20.0 : 10.0});
  REQUIRE(d.seen.size() == 1);
  CHECK(d.seen[0].step == 71);  // 16 slow of 32: the middle pair's mean is 15 ms
  CHECK(d.detector.to_json()[0]["first_step"] == 41);
}

TEST_CASE("launcher/stragglers: 1.7x slower on average, 1.6-3.8x single steps: reported within 17 steps, recovered "
          "within 50 after",
          "[stragglers]") {
  for (unsigned seed = 1; seed <= 200; ++seed) {
    std::mt19937 rng(seed);
    Series d;
    for (long s = 1; s <= 300; ++s) d.step(s, {normal_step(rng), normal_step(rng)});
    for (long s = 301; s <= 700; ++s) d.step(s, {normal_step(rng), contended_step(rng)});
    for (long s = 701; s <= 1000; ++s) d.step(s, {normal_step(rng), normal_step(rng)});
    INFO("seed " << seed << ": " << d.detector.to_json().dump());
    REQUIRE(d.warnings() == 1);
    const auto warned = d.first(1, true);
    REQUIRE(warned);
    CHECK(*warned >= 301);
    CHECK(*warned <= 301 + 16);
    const nlohmann::json entry = d.detector.to_json()[0];
    CHECK(entry["first_step"].get<long>() >= 301 - 6);  // since when: at the start, or at spikes just before it
    CHECK(entry["first_step"].get<long>() <= 301);
    CHECK(entry["slower_by"].get<double>() > 0.4);
    const auto recovered = d.first(1, false);
    REQUIRE(recovered);
    CHECK(*recovered > 700);
    CHECK(*recovered <= 700 + 50);  // 24 fast steps of 32: 27 steps after in the median seed, 44 at most in 2,000
  }
}

TEST_CASE("launcher/stragglers: slow at two steps of three, as fast as the others at the rest: reported within 64 "
          "steps",
          "[stragglers]") {
  // The old rule (20 slow steps in a row) would wait for a streak of 20: about once in 3,000 steps.
  for (unsigned seed = 1; seed <= 200; ++seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> coin(0, 1);
    Series d;
    for (long s = 1; s <= 100; ++s) d.step(s, {normal_step(rng), normal_step(rng), normal_step(rng)});
    for (long s = 101; s <= 400; ++s) {
      d.step(s, {normal_step(rng), coin(rng) < 2.0 / 3 ? contended_step(rng) : normal_step(rng, 0), normal_step(rng)});
    }
    INFO("seed " << seed << ": " << d.detector.to_json().dump());
    const auto warned = d.first(1, true);
    REQUIRE(warned);
    CHECK(*warned >= 101);
    CHECK(*warned <= 101 + 64);
    CHECK(d.warnings() == 1);  // and no recovery while it lasts
    CHECK_FALSE(d.first(1, false));
  }
}

TEST_CASE("launcher/stragglers: noise alone, spikes and a short stall are never reported", "[stragglers]") {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    Series d;
    for (long s = 1; s <= 3000; ++s) {
      std::vector<double> busy = {normal_step(rng), normal_step(rng), normal_step(rng, 0.15)};
      if (s >= 1000 && s < 1008) busy[1] = 4 * kBaseMs;  // 8 slow steps in a row: a quarter window
      d.step(s, busy);
    }
    INFO("seed " << seed << ": " << d.detector.to_json().dump());
    CHECK(d.detector.empty());
  }
}

TEST_CASE("launcher/stragglers: judged only once every rank has a full window", "[stragglers]") {
  StragglerDetector d;
  // Rank 1 reports steps 1-40 before the others report any: nothing can be judged.
  for (long s = 1; s <= 40; ++s) CHECK(d.observe(1, s, 50.0, 0.1 * s).empty());
  // The others report only step 40 (their earlier beats were coalesced): one sample each, no judgment.
  CHECK(d.observe(0, 40, 10.0, 4.0).empty());
  CHECK(d.observe(2, 40, 10.0, 4.0).empty());
  for (long s = 41; s <= 70; ++s) {
    for (int r = 0; r < 3; ++r) CHECK(d.observe(r, s, r == 1 ? 50.0 : 10.0, 0.1 * s).empty());
  }
  CHECK(d.empty());
  CHECK(d.observe(0, 71, 10.0, 7.1).empty());
  CHECK(d.observe(1, 71, 50.0, 7.1).empty());
  CHECK(d.observe(2, 71, 10.0, 7.1).size() == 1);  // 32 samples each: judged
  // A restarted gang starts its windows again.
  d.new_attempt();
  for (long s = 1; s <= 31; ++s) {
    for (int r = 0; r < 3; ++r) CHECK(d.observe(r, s, r == 2 ? 50.0 : 10.0, 0.1 * s).empty());
  }
  // Sub-millisecond differences are noise however large the ratio.
  StragglerDetector tiny;
  for (long s = 1; s <= 80; ++s) {
    for (int r = 0; r < 3; ++r) tiny.observe(r, s, r == 0 ? 0.9 : 0.1, 0.1 * s);
  }
  CHECK(tiny.empty());
}
