// The report's pieces without a browser: ticks, labels, downsampling, the SVG a chart becomes,
// metrics.jsonl read incrementally with repeated steps, and the stragglers' table.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "harness.hpp"
#include "launcher/report/html_report.hpp"
#include "launcher/report/live_report.hpp"
#include "launcher/report/run_reader.hpp"
#include "launcher/report/svg_chart.hpp"

using namespace xtrain::launcher;
using Catch::Matchers::Contains;

namespace {

// metrics.jsonl in a fresh directory.
struct TempFile {
  xtrain::test::TempDir dir;
  std::string path() const { return dir / "metrics.jsonl"; }
  void append(const std::string& text) const { std::ofstream(path(), std::ios::app) << text; }
};

std::string step_line(long step, double loss) {
  return nlohmann::json{{"step", step}, {"loss", loss}, {"lr", 1e-3}}.dump() + "\n";
}

int count(const std::string& text, const std::regex& pattern) {
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), pattern), std::sregex_iterator()));
}

}  // namespace

TEST_CASE("launcher/report: ticks at round numbers with labels in units people read", "[report]") {
  CHECK(nice_ticks(0, 10, 5) == std::vector<double>{0, 2, 4, 6, 8, 10});
  CHECK(nice_ticks(1, 60, 6) == std::vector<double>{10, 20, 30, 40, 50, 60});
  CHECK(nice_ticks(1.62, 5.71, 5) == std::vector<double>{2, 3, 4, 5});
  const auto small = nice_ticks(0, 3e-3, 5);
  REQUIRE(small.size() == 7);
  CHECK(small[1] == Approx(5e-4));
  CHECK(tick_label(0, 5e-4) == "0");
  CHECK(tick_label(5e-4, 5e-4) == "5e-4");
  CHECK(tick_label(2.5e-3, 5e-4) == "2.5e-3");
  CHECK(tick_label(2500, 2500) == "2500");
  CHECK(tick_label(12500, 2500) == "12.5k");
  CHECK(tick_label(2e6, 1e6) == "2M");
  CHECK(tick_label(0.25, 0.25) == "0.25");
  CHECK(tick_label(1.5, 0.5) == "1.5");
  CHECK(tick_label(3, 1) == "3");
}

TEST_CASE("launcher/report: min/max downsampling keeps the extremes and at most the limit", "[report]") {
  std::vector<double> x, y;
  for (int i = 0; i < 10000; ++i) x.push_back(i), y.push_back(std::sin(i * 0.01));
  y[4321] = 9;   // a spike
  y[777] = -9;   // and a dip
  const Points kept = downsample_min_max(x, y, 2000);
  CHECK(kept.x.size() <= 2000);
  CHECK(kept.x.size() >= 1900);
  CHECK(std::is_sorted(kept.x.begin(), kept.x.end()));
  CHECK(*std::max_element(kept.y.begin(), kept.y.end()) == 9);
  CHECK(*std::min_element(kept.y.begin(), kept.y.end()) == -9);
  const Points small = downsample_min_max({1, 2, 3}, {4, 5, 6}, 2000);
  CHECK(small.x == std::vector<double>{1, 2, 3});
}

