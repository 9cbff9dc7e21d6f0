#include "launcher/plan/plan.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <sstream>

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cuda_interpret.hpp"
#include "common/exit_codes.hpp"
#include "common/model_file.hpp"
#include "common/number_format.hpp"
#include "common/slurm.hpp"
#include "common/worker_cpu.hpp"
#include "common/store/kv_protocol.hpp"
#include "launcher/cli/torchrun.hpp"
#include "launcher/plan/checkpoint_space.hpp"
#include "launcher/plan/relative_paths.hpp"
#include "launcher/plan/nccl.hpp"
#include "launcher/run/launch_error.hpp"
#include "launcher/run/run_dir.hpp"
#include "worker/data/token_source.hpp"
#include "worker/formats/model_io.hpp"
#include "worker/formats/text_codec.hpp"
#include "worker/model/cuda_graphs.hpp"
#include "worker/train/checkpoint.hpp"
#include "worker/train/choice_scoring.hpp"

namespace xtrain::launcher {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kWorkerName = "xtrain-worker";

// Inside a SLURM step (`srun xlaunch job.json`) a spec without a `nodes` section takes it from
// SLURM's variables: node count, this node's index, node 0's host and a port from the job id.
JobSpec read_spec(const CliOptions& options, const HostInfo& host, bool& nodes_from_slurm, json& doc) {
  doc = torchrun::job_document(options, host);
  JobSpec spec = parse_job_spec(doc, torchrun::default_name(options));
  nodes_from_slurm = false;
  if (doc.is_object() && !doc.contains("nodes")) {
    std::optional<SlurmStep> step;
    try {
      step = read_slurm_step(host.environment);
    } catch (const SlurmError& e) {
      throw SpecError("nodes", std::string("no nodes section, and SLURM's variables are unusable: ") + e.what());
    }
    if (step && step->nnodes > 1) {
      spec.nodes = step->nodes(spec.nodes.rdzv_timeout_s);
      nodes_from_slurm = true;
    }
  }
  return spec;
}

// Several nodes need node 0's store endpoint, with a port, and a shared job token.
void check_nodes(Plan& plan, const std::string& rdzv_id) {
  const NodesSpec& nodes = plan.spec.nodes;
  if (nodes.nnodes == 1) return;
  if (nodes.rdzv_endpoint.empty()) {
    throw SpecError("nodes.rdzv_endpoint", "a job on " + std::to_string(nodes.nnodes) +
                                               " nodes needs node 0's store address, \"host:port\"");
  }
  kv::Endpoint endpoint;
  try {
    endpoint = kv::parse_endpoint(nodes.rdzv_endpoint);
  } catch (const std::exception& e) {
    throw SpecError("nodes.rdzv_endpoint", e.what());
  }
  if (endpoint.port == 0) throw SpecError("nodes.rdzv_endpoint", "expected a port other than 0 (every node must know it)");
  std::optional<std::string> token = resolve_job_token(plan.host.environment, ::getuid());
  if (!token && !rdzv_id.empty()) token = "rdzv-id:" + rdzv_id;  // torchrun's job id: no secret, but no stranger
  if (!token) {
    throw SpecError("nodes.nnodes", "a job on " + std::to_string(nodes.nnodes) +
                                        " nodes needs a job token shared by every node: set " + kJobTokenVariable +
                                        " (the same secret on every node), pass the same --rdzv-id on every "
                                        "node, or run under SLURM");
  }
  plan.job_token = *token;
}

// Fills device, backend and the rank list from the spec and the visible GPUs.
void resolve_world(Plan& plan) {
  const JobSpec& spec = plan.spec;
  plan.visible_gpus = visible_gpus(plan.host.physical_gpus, plan.host.cuda_visible_devices);
  // Interpret mode (common/cuda_interpret.hpp) runs "cuda" ranks on the CPU: no GPU needed, one
  // emulated device per rank, Gloo for the reductions unless the spec asks for interpret mode's
  // NCCL, which joins the processes of one machine.
  plan.interpret = cuda_interpret_requested();
  const bool interpret = plan.interpret;
  plan.device = spec.device != "auto" ? spec.device : plan.visible_gpus > 0 || interpret ? "cuda" : "cpu";
  if (plan.device == "cuda" && plan.visible_gpus == 0 && !interpret) {
    throw SpecError("device", "\"cuda\" needs a visible GPU, found none" +
                                  (plan.host.cuda_visible_devices
                                       ? " (CUDA_VISIBLE_DEVICES=\"" + *plan.host.cuda_visible_devices + "\")"
                                       : std::string()));
  }
  plan.backend = spec.backend != "auto" ? spec.backend : plan.device == "cuda" && !interpret ? "nccl" : "gloo";
  if (interpret && plan.backend == "nccl" && spec.nodes.nnodes > 1) {
    throw SpecError("backend", std::string("\"nccl\" in CUDA interpret mode (") + kCudaInterpretVariable +
                                   "=1) joins the ranks of one machine, but nodes.nnodes is " +
                                   std::to_string(spec.nodes.nnodes) + "; use \"gloo\" (or \"auto\")");
  }
  if (plan.backend == "nccl" && plan.device == "cpu") {
    throw SpecError("backend", "\"nccl\" needs GPUs, but the job runs on CPU ranks (no GPU visible); "
                               "use \"gloo\" or \"auto\"");
  }
  const int nproc = spec.nproc_per_node ? *spec.nproc_per_node
                    : plan.device == "cuda" && !interpret ? plan.visible_gpus
                                            : spec.cpu_ranks;
  // One GPU per rank wherever that is known before any rank starts: our worker on CUDA refuses a
  // LOCAL_RANK past the visible GPUs, and NCCL refuses two ranks on one GPU, whoever's worker it
  // is. The check is per node, so it holds for every node of a multi-node job. A user's worker on
  // Gloo may share GPUs or use none: that is its business.
  const bool one_gpu_per_rank = (plan.own_worker && plan.device == "cuda") || plan.backend == "nccl";
  if (one_gpu_per_rank && !interpret && nproc > plan.visible_gpus) {
    throw SpecError("nproc_per_node",
                    "expected at most the " + std::to_string(plan.visible_gpus) + " visible GPU" +
                        (plan.visible_gpus == 1 ? "" : "s") + " (one per rank" +
                        (plan.backend == "nccl" ? ", as NCCL needs" : "") + "; CUDA_VISIBLE_DEVICES" +
                        (plan.host.cuda_visible_devices ? "=\"" + *plan.host.cuda_visible_devices + "\"" : " unset") +
                        "), got " + std::to_string(nproc) +
                        (plan.own_worker ? "" : "; a worker that shares GPUs reduces with backend gloo"));
  }
  const int world = nproc * spec.nodes.nnodes;
  for (int local = 0; local < nproc; ++local) {
    plan.ranks.push_back(
        {spec.nodes.node_rank * nproc + local, local, world, nproc, spec.nodes.node_rank, spec.nodes.nnodes});
  }
}

// The checkpoint this run resumes from, by the worker's own choice (every file verified; under
// "auto" a damaged one is skipped with a warning): an explicit checkpoint.resume that is not
// intact fails here, before any rank starts (exit 2).
std::optional<std::string> resume_checkpoint(const Plan& plan) {
  try {
    return find_resume_checkpoint(plan.run_dir, plan.spec.checkpoint.resume);
  } catch (const CheckpointError& e) {
    throw SpecError("checkpoint.resume", e.what());
  }
}

// model.init_from's tensor file, by the header check the rank's import starts with.
void check_init_from(const JobSpec& spec) {
  try {
    check_model_headers(read_model_file_info(spec.model.init_from), ParamLayout(ModelDims::from(spec.model)));
  } catch (const FileError& e) {
    throw SpecError("model.init_from", e.what());
  }
}

// Our worker's inputs, through the worker's own readers but on headers and sizes only (fast for
// any corpus): a missing, empty, too short, truncated or foreign data file, a bad
// train.eval_multiple_choice file, or a resume checkpoint
// whose settings or training split do not fit this spec, fails here, before any rank starts (exit 2).
// Legal but almost certainly not meant: a vocabulary beyond bytes on byte-level text.
void warn_about_vocabulary(const JobSpec& spec, bool byte_level) {
  if (!byte_level || spec.model.vocab_size <= kByteVocabulary) return;
  spdlog::warn("model.vocab_size is {} but data.train ({}) is text, one token per byte: ids {} and up never occur "
               "in it; for GPT-2's tokens make llm.c token shards of the text with xtrain-data",
               spec.model.vocab_size, spec.data.train, kByteVocabulary);
}

// Legal but wasteful: validation windows spread over the validation tokens (worker/data/
// batch_sampler.hpp) overlap once there are more of them than the tokens hold side by side; at
// twice as many and more, each token is scored again and again, every validation.
void warn_about_validation(const JobSpec& spec, std::uint64_t val_tokens) {
  const TrainSpec& t = spec.train;
  if (t.eval_every <= 0 || val_tokens == 0) return;
  const std::uint64_t windows = static_cast<std::uint64_t>(t.eval_batches) * static_cast<std::uint64_t>(t.batch_size);
  const std::uint64_t side_by_side = (val_tokens - 1) / static_cast<std::uint64_t>(spec.model.seq_len);
  if (windows < 2 * side_by_side) return;  // a little overlap costs little
  const std::uint64_t batches = std::max<std::uint64_t>(1, side_by_side / static_cast<std::uint64_t>(t.batch_size));
  const auto count = [](std::uint64_t n) { return with_thousands(static_cast<long long>(n)); };
  spdlog::warn("train.eval_batches {}: each validation scores {} windows of {} tokens, but the {} validation tokens "
               "hold {} side by side, so the windows overlap and each token is scored about {} times; {} {} "
               "score each about once",
               t.eval_batches, count(windows), spec.model.seq_len, count(val_tokens), count(side_by_side),
               count((windows + side_by_side / 2) / side_by_side), batches,
               batches == 1 ? "batch would" : "batches would");
}

// Returns the resume's change lines (check_checkpoint_fits), none without a resume.
std::vector<std::string> check_training_inputs(const JobSpec& spec, const std::optional<std::string>& resume_from) {
  const DataFilesInfo data = check_data_files(spec.data, spec.model, spec.train.eval_every > 0);
  TextCodec::for_run(spec, data.byte_level);  // the tokenizer: its files, its vocabulary, the data's kind
  warn_about_vocabulary(spec, data.byte_level);
  warn_about_validation(spec, data.val_tokens);
  // The whole multiple-choice file (HellaSwag's is a few MB): its header, every example whole, and
  // each within the model's vocabulary and context.
  if (!spec.train.eval_multiple_choice.empty()) read_spec_choices(spec.train, spec.model);
  if (!resume_from) {
    if (!spec.model.init_from.empty()) check_init_from(spec);
    return {};
  }
  try {
    return check_checkpoint_fits(*resume_from, spec, data.train_tokens);
  } catch (const CheckpointError& e) {
    // Under "auto" the run dir chose it: another job in the same run dir, most likely.
    throw SpecError("checkpoint.resume", std::string(e.what()) +
                                             (spec.checkpoint.resume == "auto"
                                                  ? "; to start over in this run dir set checkpoint.resume to "
                                                    "\"never\" (its checkpoints move to superseded/), or give the "
                                                    "run another run_dir"
                                                  : ""));
  }
}

// Node 0's run dir (where rank 0 writes the checkpoints) with checkpoints of later steps than the
// run starts from: said now, moved when the job starts. model.init_from cannot be one of them,
// since the ranks read it after the move.
void plan_superseded_checkpoints(Plan& plan) {
  if (plan.spec.nodes.node_rank != 0) return;
  plan.superseded = find_superseded_checkpoints(plan.run_dir, plan.start_step);
  if (!plan.superseded) return;
  const std::string init_from = plan.spec.model.init_from;
  if (!init_from.empty() && !plan.resume_from) {
    const fs::path model = fs::weakly_canonical(fs::absolute(init_from));
    for (const std::string& dir : plan.superseded->dirs) {
      const fs::path moved = fs::weakly_canonical(dir);
      if (std::mismatch(moved.begin(), moved.end(), model.begin(), model.end()).first == moved.end()) {
        throw SpecError("model.init_from", init_from + " is a checkpoint of this run dir from a later step than "
                                           "this run starts at (" + std::to_string(plan.start_step) + "), which xlaunch "
                                           "moves out of checkpoints/ before the ranks start: copy it out of the "
                                           "run dir, or give the run another run_dir");
      }
    }
  }
  spdlog::warn("{}", describe(*plan.superseded));
}

std::optional<std::string> nothing_to_train(const Plan& plan) {
  const JobSpec& spec = plan.spec;
  if (spec.nodes.nnodes > 1 || !plan.resume_from || plan.start_step < spec.train.steps) return std::nullopt;
  const std::string steps = std::to_string(spec.train.steps);
  if (spec.checkpoint.resume == "auto") {
    return plan.run_dir + " is already trained to step " + std::to_string(plan.start_step) + " (train.steps " + steps +
           ", checkpoint " + *plan.resume_from + "): nothing to train; raise train.steps to train on, or set "
           "checkpoint.resume to never to start over";
  }
  return "checkpoint.resume " + *plan.resume_from + " is at step " + std::to_string(plan.start_step) +
         " and train.steps is " + steps + ": nothing to train; raise train.steps to train on from it";
}

// The step the chosen checkpoint records (an explicit checkpoint.resume may be a copy under any
// name, or end in a slash).
std::int64_t resumed_step(const std::string& dir) {
  try {
    return recorded_step(dir);
  } catch (const CheckpointError& e) {
    throw SpecError("checkpoint.resume", e.what());
  }
}

// Legal but almost certainly not meant: a schedule that never leaves its warmup.
void warn_about_schedule(const TrainSpec& train) {
  if (train.warmup_steps >= train.steps) {
    spdlog::warn("train.warmup_steps {} >= train.steps {}: the learning rate only ramps up and never decays "
                 "(it reaches train.lr at step warmup_steps - 1)",
                 train.warmup_steps, train.steps);
  }
}

// What each rank of our worker will hold, by the worker's own formula (worker/model/memory_plan.hpp).
void plan_rank_memory(Plan& plan, Precision precision) {
  const ModelDims dims = ModelDims::from(plan.spec.model);
  const int B = plan.spec.train.micro_batch_size;
  const int world = plan.ranks.empty() ? 1 : plan.ranks.front().world_size;
  plan.memory = plan_memory(plan.spec.model, B, world,
                            plan.device == "cuda" ? cuda_backend_memory(dims, B, precision, plan.spec.train.deterministic)
                                                  : cpu_backend_memory(dims, B, precision));
}

// CPU ranks share this machine's memory: all of this node's together must fit in what the
// processes here may use, or none starts (a GPU's fit is each rank's to check, on its GPU).
void require_host_memory_fit(const Plan& plan, Precision precision) {
  if (plan.device != "cpu" || plan.ranks.empty() || plan.host.memory_bytes == 0) return;
  check_host_memory_fit(plan.spec.model, plan.spec.train.micro_batch_size, plan.ranks.front().world_size,
                        static_cast<int>(plan.ranks.size()), precision, plan.host.memory_bytes);
}

// `what` names argv[0] in errors: the spec's field, or the command line's program.
void resolve_worker(Plan& plan, const CliOptions& options) {
  const auto& command = plan.spec.worker.command;
  const auto path_env = plan.host.environment.count("PATH") ? plan.host.environment.at("PATH") : "";
  if (command.empty()) {
    plan.worker_argv = {resolve_command(plan.host.exe_dir + "/" + kWorkerName, path_env,
                                        "worker.command (default, beside xlaunch)")};
    return;
  }
  plan.worker_argv = command;
  const bool python = !options.program.empty() && options.program_kind != ProgramKind::kExecutable;
  const std::string what = options.program.empty() ? "worker.command[0]"
                           : python ? std::string("the Python interpreter (") + torchrun::kPythonVariable + ")"
                                    : "the program";
  try {
    plan.worker_argv.front() = resolve_command(command.front(), path_env, what);
  } catch (const LaunchError& e) {
    const std::string hint = options.program.empty() || python ? "" : subcommand_hint(command.front());
    if (hint.empty() || e.exit_code() != exit_code::kNotFound) throw;
    throw LaunchError(e.exit_code(), e.what() + hint);
  }
  if (python) {
    plan.python = plan.worker_argv.front();
    plan.python_program = options.program.front();
  }
  // torchrun would start every rank and let each fail with python's exit code 2: say it once, before.
  if (!options.program.empty() && options.program_kind == ProgramKind::kPythonScript &&
      !fs::is_regular_file(options.program.front())) {
    throw LaunchError(exit_code::kNotFound, "the script \"" + options.program.front() + "\" is not a file");
  }
}

// Interpret mode's plugin where our worker will look for it (common/cuda_interpret.hpp): a build
// without it is refused before any rank starts, naming the switch.
void require_interpret_plugin(const Plan& plan, const CliOptions& options) {
  const auto& env = plan.host.environment;
  const auto chosen = env.find("XTRAIN_CUDA_PLUGIN");
  const fs::path plugin = chosen != env.end() && !chosen->second.empty()
                              ? fs::path(chosen->second)
                              : fs::path(plan.worker_argv.front()).parent_path().parent_path() / "lib" /
                                    kCudaInterpretPluginFileName;
  if (!fs::exists(plugin)) {
    throw torchrun::attributed(SpecError(kCudaInterpretVariable, "1 asks for CUDA interpret mode, but " +
                                                                      plugin.string() +
                                                                      " is not there (a build without interpret mode)"),
                               options);
  }
}

// Our worker on a CPU it cannot execute on (common/worker_cpu.hpp) would die of SIGILL in every
// rank: refused as a program the kernel cannot execute, before any rank starts.
void require_worker_cpu(const Plan& plan) {
  const std::vector<std::string> missing = missing_worker_cpu_features();
  if (missing.empty()) return;
  throw LaunchError(exit_code::kNotExecutable,
                    "the worker (" + plan.worker_argv.front() + ") cannot run here: " + describe_missing_cpu_features(missing));
}

}  // namespace

