#include "launcher/cli/torchrun.hpp"

#include <ctime>
#include <filesystem>
#include <set>

#include <unistd.h>

#include "common/store/kv_protocol.hpp"

namespace xtrain::launcher::torchrun {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// torchrun's stream bits (torch.distributed.elastic.multiprocessing.Std).
constexpr int kStdOut = 1;
constexpr int kStdErr = 2;
constexpr int kStdBoth = kStdOut | kStdErr;

// A --redirects or --tee value: one value for every local rank, or some local ranks' values
// (the others 0).
struct StreamSpec {
  int every = 0;
  std::map<int, int> by_rank;
  int of(int local_rank) const {
    const auto it = by_rank.find(local_rank);
    return it != by_rank.end() ? it->second : every;
  }
};

int stream_value(const std::string& text) {
  return text.size() == 1 && text[0] >= '0' && text[0] <= '3' ? text[0] - '0' : -1;
}

std::optional<StreamSpec> parse_stream_spec(const std::string& value) {
  StreamSpec spec;
  if (value.find(':') == std::string::npos) {
    spec.every = stream_value(value);
    if (spec.every < 0) return std::nullopt;
    return spec;
  }
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = std::min(value.find(',', start), value.size());
    const std::string item = value.substr(start, comma - start);
    const size_t colon = item.find(':');
    if (colon == std::string::npos || colon == 0 || item.find_first_not_of("0123456789", 0) != colon ||
        colon > 6) {
      return std::nullopt;
    }
    const int bits = stream_value(item.substr(colon + 1));
    if (bits < 0) return std::nullopt;
    spec.by_rank[std::stoi(item.substr(0, colon))] = bits;
    start = comma + 1;
  }
  return spec;
}

StreamSpec require_stream_spec(const std::optional<std::string>& value, const char* flag) {
  if (!value) return {};
  const auto spec = parse_stream_spec(*value);
  if (!spec) {
    throw CliError(std::string(flag) + ": expected 0-3 (0 none, 1 stdout, 2 stderr, 3 both) or "
                                       "LOCAL_RANK:VALUE,... as torchrun takes, got \"" + *value + "\"");
  }
  return *spec;
}

void set_path(json& doc, const std::string& dotted, const json& value) {
  json* node = &doc;
  size_t start = 0;
  for (size_t dot; (dot = dotted.find('.', start)) != std::string::npos; start = dot + 1) {
    node = &(*node)[dotted.substr(start, dot - start)];
    if (!node->is_object()) *node = json::object();
  }
  (*node)[dotted.substr(start)] = value;
}

const json* get_path(const json& doc, const std::string& dotted) {
  const json* node = &doc;
  size_t start = 0;
  while (true) {
    const size_t dot = dotted.find('.', start);
    const std::string part = dotted.substr(start, dot == std::string::npos ? dot : dot - start);
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &node->at(part);
    if (dot == std::string::npos) return node;
    start = dot + 1;
  }
}

// A program run without a spec starts from torchrun's defaults: one rank per node unless
// --nproc-per-node says otherwise, and for "auto"/"cpu" without GPUs one rank per core.
json program_defaults(const HostInfo& host) {
  return {{"nproc_per_node", 1}, {"cpu_ranks", std::max(1u, host.cores)}};
}

std::vector<std::string> program_argv(const CliOptions& options, const HostInfo& host) {
  if (options.program_kind == ProgramKind::kExecutable) return options.program;
  const auto python = host.environment.find(kPythonVariable);
  std::vector<std::string> argv = {python != host.environment.end() && !python->second.empty() ? python->second
                                                                                                 : kDefaultPython,
                                   "-u"};
  if (options.program_kind == ProgramKind::kPythonModule) argv.push_back("-m");
  argv.insert(argv.end(), options.program.begin(), options.program.end());
  return argv;
}