TEST_CASE("launcher/report: a chart has one polyline point per record and says when it downsampled", "[report]") {
  Chart chart{"loss", "Loss <by> step", "step", "loss (nats)", {{"train", {1, 2, 3, 4}, {4, 3, NAN, 1}}}, "none"};
  std::string svg = render_chart(chart);
  CHECK_THAT(svg, Contains(R"(data-chart="loss")"));
  CHECK_THAT(svg, Contains("Loss &lt;by&gt; step"));
  CHECK_THAT(svg, Contains(R"(data-count="3" data-records="3" data-xs="1 2 4" data-ys="4 3 1")"));
  CHECK(count(svg, std::regex("<circle ")) == 3);  // few points: markers
  const std::smatch points = [&] {
    std::smatch m;
    std::regex_search(svg, m, std::regex(R"re(points="([^"]*)")re"));
    return m;
  }();
  CHECK(count(points[1].str(), std::regex(R"(\d+\.\d,\d+\.\d)")) == 3);

  Series many{"train", {}, {}};
  for (int i = 1; i <= 5000; ++i) many.x.push_back(i), many.y.push_back(1.0 / i);
  chart.series = {many};
  svg = render_chart(chart);
  CHECK_THAT(svg, Contains(R"(data-records="5000")"));
  CHECK_THAT(svg, Contains("of 5000 records drawn (lowest and highest of each bucket)"));
  CHECK(count(svg, std::regex("<circle ")) == 0);

  chart.series = {{"empty", {}, {}}};
  svg = render_chart(chart);
  CHECK_THAT(svg, Contains(R"(data-empty="true")"));
  CHECK_THAT(svg, Contains(">none</text>"));
}

TEST_CASE("launcher/report: metrics are read incrementally and a repeated step keeps its last record", "[report]") {
  TempFile file;
  MetricsLog log(file.path());
  CHECK_FALSE(log.update());  // no file yet
  file.append(step_line(1, 5.0) + step_line(2, 4.0) + R"({"step": 2, "val_loss": 4.5})" "\n" + "not json\n");
  file.append(step_line(3, 3.0).substr(0, 10));  // a line still being written
  CHECK(log.update());
  CHECK(log.steps().size() == 2);
  CHECK(log.validations().size() == 1);
  CHECK(log.malformed() == 1);
  file.append(step_line(3, 3.0).substr(10));
  // A resume from step 1's checkpoint writes steps 2 and 3 again.
  file.append(step_line(2, 4.25) + step_line(3, 3.25) +
              R"({"step": 4, "loss": 2.0, "rank_step_ms": [10.5, 12.0], "tokens": 4096})" "\n");
  CHECK(log.update());
  REQUIRE(log.steps().size() == 4);
  CHECK(log.steps().at(2).loss == 4.25);
  CHECK(log.steps().at(3).loss == 3.25);
  CHECK(log.steps().at(4).rank_step_ms == std::vector<double>{10.5, 12.0});
  CHECK(log.steps().at(4).tokens == 4096);
  CHECK(std::isnan(log.steps().at(4).lr));
  CHECK(log.records() == 7);
  CHECK(log.superseded() == 2);
  CHECK_FALSE(log.update());  // nothing new

  const auto last = last_step_record(file.path());
  REQUIRE(last);
  CHECK(last->step == 4);
  CHECK(last->loss == 2.0);

  std::ofstream(file.path(), std::ios::trunc) << step_line(1, 9.0);  // rewritten: read from the start
  CHECK(log.update());
  CHECK(log.steps().size() == 1);
  CHECK(log.steps().at(1).loss == 9.0);
}

TEST_CASE("launcher/report: the last step record of a long file comes from its tail", "[report]") {
  TempFile file;
  std::string text;
  for (int step = 1; step <= 50000; ++step) text += step_line(step, 1000.0 / step);
  text += R"({"step": 50000, "val_loss": 1.0})" "\n";
  file.append(text);
  const auto last = last_step_record(file.path());
  REQUIRE(last);
  CHECK(last->step == 50000);
  CHECK(last->loss == Approx(0.02));
}

TEST_CASE("launcher/report: the live report waits 20 times as long as its last rewrite took, 10 s at least",
          "[report]") {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  CHECK(LiveReport::next_interval(milliseconds(0)) == seconds(10));
  CHECK(LiveReport::next_interval(milliseconds(300)) == seconds(10));   // a run of 100,000 records or so
  CHECK(LiveReport::next_interval(milliseconds(2000)) == seconds(40));  // a million: the loop stays 95% free
}

TEST_CASE("launcher/report: durations and times as people read them", "[report]") {
  CHECK(duration_text(0.035) == "0.04 s");
  CHECK(duration_text(12.34) == "12.3 s");
  CHECK(duration_text(192) == "3m 12s");
  CHECK(duration_text(7500) == "2h 05m");
  CHECK(duration_text(-1) == "-");
  const auto t = parse_iso_time("2026-11-30T10:41:12.345Z");
  REQUIRE(t);
  CHECK(*t == Approx(1796035272.345).epsilon(0).margin(1e-3));
}

TEST_CASE("launcher/report: each straggler with its start, its warning, by how much and its recovery", "[report]") {
  TempFile file;
  RunInfo run;
  run.name = "s";
  run.run_state = RunState::kCompleted;
  run.summary = {{"stragglers",
                  {{{"rank", 1}, {"first_step", 312}, {"warned_step", 329}, {"slower_by", 0.7}, {"recovered_step", 921}},
                   {{"rank", 3}, {"first_step", 1200}, {"warned_step", 1217}, {"slower_by", 0.4}}}}};
  const std::string html = render_report(run, MetricsLog(file.path()));
  CHECK_THAT(html, Contains("<tr><td>1</td><td>312</td><td>329</td><td>70%</td><td>921</td></tr>"));
  CHECK_THAT(html, Contains("<tr><td>3</td><td>1200</td><td>1217</td><td>40%</td><td>not yet</td></tr>"));
}

TEST_CASE("launcher/report: the multiple-choice accuracy gets a chart when the validations carry it", "[report]") {
  TempFile file;
  RunInfo run;
  run.name = "mc";
  run.run_state = RunState::kCompleted;
  file.append(step_line(2, 4.0) + R"({"step": 2, "val_loss": 4.5, "mc_accuracy": 0.25, "mc_correct": 1, "mc_examples": 4})"
              "\n" + step_line(4, 3.0) + R"({"step": 4, "val_loss": 3.5, "mc_accuracy": 0.5})" "\n" +
              R"({"step": 6, "val_loss": 3.0})" "\n");
  MetricsLog metrics(file.path());
  REQUIRE(metrics.update());
  const std::string html = render_report(run, metrics);
  CHECK_THAT(html, Contains(R"(data-chart="mc-accuracy")"));
  CHECK_THAT(html, Contains("multiple-choice accuracy"));
  CHECK_THAT(html, Contains(R"(data-count="2" data-records="2" data-xs="2 4" data-ys="0.25 0.5")"));
  CHECK_THAT(html, !Contains("multiple-choice acc (step"));  // the last validation (step 6) had none

  TempFile plain;
  plain.append(step_line(2, 4.0) + R"({"step": 2, "val_loss": 4.5})" "\n");
  MetricsLog plain_metrics(plain.path());
  REQUIRE(plain_metrics.update());
  CHECK_THAT(render_report(run, plain_metrics), Contains(R"(data-chart="loss-step")") && !Contains("mc-accuracy"));
}