bool is_own_worker(const JobSpec& spec) {
  return spec.worker.command.empty() || fs::path(spec.worker.command.front()).filename() == kWorkerName;
}

std::string resolve_command(const std::string& command, const std::string& path_env, const std::string& what) {
  std::vector<std::string> candidates;
  if (command.find('/') != std::string::npos) {
    candidates.push_back(fs::absolute(command).lexically_normal().string());
  } else {
    std::istringstream dirs(path_env);
    for (std::string dir; std::getline(dirs, dir, ':');) {
      candidates.push_back(fs::absolute(dir.empty() ? "." : dir).lexically_normal() / command);
    }
  }
  std::string refused;  // the first candidate that exists but cannot run, and why
  for (const std::string& candidate : candidates) {
    struct stat st {};
    if (::stat(candidate.c_str(), &st) != 0) continue;
    if (S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (refused.empty()) {
      refused = "\"" + candidate + "\" " + (S_ISDIR(st.st_mode) ? "is a directory" : "is not executable");
    }
  }
  if (!refused.empty()) throw LaunchError(exit_code::kNotExecutable, what + ": " + refused);
  throw LaunchError(exit_code::kNotFound,
                    what + ": \"" + command + "\" not found" +
                        (command.find('/') == std::string::npos ? " in PATH" : ""));
}

Plan make_plan(const CliOptions& options, const HostInfo& host) {
  Plan plan;
  plan.host = host;
  plan.rdzv_id = options.rendezvous.rdzv_id;
  plan.role = options.rendezvous.role;
  try {
    json doc;
    plan.spec = read_spec(options, host, plan.nodes_from_slurm, doc);
    check_nodes(plan, options.rendezvous.rdzv_id);
    plan.run_dir = fs::absolute(plan.spec.run_dir).lexically_normal().string();
    if (plan.run_dir.size() > 1 && plan.run_dir.back() == '/') plan.run_dir.pop_back();
    check_run_dir_creatable(plan.run_dir);
    plan.own_worker = is_own_worker(plan.spec);
    resolve_world(plan);
    if (plan.own_worker) {
      check_relative_paths(plan.spec, options.job_path);
      // The model shape from model.init_from's header (or the checkpoint a resume continues
      // from), so the job.json every rank reads carries the resolved shape.
      plan.resume_from = resume_checkpoint(plan);
      if (plan.resume_from) plan.start_step = resumed_step(*plan.resume_from);
      resolve_training_model(plan.spec, doc, plan.resume_from);
      validate_for_training(plan.spec, static_cast<int>(plan.ranks.size()));
      const Precision precision = resolve_precision(plan.spec.train, plan.device);
      plan.precision = precision_name(precision);
      plan.cuda_graph = choose_cuda_graphs(plan.spec.train, plan.spec.model, plan.device, precision).why;
      plan_rank_memory(plan, precision);
      plan.resume_changes = check_training_inputs(plan.spec, plan.resume_from);  // a missing file first, then
                                                                                  // the memory
      require_host_memory_fit(plan, precision);
      warn_about_schedule(plan.spec.train);
      plan.nothing_to_train = nothing_to_train(plan);
      if (!plan.nothing_to_train) {
        plan_superseded_checkpoints(plan);
        warn_about_checkpoint_space(plan);
      }
    }
  } catch (const SpecError& e) {
    throw torchrun::attributed(e, options);
  }
  resolve_worker(plan, options);  // spec errors (2) come first, then the command (126/127), then NCCL (125)
  if (plan.own_worker && plan.device == "cuda" && plan.interpret) require_interpret_plugin(plan, options);
  if (plan.own_worker) require_worker_cpu(plan);
  if (plan.backend == "nccl" && !plan.interpret) {  // interpret mode's NCCL is in its plugin
    std::map<std::string, std::string> rank_env = plan.host.environment;
    for (const auto& [name, value] : plan.spec.worker.env) rank_env[name] = value;
    plan.nccl = require_nccl(rank_env);
  }
  return plan;
}

std::map<std::string, std::string> rank_environment(const Plan& plan, const RankPlacement& where,
                                                    const AttemptEnv& attempt) {
  return build_worker_env(plan.spec, where, attempt, plan.host.environment, plan.host.cores);
}

std::string describe_backend(const Plan& plan) {
  if (plan.backend != "nccl") return plan.backend;
  if (plan.interpret) return plan.backend + " (interpret mode's, between the ranks of this machine)";
  return plan.backend + " (" + plan.nccl.describe() + ")";
}

json plan_to_json(const Plan& plan) {
  AttemptEnv attempt;
  attempt.master_port = plan.spec.launcher.master_port;
  if (plan.backend == "nccl") attempt.nccl_id_hex = "<ncclGetUniqueId, fresh per attempt>";
  attempt.run_id = "<" + plan.spec.name + "-TIME-PID-aN, assigned at launch>";
  attempt.elastic_run_id = plan.rdzv_id.empty() ? "<" + plan.spec.name + "-TIME-PID, node 0's>" : plan.rdzv_id;
  attempt.role_name = plan.role;
  attempt.run_dir = plan.run_dir;
  attempt.job_path = plan.run_dir + "/job.json";
  attempt.max_restarts = plan.spec.launcher.max_restarts;
  if (plan.spec.nodes.nnodes > 1) {
    attempt.master_addr = "<node 0's host, from nodes.rdzv_endpoint>";
    attempt.master_port = -1;
    attempt.store_endpoint = plan.spec.nodes.rdzv_endpoint;
    attempt.job_token = "<the job token, not shown>";
    attempt.node_addr = "<this node's address, learned at the rendezvous>";
  }

  json ranks = json::array();
  for (const RankPlacement& where : plan.ranks) {
    json env = json::object();
    for (const auto& [name, value] : rank_environment(plan, where, attempt)) {
      const auto inherited = plan.host.environment.find(name);
      if (inherited == plan.host.environment.end() || inherited->second != value) env[name] = value;
    }
    if (attempt.master_port == 0) env[env::kMasterPort] = "<a free port, picked per attempt>";
    if (attempt.master_port < 0) env[env::kMasterPort] = "<a free port on node 0, picked per attempt>";
    ranks.push_back({{"rank", where.rank}, {"local_rank", where.local_rank}, {"argv", plan.worker_argv},
                     {"env", env}});
  }
  json nccl = nullptr;
  if (plan.backend == "nccl" && plan.interpret) {
    nccl = {{"library", "the CUDA interpret plugin's"}, {"version", nullptr}, {"found_by", kCudaInterpretVariable}};
  } else if (plan.backend == "nccl") {
    nccl = {{"library", plan.nccl.path}, {"version", plan.nccl.version_string()}, {"found_by", plan.nccl.found_by}};
  }
  json resume = nullptr;
  if (plan.own_worker) {
    json superseded = json::array();
    if (plan.superseded) {
      for (const std::string& dir : plan.superseded->dirs) superseded.push_back(dir);
    }
    resume = {{"from", plan.resume_from ? json(*plan.resume_from) : json(nullptr)},
              {"start_step", plan.start_step},
              {"changes", plan.resume_changes},
              {"superseded", superseded},
              {"superseded_to", plan.superseded ? json(plan.superseded->destination) : json(nullptr)},
              {"nothing_to_train", plan.nothing_to_train ? json(*plan.nothing_to_train) : json(nullptr)}};
  }
  return {{"spec", to_json(plan.spec)},
          {"run_dir", plan.run_dir},
          {"resume", resume},
          {"nccl", nccl},
          {"world",
           {{"world_size", plan.ranks.empty() ? 0 : plan.ranks.front().world_size},
            {"nproc_per_node", plan.ranks.size()},
            {"device", plan.device},
            {"backend", plan.backend},
            {"precision", plan.precision},
            {"cuda_graph", plan.cuda_graph},
            {"visible_gpus", plan.visible_gpus},
            {"nnodes", plan.spec.nodes.nnodes},
            {"node_rank", plan.spec.nodes.node_rank},
            {"nodes_from_slurm", plan.nodes_from_slurm}}},
          {"memory_per_rank", plan.memory ? plan.memory->to_json() : json(nullptr)},
          {"ranks", ranks}};
}

}  // namespace xtrain::launcher
