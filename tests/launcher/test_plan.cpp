#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <sys/stat.h>
#include <unistd.h>

#include "common/exit_codes.hpp"
#include "common/job_spec.hpp"
#include "common/slurm.hpp"
#include "launcher/cli/host.hpp"
#include "launcher/plan/checkpoint_space.hpp"
#include "launcher/plan/nccl.hpp"
#include "launcher/plan/plan.hpp"
#include "launcher/plan/relative_paths.hpp"
#include "launcher/rendezvous/attempt.hpp"
#include "launcher/run/launch_error.hpp"

using namespace xtrain;
using namespace xtrain::launcher;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
namespace fs = std::filesystem;

namespace {

// A job spec file and a fake host, both in a fresh directory.
struct Fixture {
  fs::path dir;
  HostInfo host;

  Fixture() {
    std::string pattern = (fs::temp_directory_path() / "xlaunch-plan-XXXXXX").string();
    dir = ::mkdtemp(pattern.data());
    host.cores = 8;
    host.memory_bytes = std::uint64_t{1} << 40;  // 1 TiB: every test's CPU ranks fit
    host.exe_dir = dir.string();
    host.environment = {{"PATH", "/usr/bin:/bin"}, {"HOME", "/home/u"}};
  }
  ~Fixture() { fs::remove_all(dir); }

  Plan plan(const std::string& spec_json, const std::vector<std::string>& overrides = {}) {
    const std::string path = (dir / "job.json").string();
    std::ofstream(path) << spec_json;
    CliOptions options;
    options.job_path = path;
    options.overrides = overrides;
    return make_plan(options, host);
  }
};

const std::string kTrue = R"({"worker": {"command": ["true"]}})";

}  // namespace

TEST_CASE("launcher/plan: CUDA_VISIBLE_DEVICES follows CUDA's rules", "[plan]") {
  CHECK(visible_gpus(4, std::nullopt) == 4);
  CHECK(visible_gpus(4, "") == 0);
  CHECK(visible_gpus(4, "-1") == 0);
  CHECK(visible_gpus(4, "0,2") == 2);
  CHECK(visible_gpus(4, " 3 , 1 ") == 2);
  CHECK(visible_gpus(4, "0,7,1") == 1);     // stops at the first invalid index
  CHECK(visible_gpus(4, "1,1,2") == 1);     // a repeated index is invalid
  CHECK(visible_gpus(4, "0,-1,1") == 1);
  CHECK(visible_gpus(4, "0,x") == 1);
  CHECK(visible_gpus(0, "0") == 0);
  CHECK(visible_gpus(2, "GPU-8a3f,MIG-1234") == 2);
}

TEST_CASE("launcher/plan: no GPU means cpu_ranks CPU ranks with gloo", "[plan]") {
  Fixture f;
  const Plan plan = f.plan(R"({"worker": {"command": ["true"]}, "cpu_ranks": 3})");
  CHECK(plan.device == "cpu");
  CHECK(plan.backend == "gloo");
  REQUIRE(plan.ranks.size() == 3);
  CHECK(plan.ranks[2].rank == 2);
  CHECK(plan.ranks[2].local_rank == 2);
  CHECK(plan.ranks[2].world_size == 3);
  CHECK(plan.ranks[2].local_world_size == 3);
  CHECK(plan.worker_argv == std::vector<std::string>{"/usr/bin/true"});
  CHECK_FALSE(plan.own_worker);
  CHECK(plan.run_dir == (fs::current_path() / "runs/job").string());
  CHECK(plan.spec.name == "job");
}

