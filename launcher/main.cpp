// xlaunch: parse the command line, run the command, map every error to the contract's exit code.
#include <iostream>

#include "common/exit_codes.hpp"
#include "common/job_spec.hpp"
#include "launcher/cli.hpp"
#include "launcher/host.hpp"
#include "launcher/html_report.hpp"
#include "launcher/inspect.hpp"
#include "launcher/launch.hpp"
#include "launcher/launch_error.hpp"
#include "launcher/list_runs.hpp"

namespace {

int dispatch(const xtrain::launcher::CliOptions& options) {
  using xtrain::launcher::Command;
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

}  // namespace

int main(int argc, char** argv) {
  namespace exit_code = xtrain::exit_code;
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
