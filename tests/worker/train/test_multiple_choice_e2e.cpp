// train.eval_multiple_choice through the real xlaunch and xtrain-worker, on CPU ranks: the
// accuracy is in metrics.jsonl at every validation, in the validation line and in report.html;
// scoring it leaves training bit for bit as it was; 1 and 2 ranks on the same weights count the
// same answers, and so does `xtrain-worker eval --multiple-choice`; a bad file, or a key that
// cannot work, is refused by the plan (exit 2, the key named) before any rank starts.
//
// Same weights without a checkpoint reader: the runs that compare world sizes start from the
// trained run's checkpoint (model.init_from) and take one step at lr 1e-30, an update far below
// half an ulp of every weight (|w| ~ 1e-3 or more after training), so the weights stay the
// checkpoint's bit for bit; the parameter digests check that they did. The predictions are then
// the same rows through the same forward, so the counts must be equal, not close. The eval
// command runs the rows at another batch and context (its own GPT), so its losses may differ in
// the last bits; with 25 examples a near tie that flips is improbable, and no tolerance applies
// to a count.
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/worker/e2e_job.hpp"
#include "tests/worker/multiple_choice_file.hpp"

using namespace xtrain::test;

namespace {

constexpr int kExamples = 25;  // odd: rank 0 scores 13, rank 1 12

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// step -> the validation record of metrics.jsonl.
std::map<long, json> validations(const fs::path& run_dir) {
  std::map<long, json> out;
  std::ifstream in(run_dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    if (j.contains("val_loss")) out[j.at("step").get<long>()] = j;
  }
  return out;
}

// The validation line's words for record `r`: "multiple-choice acc 0.2400 (6/25)".
std::string accuracy_text(const json& r) {
  char text[96];
  std::snprintf(text, sizeof text, "multiple-choice acc %.4f (%ld/%ld)", r.at("mc_accuracy").get<double>(),
                r.at("mc_correct").get<long>(), r.at("mc_examples").get<long>());
  return text;
}

// xtrain-worker eval MODEL --multiple-choice FILE --device cpu --json (the device the jobs train on): its
// JSON, the line of stdout that is one.
json eval_choices(const Job& job, const fs::path& model, const fs::path& file) {
  const fs::path log = job.dir() / "eval.out";
  const pid_t pid = spawn({std::string(XTRAIN_BIN_DIR) + "/xtrain-worker", "eval", model.string(), "--multiple-choice",
                           file.string(), "--device", "cpu", "--json"},
                          log, {});
  const int code = wait_for(pid, std::chrono::seconds(60));
  const std::string output = read_text(log);
  INFO(output);
  REQUIRE(code == 0);
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.front() == '{') return json::parse(line).at("multiple_choice");
  }
  FAIL("no JSON line");
  return {};
}

}  // namespace

TEST_CASE("train.eval_multiple_choice: the accuracy at every validation, equal over world sizes and to eval's",
          "[e2e]") {
  Job job("mc");
  const std::vector<Example> examples = random_examples(kExamples, 9, 256);
  const fs::path file = job.dir() / "mc.bin";
  write_file(file, eval_file(examples));
  const std::vector<std::string> train = {"train.steps=4", "train.eval_every=2", "train.eval_batches=1"};
  std::vector<std::string> with_mc = train;
  with_mc.push_back("train.eval_multiple_choice=" + file.string());

  require_ok(job.launch("plain", 1, train));
  const Outcome scored = job.launch("mc1", 1, with_mc);
  require_ok(scored);

  // Scoring changes nothing of training: the same losses and weights, bit for bit.
  CHECK(job.losses("plain") == job.losses("mc1"));
  CHECK(job.common_digest("plain", 1) == job.common_digest("mc1", 1));

  // Every validation has the accuracy, with its counts; the line says it with them.
  const auto records = validations(job.run_dir("mc1"));
  REQUIRE(records.size() == 2);
  for (const auto& [step, r] : records) {
    INFO("step " << step << ": " << r.dump());
    CHECK(r.at("mc_examples") == kExamples);
    CHECK(r.at("mc_accuracy").get<double>() == r.at("mc_correct").get<double>() / kExamples);
    CHECK(scored.output.find(accuracy_text(r)) != std::string::npos);
  }
  CHECK(validations(job.run_dir("plain")).at(4).contains("mc_accuracy") == false);

  // The eval command on the checkpoint written after the last validation (the same weights).
  const json eval = eval_choices(job, job.run_dir("mc1"), file);
  const long correct = records.at(4).at("mc_correct").get<long>();
  CHECK(eval.at("correct").get<long>() == correct);

  // One step at lr 1e-30 from that checkpoint on 1 and on 2 ranks: the weights stay the
  // checkpoint's, and both count the same answers.
  const fs::path checkpoint = job.run_dir("mc1") / "checkpoints" / "step-00000004";
  REQUIRE(fs::exists(checkpoint));
  std::vector<std::string> same = {"train.steps=1",      "train.eval_every=1", "train.eval_batches=1",
                                   "train.lr=1e-30",     "train.min_lr=0",     "model.init_from=" + checkpoint.string(),
                                   "train.eval_multiple_choice=" + file.string()};
  require_ok(job.launch("same1", 1, same));
  require_ok(job.launch("same2", 2, same));
  const std::string digest = job.common_digest("mc1", 1);
  CHECK(job.common_digest("same1", 1) == digest);
  CHECK(job.common_digest("same2", 2) == digest);
  CHECK(validations(job.run_dir("same1")).at(1).at("mc_correct").get<long>() == correct);
  CHECK(validations(job.run_dir("same2")).at(1).at("mc_correct").get<long>() == correct);

  // train.eval_multiple_choice_examples: the file's first N, split over the ranks all the same.
  same.push_back("train.eval_multiple_choice_examples=7");
  require_ok(job.launch("first7", 2, same));
  long first7 = 0;
  for (int e = 0; e < 7; ++e) first7 += eval.at("predictions").at(e).get<int>() == examples[e].label;
  const json capped = validations(job.run_dir("first7")).at(1);
  CHECK(capped.at("mc_examples") == 7);
  CHECK(capped.at("mc_correct").get<long>() == first7);

  // report.html: a chart of the accuracy, only where the run has one.
  const std::string report = read_text(job.run_dir("mc1") / "report.html");
  CHECK(report.find(R"(data-chart="mc-accuracy")") != std::string::npos);
  CHECK(report.find(R"(data-count="2" data-records="2" data-xs="2 4")") != std::string::npos);  // steps 2 and 4
  CHECK(read_text(job.run_dir("plain") / "report.html").find("mc-accuracy") == std::string::npos);
}