TEST_CASE("launcher/plan: auto means one rank per visible GPU with NCCL", "[plan]") {
  Fixture f;
  f.host.physical_gpus = 4;
  f.host.cuda_visible_devices = "1,3";
#ifdef XTRAIN_HAVE_NCCL
  const Plan plan = f.plan(kTrue);
  CHECK(plan.visible_gpus == 2);
  CHECK(plan.device == "cuda");
  CHECK(plan.backend == "nccl");
  CHECK(plan.ranks.size() == 2);
  // --dry-run names the libnccl that xlaunch loaded by the workers' rule, and its version.
  const nlohmann::json nccl = plan_to_json(plan).at("nccl");
  CHECK(std::filesystem::exists(nccl.at("library").get<std::string>()));
  CHECK_THAT(nccl.at("version").get<std::string>(), Catch::Matchers::Matches(R"(2\.\d+\.\d+)"));
  CHECK(nccl.at("found_by") == plan.nccl.found_by);
  CHECK(plan_to_json(f.plan(kTrue, {"backend=gloo"})).at("nccl").is_null());
#else
  CHECK_THROWS_AS(f.plan(kTrue), LaunchError);
#endif
  const Plan gloo = f.plan(kTrue, {"backend=gloo", "nproc_per_node=3"});
  CHECK(gloo.device == "cuda");
  CHECK(gloo.backend == "gloo");
  CHECK(gloo.ranks.size() == 3);
  const Plan cpu = f.plan(kTrue, {"device=cpu"});
  CHECK(cpu.device == "cpu");
  CHECK(cpu.ranks.size() == 1);
}

TEST_CASE("launcher/plan: world errors name the field", "[plan]") {
  Fixture f;
  CHECK_THROWS_WITH(f.plan(kTrue, {"device=cuda"}), Contains("device: \"cuda\" needs a visible GPU, found none"));
  f.host.cuda_visible_devices = "";
  CHECK_THROWS_WITH(f.plan(kTrue, {"device=cuda"}), Contains("(CUDA_VISIBLE_DEVICES=\"\")"));
  CHECK_THROWS_WITH(f.plan(kTrue, {"backend=nccl"}), Contains("backend: \"nccl\" needs GPUs"));
  CHECK_THROWS_AS(f.plan(kTrue, {"nproc_per_node=0"}), SpecError);
}

TEST_CASE("launcher/plan: several nodes need an endpoint and a token, and place the ranks", "[plan]") {
  Fixture f;
  CHECK_THROWS_WITH(f.plan(kTrue, {"nodes.nnodes=2"}), Contains("nodes.rdzv_endpoint: a job on 2 nodes needs"));
  CHECK_THROWS_WITH(f.plan(kTrue, {"nodes.nnodes=2", "nodes.rdzv_endpoint=10.0.0.1:0"}),
                    Contains("nodes.rdzv_endpoint: expected a port other than 0"));
  CHECK_THROWS_WITH(f.plan(kTrue, {"nodes.nnodes=2", "nodes.rdzv_endpoint=10.0.0.1:29400"}),
                    Contains("nodes.nnodes: a job on 2 nodes needs a job token") && Contains("XTRAIN_JOB_TOKEN"));
  f.host.environment["XTRAIN_JOB_TOKEN"] = "secret";
  const Plan plan = f.plan(kTrue, {"nodes.nnodes=3", "nodes.node_rank=1", "nodes.rdzv_endpoint=10.0.0.1:29400",
                                   "nproc_per_node=2"});
  CHECK(plan.job_token == "secret");
  REQUIRE(plan.ranks.size() == 2);
  CHECK(plan.ranks[0].rank == 2);
  CHECK(plan.ranks[1].rank == 3);
  CHECK(plan.ranks[1].world_size == 6);
  CHECK(plan.ranks[1].node_rank == 1);
}

