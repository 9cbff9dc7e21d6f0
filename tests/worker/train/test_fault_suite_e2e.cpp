// The fault campaign's families, kept as tests through the real xlaunch and xtrain-worker: a bit
// flipped in every file of a checkpoint (state.json included), under resume: auto and as an
// explicit checkpoint.resume; resume settings the plan must refuse; a stop signal in xlaunch's
// first moments. Each bad input is refused by --check and by a run with the same line, and the
// run starts no rank (no logs/ directory).
#include <csignal>
#include <fstream>
#include <regex>

#include "tests/worker/e2e_job.hpp"

using namespace xtrain::test;

namespace {

constexpr const char* kCheckpointFiles[] = {"model.safetensors", "optimizer.safetensors", "config.json",
                                            "state.json"};

// Flips one bit of `path` that leaves it a valid file of its kind: in state.json a digit of its
// "step" (20 becomes 30: still JSON, still a number), elsewhere a byte near the end (tensor data,
// or the last value of config.json).
void flip_a_bit(const fs::path& path) {
  std::string bytes = read_text(path);
  size_t at = bytes.size() - 3;
  if (path.filename() == "state.json") {
    at = bytes.find("\"step\": 2");
    REQUIRE(at != std::string::npos);
    at += 8;
  }
  bytes[at] = static_cast<char>(bytes[at] ^ 0x01);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// xlaunch with `args`, started with SIGTERM already pending, as a signal in its very first moments is.
Outcome launch_with_pending_sigterm(const Job& job, const std::vector<std::string>& args, const std::string& name) {
  std::vector<std::string> argv = {std::string(XTRAIN_BIN_DIR) + "/xlaunch"};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = spawn(argv, job.dir() / (name + ".out"), {}, SIGTERM);
  Outcome o;
  o.exit_code = wait_for(pid, 60s);
  o.output = read_text(job.dir() / (name + ".out"));
  return o;
}

}  // namespace

TEST_CASE("a bit flipped in any file of the newest checkpoint: auto falls back and ends where the "
          "uninterrupted run does", "[e2e][faults]") {
  Job job("flipall");
  const std::vector<std::string> sets = {"train.steps=20", "checkpoint.every=10"};
  require_ok(job.launch("straight", 2, sets));
  REQUIRE(job.checkpoints("straight") == std::vector<std::string>{"step-00000010", "step-00000020"});
  const std::string uninterrupted = job.common_digest("straight", 2);

  for (const char* file : kCheckpointFiles) {
    DYNAMIC_SECTION(file) {
      fs::copy(job.run_dir("straight"), job.run_dir("damaged"), fs::copy_options::recursive);
      flip_a_bit(job.run_dir("damaged") / "checkpoints/step-00000020" / file);
      const Outcome o = job.launch("damaged", 2, sets);
      INFO(o.output);
      REQUIRE(o.exit_code == 0);
      CHECK(o.output.find("resume: skipping damaged checkpoint " +
                          (job.run_dir("damaged") / "checkpoints/step-00000020").string() + ": " + file + ": ") !=
            std::string::npos);
      CHECK(job.result("damaged", 0).at("start_step") == 10);
      CHECK(job.common_digest("damaged", 2) == uninterrupted);
    }
  }
}

TEST_CASE("an explicit checkpoint.resume with a flipped bit in any file: exit 2 before any rank starts",
          "[e2e][faults]") {
  Job job("flipexplicit");
  require_ok(job.launch("base", 1, {"train.steps=20", "checkpoint.every=10", "train.batch_size=2"}));
  int n = 0;
  for (const char* file : kCheckpointFiles) {
    DYNAMIC_SECTION(file) {
      const fs::path ckpt = job.dir() / ("copy-" + std::to_string(n++)) / "step-00000020";
      fs::create_directories(ckpt.parent_path());
      fs::copy(job.run_dir("base") / "checkpoints/step-00000020", ckpt);
      flip_a_bit(ckpt / file);
      const std::vector<std::string> sets = {"checkpoint.resume=" + ckpt.string(), "train.steps=30"};
      const std::string expect = "checkpoint.resume: checkpoint " + ckpt.string() + ": " + file + ": ";
      const Outcome checked = job.check("explicit", 2, sets);
      INFO(checked.output);
      CHECK(checked.exit_code == 2);
      CHECK(error_line(checked.output).find(expect) != std::string::npos);
      const Outcome o = job.launch("explicit", 2, sets);
      INFO(o.output);
      CHECK(o.exit_code == 2);
      CHECK(error_line(o.output).find(expect) != std::string::npos);
      CHECK_FALSE(fs::exists(job.run_dir("explicit") / "logs"));
    }
  }
}

TEST_CASE("resume settings: a key of the batches is refused by --check and the plan, the schedule may change with "
          "a log line", "[e2e][faults]") {
  Job job("resumekeys");
  require_ok(job.launch("run", 2, {"train.steps=10", "checkpoint.every=10"}));
  SECTION("train.seed changed under resume: auto") {
    const std::vector<std::string> sets = {"train.steps=20", "train.seed=7"};
    const std::string expect = "train.seed is 11 but the spec says 7; a resumed run must keep it to read the same "
                               "batches; to start over in this run dir set checkpoint.resume to \"never\" (its "
                               "checkpoints move to superseded/), or give the run another run_dir";
    const Outcome checked = job.check("run", 2, sets);
    INFO(checked.output);
    CHECK(checked.exit_code == 2);
    CHECK(error_line(checked.output).find(expect) != std::string::npos);
    fs::remove_all(job.run_dir("run") / "logs");
    const Outcome o = job.launch("run", 2, sets);
    INFO(o.output);
    CHECK(o.exit_code == 2);
    CHECK(error_line(o.output).find(expect) != std::string::npos);
    CHECK_FALSE(fs::exists(job.run_dir("run") / "logs"));
  }
  SECTION("train.lr changed: --check and --dry-run say it before the ranks take it") {
    const std::vector<std::string> sets = {"train.steps=12", "train.lr=0.001"};
    const fs::path checkpoint = job.run_dir("run") / "checkpoints" / "step-00000010";
    const std::string line = "resume: train.lr changed from 0.003 to 0.001, train.steps changed from 10 to 12: the "
                             "cosine decay now ends at step 12; step 11 takes a learning rate of ";
    const Outcome checked = job.check("run", 2, sets);
    INFO(checked.output);
    CHECK(checked.exit_code == 0);
    CHECK_THAT(checked.output, Catch::Matchers::Contains("is valid: 2 rank(s) on cpu with gloo, run dir " +
                                                         job.run_dir("run").string() + ", resuming at step 10 from " +
                                                         checkpoint.string()) &&
                                   Catch::Matchers::Contains("xlaunch: " + line));
    const Outcome dry = job.finish(job.start("run", 2, sets, {}, {"--dry-run"}), "run");
    const json resume = json::parse(dry.output).at("resume");
    CHECK(resume.at("from") == checkpoint.string());
    CHECK(resume.at("start_step") == 10);
    REQUIRE(resume.at("changes").size() == 1);  // lr and steps, one schedule
    CHECK_THAT(resume.at("changes").at(0).get<std::string>(), Catch::Matchers::StartsWith(line));
    CHECK(resume.at("superseded").empty());
    const Outcome o = job.launch("run", 2, sets);
    INFO(o.output);
    REQUIRE(o.exit_code == 0);
    CHECK_THAT(o.output, Catch::Matchers::Contains("info: " + line));
    CHECK(job.result("run", 0).at("start_step") == 10);
  }
  SECTION("train.steps changed: taken, the new schedule said in one line") {
    const Outcome o = job.launch("run", 2, {"train.steps=12"});
    INFO(o.output);
    REQUIRE(o.exit_code == 0);
    CHECK(o.output.find("resume: train.steps changed from 10 to 12: the cosine decay now ends at step 12; step "
                        "11 takes a learning rate of ") != std::string::npos);
    CHECK(job.result("run", 0).at("step") == 12);
  }
  SECTION("warmup_steps >= steps is a warning") {
    const Outcome o = job.check("warm", 2, {"train.steps=5", "train.warmup_steps=5"});
    INFO(o.output);
    CHECK(o.exit_code == 0);
    CHECK(o.output.find("train.warmup_steps 5 >= train.steps 5") != std::string::npos);
  }
}

TEST_CASE("checkpoints that would outgrow the run dir's disk are a warning of the plan", "[e2e][faults]") {
  Job job("diskspace");
  // A checkpoint a step, all kept: a billion of them outgrow any disk.
  const Outcome o = job.check("big", 2, {"train.steps=1000000000", "checkpoint.every=1", "checkpoint.keep=1000000000"});
  INFO(o.output);
  CHECK(o.exit_code == 0);
  const std::regex warning("the run dir's file system has [0-9.]+ [KMGT]?i?B free, but this run's checkpoints of "
                           "[0-9.]+ KiB each take [0-9.]+ [KMGT]?i?B more by step [0-9]+ \\(checkpoint.keep "
                           "1000000000, and each new one written before the oldest goes\\), so that checkpoint "
                           "would fail with the disk full");
  CHECK(std::regex_search(o.output, warning));
  const Outcome fits = job.check("small", 2);
  CHECK(fits.exit_code == 0);
  CHECK(fits.output.find("disk full") == std::string::npos);
}

TEST_CASE("the stdout of --dry-run is the plan's JSON alone when the plan warns: warnings go to stderr", "[e2e][faults]") {
  Job job("dryrunwarn");
  job.spec()["train"]["warmup_steps"] = 40;
  const fs::path spec = job.dir() / "warm.json", out = job.dir() / "stdout", err = job.dir() / "stderr";
  std::ofstream(spec) << job.spec().dump(2);
  const std::string xlaunch = std::string(XTRAIN_BIN_DIR) + "/xlaunch";
  const pid_t pid = spawn({"/bin/sh", "-c",
                           "'" + xlaunch + "' '" + spec.string() + "' --run-dir '" + job.run_dir("warm").string() +
                               "' --dry-run >'" + out.string() + "' 2>'" + err.string() + "'"},
                          job.dir() / "sh.out", {});
  REQUIRE(wait_for(pid, 60s) == 0);
  INFO(read_text(out));
  CHECK(json::parse(read_text(out)).at("spec").at("train").at("warmup_steps") == 40);
  CHECK_THAT(read_text(err), Catch::Matchers::StartsWith("xlaunch: warning: train.warmup_steps 40 >= train.steps 20"));
}

TEST_CASE("a vocabulary beyond bytes on text is a warning of the plan", "[e2e][faults]") {
  Job job("vocabwarning");
  const Outcome o = job.check("vocab", 2, {"model.vocab_size=50257"});
  INFO(o.output);
  CHECK(o.exit_code == 0);
  CHECK(o.output.find("model.vocab_size is 50257 but data.train (" + job.spec()["data"]["train"].get<std::string>() +
                      ") is text, one token per byte: ids 256 and up never occur in it; for GPT-2's tokens make "
                      "llm.c token shards of the text with xtrain-data") != std::string::npos);
  const Outcome bytes = job.check("bytes", 2);
  CHECK(bytes.exit_code == 0);
  CHECK(bytes.output.find("never occur") == std::string::npos);
}

TEST_CASE("validation windows that score each token many times over are a warning of the plan", "[e2e][faults]") {
  Job job("valwarning");
  const std::vector<std::string> val = {"train.eval_every=5", "data.val_fraction=0.01"};
  std::vector<std::string> many = val;
  many.push_back("train.eval_batches=1000");
  const Outcome o = job.check("many", 2, many);
  INFO(o.output);
  CHECK(o.exit_code == 0);
  CHECK_THAT(o.output, Catch::Matchers::Matches(
                           "(.|\\n)*train\\.eval_batches 1000: each validation scores 8,000 windows of 16 tokens, but "
                           "the [0-9,]+ validation tokens hold [0-9,]+ side by side, so the windows overlap and each "
                           "token is scored about [0-9]+ times; [0-9]+ batches would score each about once(.|\\n)*"));
  const Outcome few = job.check("few", 2, val);
  CHECK(few.exit_code == 0);
  CHECK(few.output.find("overlap") == std::string::npos);
}

TEST_CASE("a SIGTERM in xlaunch's first moments ends with 143, with a summary once a run dir exists",
          "[e2e][faults]") {
  Job job("earlyterm");
  const fs::path spec = job.dir() / "early.json";
  std::ofstream(spec) << job.spec().dump(2);
  const std::vector<std::string> run = {spec.string(), "--run-dir", job.run_dir("early").string(),
                                        "--nproc-per-node", "2"};
  SECTION("--check") {
    std::vector<std::string> args = run;
    args.push_back("--check");
    const Outcome o = launch_with_pending_sigterm(job, args, "check");
    INFO(o.output);
    CHECK(o.exit_code == 143);
    CHECK(o.output.find("received SIGTERM before any rank started") != std::string::npos);
  }
  SECTION("a run") {
    const Outcome o = launch_with_pending_sigterm(job, run, "run");
    INFO(o.output);
    CHECK(o.exit_code == 143);
    CHECK(fs::exists(job.run_dir("early") / "summary.json"));
  }
}

TEST_CASE("a run dir whose disk fills: the rank that hit ENOSPC is the root cause, and summary.json is "
          "still written", "[e2e][faults]") {
  Job job("fulldisk");
  for (int trial = 0; trial < 2; ++trial) {
    const std::string run = "run" + std::to_string(trial);
    Tmpfs disk(job.run_dir(run), "2m");  // room for the reserve (1 MiB) and the first files
    if (!disk.mounted) {
      WARN("skipped: mounting a tmpfs needs root (CI runs as root)");
      return;
    }
    const pid_t xlaunch = job.start(run, 2, {"train.steps=100000", "checkpoint.every=100", "launcher.tee=none"});
    wait_for_step(job.run_dir(run), 3);
    {  // another program takes every free byte: the next checkpoint, result files and logs find none
      std::ofstream filler(job.run_dir(run) / "filler", std::ios::binary);
      const std::string block(64 * 1024, 'x');
      while (filler.write(block.data(), static_cast<std::streamsize>(block.size()))) filler.flush();
    }
    const int code = wait_for(xlaunch, 120s);
    const std::string output = read_text(job.dir() / (run + ".out"));
    INFO("trial " << trial << "\n" << output);
    CHECK(code == 1);
    CHECK(output.find("No space left on device") != std::string::npos);
    REQUIRE(fs::exists(job.run_dir(run) / "summary.json"));
    const json summary = json::parse(read_text(job.run_dir(run) / "summary.json"));
    CHECK(summary.at("root_cause").at("rank") == 0);
    CHECK(summary.at("root_cause").at("message").get<std::string>().find("No space left on device") !=
          std::string::npos);
    CHECK(output.find("summary in " + (job.run_dir(run) / "summary.json").string()) != std::string::npos);
  }
}
