// torchrun's command line resolved into plans on a fake host: what each flag becomes in the spec,
// the program's argv, the rendezvous flags against the spec's nodes, and errors named by the flag.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>

#include <sys/stat.h>

#include "common/exit_codes.hpp"
#include "common/job_spec.hpp"
#include "harness.hpp"
#include "launcher/cli/host.hpp"
#include "launcher/cli/torchrun.hpp"
#include "launcher/plan/plan.hpp"
#include "launcher/run/launch_error.hpp"

using namespace xtrain;
using namespace xtrain::launcher;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
namespace fs = std::filesystem;

namespace {

// A fresh directory holding a fake python3 (on the fake host's PATH) and a script, and a host
// with 8 cores and no GPU unless a test says otherwise.
struct Fixture {
  xtrain::test::TempDir dir;
  HostInfo host;

  Fixture() {
    fs::create_directory(path("bin"));
    for (const char* exe : {"bin/python3", "bin/worker"}) {
      std::ofstream(path(exe)) << "#!/bin/sh\n";
      ::chmod(path(exe).c_str(), 0755);
    }
    std::ofstream(path("train.py")) << "print('hi')\n";
    host.cores = 8;
    host.exe_dir = dir.path();
    host.environment = {{"PATH", path("bin") + ":/usr/bin:/bin"}};
  }

  std::string path(const std::string& name) const { return dir / name; }