TEST_CASE("launcher/plan: inside a SLURM step a spec without nodes takes them from SLURM", "[plan]") {
  Fixture f;
  f.host.environment.insert({{"SLURM_JOB_ID", "4242"}, {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NODELIST", "gpu[07-08]"},
                             {"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_NODEID", "1"}, {"SLURM_STEP_NUM_TASKS", "2"},
                             {"SLURM_JOB_UID", "1000"}});
  const Plan plan = f.plan(kTrue, {"nproc_per_node=2"});
  CHECK(plan.nodes_from_slurm);
  CHECK(plan.spec.nodes.nnodes == 2);
  CHECK(plan.spec.nodes.node_rank == 1);
  CHECK(plan.spec.nodes.rdzv_endpoint == "gpu07:24242");
  CHECK(plan.job_token == slurm_job_token(4242, 1000));
  CHECK(plan.ranks[0].rank == 2);
  // An explicit nodes section wins over SLURM's variables.
  const Plan own = f.plan(kTrue, {"nproc_per_node=2", "nodes.nnodes=1"});
  CHECK_FALSE(own.nodes_from_slurm);
  CHECK(own.spec.nodes.nnodes == 1);
}

TEST_CASE("launcher/plan: our own worker is checked against the world", "[plan]") {
  Fixture f;
  std::ofstream(f.dir / "xtrain-worker") << "#!/bin/sh\n";
  fs::permissions(f.dir / "xtrain-worker", fs::perms::owner_all);
  const std::string data = (f.dir / "x.txt").string();
  std::ofstream(data) << std::string(1000, 'x');
  const std::string spec = R"({"nproc_per_node": 3, "data": {"train": ")" + data + R"("}})";
  CHECK_THROWS_WITH(f.plan(spec), Contains("train.batch_size: expected a multiple of world size"));
  const Plan plan = f.plan(spec, {"train.batch_size=12"});
  CHECK(plan.own_worker);
  CHECK(plan.worker_argv == std::vector<std::string>{(f.dir / "xtrain-worker").string()});
  CHECK_THROWS_WITH(f.plan(R"({"nproc_per_node": 1})"), Contains("data.train"));
  // The inputs are read (headers and sizes) before anything starts: bad ones are spec errors.
  CHECK_THROWS_AS(f.plan(spec, {"train.batch_size=12", "data.train=\"/no/such.txt\""}), SpecError);
  CHECK_THROWS_WITH(f.plan(spec, {"train.batch_size=12", "data.train=\"/no/such.txt\""}),
                    "data.train: /no/such.txt: No such file or directory");
  CHECK_THROWS_WITH(f.plan(spec, {"train.batch_size=12", "checkpoint.resume=\"/no/ckpt\""}),
                    "checkpoint.resume: checkpoint /no/ckpt: No such file or directory");
}

TEST_CASE("launcher/plan: more ranks than visible GPUs is refused before any rank starts wherever it is known",
          "[plan]") {
  Fixture f;
  std::ofstream(f.dir / "xtrain-worker") << "#!/bin/sh\n";
  fs::permissions(f.dir / "xtrain-worker", fs::perms::owner_all);
  const std::string data = (f.dir / "x.txt").string();
  std::ofstream(data) << std::string(1000, 'x');
  const std::string own = R"({"nproc_per_node": 3, "data": {"train": ")" + data + R"("}, "train": {"batch_size": 12, "micro_batch_size": 1}})";
  f.host.physical_gpus = 4;
  f.host.cuda_visible_devices = "1,3";
  const std::string expected = "nproc_per_node: expected at most the 2 visible GPUs (one per rank";
  // Our worker on CUDA, whatever reduces its gradients.
  CHECK_THROWS_WITH(f.plan(own, {"backend=gloo"}),
                    expected + "; CUDA_VISIBLE_DEVICES=\"1,3\"), got 3");
  CHECK_THROWS_WITH(f.plan(own), StartsWith(expected + ", as NCCL needs"));
  // A user's worker on NCCL: NCCL refuses two ranks on one GPU.
  CHECK_THROWS_WITH(f.plan(kTrue, {"nproc_per_node=3", "backend=nccl"}),
                    expected + ", as NCCL needs; CUDA_VISIBLE_DEVICES=\"1,3\"), got 3; a worker that shares GPUs "
                               "reduces with backend gloo");
  // Every node of a multi-node job checks its own GPUs.
  f.host.environment["XTRAIN_JOB_TOKEN"] = "secret";
  CHECK_THROWS_WITH(f.plan(kTrue, {"nproc_per_node=3", "backend=nccl", "nodes.nnodes=2", "nodes.node_rank=1",
                                   "nodes.rdzv_endpoint=10.0.0.1:29400"}),
                    StartsWith(expected));
  f.host.cuda_visible_devices.reset();
  CHECK_THROWS_WITH(f.plan(own, {"nproc_per_node=5", "backend=gloo"}),
                    "nproc_per_node: expected at most the 4 visible GPUs (one per rank; CUDA_VISIBLE_DEVICES unset), "
                    "got 5");
  // What stays allowed: a user's worker on Gloo, our worker on CPU ranks, one rank per GPU.
  CHECK(f.plan(kTrue, {"nproc_per_node=6", "backend=gloo"}).ranks.size() == 6);
  CHECK(f.plan(own, {"nproc_per_node=6", "device=cpu"}).ranks.size() == 6);
  CHECK(f.plan(own, {"nproc_per_node=4", "backend=gloo"}).ranks.size() == 4);
}

TEST_CASE("launcher/plan: --dry-run shows each rank's memory plan and the CUDA graph choice", "[plan]") {
  Fixture f;
  std::ofstream(f.dir / "xtrain-worker") << "#!/bin/sh\n";
  fs::permissions(f.dir / "xtrain-worker", fs::perms::owner_all);
  const std::string data = (f.dir / "x.txt").string();
  std::ofstream(data) << std::string(100000, 'x');
  const std::string spec = R"({"nproc_per_node": 2, "backend": "gloo", "data": {"train": ")" + data +
                           R"("}, "model": {"n_layer": 12, "n_head": 12, "n_embd": 768, "seq_len": 1024,
                           "vocab_size": 50257}, "train": {"batch_size": 32, "micro_batch_size": 16}})";
  // CPU ranks: the plan leaves out the CPU attention's scratch, which only the worker knows.
  const nlohmann::json cpu = plan_to_json(f.plan(spec));
  CHECK(cpu["world"]["cuda_graph"] == "off (CPU ranks)");
  CHECK(cpu["memory_per_rank"]["device"] == "cpu");
  CHECK(cpu["memory_per_rank"]["complete"] == false);
  CHECK_THROWS_WITH(f.plan(spec, {"train.cuda_graph=on"}), Contains("train.cuda_graph: \"on\""));
  // The node's CPU ranks together against the memory its processes may use: two ranks' plans fit
  // in exactly that much, not in a byte less (refused before any rank starts); unknown is unchecked.
  const std::uint64_t both = 2 * cpu["memory_per_rank"]["total_bytes"].get<std::uint64_t>();
  f.host.memory_bytes = both;
  CHECK_NOTHROW(f.plan(spec));
  f.host.memory_bytes = both - 1;
  CHECK_THROWS_WITH(f.plan(spec), Contains("train.micro_batch_size: 16 sequences of 1024 tokens per micro-step do "
                                           "not fit this machine's memory") &&
                                      Contains("needs 2 CPU ranks x "));
  f.host.memory_bytes = 0;
  CHECK_NOTHROW(f.plan(spec));
  // GPUs: bf16, the whole plan, under 40 GiB at GPT-2 124M, 16 sequences of 1024 tokens.
  f.host.physical_gpus = 2;
  const nlohmann::json gpu = plan_to_json(f.plan(spec));
  const nlohmann::json& memory = gpu["memory_per_rank"];
  CHECK(memory["device"] == "cuda");
  CHECK(memory["activation_dtype"] == "bf16");
  CHECK(memory["complete"] == true);
  CHECK(memory["total_bytes"].get<double>() < 40.0 * (1 << 30));
  CHECK(memory["items"][0]["name"] == "parameters");
  CHECK_THAT(gpu["world"]["cuda_graph"].get<std::string>(), Contains("off (auto: "));
  CHECK_THAT(plan_to_json(f.plan(spec, {"train.cuda_graph=on"}))["world"]["cuda_graph"].get<std::string>(),
             Contains("on (train.cuda_graph; "));
}

