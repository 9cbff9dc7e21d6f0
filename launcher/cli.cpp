#include "launcher/cli.hpp"

#include <charconv>
#include <functional>
#include <map>

#include <nlohmann/json.hpp>

namespace xtrain::launcher {
namespace {

struct OptionRule {
  bool takes_value;
  std::vector<Command> allowed;  // the commands this option belongs to
  std::function<void(CliOptions&, const std::string&)> apply;
};

// A value that must reach the spec as a JSON string, whatever it looks like ("123", "true").
std::string string_override(const std::string& key, const std::string& value) {
  return key + "=" + nlohmann::json(value).dump();
}

const std::map<std::string, OptionRule>& option_rules() {
  static const std::map<std::string, OptionRule> rules = {
      {"--set", {true, {Command::kRun}, [](CliOptions& o, const std::string& v) {
         if (v.find('=') == std::string::npos || v.front() == '=') {
           throw CliError("--set: expected KEY=VALUE with a dotted KEY, got \"" + v + "\"");
         }
         o.overrides.push_back(v);
       }}},
      {"--nproc-per-node", {true, {Command::kRun}, [](CliOptions& o, const std::string& v) {
         o.overrides.push_back("nproc_per_node=" + v);
       }}},
      {"--run-dir", {true, {Command::kRun}, [](CliOptions& o, const std::string& v) {
         o.overrides.push_back(string_override("run_dir", v));
       }}},
      {"--tee", {true, {Command::kRun}, [](CliOptions& o, const std::string& v) {
         if (v != "all" && v != "rank0" && v != "none") {
           throw CliError("--tee: expected all, rank0 or none, got \"" + v + "\"");
         }
         o.overrides.push_back(string_override("launcher.tee", v));
       }}},
      {"--dry-run", {false, {Command::kRun}, [](CliOptions& o, const std::string&) { o.dry_run = true; }}},
      {"--check", {false, {Command::kRun}, [](CliOptions& o, const std::string&) { o.check = true; }}},
      {"--detach", {false, {Command::kRun}, [](CliOptions& o, const std::string&) { o.detach = true; }}},
      {"--json", {false, {Command::kStatus}, [](CliOptions& o, const std::string&) { o.json = true; }}},
      {"--follow", {false, {Command::kLogs}, [](CliOptions& o, const std::string&) { o.follow = true; }}},
      {"--rank", {true, {Command::kLogs}, [](CliOptions& o, const std::string& v) {
         int rank = -1;
         const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), rank);
         if (ec != std::errc() || end != v.data() + v.size() || rank < 0) {
           throw CliError("--rank: expected an integer >= 0, got \"" + v + "\"");
         }
         o.rank = rank;
       }}},
  };
  return rules;
}

const std::map<std::string, Command> kSubcommands = {
    {"status", Command::kStatus}, {"logs", Command::kLogs}, {"stop", Command::kStop}};

const char* command_name(Command c) {
  switch (c) {
    case Command::kStatus: return "xlaunch status";
    case Command::kLogs: return "xlaunch logs";
    case Command::kStop: return "xlaunch stop";
    default: return "xlaunch JOB.json";
  }
}

struct SplitArgs {
  std::vector<std::pair<std::string, std::string>> options;  // name, value ("" for flags)
  std::vector<std::string> positionals;
};

SplitArgs split(const std::vector<std::string>& args) {
  SplitArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 2 || arg[0] != '-' || arg == "--") {
      if (arg != "--") out.positionals.push_back(arg);
      continue;
    }
    std::string name = arg;
    std::string value;
    const auto eq = arg.find('=');
    const bool inline_value = arg.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) name = arg.substr(0, eq), value = arg.substr(eq + 1);
    if (name == "-f") name = "--follow";
    if (name == "-h" || name == "--help") {
      out.options.emplace_back("--help", "");
      continue;
    }
    const auto rule = option_rules().find(name);
    if (rule == option_rules().end()) throw CliError("unknown option " + name + " (see xlaunch --help)");
    if (rule->second.takes_value && !inline_value) {
      if (i + 1 >= args.size()) throw CliError(name + ": expected a value");
      value = args[++i];
    } else if (!rule->second.takes_value && inline_value) {
      throw CliError(name + ": takes no value");
    }
    out.options.emplace_back(name, value);
  }
  return out;
}

void check_combination(const CliOptions& o) {
  const int modes = int(o.dry_run) + int(o.check) + int(o.detach);
  if (modes > 1) throw CliError("--dry-run, --check and --detach exclude each other");
}

}  // namespace

CliOptions parse_cli(const std::vector<std::string>& args) {
  const SplitArgs parts = split(args);
  CliOptions opts;
  for (const auto& [name, value] : parts.options) {
    if (name == "--help") {
      opts.command = Command::kHelp;
      return opts;
    }
  }
  std::vector<std::string> positionals = parts.positionals;
  if (!positionals.empty() && kSubcommands.count(positionals.front())) {
    opts.command = kSubcommands.at(positionals.front());
    positionals.erase(positionals.begin());
  }
  if (positionals.empty()) {
    throw CliError(opts.command == Command::kRun ? "expected a job spec: xlaunch [OPTIONS] JOB.json"
                                                 : std::string("expected a run directory: ") +
                                                       command_name(opts.command) + " RUN_DIR");
  }
  if (positionals.size() > 1) throw CliError("unexpected argument \"" + positionals[1] + "\"");
  (opts.command == Command::kRun ? opts.job_path : opts.run_dir) = positionals.front();

  for (const auto& [name, value] : parts.options) {
    const OptionRule& rule = option_rules().at(name);
    if (std::find(rule.allowed.begin(), rule.allowed.end(), opts.command) == rule.allowed.end()) {
      throw CliError(name + " is not an option of `" + command_name(opts.command) + "`");
    }
    rule.apply(opts, value);
  }
  check_combination(opts);
  return opts;
}

std::string usage() {
  return R"(usage: xlaunch [OPTIONS] JOB.json     run the job; the exit code is the job's outcome
       xlaunch status RUN_DIR [--json]  the run's live or final state
       xlaunch logs RUN_DIR [--rank R] [--follow]
       xlaunch stop RUN_DIR             graceful stop of a running supervisor

options of a run:
  --set KEY=VALUE         override a spec field by dotted path (repeatable); VALUE is JSON,
                          or a plain string when it does not parse as JSON
  --nproc-per-node N|auto ranks on this node (auto: one per visible GPU)
  --run-dir DIR           where state, summary and logs go (default runs/<name>)
  --tee all|rank0|none    which ranks' lines go to the console (files always get all)
  --dry-run               print the resolved plan as JSON and start nothing
  --check                 validate the spec and exit (0 valid, else the code the run would give)
  --detach                run in the background; print the run dir and the supervisor's pid

exit codes: 0 every rank exited 0; 2 bad command line or spec; 124 timeout or lost heartbeat;
125 could not run the job; 126/127 worker not executable / not found; 128+N stopped by signal N;
otherwise the exit code of the first rank to fail (128+N if signal N killed it).
)";
}

}  // namespace xtrain::launcher
