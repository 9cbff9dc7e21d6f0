// Integration: invalid specs and command lines exit 2 naming the field, and start nothing.
#include <catch2/catch.hpp>

#include <filesystem>

#include "harness.hpp"

using namespace xtrain::test;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using nlohmann::json;

namespace {

struct InvalidSpec {
  const char* what;
  json patch;                      // merged into a valid spec (null: use `text`)
  std::string text;                // the spec file verbatim
  std::vector<std::string> args;   // extra command-line arguments
  std::string message;             // expected in the error
};

}  // namespace

TEST_CASE("launcher/specs: at least 20 kinds of invalid spec exit 2 naming the field and starting nothing",
          "[integration][spec]") {
  TempDir dir;
  write_file(dir / "a-file", "x");
  const std::vector<InvalidSpec> cases = {
      {"malformed JSON", nullptr, "{\"nproc_per_node\": 2,", {}, "malformed JSON: parse error at line 1"},
      {"not an object", nullptr, "[1, 2]", {}, "expected an object, got [1,2]"},
      {"unknown key", {{"nproc_per_nod", 2}}, "", {}, "nproc_per_nod: unknown key (did you mean \"nproc_per_node\"?)"},
      {"unknown nested key", {{"launcher", {{"term_timeout", 1}}}}, "", {}, "launcher.term_timeout: unknown key"},
      {"wrong type", {{"launcher", {{"term_timeout_s", "ten"}}}}, "", {},
       "launcher.term_timeout_s: expected a number >= 0, got \"ten\""},
      {"negative count", {{"launcher", {{"max_restarts", -1}}}}, "", {}, "launcher.max_restarts: expected an integer >= 0"},
      {"zero ranks", {{"nproc_per_node", 0}}, "", {}, "nproc_per_node: expected \"auto\" or an integer >= 1, got 0"},
      {"ranks as words", {{"nproc_per_node", "four"}}, "", {}, "nproc_per_node: expected \"auto\" or an integer"},
      {"negative heartbeat", {{"launcher", {{"heartbeat_timeout_s", -5}}}}, "", {}, "launcher.heartbeat_timeout_s:"},
      {"boolean timeout", {{"launcher", {{"timeout_s", true}}}}, "", {}, "launcher.timeout_s: expected a number"},
      {"bad tee", {{"launcher", {{"tee", "rank1"}}}}, "", {}, "launcher.tee: expected one of \"all\", \"rank0\""},
      {"port out of range", {{"launcher", {{"master_port", 70000}}}}, "", {}, "launcher.master_port: expected an integer"},
      {"section not an object", {{"launcher", 5}}, "", {}, "launcher: expected an object, got 5"},
      {"bad device", {{"device", "tpu"}}, "", {}, "device: expected one of"},
      {"bad backend", {{"backend", "mpi"}}, "", {}, "backend: expected one of"},
      {"nccl on cpu", {{"backend", "nccl"}}, "", {}, "backend: \"nccl\" needs GPUs"},
      {"missing worker command", {{"worker", {{"command", json::array()}}}}, "", {},
       "worker.command: expected a non-empty list of strings"},
      {"command as a string", {{"worker", {{"command", "python train.py"}}}}, "", {}, "worker.command: expected"},
      {"empty argv item", {{"worker", {{"command", {"x", ""}}}}}, "", {}, "worker.command[1]: expected a non-empty string"},
      {"env of lists", {{"worker", {{"env", {{"A", {1}}}}}}}, "", {}, "worker.env.A: expected a string, number or boolean"},
      {"env overriding RANK", {{"worker", {{"env", {{"RANK", "3"}}}}}}, "", {}, "worker.env.RANK: is set by xlaunch"},
      {"name with a slash", {{"name", "a/b"}}, "", {}, "name: expected a name without '/'"},
      {"unwritable run dir", {{"run_dir", dir / "a-file/run"}}, "", {}, "run_dir: cannot create"},
      {"node rank out of range", {{"nodes", {{"node_rank", 1}}}}, "", {}, "nodes.node_rank: expected an integer < nodes.nnodes"},
      {"our worker, bad model", {{"worker", {{"command", {"/nowhere/xtrain-worker"}}}}, {"model", {{"n_embd", 130}}}},
       "", {}, "model.n_embd: expected a multiple of model.n_head (4), got 130"},
      {"our worker, no data", {{"worker", {{"command", {"/nowhere/xtrain-worker"}}}}}, "", {}, "data.train:"},
      {"bad --set path", nullptr, "", {"--set", "name.x=1"}, "name: --set name.x=1: cannot set a field inside a string"},
      {"bad --nproc-per-node", nullptr, "", {"--nproc-per-node", "many"},
       "--nproc-per-node: expected a number >= 1, auto, gpu or cpu"},
      {"bad --set value", nullptr, "", {"--set", "launcher.term_timeout_s=-1"}, "launcher.term_timeout_s: expected"},
      {"--set of a number where a string goes", nullptr, "", {"--set", "name=7", "--set", "name=123"},
       "name: expected a non-empty string, got 123 (--set reads VALUE as JSON where it parses; "
       "for the string write --set 'name=\"123\"')"},
  };
  REQUIRE(cases.size() >= 20);
  for (const InvalidSpec& c : cases) {
    INFO(c.what);
    json spec = test_spec(dir, 2, {"--pid-dir", dir.path()});
    if (!c.patch.is_null()) spec.merge_patch(c.patch);
    std::vector<std::string> args = {c.text.empty() ? write_spec(dir, spec) : write_file(dir / "job.json", c.text)};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto r = run_xlaunch(args);
    REQUIRE(r);
    CHECK(r->exit_code == 2);
    CHECK_THAT(r->err, StartsWith("xlaunch: error: ") && Contains(c.message));
    CHECK_FALSE(exists(dir / "run"));
    CHECK_FALSE(exists(dir / "rank-0.pid"));
  }
}

TEST_CASE("launcher/specs: a missing spec file and bad command lines exit 2", "[integration][spec]") {
  TempDir dir;
  auto r = run_xlaunch({dir / "nope.json"});
  REQUIRE(r);
  CHECK(r->exit_code == 2);
  CHECK_THAT(r->err, Contains("nope.json: cannot read the job spec"));
  r = run_xlaunch({});
  REQUIRE(r);
  CHECK(r->exit_code == 2);
  CHECK_THAT(r->err, Contains("expected a job spec"));
  r = run_xlaunch({"--frob", "x.json"});
  REQUIRE(r);
  CHECK(r->exit_code == 2);
  CHECK_THAT(r->err, Contains("unknown option --frob"));
  r = run_xlaunch({"--help"});
  REQUIRE(r);
  CHECK(r->exit_code == 0);
  CHECK_THAT(r->out, StartsWith("usage: xlaunch"));
}
