#include "launcher/cli/cli.hpp"

#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <functional>
#include <set>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/did_you_mean.hpp"
#include "launcher/cli/torchrun.hpp"

namespace xtrain::launcher {
namespace {

// What the options of one command line leave to be decided once all of them are read.
struct ParseState {
  CliOptions options;
  std::optional<std::string> redirects;   // torchrun's --redirects
  std::optional<std::string> stream_tee;  // torchrun's --tee form (0-3, LOCAL_RANK:VALUE)
  bool no_python = false;
  bool module = false;
  bool run_path = false;
  bool run_dir_flag = false;
  std::set<std::string> given;  // the options on the command line, by canonical name
};

// `typed`: the option's name as the user wrote it ("--nproc_per_node"), for messages.
using Apply = std::function<void(ParseState&, const std::string& value, const std::string& typed)>;

struct OptionRule {
  bool takes_value;
  std::vector<Command> allowed;  // the commands this option belongs to
  Apply apply;
};

// A value that must reach the spec as a JSON string, whatever it looks like ("123", "true").
std::string string_override(const std::string& key, const std::string& value) {
  return key + "=" + nlohmann::json(value).dump();
}

// An override a flag makes, remembered so that a spec error on that key names the flag.
void flag_override(ParseState& s, const std::string& key, const nlohmann::json& value, const std::string& as_typed) {
  s.options.overrides.push_back(key + "=" + value.dump());
  s.options.flag_of[key] = as_typed;
}

Apply note(const std::string& why) {
  return [why](ParseState& s, const std::string&, const std::string& typed) {
    s.options.notes.push_back(typed + " is ignored: " + why);
  };
}

Apply set_true(bool ParseState::*field) {
  return [field](ParseState& s, const std::string&, const std::string&) { s.*field = true; };
}

Apply set_option(bool CliOptions::*field) {
  return [field](ParseState& s, const std::string&, const std::string&) { s.options.*field = true; };
}

const std::vector<Command> kRun = {Command::kRun};

// Keys are canonical names: "--" and dashes (torchrun's underscores are read as dashes).
const std::map<std::string, OptionRule>& option_rules() {
  static const std::map<std::string, OptionRule> rules = {
      // xlaunch's own.
      {"--set", {true, kRun, [](ParseState& s, const std::string& v, const std::string&) {
         if (v.find('=') == std::string::npos || v.front() == '=') {
           throw CliError("--set: expected KEY=VALUE with a dotted KEY, got \"" + v + "\"");
         }
         s.options.overrides.push_back(v);
       }}},
      {"--run-dir", {true, kRun, [](ParseState& s, const std::string& v, const std::string& typed) {
         s.options.overrides.push_back(string_override("run_dir", v));
         s.options.flag_of["run_dir"] = typed + " " + v;
         s.run_dir_flag = true;
       }}},
      {"--tee", {true, kRun, [](ParseState& s, const std::string& v, const std::string& typed) {
         if (v == "all" || v == "rank0" || v == "none") {
           flag_override(s, "launcher.tee", v, typed + " " + v);
         } else if (torchrun::is_stream_spec(v)) {
           s.stream_tee = v;
         } else {
           throw CliError(typed + ": expected all, rank0 or none (or torchrun's 0-3, LOCAL_RANK:VALUE), got \"" + v +
                          "\"");
         }
       }}},
      {"--preempt-grace", {true, kRun, [](ParseState& s, const std::string& v, const std::string& typed) {
         double grace = 0;
         try {
           grace = parse_number_option(typed, v, 0);
         } catch (const CliError&) {
         }
         if (!(grace > 0)) throw CliError(typed + ": expected a number of seconds > 0, got \"" + v + "\"");
         flag_override(s, "launcher.preempt_grace_s", grace, typed + " " + v);
       }}},
      {"--dry-run", {false, kRun, set_option(&CliOptions::dry_run)}},
      {"--check", {false, kRun, set_option(&CliOptions::check)}},
      {"--detach", {false, kRun, set_option(&CliOptions::detach)}},
      // torchrun's, where they mean the same thing (launcher/cli/torchrun.hpp).
      {"--nproc-per-node", {true, kRun, [](ParseState& s, const std::string& v, const std::string& typed) {
         torchrun::apply_nproc_per_node(s.options, v, typed);
       }}},
      {"--nnodes", {true, kRun, [](ParseState& s, const std::string& v, const std::string& typed) {
         const int nnodes = torchrun::parse_nnodes(v, typed);
         flag_override(s, "nodes.nnodes", nnodes, typed + " " + v);
         s.options.rendezvous.nnodes = nnodes;
       }}},
      {"--node-rank", {true, kRun, [](ParseState& s, const std::string& v, const std::string& typed) {
         flag_override(s, "nodes.node_rank", parse_int_option(typed, v, 0, 65535), typed + " " + v);
         s.options.rendezvous.node_rank = true;
       }}},
      {"--rdzv-endpoint", {true, kRun, [](ParseState& s, const std::string& v, const std::string& typed) {
         const std::string endpoint = torchrun::endpoint_with_default_port(v, typed);
         flag_override(s, "nodes.rdzv_endpoint", endpoint, typed + " " + v);
         s.options.rendezvous.endpoint = endpoint;
       }}},
      {"--rdzv-backend", {true, kRun, [](ParseState&, const std::string& v, const std::string& typed) {
         if (v != "c10d" && v != "static") {
           throw CliError(typed + " " + v + ": not supported; node 0's xlaunch serves the rendezvous store itself "
                                            "(c10d and static are accepted and mean that)");
         }
       }}},
      {"--rdzv-id", {true, kRun, [](ParseState& s, const std::string& v, const std::string& typed) {
         if (v.empty()) throw CliError(typed + ": expected a job id, got \"\"");
         s.options.rendezvous.rdzv_id = v;
       }}},
      {"--rdzv-conf", {true, kRun, [](ParseState& s, const std::string& v, const std::string& typed) {
         torchrun::apply_rdzv_conf(s.options, v, typed);
       }}},
      {"--standalone", {false, kRun, [](ParseState& s, const std::string&, const std::string&) {
         s.options.rendezvous.standalone = true;
       }}},
      {"--max-restarts", {true, kRun, [](ParseState& s, const std::string& v, const std::string& typed) {
         flag_override(s, "launcher.max_restarts", parse_int_option(typed, v, 0, 1000), typed + " " + v);
       }}},
      {"--master-addr", {true, kRun, [](ParseState& s, const std::string& v, const std::string& typed) {
         if (v.empty()) throw CliError(typed + ": expected a host, got \"\"");
         s.options.rendezvous.master_addr = v;
         s.options.flag_of.emplace("nodes.rdzv_endpoint", typed + " " + v);
       }}},
      {"--master-port", {true, kRun, [](ParseState& s, const std::string& v, const std::string& typed) {
         s.options.rendezvous.master_port = parse_int_option(typed, v, 1, 65535);
         s.options.flag_of["launcher.master_port"] = typed + " " + v;
         s.options.flag_of.emplace("nodes.rdzv_endpoint", typed + " " + v);
       }}},
      {"--redirects", {true, kRun, [](ParseState& s, const std::string& v, const std::string&) { s.redirects = v; }}},
      {"--log-dir", {true, kRun, [](ParseState& s, const std::string& v, const std::string& typed) {
         if (v.empty()) throw CliError(typed + ": expected a directory, got \"\"");
         s.options.log_dir = v;
         s.options.flag_of["run_dir"] = typed + " " + v;
       }}},
      {"--no-python", {false, kRun, set_true(&ParseState::no_python)}},
      {"--module", {false, kRun, set_true(&ParseState::module)}},
      {"--run-path", {false, kRun, set_true(&ParseState::run_path)}},
      {"--monitor-interval", {true, kRun, [](ParseState& s, const std::string& v, const std::string& typed) {
         parse_number_option(typed, v, 0);
         note("xlaunch reacts to each rank's exit as it happens (no polling)")(s, v, typed);
       }}},
      {"--start-method", {true, kRun, [](ParseState& s, const std::string& v, const std::string& typed) {
         if (v != "spawn" && v != "fork" && v != "forkserver") {
           throw CliError(typed + ": expected spawn, fork or forkserver, got \"" + v + "\"");
         }
         note("every rank is a new process (fork and exec of the program)")(s, v, typed);
       }}},
      {"--log-line-prefix-template", {true, kRun, note("xlaunch's console prefixes each rank's lines with "
                                                        "[rank R]; the log files hold them as the rank wrote them")}},
      {"--role", {true, kRun, [](ParseState& s, const std::string& v, const std::string& typed) {
         if (v.empty()) throw CliError(typed + ": expected a role name, got \"\"");
         s.options.rendezvous.role = v;
       }}},
      // The subcommands'.
      {"--json", {false, {Command::kStatus, Command::kList}, set_option(&CliOptions::json)}},
      {"--follow", {false, {Command::kLogs}, set_option(&CliOptions::follow)}},
      {"--rank", {true, {Command::kLogs}, [](ParseState& s, const std::string& v, const std::string& typed) {
         s.options.rank = parse_int_option(typed, v, 0, INT_MAX);
       }}},
      {"--out", {true, {Command::kReport}, [](ParseState& s, const std::string& v, const std::string& typed) {
         if (v.empty()) throw CliError(typed + ": expected a file name, got \"\"");
         s.options.out = v;
       }}},
  };
  return rules;
}

const std::map<std::string, Command> kSubcommands = {{"status", Command::kStatus}, {"logs", Command::kLogs},
                                                     {"stop", Command::kStop},     {"ls", Command::kList},
                                                     {"report", Command::kReport}};

const char* command_name(Command c) {
  switch (c) {
    case Command::kStatus: return "xlaunch status";
    case Command::kLogs: return "xlaunch logs";
    case Command::kStop: return "xlaunch stop";
    case Command::kList: return "xlaunch ls";
    case Command::kReport: return "xlaunch report";
    default: return "xlaunch JOB.json";
  }
}

// "--nproc_per_node" -> "--nproc-per-node"; torchrun's short options -> their long names.
std::string canonical(const std::string& name) {
  static const std::map<std::string, std::string> shorts = {
      {"-h", "--help"}, {"-f", "--follow"}, {"-m", "--module"}, {"-r", "--redirects"}, {"-t", "--tee"}};
  if (const auto it = shorts.find(name); it != shorts.end()) return it->second;
  std::string out = name;
  for (size_t i = 2; i < out.size(); ++i) {
    if (out[i] == '_') out[i] = '-';
  }
  return out;
}

bool is_option(const std::string& arg) { return arg.size() >= 2 && arg[0] == '-' && arg != "--"; }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Reads the option at args[i] (and its value, advancing i); returns false for --help.
bool read_option(ParseState& state, const std::vector<std::string>& args, size_t& i) {
  const std::string& arg = args[i];
  std::string typed = arg;
  std::string value;
  bool inline_value = false;
  if (arg.rfind("--", 0) == 0) {
    if (const auto eq = arg.find('='); eq != std::string::npos) {
      typed = arg.substr(0, eq), value = arg.substr(eq + 1), inline_value = true;
    }
  } else if (arg.size() > 2) {  // torchrun's -r3, -t3
    typed = arg.substr(0, 2), value = arg.substr(2), inline_value = true;
  }
  const std::string name = canonical(typed);
  if (name == "--help") return false;
  if (const char* why = torchrun::unsupported_reason(name)) {
    throw CliError("torchrun's " + typed + " is not supported by xlaunch: " + why);
  }
  const auto rule = option_rules().find(name);
  if (rule == option_rules().end()) {
    std::vector<std::string> known = {"--help"};
    for (const auto& [option, unused] : option_rules()) known.push_back(option);
    const std::string close = closest_name(typed, known, typo_edits(typed));
    throw CliError("unknown option " + typed + (close.empty() ? "" : " (did you mean " + close + "?)") +
                   " (see xlaunch --help)");
  }
  state.given.insert(name);
  if (rule->second.takes_value && !inline_value) {
    if (i + 1 >= args.size()) throw CliError(typed + ": expected a value");
    value = args[++i];
  } else if (!rule->second.takes_value && inline_value) {
    throw CliError(typed + ": takes no value");
  }
  const auto& allowed = rule->second.allowed;
  if (std::find(allowed.begin(), allowed.end(), state.options.command) == allowed.end()) {
    throw CliError(typed + " is not an option of `" + command_name(state.options.command) + "`");
  }
  rule->second.apply(state, value, typed);
  return true;
}

// status|logs|stop|report RUN_DIR, ls [DIR]: options anywhere after the subcommand.
CliOptions parse_subcommand(ParseState& state, const std::vector<std::string>& args) {
  CliOptions& o = state.options;
  std::vector<std::string> positionals;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--") continue;
    if (!is_option(args[i])) {
      positionals.push_back(args[i]);
    } else if (!read_option(state, args, i)) {
      o.command = Command::kHelp;
      return o;
    }
  }
  if (positionals.size() > 1) throw CliError("unexpected argument \"" + positionals[1] + "\"");
  if (positionals.empty() && o.command != Command::kList) {
    throw CliError(std::string("expected a run directory: ") + command_name(o.command) + " RUN_DIR");
  }
  o.run_dir = positionals.empty() ? "runs" : positionals.front();
  return o;
}

// torchrun's flags, which torchrun also reads from PET_<FLAG> (xlaunch's own flags have no variable).
const std::set<std::string> kTorchrunFlags = {
    "--nproc-per-node", "--nnodes",      "--node-rank",   "--rdzv-endpoint", "--rdzv-backend",     "--rdzv-id",
    "--rdzv-conf",      "--standalone",  "--max-restarts", "--master-addr",  "--master-port",      "--redirects",
    "--tee",            "--log-dir",     "--no-python",   "--module",        "--run-path",         "--monitor-interval",
    "--start-method",   "--role",        "--log-line-prefix-template"};

// "PET_NPROC_PER_NODE" -> "--nproc-per-node"
std::string flag_of_variable(const std::string& variable) {
  std::string flag = "--";
  for (size_t i = 4; i < variable.size(); ++i) {
    flag += variable[i] == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(variable[i])));
  }
  return flag;
}

