// The plan: a job spec resolved against this machine. Spec + --set overrides + the world (how
// many ranks, which device and backend) + the worker command, checked before anything starts.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/gpu/nccl_library.hpp"
#include "common/job_spec.hpp"
#include "common/worker_env.hpp"
#include "launcher/cli/cli.hpp"
#include "launcher/cli/host.hpp"
#include "launcher/run/superseded_checkpoints.hpp"
#include "worker/model/memory_plan.hpp"

namespace xtrain::launcher {

struct Plan {
  JobSpec spec;                          // after defaults and overrides
  std::string run_dir;                   // absolute
  std::string device;                    // resolved: "cuda" | "cpu"
  std::string backend;                   // resolved: "nccl" | "gloo"
  std::string precision;                 // resolved train.precision for our worker, else empty
  int visible_gpus = 0;
  bool interpret = false;                // CUDA interpret mode (common/cuda_interpret.hpp) asked for
  std::vector<std::string> worker_argv;  // argv[0] resolved to an absolute path
  std::string python;                    // a .py or -m program: the interpreter that runs it
  std::string python_program;            // and the script or module, as given
  bool own_worker = false;               // xtrain-worker: its training sections were validated
  std::vector<RankPlacement> ranks;      // this node's ranks, by local rank
  HostInfo host;
  std::string job_token;                 // several nodes: the rendezvous store's token
  std::string rdzv_id;                   // --rdzv-id: the ranks' TORCHELASTIC_RUN_ID, when given
  std::string role;                      // --role: the ranks' ROLE_NAME
  bool nodes_from_slurm = false;         // `nodes` came from SLURM's variables, not the spec
  NcclLibrary nccl;                      // backend nccl: the libnccl that xlaunch and the ranks load
  std::optional<MemoryPlan> memory;      // our worker: each rank's memory plan (worker/model/memory_plan.hpp)
  std::string cuda_graph;                // our worker: train.cuda_graph resolved, and why
  std::optional<std::string> resume_from;  // our worker: the checkpoint it resumes from, verified and
                                           // checked against the spec (worker/train/checkpoint.hpp)
  std::int64_t start_step = 0;           // our worker: resume_from's step, else 0
  std::vector<std::string> resume_changes;  // our worker: the train keys the resume changes, one line each
  std::optional<SupersededCheckpoints> superseded;  // our worker, node 0: checkpoints of later steps,
                                                    // moved aside before the ranks start
  // Our worker on one node, resuming from a checkpoint at train.steps or later: why a run would
  // train nothing, and the way on. xlaunch then starts nothing and moves nothing aside, so that the
  // run dir (its summary, status and progress) keeps what the run that trained it left. On several
  // nodes node 0's checkpoint decides, which the others learn at the rendezvous (docs/multinode.md).
  std::optional<std::string> nothing_to_train;
};

// Throws SpecError (exit 2) for an invalid spec or world, LaunchError for a worker command that
// is missing (127) or not executable (126), or NCCL that cannot be loaded (125). With backend
// nccl, loads libnccl by the workers' rule (common/gpu/nccl_library.hpp) and records which.
Plan make_plan(const CliOptions& options, const HostInfo& host);

// Whether the worker is xtrain-worker (the default, or a command named so): its training
// sections are validated, and its metrics have a known shape.
bool is_own_worker(const JobSpec& spec);

// Resolves argv[0] the way execvp would. `what` names it in errors ("worker.command[0]").
std::string resolve_command(const std::string& command, const std::string& path_env, const std::string& what);

// One rank's full environment for one attempt: xlaunch's own, then the contract's variables,
// then worker.env.
std::map<std::string, std::string> rank_environment(const Plan& plan, const RankPlacement& where,
                                                    const AttemptEnv& attempt);

// "gloo", or "nccl (NCCL 2.28.9 at /path/libnccl.so.2 (LD_LIBRARY_PATH))": for the log lines.
std::string describe_backend(const Plan& plan);

// --dry-run: the spec after defaults and overrides, the world, each rank's memory plan (our
// worker), and for each rank its argv and the variables xlaunch sets or changes (the rest of
// xlaunch's environment passes through).
nlohmann::json plan_to_json(const Plan& plan);

}  // namespace xtrain::launcher
