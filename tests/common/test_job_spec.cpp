#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/job_spec.hpp"

using namespace xtrain;
using nlohmann::json;

namespace {

// The message a spec produces, or "" when it parses.
std::string error_of(const json& doc) {
  try {
    parse_job_spec(doc, "t");
  } catch (const SpecError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("an empty spec gets every default", "[spec]") {
  const JobSpec s = parse_job_spec(json::object(), "demo");
  CHECK(s.name == "demo");
  CHECK(s.run_dir == "runs/demo");
  CHECK_FALSE(s.nproc_per_node.has_value());
  CHECK(s.launcher.term_timeout_s == 10.0);
  CHECK(s.launcher.preempt_grace_s == 0);  // off: SIGTERM stops the ranks at once
  CHECK(s.launcher.tee == "all");
  CHECK(s.model.vocab_size == 256);
  CHECK(s.checkpoint.resume == "auto");
  CHECK(s.worker.command.empty());
  CHECK(s.train.deterministic);
}

TEST_CASE("values are read into the typed struct", "[spec]") {
  const JobSpec s = parse_job_spec(json::parse(R"({
    "name": "x", "nproc_per_node": 4, "device": "cpu",
    "worker": {"command": ["/bin/echo", "hi"], "env": {"A": "1", "B": 2, "C": true}},
    "launcher": {"term_timeout_s": 2.5, "max_restarts": 3, "tee": "rank0"},
    "model": {"n_layer": 2, "init_seed": 7}, "train": {"lr": 0.001, "steps": 5, "deterministic": false}
  })"));
  CHECK(s.run_dir == "runs/x");
  CHECK(s.nproc_per_node == 4);
  CHECK(s.worker.command == std::vector<std::string>{"/bin/echo", "hi"});
  CHECK(s.worker.env.at("B") == "2");
  CHECK(s.worker.env.at("C") == "true");
  CHECK(s.launcher.term_timeout_s == 2.5);
  CHECK(s.launcher.max_restarts == 3);
  CHECK(s.model.n_layer == 2);
  CHECK(s.model.init_seed == 7);
  CHECK(s.train.lr == 0.001);
  CHECK_FALSE(s.train.deterministic);
}

TEST_CASE("errors name the field by JSON path and say what was expected", "[spec]") {
  CHECK(error_of(json::parse(R"({"launcher": {"term_timeout_s": "ten"}})")) ==
        R"(launcher.term_timeout_s: expected a number >= 0, got "ten")");
  CHECK(error_of(json::parse(R"({"launcher": {"term_timeout_s": -1}})")) ==
        "launcher.term_timeout_s: expected a number >= 0, got -1");
  CHECK(error_of(json::parse(R"({"launcher": {"preempt_grace_s": -30}})")) ==
        "launcher.preempt_grace_s: expected a number >= 0, got -30");
  CHECK(error_of(json::parse(R"({"launcher": {"preempt_grace_s": "1m"}})")) ==
        R"(launcher.preempt_grace_s: expected a number >= 0, got "1m")");
  CHECK(error_of(json::parse(R"({"nproc_per_node": 0})")) ==
        R"(nproc_per_node: expected "auto" or an integer >= 1, got 0)");
  CHECK(error_of(json::parse(R"({"nproc_per_node": "many"})")) ==
        R"(nproc_per_node: expected "auto" or an integer >= 1, got "many")");
  CHECK(error_of(json::parse(R"({"train": {"steps": 2.5}})")) ==
        "train.steps: expected an integer >= 1, got 2.5");
  CHECK(error_of(json::parse(R"({"launcher": {"max_restarts": -2}})")) ==
        "launcher.max_restarts: expected an integer >= 0 and <= 1000, got -2");
  CHECK(error_of(json::parse(R"({"train": {"deterministic": "no"}})")) ==
        R"(train.deterministic: expected true or false, got "no")");
  CHECK(error_of(json::parse(R"({"train": {"deterministic": 0}})")) ==
        "train.deterministic: expected true or false, got 0");
  CHECK(error_of(json::parse(R"({"device": "tpu"})")) ==
        R"(device: expected one of "auto", "cuda", "cpu", got "tpu")");
  CHECK(error_of(json::parse(R"({"worker": {"command": []}})")) ==
        "worker.command: expected a non-empty list of strings (argv), got []");
  CHECK(error_of(json::parse(R"({"worker": {"command": ["a", 3]}})")) ==
        "worker.command[1]: expected a non-empty string, got 3");
  CHECK(error_of(json::parse(R"({"worker": {"env": {"X": [1]}}})")) ==
        "worker.env.X: expected a string, number or boolean, got [1]");
  CHECK(error_of(json::parse(R"({"worker": {"env": {"RANK": "3"}}})")) ==
        "worker.env.RANK: is set by xlaunch for each rank and cannot be overridden");
  CHECK(error_of(json::parse(R"({"launcher": 5})")) == "launcher: expected an object, got 5");
  CHECK(error_of(json::parse(R"([1, 2])")) == "expected an object, got [1,2]");
  CHECK(error_of(json::parse(R"({"train": {"lr": 0.1, "min_lr": 0.2}})")) ==
        "train.min_lr: expected a number <= train.lr (0.1), got 0.2");
  CHECK(error_of(json::parse(R"({"nodes": {"nnodes": 2, "node_rank": 2}})")) ==
        "nodes.node_rank: expected an integer < nodes.nnodes (2), got 2");
  CHECK(error_of(json::parse(R"({"nodes": {"keepalive_interval_s": 5}})")) ==
        "nodes.keepalive_timeout_s: expected a number > nodes.keepalive_interval_s (5), got 3");
  CHECK(error_of(json::parse(R"({"nodes": {"keepalive_interval_s": 0}})")) ==
        "nodes.keepalive_interval_s: expected a number >= 0.01 and <= 3600, got 0");
  CHECK(error_of(json::parse(R"({"name": "a/b"})")) == R"(name: expected a name without '/', got "a/b")");
  // JSON may hold a NUL (\u0000); a path, an argument or an environment value cannot: the system would
  // end the string there, so "runs/a\u0000b" would silently be runs/a.
  CHECK(error_of(json::parse(R"({"run_dir": "runs/a\u0000b"})")) ==
        R"(run_dir: expected a string without NUL characters (\u0000), got "runs/a\u0000b")");
  CHECK(error_of(json::parse(R"({"worker": {"command": ["a", "b\u0000"]}})")) ==
        R"(worker.command[1]: expected a string without NUL characters (\u0000), got "b\u0000")");
  CHECK(error_of(json::parse(R"({"worker": {"env": {"X": "\u0000"}}})")) ==
        R"(worker.env.X: expected a string without NUL characters (\u0000), got "\u0000")");
  CHECK(error_of(json::parse(R"({"worker": {"env": {"X\u0000": "1"}}})")) ==
        R"(worker.env: expected environment variable names without '=' or NUL characters, got "X\u0000")");
  CHECK(error_of(json::parse(R"({"worker": {"env": {"A=B": "1"}}})")) ==
        R"(worker.env: expected environment variable names without '=' or NUL characters, got "A=B")");
  // Nothing but a shell expands "~": taken as it is, it would be a directory named "~".
  CHECK(error_of(json::parse(R"({"run_dir": "~/runs/x"})")) ==
        R"(run_dir: "~/runs/x" would be a directory named "~" here: "~" is expanded by shells, not in a spec or a )"
        R"(quoted argument: write )" + std::string(std::getenv("HOME")) + "/runs/x");
  CHECK(error_of(json::parse(R"({"device": "cpu", "backend": "nccl"})")) ==
        R"(backend: "nccl" needs GPUs, but device is "cpu"; use "gloo" or "auto")");
}

TEST_CASE("train.eval_multiple_choice: off by default, a path and a count, only with validation", "[spec]") {
  const JobSpec off = parse_job_spec(json::object());
  CHECK(off.train.eval_multiple_choice.empty());
  CHECK(off.train.eval_multiple_choice_examples == 0);  // all
  const JobSpec on = parse_job_spec(json::parse(
      R"({"train": {"eval_every": 50, "eval_multiple_choice": "hellaswag_val.bin", "eval_multiple_choice_examples": 500}})"));
  CHECK(on.train.eval_multiple_choice == "hellaswag_val.bin");
  CHECK(on.train.eval_multiple_choice_examples == 500);
  CHECK(error_of(json::parse(R"({"train": {"eval_multiple_choice": "mc.bin"}})")) ==
        "train.eval_multiple_choice: is scored at each validation, but train.eval_every is 0 (none); set "
        "train.eval_every");
  CHECK(error_of(json::parse(R"({"train": {"eval_every": 5, "eval_multiple_choice": 3}})")) ==
        "train.eval_multiple_choice: expected a non-empty string, got 3");
  CHECK(error_of(json::parse(R"({"train": {"eval_multiple_choice_examples": -1}})")) ==
        "train.eval_multiple_choice_examples: expected an integer >= 0, got -1");
}

TEST_CASE("each other trainer's name of a key leads to a key the spec has", "[spec]") {
  const nlohmann::json all = to_json(JobSpec{});
  CHECK(other_trainer_key_names().size() >= 30);
  for (const auto& [name, ours] : other_trainer_key_names()) {
    INFO(name << " -> " << ours);
    REQUIRE(ours.find('.') != std::string::npos);
    const std::string section = ours.substr(0, ours.find('.'));
    CHECK(all.at(section).contains(ours.substr(section.size() + 1)));
    CHECK_FALSE(all.contains(name));  // not a key of ours itself
  }
}

TEST_CASE("unknown keys are errors, with a suggestion when one is close", "[spec]") {
  const std::string typo = error_of(json::parse(R"({"train": {"stpes": 10}})"));
  CHECK_THAT(typo, Catch::StartsWith(R"(train.stpes: unknown key (did you mean "steps"?); expected one of: steps, )"));
  const std::string far = error_of(json::parse(R"({"colour": "blue"})"));
  CHECK_THAT(far, Catch::StartsWith("colour: unknown key; expected one of: name, run_dir,"));
  // Other trainers' names for our keys, in the section that has the key.
  CHECK_THAT(error_of(json::parse(R"({"train": {"learning_rate": 0.001}})")),
             Catch::StartsWith(R"(train.learning_rate: unknown key (did you mean "lr"?); expected one of: steps, )"));
  CHECK_THAT(error_of(json::parse(R"({"train": {"max_iters": 5000}})")),
             Catch::StartsWith(R"(train.max_iters: unknown key (did you mean "steps"?))"));
  CHECK_THAT(error_of(json::parse(R"({"model": {"block_size": 1024}})")),
             Catch::StartsWith(R"(model.block_size: unknown key (did you mean "seq_len"?))"));
  CHECK_THAT(error_of(json::parse(R"({"checkpoint": {"save_every": 100}})")),
             Catch::StartsWith(R"(checkpoint.save_every: unknown key (did you mean "every"?))"));
  // Flat, as nanoGPT's configs are, or in another section: where our key is.
  CHECK_THAT(error_of(json::parse(R"({"learning_rate": 0.001})")),
             Catch::StartsWith(R"(learning_rate: unknown key (did you mean "train.lr"?))"));
  CHECK_THAT(error_of(json::parse(R"({"model": {"learning_rate": 0.001}})")),
             Catch::StartsWith(R"(model.learning_rate: unknown key (did you mean "train.lr"?))"));
  CHECK_THAT(error_of(json::parse(R"({"train": {"save_every": 100}})")),
             Catch::StartsWith(R"(train.save_every: unknown key (did you mean "checkpoint.every"?))"));
  CHECK_THAT(error_of(json::parse(R"({"train": {"block_size": 1024}})")),
             Catch::StartsWith(R"(train.block_size: unknown key (did you mean "model.seq_len"?))"));
  // A key of another section: where it belongs.
  CHECK_THAT(error_of(json::parse(R"({"steps": 100})")),
             Catch::StartsWith(R"(steps: unknown key (did you mean "train.steps"?))"));
  CHECK_THAT(error_of(json::parse(R"({"train": {"n_layer": 4}})")),
             Catch::StartsWith(R"(train.n_layer: unknown key (did you mean "model.n_layer"?))"));
  CHECK_THAT(error_of(json::parse(R"({"train": {"run_dir": "x"}})")),
             Catch::StartsWith(R"(train.run_dir: unknown key (did you mean "run_dir"?))"));
}

TEST_CASE("train.precision is resolved per device, and the old key and tf32 on CPU are errors naming the field",
          "[spec][precision]") {
  CHECK(error_of(json::parse(R"({"train": {"matmul_precision": "tf32"}})")) ==
        R"(train.matmul_precision: was replaced by train.precision: "auto" (bf16 on CUDA, fp32 on CPU), "bf16", "tf32" or "fp32")");
  CHECK(error_of(json::parse(R"({"train": {"precision": "fp16"}})")) ==
        R"(train.precision: expected one of "auto", "bf16", "tf32", "fp32", got "fp16")");
  const auto resolved = [](const char* value, const char* device) {
    TrainSpec t;
    t.precision = value;
    return resolve_precision(t, device);
  };
  CHECK(resolved("auto", "cuda") == Precision::bf16);
  CHECK(resolved("auto", "cpu") == Precision::fp32);
  CHECK(resolved("bf16", "cpu") == Precision::bf16);  // the emulation
  CHECK(resolved("tf32", "cuda") == Precision::tf32);
  CHECK(resolved("fp32", "cuda") == Precision::fp32);
  CHECK_THROWS_WITH(resolved("tf32", "cpu"),
                    Catch::StartsWith(R"(train.precision: "tf32" is a tensor-core mode of CUDA GPUs)") &&
                        Catch::Contains(R"(use "fp32")"));
  CHECK(std::string(precision_name(Precision::bf16)) == "bf16");
}

TEST_CASE("overrides set fields by dotted path, as JSON or a plain string", "[spec][override]") {
  json doc = json::parse(R"({"launcher": {"term_timeout_s": 10}})");
  apply_override(doc, "launcher.term_timeout_s=2");
  apply_override(doc, "nproc_per_node=auto");
  apply_override(doc, "worker.env.FOO=bar baz");
  apply_override(doc, "worker.command=[\"/bin/true\"]");
  apply_override(doc, "train.lr=1e-3");
  apply_override(doc, "train.deterministic=false");
  const JobSpec s = parse_job_spec(doc);
  CHECK(s.launcher.term_timeout_s == 2);
  CHECK_FALSE(s.nproc_per_node.has_value());
  CHECK(s.worker.env.at("FOO") == "bar baz");
  CHECK(s.worker.command == std::vector<std::string>{"/bin/true"});
  CHECK(s.train.lr == 1e-3);
  CHECK_FALSE(s.train.deterministic);

  CHECK_THROWS_WITH(apply_override(doc, "novalue"),
                    R"(--set: expected KEY=VALUE with a dotted KEY, got "novalue")");
  CHECK_THROWS_WITH(apply_override(doc, "a..b=1"), R"(--set: empty component in key "a..b")");
  CHECK_THROWS_WITH(apply_override(doc, "train.lr.x=1"),
                    "train.lr: --set train.lr.x=1: cannot set a field inside a number");
  apply_override(doc, "launcher.tee=loud");  // type-checked by the parser, like any spec value
  CHECK(error_of(doc) == R"(launcher.tee: expected one of "all", "rank0", "none", got "loud")");
}

TEST_CASE("to_json round-trips every field", "[spec]") {
  JobSpec s = parse_job_spec(json::parse(R"({"nproc_per_node": 3, "worker": {"env": {"A": "b"}},
                                             "train": {"lr": 0.01, "deterministic": false}, "checkpoint": {"keep": 5}})"),
                             "rt");
  const json out = to_json(s);
  CHECK(out.at("nproc_per_node") == 3);
  CHECK(out.at("train").at("lr") == 0.01);
  CHECK(out.at("train").at("deterministic") == false);
  const JobSpec back = parse_job_spec(out, "other");
  CHECK(to_json(back) == out);
  CHECK(back.name == "rt");
  s.nproc_per_node.reset();
  CHECK(to_json(s).at("nproc_per_node") == "auto");
}

TEST_CASE("training checks need the world size", "[spec]") {
  JobSpec s = parse_job_spec(json::parse(R"({"data": {"train": "x.txt"},
      "train": {"batch_size": 8, "micro_batch_size": 2}, "model": {"n_embd": 64, "n_head": 4}})"));
  CHECK_NOTHROW(validate_for_training(s, 4));
  CHECK_NOTHROW(validate_for_training(s, 2));
  CHECK_THROWS_WITH(validate_for_training(s, 3),
                    "train.batch_size: expected a multiple of world size x train.micro_batch_size "
                    "(3 x 2 = 6), got 8");
  s.model.n_head = 5;
  CHECK_THROWS_WITH(validate_for_training(s, 1), "model.n_embd: expected a multiple of model.n_head (5), got 64");
  s.model.n_head = 4;
  s.model.n_embd = 68;  // a multiple of 4 heads and even: accepted
  CHECK_NOTHROW(validate_for_training(s, 1));
  s.model.n_embd = 63;
  s.model.n_head = 3;
  CHECK_THROWS_WITH(validate_for_training(s, 1),
                    "model.n_embd: expected an even number (the MLP's fused GELU product needs 4 x n_embd to be a "
                    "multiple of 8), got 63");
  s.model.n_embd = 64;
  s.model.n_head = 4;
  s.data.train.clear();
  CHECK_THROWS_AS(validate_for_training(s, 1), SpecError);
}

TEST_CASE("malformed JSON names the file, line and column", "[spec]") {
  const std::string path = "/tmp/xtrain-spec-test-" + std::to_string(::getpid()) + ".json";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("{\n  \"name\": \"x\",\n  oops\n}\n", f);
    std::fclose(f);
  }
  try {
    read_job_json(path);
    FAIL("malformed JSON was accepted");
  } catch (const SpecError& e) {
    CHECK_THAT(std::string(e.what()), Catch::StartsWith(path + ": malformed JSON: parse error at line 3, column 3"));
  }
  std::remove(path.c_str());
  CHECK_THROWS_WITH(read_job_json("/nonexistent/job.json"),
                    "/nonexistent/job.json: cannot read the job spec (No such file or directory)");
}

TEST_CASE("docs/job-spec.md documents every key", "[spec][docs]") {
  std::ifstream in(std::string(XTRAIN_SOURCE_DIR) + "/docs/job-spec.md");
  REQUIRE(in);
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  JobSpec s;  // defaults; fill the keys that are left out when empty
  s.worker.command = {"w"};
  s.nodes.rdzv_endpoint = "h:1";
  s.data.train = s.data.val = "d";
  s.model.init_from = s.tokenizer = "m";
  const json flat = to_json(s).flatten();
  for (const auto& item : flat.items()) {
    std::string key = item.key().substr(1);  // "/launcher/tee" -> "launcher.tee"
    std::replace(key.begin(), key.end(), '/', '.');
    const auto index = key.find(".0");
    if (index != std::string::npos) key = key.substr(0, index);  // list items
    INFO(key);
    CHECK(doc.find("`" + key + "`") != std::string::npos);
  }
}

TEST_CASE("every spec in configs/ is valid, at one rank and at its own nproc_per_node", "[spec][configs]") {
  int specs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(XTRAIN_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".json") continue;
    INFO(entry.path());
    const JobSpec spec = parse_job_spec(read_job_json(entry.path().string()), entry.path().stem().string());
    CHECK_NOTHROW(validate_for_training(spec, 1));
    if (spec.nproc_per_node) CHECK_NOTHROW(validate_for_training(spec, *spec.nproc_per_node));
    ++specs;
  }
  CHECK(specs >= 2);
}

TEST_CASE("configs/gpt2-124m.json is GPT-2 small with llm.c's batch of 0.5M tokens on 1 to 8 GPUs",
          "[spec][configs]") {
  const JobSpec spec = parse_job_spec(read_job_json(std::string(XTRAIN_SOURCE_DIR) + "/configs/gpt2-124m.json"));
  CHECK(spec.model.n_layer == 12);
  CHECK(spec.model.n_head == 12);
  CHECK(spec.model.n_embd == 768);
  CHECK(spec.model.seq_len == 1024);
  CHECK(spec.model.vocab_size == 50257);
  CHECK(spec.device == "cuda");
  CHECK(spec.train.micro_batch_size == 16);
  CHECK(spec.train.batch_size * spec.model.seq_len == 524288);
  for (int gpus : {1, 2, 4, 8}) CHECK_NOTHROW(validate_for_training(spec, gpus));
}