TEST_CASE("train.eval_multiple_choice: a bad file or setting is refused before any rank starts", "[e2e]") {
  Job job("mcbad");
  const std::vector<Example> two = {{1, {1, 2, 3}, {{4}, {5, 6}}}, {0, {7, 8}, {{9, 10}, {11}, {12}}}};
  const std::string good = eval_file(two);
  write_file(job.dir() / "magic.bin", eval_file(two, 20240520));
  write_file(job.dir() / "cut.bin", good.substr(0, good.size() - 4));
  write_file(job.dir() / "vocab.bin", eval_file({{0, {1, 300}, {{4}, {5}}}}));
  // 12 context tokens and a completion of 6: 17 positions, one more than model.seq_len 16.
  write_file(job.dir() / "long.bin", eval_file({{0, std::vector<int>(12, 1), {std::vector<int>(6, 2), {3}}}}));
  const auto key = [&](const std::string& name) { return "train.eval_multiple_choice=" + (job.dir() / name).string(); };
  struct Case {
    std::string name;
    std::vector<std::string> sets;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"a missing file", {"train.eval_every=2", key("nope.bin")},
       "train.eval_multiple_choice: " + (job.dir() / "nope.bin").string()},
      {"a bad header", {"train.eval_every=2", key("magic.bin")},
       "train.eval_multiple_choice: " + (job.dir() / "magic.bin").string() + ": header: magic is 20240520"},
      {"a truncated example", {"train.eval_every=2", key("cut.bin")},
       "train.eval_multiple_choice: " + (job.dir() / "cut.bin").string() +
           ": example 1 (at byte 1052) is truncated: the file ends inside it"},
      {"a token outside the vocabulary", {"train.eval_every=2", key("vocab.bin")},
       "example 0 (at byte 1024): the context has token 300, outside the model's vocabulary of 256"},
      {"an example longer than the context", {"train.eval_every=2", key("long.bin")},
       "train.eval_multiple_choice: " + (job.dir() / "long.bin").string() +
           ": example 0 needs 17 positions (context and its longest completion), more than model.seq_len 16"},
      {"no validation to score it at", {key("cut.bin")}, "train.eval_multiple_choice: is scored at each validation"},
      {"a negative example count", {"train.eval_multiple_choice_examples=-1"},
       "train.eval_multiple_choice_examples: expected an integer >= 0"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    DYNAMIC_SECTION(c.name) {
      const std::string run = "bad" + std::to_string(i);
      const Outcome checked = job.check(run, 2, c.sets);  // --check runs the same plan
      INFO(checked.output);
      CHECK(checked.exit_code == 2);
      CHECK(error_line(checked.output).find(c.expect) != std::string::npos);
      const Outcome o = job.launch(run, 2, c.sets);
      INFO(o.output);
      CHECK(o.exit_code == 2);
      CHECK(error_line(o.output).find(c.expect) != std::string::npos);
      CHECK_FALSE(fs::exists(job.run_dir(run) / "logs"));  // no rank was started
    }
  }
}
