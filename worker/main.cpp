// xtrain-worker: one rank of data-parallel GPT-2 training (the loop is worker/train/trainer.hpp).
//
// Under xlaunch it reads the environment contract (RANK, WORLD_SIZE, XTRAIN_JOB, XTRAIN_RUN_DIR,
// ...). By hand, `xtrain-worker --job FILE` is a world of one writing to the spec's run_dir.
//
// Exit codes (and the "status" of the result file, $XTRAIN_RESULT_FILE):
//   0  "completed": trained to train.steps; or "preempted": stopped by SIGUSR1 after writing a
//      checkpoint that resume: auto continues from
//   1  "failed", a runtime failure: a peer died or timed out, a checkpoint could not be written,
//      replicas disagreed
//   2  "failed", bad input given to the worker: command line, environment, job spec, data,
//      checkpoint, or a device that is not there (a CPU without x86-64-v3 too, said on stderr
//      only); retrying cannot help
//   3  "failed", training diverged: a non-finite loss or gradient norm, the same on every rank
// SIGTERM and SIGINT keep their default action: the rank dies at once (the launcher's way to stop
// a gang), until the rank fails: then it exits with its own code. SIGUSR2 makes the receiving
// thread write its backtrace (worker/train/backtrace.hpp). Every failure prints one line
// "error: <field or file>: <what>" on stderr, and the result file says
// whether the failure is this rank's own ("primary") or a collective that failed because a peer
// died or stopped answering ("peer_lost": xlaunch then looks for the primary one elsewhere).
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/build_info.hpp"
#include "common/command_line.hpp"
#include "common/did_you_mean.hpp"
#include "common/exit_codes.hpp"
#include "common/job_spec.hpp"
#include "common/log.hpp"
#include "common/model_file.hpp"
#include "common/worker_cpu.hpp"
#include "common/work_progress.hpp"
#include "common/worker_env.hpp"
#include "worker/train/backtrace.hpp"
#include "worker/train/checkpoint.hpp"
#include "worker/device/device_choice.hpp"
#include "worker/export_command.hpp"
#include "worker/eval_command.hpp"
#include "worker/generate_command.hpp"
#include "worker/formats/file_io.hpp"
#include "worker/model/memory_plan.hpp"
#include "worker/cpu/openblas_core.hpp"
#include "worker/data/token_source.hpp"
#include "worker/train/trainer.hpp"

namespace {

using namespace xtrain;


// Set by the SIGUSR1 handler, read once per step. A signal handler can only reach static
// storage; a lock-free atomic is async-signal-safe.
std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_sigusr1(int) { g_stop_requested.store(true); }

const char* const kUsage =
    "usage: xtrain-worker [--job FILE]\n"
    "       xtrain-worker export SOURCE --format hf|llmc OUT ...   (see export --help)\n"
    "       xtrain-worker generate MODEL [--prompt TEXT] ...         (see generate --help)\n"
    "       xtrain-worker eval MODEL --data GLOB ...                 (see eval --help)\n"
    "       xtrain-worker --version\n"
    "  One rank of data-parallel GPT-2 training. Under xlaunch the job and the rank come from the\n"
    "  environment (XTRAIN_JOB, RANK, WORLD_SIZE, ...); by hand, --job FILE runs a world of one.\n"
    "exit codes: 0 completed (or preempted by SIGUSR1 after a checkpoint); 1 runtime failure;\n"
    "  2 bad input (command line, environment, spec, data, checkpoint, device); 3 training diverged\n";

// The commands main() dispatches to by their first argument; each is given the whole command line and
// passes its own arguments (from its name on) to the command. eval's forwards are OpenBLAS's products,
// as training's are (below); export and generate (its own kernels on the CPU) run none, so they start
// without executing this program again.
struct SubCommand {
  const char* name;
  int (*run)(int argc, char** argv);
};
const SubCommand kSubCommands[] = {
    {"export", [](int argc, char** argv) { return run_export(argc - 1, argv + 1); }},
    {"generate", [](int argc, char** argv) { return run_generate(argc - 1, argv + 1); }},
    {"eval", [](int argc, char** argv) { return run_eval(argc - 1, argv + 1, choose_openblas_core(argv)); }},
};

// An argument where a command or an option was expected: a typo of a command, or a job spec given
// as xlaunch takes it.
std::string unexpected_argument(const std::string& arg) {
  std::vector<std::string> names;
  for (const SubCommand& command : kSubCommands) names.emplace_back(command.name);
  const std::string close = closest_name(arg, names, typo_edits(arg));
  if (!close.empty()) return "command line: unknown command \"" + arg + "\" (did you mean \"" + close + "\"?)";
  std::string text = "command line: unexpected argument \"" + arg + "\"";
  if (arg.size() > 5 && arg.compare(arg.size() - 5, 5, ".json") == 0) {
    text += ": to train, run xlaunch " + arg + " (every rank), or xtrain-worker --job " + arg + " (a world of one)";
  }
  return text + " (see --help)";
}

std::string job_path_from(int argc, char** argv, const WorkerEnv& env) {
  std::string path = env.job_path;
  const std::vector<std::string> positional =
      CommandLine(kUsage, "--help").option("--job", path).parse(argc, argv);
  if (!positional.empty()) throw BadInput(unexpected_argument(positional.front()));
  if (path.empty()) throw BadInput("command line: no job: give --job FILE or run under xlaunch (XTRAIN_JOB)");
  return path;
}

bool is_bad_input(const std::exception& e) {
  return dynamic_cast<const SpecError*>(&e) || dynamic_cast<const FileError*>(&e) ||
         dynamic_cast<const CheckpointError*>(&e) || dynamic_cast<const BadInput*>(&e) ||
         dynamic_cast<const std::invalid_argument*>(&e);
}

}  // namespace