// An Indexed Job's (and a JobSet's) pod index: the node rank where nothing else gives one.
void apply_completion_index(json& doc, int nnodes, const std::map<std::string, std::string>& environment) {
  const auto index = environment.find(kCompletionIndexVariable);
  if (index == environment.end() || get_path(doc, "nodes.node_rank")) return;
  try {
    set_path(doc, "nodes.node_rank", parse_int_option(kCompletionIndexVariable, index->second, 0, nnodes - 1));
  } catch (const CliError& e) {
    throw SpecError("", std::string(e.what()) + " (the node rank of a job on " + std::to_string(nnodes) + " nodes)");
  }
}

// Node 0's address for several nodes, 127.0.0.1's MASTER_PORT for one; see the README's table.
void apply_rendezvous_flags(json& doc, const CliOptions& options, const std::map<std::string, std::string>& environment) {
  const RendezvousFlags& flags = options.rendezvous;
  if (flags.standalone) {
    set_path(doc, "nodes.nnodes", 1);
    set_path(doc, "nodes.node_rank", 0);
    return;
  }
  const json* nnodes_value = get_path(doc, "nodes.nnodes");
  const int nnodes = nnodes_value && nnodes_value->is_number_integer() ? nnodes_value->get<int>() : 1;
  if (nnodes <= 1) {
    if (flags.master_port) set_path(doc, "launcher.master_port", *flags.master_port);
    return;
  }
  apply_completion_index(doc, nnodes, environment);
  if (!flags.endpoint && (flags.master_addr || flags.master_port)) {
    set_path(doc, "nodes.rdzv_endpoint",
             flags.master_addr.value_or("127.0.0.1") + ":" + std::to_string(flags.master_port.value_or(kDefaultMasterPort)));
  }
  if (!flags.nnodes) return;  // the spec chose several nodes: its own rules apply
  const std::string nodes = std::to_string(nnodes) + " nodes";
  if (!get_path(doc, "nodes.rdzv_endpoint")) {
    throw SpecError("nodes.nnodes", "a job on " + nodes + " needs node 0's address, the same on every node: "
                                    "add --rdzv-endpoint HOST:PORT, or --master-addr HOST [--master-port PORT]");
  }
  if (!flags.node_rank && !get_path(doc, "nodes.node_rank")) {
    throw SpecError("nodes.nnodes", "a job on " + nodes + " needs --node-rank (or PET_NODE_RANK, or an Indexed "
                                    "Job's JOB_COMPLETION_INDEX) on every node, 0 where the rendezvous endpoint "
                                    "is: torchrun's c10d numbers nodes as they arrive, xlaunch by --node-rank");
  }
}

std::string time_stamp() {
  const std::time_t now = std::time(nullptr);
  std::tm parts{};
  localtime_r(&now, &parts);
  char text[32];
  std::strftime(text, sizeof(text), "%Y%m%d-%H%M%S", &parts);
  return text;
}

// A program run gets a fresh run dir each time, runs/<name>-<time> (two runs in the same second:
// -<pid> appended), so that runs of one script side by side never meet. --log-dir replaces runs/.
void apply_run_dir(json& doc, const CliOptions& options) {
  const json* name = get_path(doc, "name");
  const std::string base = name && name->is_string() ? name->get<std::string>() : default_name(options);
  const std::string parent = options.log_dir.value_or("runs");
  if (!options.job_path.empty()) {
    if (options.log_dir) doc["run_dir"] = parent + "/" + base;
    return;
  }
  if (doc.contains("run_dir")) return;
  std::string dir = parent + "/" + base + "-" + time_stamp();
  std::error_code ec;
  if (fs::exists(dir, ec)) dir += "-" + std::to_string(::getpid());
  doc["run_dir"] = dir;
}

}  // namespace