// torchrun's PET_<FLAG> variables as the defaults of the flags the command line does not give.
// A switch (--standalone) takes 0 or 1 (torchrun reads bool(int(value))). Their
// overrides go before the command line's, so that --set still wins over them.
void apply_environment(ParseState& s, const std::map<std::string, std::string>& environment) {
  std::vector<std::string> command_line = std::move(s.options.overrides);
  s.options.overrides.clear();
  for (const auto& [variable, value] : environment) {
    if (variable.rfind("PET_", 0) != 0) continue;
    const std::string flag = flag_of_variable(variable);
    if (const char* why = torchrun::unsupported_reason(flag)) {
      throw CliError(variable + " (torchrun's " + flag + ") is not supported by xlaunch: " + why);
    }
    if (!kTorchrunFlags.count(flag) || s.given.count(flag)) continue;
    const OptionRule& rule = option_rules().at(flag);
    if (rule.takes_value) {
      rule.apply(s, value, variable);
    } else if (parse_int_option(variable, value, 0, 1) == 1) {
      rule.apply(s, "", variable);
    }
  }
  s.options.overrides.insert(s.options.overrides.end(), command_line.begin(), command_line.end());
}

void resolve_program(ParseState& s) {
  CliOptions& o = s.options;
  const bool program_flag = s.no_python || s.module || s.run_path;
  if (o.program.empty()) {
    if (program_flag) {
      throw CliError(std::string(s.module ? "-m" : s.run_path ? "--run-path" : "--no-python") +
                     ": expected the program after the options");
    }
    return;
  }
  if (s.module && s.no_python && !s.run_path) throw CliError("--no-python and -m exclude each other (as in torchrun)");
  if (s.run_path) {  // torchrun: takes precedence over --no-python
    o.program_kind = ProgramKind::kPythonScript;
  } else if (s.module) {
    o.program_kind = ProgramKind::kPythonModule;
  } else if (s.no_python || !ends_with(o.program.front(), ".py")) {
    o.program_kind = ProgramKind::kExecutable;
  } else {
    o.program_kind = ProgramKind::kPythonScript;
  }
  o.flag_of["worker.command"] = "the program \"" + o.program.front() + "\"";
}