  // parse_cli + make_plan, with the run dir inside the fixture unless the arguments choose one.
  Plan plan(std::vector<std::string> args, bool own_run_dir = true) {
    if (own_run_dir) args.insert(args.begin(), {"--run-dir", path("run")});
    return make_plan(parse_cli(args, host.environment), host);
  }
  std::string spec(const std::string& json) {
    std::ofstream(path("job.json")) << json;
    return path("job.json");
  }
  // The message of the `Error` that planning `args` throws.
  template <class Error>
  std::string error_of(const std::vector<std::string>& args) {
    try {
      plan(args);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }
  std::string spec_error(const std::vector<std::string>& args) { return error_of<SpecError>(args); }
  std::string cli_error(const std::vector<std::string>& args) { return error_of<CliError>(args); }
  // The environment a Kubeflow PyTorchJob gives node `rank` of 2 (by IP address), and a job token.
  void kubeflow_pod(int rank) {
    host.environment["PET_NNODES"] = "2";
    host.environment["PET_NPROC_PER_NODE"] = "2";
    host.environment["PET_NODE_RANK"] = std::to_string(rank);
    host.environment["PET_MASTER_ADDR"] = "10.0.0.1";
    host.environment["PET_MASTER_PORT"] = "23456";
    host.environment["XTRAIN_JOB_TOKEN"] = "secret";
  }
};

}  // namespace

TEST_CASE("launcher/torchrun: a torchrun command line becomes a plan", "[torchrun]") {
  Fixture f;
  const Plan plan = f.plan({"--standalone", "--nproc_per_node=2", "--max_restarts=3", "--redirects", "3", "--tee",
                            "0:3", "--monitor_interval=0.1", "--no_python", "worker", "--epochs", "1"});
  CHECK(plan.ranks.size() == 2);
  CHECK(plan.worker_argv == std::vector<std::string>{f.path("bin/worker"), "--epochs", "1"});
  CHECK(plan.spec.launcher.max_restarts == 3);
  CHECK(plan.spec.launcher.tee == "rank0");
  CHECK(plan.spec.nodes.nnodes == 1);
  CHECK(plan.spec.name == "worker");
  CHECK_FALSE(plan.own_worker);
}

TEST_CASE("launcher/torchrun: ranks per node as torchrun counts them", "[torchrun]") {
  Fixture f;
  const std::string train = f.path("train.py");
  CHECK(f.plan({train}).ranks.size() == 1);  // torchrun's default
  CHECK(f.plan({"--nproc-per-node", "3", train}).ranks.size() == 3);
  CHECK(f.plan({"--nproc-per-node", "auto", train}).ranks.size() == 8);  // no GPU: one per core
  const Plan cpu = f.plan({"--nproc-per-node", "cpu", train});
  CHECK(cpu.ranks.size() == 8);
  CHECK(cpu.device == "cpu");
  CHECK_THAT(f.spec_error({"--nproc-per-node", "gpu", train}),
             StartsWith("--nproc-per-node gpu: \"cuda\" needs a visible GPU, found none"));
  f.host.physical_gpus = 4;
  f.host.cuda_visible_devices = "1,2";
  const Plan gpu = f.plan({"--nproc-per-node", "gpu", train});
  CHECK(gpu.ranks.size() == 2);
  CHECK(gpu.device == "cuda");
  CHECK(f.plan({"--nproc-per-node", "auto", train}).ranks.size() == 2);
  // More ranks than GPUs under NCCL (what "auto" picks on GPUs): refused, naming the flag.
  CHECK_THAT(f.spec_error({"--nproc-per-node", "3", train}),
             StartsWith("--nproc-per-node 3: expected at most the 2 visible GPUs (one per rank, as NCCL needs; "
                        "CUDA_VISIBLE_DEVICES=\"1,2\"), got 3"));
  // With a spec, "auto" and "cpu" keep the spec's meaning of CPU ranks.
  f.host.physical_gpus = 0;
  f.host.cuda_visible_devices.reset();
  const std::string job = f.spec(R"({"cpu_ranks": 3, "worker": {"command": ["worker"]}})");
  CHECK(f.plan({job, "--nproc-per-node", "cpu"}).ranks.size() == 3);
}

TEST_CASE("launcher/torchrun: .py and -m run with PYTHON_EXEC or python3 -u as torchrun does", "[torchrun]") {
  Fixture f;
  const std::string script = f.path("train.py");
  CHECK(f.plan({script, "--lr", "1"}).worker_argv ==
        std::vector<std::string>{f.path("bin/python3"), "-u", script, "--lr", "1"});
  CHECK(f.plan({"-m", "pkg.train", "x"}).worker_argv ==
        std::vector<std::string>{f.path("bin/python3"), "-u", "-m", "pkg.train", "x"});
  CHECK(f.plan({"--run-path", "--no-python", script}).worker_argv ==
        std::vector<std::string>{f.path("bin/python3"), "-u", script});
  CHECK(f.plan({"-m", "pkg.train"}).spec.name == "train");
  f.host.environment[torchrun::kPythonVariable] = f.path("bin/worker");
  CHECK(f.plan({script}).worker_argv == std::vector<std::string>{f.path("bin/worker"), "-u", script});

  try {
    f.plan({f.path("missing.py")});
    FAIL("a missing script was accepted");
  } catch (const LaunchError& e) {
    CHECK(e.exit_code() == exit_code::kNotFound);
    CHECK_THAT(e.what(), Contains("the script \"" + f.path("missing.py") + "\" is not a file"));
  }
  f.host.environment[torchrun::kPythonVariable] = "no-such-python";
  try {
    f.plan({script});
    FAIL("a missing interpreter was accepted");
  } catch (const LaunchError& e) {
    CHECK(e.exit_code() == exit_code::kNotFound);
    CHECK_THAT(e.what(), StartsWith("the Python interpreter (PYTHON_EXEC): \"no-such-python\" not found in PATH"));
  }
}

TEST_CASE("launcher/torchrun: rendezvous flags become nodes and the master port", "[torchrun]") {
  Fixture f;
  // c10d's form: the endpoint gets torchrun's default port; --rdzv-id opens the store.
  Plan plan = f.plan({"--nnodes", "2", "--node-rank", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "node0",
                      "--rdzv-id", "job7", "worker"});
  CHECK(plan.spec.nodes.nnodes == 2);
  CHECK(plan.spec.nodes.node_rank == 1);
  CHECK(plan.spec.nodes.rdzv_endpoint == "node0:29400");
  CHECK(plan.job_token == "rdzv-id:job7");
  CHECK(plan.ranks.front().rank == 1);
  // The static form: node 0's store at --master-addr:--master-port; XTRAIN_JOB_TOKEN wins over --rdzv-id.
  f.host.environment["XTRAIN_JOB_TOKEN"] = "secret";
  plan = f.plan({"--nnodes=2", "--node_rank=0", "--master_addr=10.0.0.1", "--master_port=1234", "--rdzv-id", "j",
                 "worker"});
  CHECK(plan.spec.nodes.rdzv_endpoint == "10.0.0.1:1234");
  CHECK(plan.job_token == "secret");
  CHECK(f.plan({"--nnodes=2", "--node_rank=0", "--master_addr=h", "worker"}).spec.nodes.rdzv_endpoint == "h:29500");
  // One node: --master-port is MASTER_PORT.
  plan = f.plan({"--master-addr", "127.0.0.1", "--master-port", "4321", "worker"});
  CHECK(plan.spec.nodes.nnodes == 1);
  CHECK(plan.spec.launcher.master_port == 4321);
  // --standalone is one node whatever the spec says.
  const std::string job =
      f.spec(R"({"nodes": {"nnodes": 2, "node_rank": 1, "rdzv_endpoint": "h:1"}, "worker": {"command": ["worker"]}})");
  CHECK(f.plan({job}).spec.nodes.nnodes == 2);
  plan = f.plan({job, "--standalone"});
  CHECK(plan.spec.nodes.nnodes == 1);
  CHECK(plan.spec.nodes.node_rank == 0);
}

TEST_CASE("launcher/torchrun: spec errors caused by a flag name the flag", "[torchrun]") {
  Fixture f;
  CHECK_THAT(f.spec_error({"--nnodes", "2", "worker"}),
             StartsWith("--nnodes 2: a job on 2 nodes needs node 0's address, the same on every node: add "
                        "--rdzv-endpoint HOST:PORT"));
  CHECK_THAT(f.spec_error({"--nnodes", "2", "--rdzv-endpoint", "h:1", "worker"}),
             StartsWith("--nnodes 2: a job on 2 nodes needs --node-rank (or PET_NODE_RANK, or an Indexed Job's "
                        "JOB_COMPLETION_INDEX) on every node"));
  CHECK_THAT(f.spec_error({"--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "h:1", "worker"}),
             StartsWith("--nnodes 2: a job on 2 nodes needs a job token shared by every node"));
  CHECK_THAT(f.spec_error({"--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1", "worker"}),
             StartsWith("--node-rank 2: expected an integer < nodes.nnodes (2), got 2"));
  const std::string job = f.spec(R"({"nodes": {"nnodes": 2, "rdzv_endpoint": "h:1"}, "worker": {"command": ["w"]}})");
  CHECK_THAT(f.spec_error({job, "--node-rank", "3"}), StartsWith("--node-rank 3: expected an integer < nodes.nnodes"));
  // A key no flag set keeps the spec's own wording.
  const std::string bad = f.spec(R"({"launcher": {"tee": "some"}, "worker": {"command": ["worker"]}})");
  CHECK_THAT(f.spec_error({bad}), StartsWith("launcher.tee: expected one of"));
}

TEST_CASE("launcher/torchrun: a spec and flags combine and flags win in command-line order with --set", "[torchrun]") {
  Fixture f;
  const std::string job = f.spec(R"({"name": "mine", "nproc_per_node": 4, "launcher": {"max_restarts": 1},
                                     "worker": {"command": ["worker", "--from-spec"]}})");
  Plan plan = f.plan({job, "--max-restarts", "2", "--", "worker", "--from-flags"});
  CHECK(plan.ranks.size() == 4);
  CHECK(plan.spec.launcher.max_restarts == 2);
  CHECK(plan.worker_argv == std::vector<std::string>{f.path("bin/worker"), "--from-flags"});
  CHECK(plan.spec.name == "mine");
  CHECK(f.plan({job, "--set", "launcher.max_restarts=5", "--max-restarts", "2"}).spec.launcher.max_restarts == 2);
  CHECK(f.plan({job, "--max-restarts", "2", "--set", "launcher.max_restarts=5"}).spec.launcher.max_restarts == 5);
}

TEST_CASE("launcher/torchrun: a program run gets a fresh run dir and --log-dir is its parent", "[torchrun]") {
  Fixture f;
  const std::regex stamped(R"(.*/runs/train-\d{8}-\d{6}(-\d+)?)");
  CHECK(std::regex_match(f.plan({f.path("train.py")}, false).run_dir, stamped));
  const std::regex logged(f.path("logs") + R"(/worker-\d{8}-\d{6}(-\d+)?)");
  CHECK(std::regex_match(f.plan({"--log-dir", f.path("logs"), "worker"}, false).run_dir, logged));
  const std::string job = f.spec(R"({"name": "mine", "worker": {"command": ["worker"]}})");
  CHECK(f.plan({job, "--log-dir", f.path("logs")}, false).run_dir == f.path("logs/mine"));
}

TEST_CASE("launcher/torchrun: console_tee maps torchrun's stream values", "[torchrun]") {
  std::vector<std::string> notes;
  using torchrun::console_tee;
  CHECK(console_tee(std::nullopt, std::nullopt, notes) == "all");
  CHECK(console_tee("3", std::nullopt, notes) == "none");
  CHECK(console_tee("3", "3", notes) == "all");
  CHECK(console_tee("3", "0:3", notes) == "rank0");
  CHECK(console_tee("1:3,2:3", "1:3,2:3", notes) == "all");
  CHECK(notes.empty());
  CHECK(console_tee("0:1", std::nullopt, notes) == "all");  // local rank 0's stderr only: both shown, a note
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], StartsWith("--redirects/--tee: local rank 0 shows only its stderr under torchrun"));
  CHECK_THROWS_AS(console_tee("3", "2:3", notes), CliError);
  CHECK_THROWS_AS(console_tee("0:3", std::nullopt, notes), CliError);  // every rank but 0 on the console
}