TEST_CASE("launcher/plan: the worker command must exist (127) and be executable (126)", "[plan]") {
  Fixture f;
  auto code_of = [&](const std::string& spec) {
    try {
      f.plan(spec);
    } catch (const LaunchError& e) {
      return e.exit_code();
    }
    return 0;
  };
  std::ofstream(f.dir / "script.sh") << "#!/bin/sh\n";
  fs::create_directory(f.dir / "adir");
  const std::string script = (f.dir / "script.sh").string();
  CHECK(code_of(R"({"worker": {"command": ["no-such-program-xyz"]}})") == exit_code::kNotFound);
  CHECK(code_of(R"({"worker": {"command": ["/no/such/file"]}})") == exit_code::kNotFound);
  CHECK(code_of(R"({"worker": {"command": [")" + script + R"("]}})") == exit_code::kNotExecutable);
  CHECK(code_of(R"({"worker": {"command": [")" + (f.dir / "adir").string() + R"("]}})") == exit_code::kNotExecutable);
  // the default worker, xtrain-worker beside xlaunch, is missing
  const std::string data = (f.dir / "x.txt").string();
  std::ofstream(data) << std::string(1000, 'x');
  CHECK(code_of(R"({"data": {"train": ")" + data + R"("}})") == exit_code::kNotFound);
  CHECK_THROWS_WITH(f.plan(R"({"worker": {"command": ["no-such-program-xyz"]}})"),
                    Contains("worker.command[0]: \"no-such-program-xyz\" not found in PATH"));
  CHECK_THROWS_WITH(f.plan(R"({"worker": {"command": [")" + script + R"("]}})"), Contains("is not executable"));
  fs::permissions(script, fs::perms::owner_all);
  CHECK(code_of(R"({"worker": {"command": [")" + script + R"("]}})") == 0);
}