void resolve_run(ParseState& s) {
  CliOptions& o = s.options;
  if (int(o.dry_run) + int(o.check) + int(o.detach) > 1) {
    throw CliError("--dry-run, --check and --detach exclude each other");
  }
  resolve_program(s);
  if (o.job_path.empty() && o.program.empty()) {
    throw CliError("expected a job spec or a program: xlaunch [OPTIONS] JOB.json, or xlaunch [OPTIONS] -- PROGRAM "
                   "[ARGS...]");
  }
  RendezvousFlags& r = o.rendezvous;
  if (r.standalone) {
    if (r.nnodes && *r.nnodes > 1) {
      throw CliError("--standalone runs on one node; it excludes --nnodes " + std::to_string(*r.nnodes));
    }
    if (r.endpoint || r.master_addr || r.master_port || !r.rdzv_id.empty()) {
      o.notes.push_back("--standalone: the rendezvous flags are ignored, as torchrun does");
    }
  }
  if (o.log_dir && s.run_dir_flag) {
    throw CliError("--log-dir and --run-dir exclude each other (--log-dir DIR makes the run dir DIR/<name>)");
  }
  if (s.redirects || s.stream_tee) {
    if (o.flag_of.count("launcher.tee")) {
      throw CliError(o.flag_of.at("launcher.tee") + " and --redirects exclude each other: --redirects goes with "
                     "torchrun's --tee values (0-3, LOCAL_RANK:VALUE); use either xlaunch's --tee all|rank0|none alone, "
                     "or torchrun's --redirects/--tee");
    }
    o.overrides.push_back(string_override("launcher.tee", torchrun::console_tee(s.redirects, s.stream_tee, o.notes)));
    o.flag_of["launcher.tee"] = "--redirects/--tee";
  }
}

}  // namespace