void apply_nproc_per_node(CliOptions& options, const std::string& value, const std::string& flag) {
  const std::string as_typed = flag + " " + value;
  const auto set = [&](const std::string& key, const json& v) {
    options.overrides.push_back(key + "=" + v.dump());
    options.flag_of[key] = as_typed;
  };
  if (value == "auto") {
    set("nproc_per_node", "auto");
  } else if (value == "gpu" || value == "cpu") {
    set("nproc_per_node", "auto");
    set("device", value == "gpu" ? "cuda" : "cpu");
  } else if (!value.empty() && value.find_first_not_of("0123456789") == std::string::npos) {
    set("nproc_per_node", parse_int_option(flag, value, 1, 4096));
  } else {
    throw CliError(flag + ": expected a number >= 1, auto, gpu or cpu, got \"" + value + "\"");
  }
}

int parse_nnodes(const std::string& value, const std::string& flag) {
  const size_t colon = value.find(':');
  if (colon == std::string::npos) return parse_int_option(flag, value, 1, 65536);
  const std::string low = value.substr(0, colon);
  const std::string high = value.substr(colon + 1);
  const int min = parse_int_option(flag, low, 1, 65536);
  const int max = parse_int_option(flag, high, 1, 65536);
  if (min != max) {
    throw CliError(flag + " " + value + ": elastic ranges (MIN:MAX) are not supported; xlaunch runs a fixed "
                                        "number of nodes: give one number");
  }
  return min;
}

std::string endpoint_with_default_port(const std::string& value, const std::string& flag) {
  std::string endpoint = value;
  const bool bracketed = !value.empty() && value.front() == '[';
  if (bracketed ? value.back() == ']' : value.find(':') == std::string::npos) {
    endpoint += ":" + std::to_string(kDefaultRdzvPort);
  }
  try {
    if (kv::parse_endpoint(endpoint).port == 0) throw std::invalid_argument("expected a port other than 0");
  } catch (const std::invalid_argument& e) {
    throw CliError(flag + ": " + e.what());
  }
  return endpoint;
}

void apply_rdzv_conf(CliOptions& options, const std::string& value, const std::string& flag) {
  size_t start = 0;
  while (start < value.size()) {
    const size_t comma = std::min(value.find(',', start), value.size());
    const std::string item = value.substr(start, comma - start);
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    if (eq == std::string::npos || key != "join_timeout") {
      throw CliError(flag + ": \"" + item + "\" is not supported; xlaunch takes join_timeout=SECONDS only "
                                            "(nodes.rdzv_timeout_s)");
    }
    const double seconds = parse_number_option(flag + " join_timeout", item.substr(eq + 1), 0);
    options.overrides.push_back("nodes.rdzv_timeout_s=" + json(seconds).dump());
    options.flag_of["nodes.rdzv_timeout_s"] = flag + " " + item;
    start = comma + 1;
  }
}

bool is_stream_spec(const std::string& value) { return parse_stream_spec(value).has_value(); }

std::string console_tee(const std::optional<std::string>& redirects, const std::optional<std::string>& tee,
                        std::vector<std::string>& notes) {
  const StreamSpec redirected = require_stream_spec(redirects, "--redirects");
  const StreamSpec teed = require_stream_spec(tee, "--tee");
  std::set<int> named;  // local ranks either flag names; every other rank behaves like rank -1
  for (const StreamSpec* spec : {&redirected, &teed}) {
    for (const auto& [rank, bits] : spec->by_rank) named.insert(rank);
  }
  std::set<int> ranks = named;
  ranks.insert(-1);
  std::set<int> shown;
  bool others_shown = false;
  for (int rank : ranks) {
    const int streams = (kStdBoth & ~redirected.of(rank)) | teed.of(rank);
    if (streams == kStdOut || streams == kStdErr) {
      notes.push_back(std::string("--redirects/--tee: ") + (rank < 0 ? "every rank" : "local rank " + std::to_string(rank)) +
                      " shows only its " + (streams == kStdOut ? "stdout" : "stderr") +
                      " under torchrun; xlaunch shows both streams (one pipe carries them, in order); "
                      "the log files hold everything");
    }
    if (streams == 0) continue;
    if (rank < 0) {
      others_shown = true;
    } else {
      shown.insert(rank);
    }
  }
  if (others_shown && shown.size() == named.size()) return "all";
  if (!others_shown && shown.empty()) return "none";
  if (!others_shown && shown == std::set<int>{0}) return "rank0";
  throw CliError("--redirects/--tee: xlaunch's console shows every rank, rank 0 only, or none (launcher.tee); "
                 "these values show another set of local ranks");
}

