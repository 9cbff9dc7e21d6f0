#include "launcher/launch.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/exit_codes.hpp"
#include "launcher/agent/supervisor.hpp"
#include "launcher/plan/plan.hpp"
#include "launcher/process/console.hpp"
#include "launcher/process/guard.hpp"
#include "launcher/run/run_dir.hpp"

namespace xtrain::launcher {
namespace {

// The supervisor's life after the run dir exists. Declaration order is teardown order in
// reverse: the guard (forked first, before any thread) says "bye" last.
int supervise(const Plan& plan, RunDir& run_dir, bool attached) {
  Guard guard;
  std::optional<Console> console;
  if (attached) console.emplace();
  init_supervisor_logging(console ? &*console : nullptr, run_files::supervisor_log(run_dir.path()));
  Supervisor supervisor(plan, run_dir, console ? &*console : nullptr, guard);
  return supervisor.run();
}

// --detach: double fork, so that the supervisor is in its own session and no process waits
// for it. Returns the caller's pid in the supervisor; in the original process returns nullopt
// after printing the run dir and the supervisor's pid.
std::optional<pid_t> detach(RunDir& run_dir) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) throw std::runtime_error(std::string("detach: pipe: ") + std::strerror(errno));
  const pid_t child = ::fork();
  if (child < 0) throw std::runtime_error(std::string("detach: fork: ") + std::strerror(errno));
  if (child > 0) {
    ::close(ready[1]);
    pid_t supervisor = 0;
    const bool told = ::read(ready[0], &supervisor, sizeof(supervisor)) == sizeof(supervisor);
    ::close(ready[0]);
    ::waitpid(child, nullptr, 0);
    if (!told) {
      throw std::runtime_error("the detached supervisor did not start; see " +
                               run_files::supervisor_log(run_dir.path()));
    }
    std::cout << "run_dir: " << run_dir.path() << "\npid: " << supervisor << std::endl;
    return std::nullopt;
  }
  ::close(ready[0]);
  ::setsid();
  if (::fork() != 0) ::_exit(0);
  const pid_t self = ::getpid();
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const std::string log = run_files::supervisor_log(run_dir.path());
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  ::dup2(null_fd, STDIN_FILENO);
  ::dup2(log_fd, STDOUT_FILENO);
  ::dup2(log_fd, STDERR_FILENO);
  // `xlaunch stop` reads the pid from state.json: it must be there before the caller returns.
  run_dir.write_state({{"supervisor_pid", self}, {"status", "starting"}});
  (void)!::write(ready[1], &self, sizeof(self));
  ::close(ready[1]);
  return self;
}

std::string describe_plan(const Plan& plan) {
  return std::to_string(plan.ranks.size()) + " rank(s) on " + plan.device + " with " + describe_backend(plan) +
         ", run dir " + plan.run_dir +
         (plan.resume_from ? ", resuming at step " + std::to_string(plan.start_step) + " from " + *plan.resume_from
                           : std::string());
}

}  // namespace

int run_job(const CliOptions& options) {
  // The stop signals are blocked since main() began, until the supervisor's signal_set exists.
  ::signal(SIGPIPE, SIG_IGN);   // a closed console must not kill the supervisor
  for (const std::string& note : options.notes) std::cerr << "xlaunch: note: " << note << "\n";
  const Plan plan = make_plan(options, probe_host());
  if (options.dry_run) {
    std::cout << plan_to_json(plan).dump(2) << std::endl;
    return exit_code::kSuccess;
  }
  if (options.check) {
    if (supervisor_running(plan.run_dir)) fail_run_dir_in_use(plan.run_dir);  // as the launch would
    const std::string what = options.job_path.empty() ? "the command line" : options.job_path;
    std::cout << "xlaunch: " << what << " is valid: " << describe_plan(plan) << std::endl;
    if (plan.nothing_to_train) {
      std::cout << "xlaunch: a run would start nothing: " << *plan.nothing_to_train << std::endl;
      return exit_code::kSuccess;
    }
    for (const std::string& change : plan.resume_changes) std::cout << "xlaunch: " << change << "\n";
    return exit_code::kSuccess;
  }
  if (plan.nothing_to_train) {
    std::cout << "xlaunch: nothing started: " << *plan.nothing_to_train << std::endl;
    return exit_code::kSuccess;
  }
  RunDir run_dir(plan.run_dir, to_json(plan.spec));
  if (plan.superseded) set_aside(*plan.superseded);  // under the run dir's lock, before any rank starts
  if (options.detach && !detach(run_dir)) return exit_code::kSuccess;
  return supervise(plan, run_dir, !options.detach);
}

}  // namespace xtrain::launcher