TEST_CASE("launcher/torchrun: PET_* variables are the flags' defaults and the command line wins", "[torchrun]") {
  Fixture f;
  f.kubeflow_pod(1);
  Plan plan = f.plan({"worker"});
  CHECK(plan.spec.nodes.nnodes == 2);
  CHECK(plan.spec.nodes.node_rank == 1);
  CHECK(plan.spec.nodes.rdzv_endpoint == "10.0.0.1:23456");
  REQUIRE(plan.ranks.size() == 2);
  CHECK(plan.ranks.front().rank == 2);
  CHECK(plan.ranks.front().world_size == 4);
  // Flags win over the variables, --set wins over both, and the variables win over the spec.
  plan = f.plan({"--node-rank", "0", "--nproc-per-node", "1", "--master-port", "999", "worker"});
  CHECK(plan.spec.nodes.node_rank == 0);
  CHECK(plan.ranks.size() == 1);
  CHECK(plan.spec.nodes.rdzv_endpoint == "10.0.0.1:999");
  CHECK(f.plan({"--set", "nodes.node_rank=0", "worker"}).spec.nodes.node_rank == 0);
  const std::string job = f.spec(R"({"nproc_per_node": 3, "worker": {"command": ["worker"]}})");
  CHECK(f.plan({job}).ranks.size() == 2);
  // torchrun's c10d variables, a switch and the role.
  f.host.environment = {{"PATH", f.path("bin")}, {"PET_NNODES", "2"}, {"PET_NODE_RANK", "0"},
                        {"PET_RDZV_BACKEND", "c10d"}, {"PET_RDZV_ENDPOINT", "10.0.0.1"}, {"PET_RDZV_ID", "job9"},
                        {"PET_RDZV_CONF", "join_timeout=7"}, {"PET_MAX_RESTARTS", "3"}, {"PET_ROLE", "trainer"}};
  plan = f.plan({"worker"});
  CHECK(plan.spec.nodes.rdzv_endpoint == "10.0.0.1:29400");
  CHECK(plan.job_token == "rdzv-id:job9");
  CHECK(plan.spec.nodes.rdzv_timeout_s == 7);
  CHECK(plan.spec.launcher.max_restarts == 3);
  CHECK(plan.role == "trainer");
  f.host.environment["PET_STANDALONE"] = "0";
  CHECK(f.plan({"worker"}).spec.nodes.nnodes == 2);
  f.host.environment.erase("PET_NNODES");
  f.host.environment["PET_STANDALONE"] = "1";
  f.host.environment["PET_NODE_RANK"] = "1";
  plan = f.plan({"worker"});
  CHECK(plan.spec.nodes.nnodes == 1);
  CHECK(plan.spec.nodes.node_rank == 0);
}

