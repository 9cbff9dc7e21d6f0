// xlaunch: parse the command line, run the command, map every error to the contract's exit code.
#include <iostream>

#include "common/build_info.hpp"
#include "common/exit_codes.hpp"
#include "common/job_spec.hpp"
#include "launcher/agent/supervisor.hpp"
#include "launcher/cli/cli.hpp"
#include "launcher/cli/host.hpp"
#include "launcher/inspect.hpp"
#include "launcher/launch.hpp"
#include "launcher/list_runs.hpp"
#include "launcher/process/console.hpp"
#include "launcher/report/html_report.hpp"
#include "launcher/run/launch_error.hpp"

namespace {

int dispatch(const xtrain::launcher::CliOptions& options) {
  using xtrain::launcher::Command;
  // Only a run has a supervisor to take the stop signals; the other commands end by them.
  if (options.command != Command::kRun) xtrain::launcher::block_handled_signals(false);
  switch (options.command) {
    case Command::kHelp: std::cout << xtrain::launcher::usage(); return 0;
    case Command::kStatus: return xtrain::launcher::show_status(options);
    case Command::kLogs: return xtrain::launcher::show_logs(options);
    case Command::kStop: return xtrain::launcher::stop_run(options);
    case Command::kList: return xtrain::launcher::list_runs(options);
    case Command::kReport: return xtrain::launcher::report_command(options);
    case Command::kRun: break;
  }
  return xtrain::launcher::run_job(options);
}

int run_command(int argc, char** argv) {
  namespace exit_code = xtrain::exit_code;
  if (xtrain::print_version_if_asked(argc, argv, "xlaunch")) return exit_code::kSuccess;
  xtrain::launcher::init_command_logging();
  try {
    return dispatch(xtrain::launcher::parse_cli({argv + 1, argv + argc}, xtrain::launcher::process_environment()));
  } catch (const xtrain::launcher::CliError& e) {
    std::cerr << "xlaunch: error: " << e.what() << "\n";
    return exit_code::kInvalidSpec;
  } catch (const xtrain::SpecError& e) {
    std::cerr << "xlaunch: error: " << e.what() << "\n";
    return exit_code::kInvalidSpec;
  } catch (const xtrain::launcher::LaunchError& e) {
    std::cerr << "xlaunch: error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "xlaunch: error: " << e.what() << "\n";
    return exit_code::kLaunchFailure;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything else: the stop signals wait, blocked, for the supervisor's handlers (which take
  // one that came early), so none in xlaunch's first milliseconds takes the default action.
  xtrain::launcher::block_handled_signals(true);
  const int code = run_command(argc, argv);
  if (const auto sig = xtrain::launcher::take_pending_stop_signal()) {
    std::cerr << "xlaunch: received " << xtrain::exit_code::signal_name(*sig) << " before any rank started; exit " << 128 + *sig
              << "\n";
    return 128 + *sig;
  }
  return code;
}