int main(int argc, char** argv) {
  // Before any code that may be compiled for x86-64-v3 runs (common/worker_cpu.hpp).
  if (const auto missing = missing_worker_cpu_features(); !missing.empty()) {
    std::fprintf(stderr, "error: CPU: %s\n", describe_missing_cpu_features(missing).c_str());
    return exit_code::kBadInput;
  }
  if (print_version_if_asked(argc, argv, "xtrain-worker")) return exit_code::kSuccess;
  for (const SubCommand& command : kSubCommands) {
    if (argc > 1 && std::string(argv[1]) == command.name) return command.run(argc, argv);
  }
  // Declared in dependency order: the trainer refers to the spec, the report and the backend, so
  // it must be destroyed first.
  int rank = 0;
  JobSpec spec;
  DeviceChoice device;
  std::unique_ptr<RunReport> report;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Trainer> trainer;
  // Until the report exists, failures go to stderr only.
  auto fail = [&](const std::exception& e, int code) {
    // From here on the rank exits with its own code. Another rank's failure, seen first, makes the
    // launcher stop the gang with SIGTERM, which would turn this rank's recorded failure into
    // "stopped"; a signal before this line finds no result written, so the two always agree. A
    // teardown that hangs still ends by the launcher's SIGKILL.
    for (const int stop : {SIGTERM, SIGINT, SIGHUP}) std::signal(stop, SIG_IGN);
    std::fprintf(stderr, "error: %s\n", e.what());
    if (report) {
      RankResult r;
      r.rank = rank;
      r.status = "failed";
      r.step = trainer ? trainer->completed_steps() : 0;
      r.error = e.what();
      const bool peer_lost = dynamic_cast<const CommunicatorError*>(&e) != nullptr;
      const bool diverged = dynamic_cast<const TrainingDiverged*>(&e) != nullptr;
      r.failure_kind = peer_lost ? "peer_lost" : diverged ? "diverged" : "primary";
      r.extra = {{"exit_code", code}};
      // First the record, which needs no disk space: on a full disk the result file cannot be written.
      report->heartbeat().set_failure(peer_lost  ? RecordedFailure::kPeerLost
                                      : diverged ? RecordedFailure::kDiverged
                                                 : RecordedFailure::kPrimary);
      report->write_result(r);
    }
    return code;
  };

  WorkerEnv env;
  try {
    env = read_worker_env();
  } catch (const std::exception& e) {
    return fail(e, exit_code::kBadInput);
  }
  rank = env.where.rank;
  init_logging("", "", /*quiet=*/rank != 0);
  // May execute this program again, so before anything is written.
  const std::string openblas_choice = choose_openblas_core(argv);
  report = std::make_unique<RunReport>(rank, env.run_dir, env.heartbeat_file, env.result_file);
  report->heartbeat().beat();
  // Checkpoints and model files read or written, and weights drawn or loaded, on this thread beat as
  // they go: the watchdog then tells a slow disk from a stalled one (report may be made anew below,
  // so it is looked up each time).
  const WorkProgress beat_on_progress([&report] { report->heartbeat().beat(); });
  install_backtrace_handler(env.heartbeat_file.empty() ? "" : backtrace_file_path(env.run_dir, rank));
  report->heartbeat().set_backtrace_signal(kBacktraceSignal);

  struct sigaction sa = {};
  sa.sa_handler = on_sigusr1;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);

  // Setup: everything here depends on this rank's inputs only, so bad input fails before any
  // peer is waited for.
  try {
    const std::string job_path = job_path_from(argc, argv, env);
    const nlohmann::json doc = read_job_json(job_path);
    spec = parse_job_spec(doc, std::filesystem::path(job_path).stem().string());
    const std::string resume = resume_for_attempt(env.run_dir.empty() ? spec.run_dir : env.run_dir,
                                                  spec.checkpoint.resume, env.restart_count);
    if (resume != spec.checkpoint.resume && rank == 0) {
      spdlog::info("restart {}: checkpoint.resume {} was the job's start; this attempt goes on from the newest "
                   "checkpoint the job wrote",
                   env.restart_count, nlohmann::json(spec.checkpoint.resume).dump());
    }
    spec.checkpoint.resume = resume;
    if (needs_training_model_resolution(spec)) {  // from the checkpoint the trainer will resume from
      resolve_training_model(spec, doc,
                             find_resume_candidate(env.run_dir.empty() ? spec.run_dir : env.run_dir,
                                                   spec.checkpoint.resume));
    }
    validate_for_training(spec, env.where.world_size);
    check_data_files(spec.data, spec.model, spec.train.eval_every > 0);  // a missing file first, not the memory plan
    device = choose_device(spec, env.where.local_rank, DeviceProbe::of_this_machine());
    log_device_line(device, device.summary);
    require_memory_fit(device, spec, env.where.world_size, env.where.local_world_size);
    if (!openblas_choice.empty() && device.cuda == nullptr) spdlog::info("{}", openblas_choice);
    if (env.run_dir.empty()) {
      env.run_dir = spec.run_dir;
      std::filesystem::create_directories(env.run_dir);
      report = std::make_unique<RunReport>(rank, env.run_dir, env.heartbeat_file, env.result_file);
    }
    backend = make_backend(device);
    if (rank == 0) {
      const ModelDims dims = ModelDims::from(spec.model);
      const int B = spec.train.micro_batch_size;
      spdlog::info("{}", plan_memory(spec.model, B, env.where.world_size, backend_memory(*backend, dims, B)).summary());
    }
    trainer = std::make_unique<Trainer>(spec, env.run_dir, rank, env.where.world_size, *backend, *report,
                                        FaultInjection::from_environment(env.restart_count));
  } catch (const std::exception& e) {
    return fail(e, is_bad_input(e) ? exit_code::kBadInput : exit_code::kRuntimeFailure);
  }

  try {
    report->heartbeat().phase(WorkerPhase::kConnecting);
    auto comm = make_communicator(device, spec, env, *backend);
    const RankResult result = trainer->run(*comm, g_stop_requested);
    report->write_result(result);
    return 0;
  } catch (const FaultExit& e) {  // its connections closed with `comm`; the exit comes later
    const int code = fail(e, e.code);
    std::this_thread::sleep_for(std::chrono::duration<double>(e.linger_s));
    return code;
  } catch (const SpecError& e) {
    return fail(e, exit_code::kBadInput);
  } catch (const TrainingDiverged& e) {
    return fail(e, exit_code::kDiverged);
  } catch (const std::exception& e) {
    return fail(e, exit_code::kRuntimeFailure);
  }
}