TEST_CASE("launcher/plan: an unwritable run dir is a spec error and nothing is created", "[plan]") {
  Fixture f;
  std::ofstream(f.dir / "file") << "x";
  CHECK_THROWS_WITH(f.plan(kTrue, {"run_dir=\"" + (f.dir / "file/run").string() + "\""}),
                    Contains("run_dir: cannot create") && Contains("is not a directory"));
  CHECK_THROWS_WITH(f.plan(kTrue, {"run_dir=\"" + (f.dir / "file").string() + "\""}),
                    Contains("is not a directory"));
  if (::geteuid() != 0) {  // root may write anywhere
    fs::create_directory(f.dir / "locked");
    fs::permissions(f.dir / "locked", fs::perms::owner_read | fs::perms::owner_exec);
    CHECK_THROWS_WITH(f.plan(kTrue, {"run_dir=\"" + (f.dir / "locked/run").string() + "\""}),
                      Contains("is not writable"));
  }
  const Plan ok = f.plan(kTrue, {"run_dir=\"" + (f.dir / "a/b/c").string() + "\""});
  CHECK_FALSE(fs::exists(f.dir / "a"));
}

TEST_CASE("launcher/plan: each rank's environment is the contract's", "[plan][env]") {
  Fixture f;
  f.host.environment["CUDA_VISIBLE_DEVICES"] = "";
  f.host.environment["RANK"] = "99";  // from an enclosing launcher: must not leak
  f.host.environment["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  f.host.environment["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0";
  const Plan plan = f.plan(R"({"worker": {"command": ["true"], "env": {"FOO": "bar"}},
                               "nproc_per_node": 4, "launcher": {"heartbeat_timeout_s": 5, "max_restarts": 2}})");
  AttemptEnv attempt = make_attempt_env(plan, "job-x", 1);
  CHECK(attempt.master_port > 0);
  CHECK(attempt.nccl_id_hex.empty());
  CHECK(attempt.run_id == "job-x-a2");
  const auto env = rank_environment(plan, plan.ranks[2], attempt);
  const std::map<std::string, std::string> expected = {
      {"PATH", "/usr/bin:/bin"},
      {"HOME", "/home/u"},
      {"CUDA_VISIBLE_DEVICES", ""},
      {"FOO", "bar"},
      {"RANK", "2"},
      {"WORLD_SIZE", "4"},
      {"LOCAL_RANK", "2"},
      {"LOCAL_WORLD_SIZE", "4"},
      {"GROUP_RANK", "0"},
      {"GROUP_WORLD_SIZE", "1"},
      {"ROLE_RANK", "2"},
      {"ROLE_WORLD_SIZE", "4"},
      {"ROLE_NAME", "default"},
      {"TORCHELASTIC_RESTART_COUNT", "1"},
      {"TORCHELASTIC_MAX_RESTARTS", "2"},
      {"TORCHELASTIC_RUN_ID", "job-x"},  // the run's, the same in every attempt
      {"TORCHELASTIC_ERROR_FILE", plan.run_dir + "/ranks/rank-2.error.json"},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"},  // the machine's own choice stays
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", std::to_string(attempt.master_port)},
      {"XTRAIN_RUN_ID", "job-x-a2"},
      {"XTRAIN_RUN_DIR", plan.run_dir},
      {"XTRAIN_JOB", plan.run_dir + "/job.json"},
      {"XTRAIN_RESTART_COUNT", "1"},
      {"XTRAIN_MAX_RESTARTS", "2"},
      {"XTRAIN_RESULT_FILE", plan.run_dir + "/ranks/rank-2.json"},
      {"XTRAIN_HEARTBEAT_FILE", plan.run_dir + "/ranks/rank-2.heartbeat"},
      {"OMP_NUM_THREADS", "2"},  // 8 cores / 4 local ranks
  };
  CHECK(env == expected);
  const Plan fixed = f.plan(kTrue, {"launcher.master_port=29500"});
  CHECK(make_attempt_env(fixed, "r", 0).master_port == 29500);
}