const char* unsupported_reason(const std::string& name) {
  static const std::map<std::string, const char*> reasons = {
      {"--local-addr", "each node's address is learned from its connection to node 0's store"},
      {"--logs-specs", "every rank's output goes to logs/rank-R.log in the run dir (--log-dir sets its parent)"},
      {"--local-ranks-filter", "use --tee rank0 (the log files always hold every rank)"},
      {"--numa-binding", "bind inside the program, or start it under numactl"},
      {"--use-env", "that is torch.distributed.launch's flag; LOCAL_RANK is always in the environment"},
      {"--signals-to-handle",
       "xlaunch stops the job on SIGINT, SIGTERM, SIGHUP and SIGQUIT and forwards SIGUSR1/SIGUSR2"},
      {"--event-log-handler", "xlaunch's events go to logs/xlaunch.log and summary.json"},
      {"--virtual-local-rank", "every rank sees its own LOCAL_RANK"},
      {"--module-path", "not supported"},
  };
  const auto it = reasons.find(name);
  return it == reasons.end() ? nullptr : it->second;
}

std::string default_name(const CliOptions& options) {
  std::string name;
  if (!options.job_path.empty()) {
    name = fs::path(options.job_path).stem().string();
  } else if (!options.program.empty()) {
    const std::string& program = options.program.front();
    name = options.program_kind == ProgramKind::kPythonModule ? program.substr(program.rfind('.') + 1)
                                                              : fs::path(program).stem().string();
  }
  return name.empty() || name == "." || name == ".." ? "run" : name;
}

json job_document(const CliOptions& options, const HostInfo& host) {
  json doc = options.job_path.empty() ? program_defaults(host) : read_job_json(options.job_path);
  for (const std::string& assignment : options.overrides) apply_override(doc, assignment);
  if (!doc.is_object()) return doc;  // parse_job_spec says what is wrong
  if (!options.program.empty()) set_path(doc, "worker.command", program_argv(options, host));
  apply_rendezvous_flags(doc, options, host.environment);
  apply_run_dir(doc, options);
  return doc;
}

namespace {

// `--set sample.prompt=123` gives the number 123 (VALUE is JSON where it parses), and the field
// wants a string: the error then shows how to write the string. The last --set of the key is
// the one that took effect.
std::string quoting_hint(const SpecError& error, const CliOptions& options) {
  if (std::string(error.what()).find("string") == std::string::npos) return "";
  for (auto it = options.overrides.rbegin(); it != options.overrides.rend(); ++it) {
    const auto eq = it->find('=');
    if (eq == std::string::npos || it->compare(0, eq, error.path()) != 0 || eq != error.path().size()) continue;
    const std::string text = it->substr(eq + 1);
    const json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded() || value.is_string() || !value.is_primitive()) return "";
    return " (--set reads VALUE as JSON where it parses; for the string write --set '" + error.path() + "=\"" +
           text + "\"')";
  }
  return "";
}

}  // namespace

SpecError attributed(const SpecError& error, const CliOptions& options) {
  const auto flag = options.flag_of.find(error.path());
  if (flag == options.flag_of.end()) {
    const std::string hint = quoting_hint(error, options);
    return hint.empty() ? error : SpecError(error.path(), std::string(error.what()).substr(error.path().size() + 2) + hint);
  }
  const std::string what = error.what();
  return SpecError("", flag->second + ": " + what.substr(std::min(what.size(), error.path().size() + 2)));
}

}  // namespace xtrain::launcher::torchrun