TEST_CASE("launcher/torchrun: a malformed PET_* variable is an error naming it", "[torchrun]") {
  Fixture f;
  f.kubeflow_pod(0);
  f.host.environment["PET_NNODES"] = "two";
  CHECK_THAT(f.cli_error({"worker"}), StartsWith("PET_NNODES: expected an integer >= 1"));
  CHECK(f.plan({"--nnodes", "2", "worker"}).spec.nodes.nnodes == 2);  // the flag wins: the variable is not read
  f.host.environment["PET_NNODES"] = "1:4";
  CHECK_THAT(f.cli_error({"worker"}), StartsWith("PET_NNODES 1:4: elastic ranges (MIN:MAX) are not supported"));
  f.kubeflow_pod(0);
  f.host.environment["PET_MASTER_PORT"] = "http";
  CHECK_THAT(f.cli_error({"worker"}), StartsWith("PET_MASTER_PORT: expected an integer >= 1 and <= 65535, got \"http\""));
  f.kubeflow_pod(0);
  f.host.environment["PET_STANDALONE"] = "yes";
  CHECK_THAT(f.cli_error({"worker"}), StartsWith("PET_STANDALONE: expected an integer >= 0 and <= 1, got \"yes\""));
  f.host.environment.erase("PET_STANDALONE");
  f.host.environment["PET_LOCAL_ADDR"] = "10.0.0.2";
  CHECK_THAT(f.cli_error({"worker"}), StartsWith("PET_LOCAL_ADDR (torchrun's --local-addr) is not supported by xlaunch"));
  f.host.environment.erase("PET_LOCAL_ADDR");
  f.host.environment["PET_NODE_RANK"] = "2";
  CHECK_THAT(f.spec_error({"worker"}), StartsWith("PET_NODE_RANK 2: expected an integer < nodes.nnodes (2)"));
}