TEST_CASE("launcher/plan: --dry-run shows the spec and the world and what each rank gets", "[plan]") {
  Fixture f;
  f.host.environment["OMP_NUM_THREADS"] = "3";
  const Plan plan = f.plan(kTrue, {"nproc_per_node=2", "worker.env.A=1"});
  const nlohmann::json dry = plan_to_json(plan);
  CHECK(dry["spec"]["nproc_per_node"] == 2);
  CHECK(dry["spec"]["launcher"]["term_timeout_s"] == 10.0);
  CHECK(dry["world"]["world_size"] == 2);
  CHECK(dry["world"]["backend"] == "gloo");
  REQUIRE(dry["ranks"].size() == 2);
  const auto& env = dry["ranks"][1]["env"];
  CHECK(dry["ranks"][1]["argv"] == nlohmann::json::array({"/usr/bin/true"}));
  CHECK(env["RANK"] == "1");
  CHECK(env["A"] == "1");
  CHECK(env["MASTER_PORT"] == "<a free port, picked per attempt>");
  CHECK_FALSE(env.contains("PATH"));             // passed through unchanged: not shown
  CHECK_FALSE(env.contains("OMP_NUM_THREADS"));  // already set: kept
  CHECK(env["XTRAIN_HEARTBEAT_FILE"] == plan.run_dir + "/ranks/rank-1.heartbeat");
}

#ifdef XTRAIN_HAVE_NCCL
TEST_CASE("launcher/plan: ncclGetUniqueId works without a GPU and is fresh every time", "[plan][nccl]") {
  const std::string a = nccl_unique_id_hex();
  const std::string b = nccl_unique_id_hex();
  CHECK(a.size() == 256);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(a != b);
}
#endif