int parse_int_option(const std::string& flag, const std::string& value, long long min, long long max) {
  long long n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (value.empty() || ec != std::errc() || end != value.data() + value.size() || n < min || n > max) {
    throw CliError(flag + ": expected an integer >= " + std::to_string(min) +
                   (max < INT_MAX ? " and <= " + std::to_string(max) : "") + ", got \"" + value + "\"");
  }
  return static_cast<int>(n);
}

double parse_number_option(const std::string& flag, const std::string& value, double min) {
  char* end = nullptr;
  const double x = value.empty() ? NAN : std::strtod(value.c_str(), &end);
  if (!end || *end != '\0' || !std::isfinite(x) || x < min) {
    throw CliError(flag + ": expected a number >= " + nlohmann::json(min).dump() + ", got \"" + value + "\"");
  }
  return x;
}

CliOptions parse_cli(const std::vector<std::string>& args, const std::map<std::string, std::string>& environment) {
  ParseState state;
  CliOptions& o = state.options;
  if (!args.empty() && kSubcommands.count(args.front())) {
    o.command = kSubcommands.at(args.front());
    return parse_subcommand(state, args);
  }
  // Options, then at most one JOB.json (options may follow it), then the program with its
  // arguments: everything after `--`, or after the first argument that is not a spec.
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      o.program.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      if (o.program.empty()) throw CliError("--: expected PROGRAM [ARGS...] after it");
      break;
    }
    if (is_option(arg)) {
      if (!read_option(state, args, i)) {
        o.command = Command::kHelp;
        return o;
      }
      continue;
    }
    const bool program_flag = state.no_python || state.module || state.run_path;
    if (!program_flag && ends_with(arg, ".json")) {
      if (!o.job_path.empty()) throw CliError("unexpected argument \"" + arg + "\": one job spec at most");
      o.job_path = arg;
      continue;
    }
    if (!program_flag && (ends_with(arg, ".yaml") || ends_with(arg, ".yml") || ends_with(arg, ".toml")) &&
        ::access(arg.c_str(), X_OK) != 0) {
      throw CliError("\"" + arg + "\": job specs are JSON (JOB.json, comments allowed), and this is not a program "
                     "to run either");
    }
    o.program.assign(args.begin() + static_cast<long>(i), args.end());
    break;
  }
  apply_environment(state, environment);
  resolve_run(state);
  return o;
}

