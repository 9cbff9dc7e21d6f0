// xlaunch's command line: `xlaunch [OPTIONS] JOB.json` and the status / logs / stop subcommands.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace xtrain::launcher {

enum class Command { kRun, kStatus, kLogs, kStop, kHelp };

struct CliOptions {
  Command command = Command::kRun;
  // kRun
  std::string job_path;
  std::vector<std::string> overrides;  // KEY=VALUE for apply_override, in command-line order
  bool dry_run = false;
  bool check = false;
  bool detach = false;
  // kStatus, kLogs, kStop
  std::string run_dir;
  bool json = false;                   // status --json
  std::optional<int> rank;             // logs --rank R
  bool follow = false;                 // logs --follow
};

// A bad command line: exit 2. The message says which option and what was expected.
class CliError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// `args` excludes argv[0].
CliOptions parse_cli(const std::vector<std::string>& args);

std::string usage();

}  // namespace xtrain::launcher