TEST_CASE("launcher/plan: the checkpoints a run writes, and how many more the run dir holds at each", "[plan]") {
  CHECK(checkpoints_written(0, 2000, 500) == 4);   // 500, 1000, 1500, 2000
  CHECK(checkpoints_written(0, 2001, 500) == 5);   // and the last step's
  CHECK(checkpoints_written(1000, 2000, 500) == 2);
  CHECK(checkpoints_written(1200, 2000, 500) == 2);  // 1500, 2000
  CHECK(checkpoints_written(0, 2000, 0) == 1);
  CHECK(checkpoints_written(2000, 2000, 500) == 0);
  CHECK(checkpoint_step_of(1, 1200, 2000, 500) == 1500);
  CHECK(checkpoint_step_of(2, 1200, 2000, 500) == 2000);
  CHECK(checkpoint_step_of(3, 1200, 2001, 500) == 2001);
  CHECK(checkpoint_step_of(1, 0, 2000, 0) == 2000);
  // keep 2 from an empty run dir: 1, then 2, then 3 at once (two kept and the one being written).
  CHECK(new_checkpoints_at(1, 0, 2) == 1);
  CHECK(new_checkpoints_at(2, 0, 2) == 2);
  CHECK(new_checkpoints_at(3, 0, 2) == 3);
  CHECK(new_checkpoints_at(9, 0, 2) == 3);
  // Resumed with two already there: each new one is written before the oldest goes.
  CHECK(new_checkpoints_at(1, 2, 2) == 1);
  CHECK(new_checkpoints_at(5, 2, 2) == 1);
  CHECK(new_checkpoints_at(1, 5, 2) == 1);  // more than keep: the rotation removes them
  CHECK(new_checkpoints_at(3, 0, 0) == 2);  // keep 0 keeps one
}

TEST_CASE("plan: a relative input path that names something only from the spec's directory or above says so",
          "[plan][errors]") {
  Fixture f;
  fs::create_directories(f.dir / "proj/configs");
  fs::create_directories(f.dir / "proj/data");
  std::ofstream(f.dir / "proj/data/f.txt") << "text";
  std::ofstream(f.dir / "proj/configs/tok.json") << "{}";
  const std::string job = (f.dir / "proj/configs/j.json").string();
  struct Cwd {  // the test's current directory, put back whatever happens
    fs::path before = fs::current_path();
    explicit Cwd(const fs::path& to) { fs::current_path(to); }
    ~Cwd() { fs::current_path(before); }
  } cwd(f.dir);
  const std::string proj = (f.dir / "proj").string();
  JobSpec spec;
  spec.data.train = "data/f.txt";
  CHECK_THROWS_WITH(check_relative_paths(spec, job),
                    "data.train: data/f.txt names nothing from the current directory (" + f.dir.string() +
                        "), which relative paths are read from; from " + proj + " (above the spec) it names " + proj +
                        "/data/f.txt: run xlaunch from there, or give the path from here");
  spec.data.train = "data/f*.txt";  // a glob
  CHECK_THROWS_WITH(check_relative_paths(spec, job), StartsWith("data.train: data/f*.txt names nothing from"));
  spec.data.train = "proj/data/f.txt";  // found from here
  spec.tokenizer = "tok.json";
  CHECK_THROWS_WITH(check_relative_paths(spec, job), Contains("tokenizer: tok.json names nothing from the current "
                                                              "directory") &&
                                                         Contains("(the spec's directory) it names"));
  spec.tokenizer = "nowhere.json";  // found nowhere: left to the checks that read it
  CHECK_NOTHROW(check_relative_paths(spec, job));
  spec.data.train = "data/f.txt";
  CHECK_NOTHROW(check_relative_paths(spec, ""));  // no spec file
  fs::current_path(proj);
  CHECK_NOTHROW(check_relative_paths(spec, job));
}