std::string usage() {
  return R"(usage: xlaunch [OPTIONS] JOB.json                 run the job; the exit code is the job's outcome
       xlaunch [OPTIONS] [JOB.json] -- PROGRAM [ARGS...]   run PROGRAM as every rank (no spec needed)
       xlaunch [OPTIONS] [JOB.json] SCRIPT.py [ARGS...]    run python3 -u SCRIPT.py, as torchrun does
       xlaunch [OPTIONS] [JOB.json] -m MODULE [ARGS...]    run python3 -u -m MODULE
       xlaunch status RUN_DIR [--json]  the run's live or final state
       xlaunch logs RUN_DIR [--rank R] [--follow]
       xlaunch stop RUN_DIR             graceful stop of a running supervisor
       xlaunch ls [DIR] [--json]        the runs under DIR (default runs), one line each
       xlaunch report RUN_DIR [--out FILE]   write the run's report (default RUN_DIR/report.html)
       xlaunch --version                the version and the commit this build comes from

options of a run (flags win over the spec file):
  --set KEY=VALUE         override a spec field by dotted path (repeatable); VALUE is JSON,
                          or a plain string when it does not parse as JSON
  --nproc-per-node N|auto|gpu|cpu   ranks on this node (auto: one per visible GPU, else the CPU ranks)
  --run-dir DIR           where state, summary and logs go (default runs/<name>; a program
                          run without a spec: runs/<name>-<time>)
  --tee all|rank0|none    which ranks' lines go to the console (files always get all)
  --preempt-grace S       on SIGTERM, every rank checkpoints at its next step and exits; the
                          usual stop only after S s (launcher.preempt_grace_s; README: Preemption)
  --dry-run               print the resolved plan as JSON and start nothing
  --check                 validate the spec and exit (0 valid, else the code the run would give)
  --detach                run in the background; print the run dir and the supervisor's pid

torchrun's flags (either spelling, --flag value or --flag=value; README: "Coming from torchrun"):
  --nnodes N  --node-rank R  --rdzv-endpoint HOST[:PORT]  --rdzv-backend c10d|static  --rdzv-id ID
  --rdzv-conf join_timeout=S  --standalone  --master-addr HOST  --master-port PORT  --max-restarts N
  --redirects/-r V  --tee/-t V  --log-dir DIR  --no-python  -m/--module  --run-path
  --role R (every rank's ROLE_NAME)
  --monitor-interval S, --start-method M, --log-line-prefix-template T (accepted, ignored with a note)
  .py programs and -m run with $PYTHON_EXEC, else python3 from PATH.

exit codes: 0 every rank exited 0; 2 bad command line or spec; 124 timeout or lost heartbeat;
125 could not run the job; 126/127 worker not executable / not found; 128+N stopped by signal N
(129 SIGHUP, 130 SIGINT, 131 SIGQUIT, 143 SIGTERM); otherwise the exit code of the first rank to
fail (128+N if signal N killed it).
)";
}

std::string subcommand_hint(const std::string& program) {
  std::vector<std::string> names;
  for (const auto& [name, unused] : kSubcommands) names.push_back(name);
  const std::string close = closest_name(program, names, typo_edits(program));
  return close.empty() ? "" : " (did you mean `xlaunch " + close + "`?)";
}

}  // namespace xtrain::launcher
