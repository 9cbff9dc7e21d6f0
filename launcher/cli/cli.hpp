// xlaunch's command line:
//   xlaunch [OPTIONS] JOB.json                        a job spec
//   xlaunch [OPTIONS] [JOB.json] -- PROGRAM [ARGS...] a program as the worker (torchrun's form;
//   xlaunch [OPTIONS] [JOB.json] SCRIPT.py [ARGS...]    flags and the spec combine, flags win)
//   xlaunch [OPTIONS] [JOB.json] -m MODULE [ARGS...]
//   xlaunch status|logs|stop|report RUN_DIR ..., xlaunch ls [DIR]
// torchrun's flag names are accepted where they mean the same thing (launcher/cli/torchrun.hpp).
#pragma once

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace xtrain::launcher {

enum class Command { kRun, kStatus, kLogs, kStop, kList, kReport, kHelp };

// How the program of a program run is started (torchrun's rules, see launcher/cli/torchrun.hpp).
enum class ProgramKind {
  kExecutable,    // exec'd as is: --no-python, or a first argument that does not end in .py
  kPythonScript,  // python3 -u SCRIPT ARGS: a .py first argument, or --run-path
  kPythonModule,  // python3 -u -m MODULE ARGS: -m / --module
};

// torchrun's rendezvous flags: what each means depends on the others and on the spec's number
// of nodes, so they are resolved together when the plan is made (apply_rendezvous_flags).
struct RendezvousFlags {
  std::optional<std::string> master_addr;  // --master-addr
  std::optional<int> master_port;          // --master-port
  std::optional<std::string> endpoint;     // --rdzv-endpoint, with torchrun's default port
  std::string rdzv_id;                     // --rdzv-id: the job token when XTRAIN_JOB_TOKEN is unset
  std::optional<int> nnodes;               // --nnodes
  bool node_rank = false;                  // --node-rank was given
  bool standalone = false;                 // --standalone
  std::string role = "default";            // --role: the ranks' ROLE_NAME, torchrun's default
};

struct CliOptions {
  Command command = Command::kRun;
  // kRun
  std::string job_path;                  // empty: a program run without a spec file
  std::vector<std::string> program;      // PROGRAM|SCRIPT|MODULE [ARGS...], as given
  ProgramKind program_kind = ProgramKind::kExecutable;
  std::vector<std::string> overrides;    // KEY=VALUE for apply_override, in command-line order
  std::map<std::string, std::string> flag_of;  // spec key -> the flag that set it ("--nnodes 2")
  std::vector<std::string> notes;        // flags accepted but ignored or approximated: said on stderr
  RendezvousFlags rendezvous;
  std::optional<std::string> log_dir;    // --log-dir: the run dir's parent instead of runs/
  bool dry_run = false;
  bool check = false;
  bool detach = false;
  // kStatus, kLogs, kStop, kReport, kList
  std::string run_dir;                   // ls: the directory to list (default runs)
  bool json = false;                     // status --json, ls --json
  std::optional<int> rank;               // logs --rank R
  bool follow = false;                   // logs --follow
  std::string out;                       // report --out FILE
};

// A bad command line: exit 2. The message says which option and what was expected.
class CliError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An option's integer value in [min, max]; throws CliError naming `flag` otherwise.
int parse_int_option(const std::string& flag, const std::string& value, long long min, long long max);
// A finite number >= `min`; throws CliError naming `flag` otherwise.
double parse_number_option(const std::string& flag, const std::string& value, double min);

// `args` excludes argv[0]. `environment` gives a run torchrun's PET_<FLAG> variables: each is the
// default of --<flag> (PET_NNODES of --nnodes, ...), as torchrun reads them; the command line wins.
// A malformed value is a CliError naming the variable.
CliOptions parse_cli(const std::vector<std::string>& args, const std::map<std::string, std::string>& environment = {});

std::string usage();

// For a program that is not found: " (did you mean `xlaunch status`?)" when its name is a typo of
// one of xlaunch's subcommands, else "".
std::string subcommand_hint(const std::string& program);

}  // namespace xtrain::launcher