TEST_CASE("launcher/torchrun: JOB_COMPLETION_INDEX is the node rank where nothing else gives one", "[torchrun]") {
  Fixture f;
  f.kubeflow_pod(0);
  f.host.environment.erase("PET_NODE_RANK");
  f.host.environment["JOB_COMPLETION_INDEX"] = "1";
  CHECK(f.plan({"worker"}).spec.nodes.node_rank == 1);
  CHECK(f.plan({"--node-rank", "0", "worker"}).spec.nodes.node_rank == 0);
  f.host.environment["PET_NODE_RANK"] = "0";
  CHECK(f.plan({"worker"}).spec.nodes.node_rank == 0);
  const std::string job =
      f.spec(R"({"nodes": {"nnodes": 2, "node_rank": 0, "rdzv_endpoint": "h:1"}, "worker": {"command": ["worker"]}})");
  f.host.environment.erase("PET_NODE_RANK");
  f.host.environment.erase("PET_NNODES");
  CHECK(f.plan({job}).spec.nodes.node_rank == 0);  // the spec's
  // One node: the index means nothing to the job and is not read.
  f.host.environment["PET_NNODES"] = "1";
  f.host.environment["JOB_COMPLETION_INDEX"] = "x";
  CHECK(f.plan({"worker"}).spec.nodes.nnodes == 1);
  f.host.environment["PET_NNODES"] = "2";
  CHECK_THAT(f.spec_error({"worker"}),
             StartsWith("JOB_COMPLETION_INDEX: expected an integer >= 0 and <= 1, got \"x\" (the node rank of a job on 2 nodes)"));
  f.host.environment["JOB_COMPLETION_INDEX"] = "2";
  CHECK_THAT(f.spec_error({"worker"}), StartsWith("JOB_COMPLETION_INDEX: expected an integer >= 0 and <= 1, got \"2\""));
}
