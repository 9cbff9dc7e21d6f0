#include "common/slurm.hpp"

#include <charconv>
#include <initializer_list>

namespace xtrain {
namespace {

// One piece of a host expression: literal text, or a bracket group's numbers already expanded.
struct Piece {
  std::vector<std::string> choices;  // literal text = one choice
};

class HostlistParser {
 public:
  HostlistParser(std::string_view list, std::size_t max_hosts) : list_(list), max_hosts_(max_hosts) {}

  std::vector<std::string> expand() {
    if (list_.empty()) fail("the list is empty", 0);
    std::vector<std::string> hosts;
    std::size_t start = 0;
    int depth = 0;
    std::size_t open_at = 0;
    for (std::size_t i = 0; i <= list_.size(); ++i) {
      const char c = i < list_.size() ? list_[i] : ',';
      if (c == '[') {
        if (depth > 0) fail("'[' inside the brackets opened at position " + std::to_string(open_at), i);
        depth = 1;
        open_at = i;
      } else if (c == ']') {
        if (depth == 0) fail("']' without a '['", i);
        depth = 0;
      } else if (c == ',' && depth == 0) {
        expand_expression(start, i, hosts);
        start = i + 1;
      }
    }
    if (depth > 0) fail("the '[' is never closed", open_at);
    return hosts;
  }

 private:
  [[noreturn]] void fail(const std::string& why, std::size_t position) const {
    throw SlurmError("host list \"" + std::string(list_) + "\": " + why + " (at position " +
                     std::to_string(position) + ")");
  }

  // list_[begin, end) is one host expression with balanced, unnested brackets.
  void expand_expression(std::size_t begin, std::size_t end, std::vector<std::string>& hosts) {
    if (begin == end) fail("empty host name", begin);
    std::vector<Piece> pieces;
    std::size_t count = 1;
    std::size_t i = begin;
    while (i < end) {
      if (list_[i] == '[') {
        const std::size_t close = list_.find(']', i);
        pieces.push_back(Piece{expand_group(i + 1, close)});
        count = checked_product(count, pieces.back().choices.size(), hosts.size(), begin);
        i = close + 1;
      } else {
        const std::size_t next = std::min(list_.find('[', i), end);
        pieces.push_back(Piece{{std::string(list_.substr(i, next - i))}});
        i = next;
      }
    }
    // Odometer over the pieces, the last one fastest.
    std::vector<std::size_t> digit(pieces.size(), 0);
    for (std::size_t n = 0; n < count; ++n) {
      std::string host;
      for (std::size_t p = 0; p < pieces.size(); ++p) host += pieces[p].choices[digit[p]];
      hosts.push_back(std::move(host));
      for (std::size_t p = pieces.size(); p-- > 0;) {
        if (++digit[p] < pieces[p].choices.size()) break;
        digit[p] = 0;
      }
    }
  }

  std::size_t checked_product(std::size_t count, std::size_t factor, std::size_t already,
                              std::size_t position) const {
    if (factor != 0 && count > (max_hosts_ - already) / factor) {
      fail("expands to more than " + std::to_string(max_hosts_) + " hosts", position);
    }
    return count * factor;
  }

  // list_[begin, end) is a bracket group's inside: "01-03,07".
  std::vector<std::string> expand_group(std::size_t begin, std::size_t end) {
    if (begin == end) fail("empty brackets", begin - 1);
    std::vector<std::string> out;
    std::size_t item = begin;
    while (item <= end) {
      const std::size_t comma = std::min(list_.find(',', item), end);
      const std::string_view range = list_.substr(item, comma - item);
      if (range.empty()) fail("empty range in the brackets", item);
      const std::size_t dash = range.find('-');
      const std::string_view lo = range.substr(0, dash);
      const std::string_view hi = dash == std::string_view::npos ? lo : range.substr(dash + 1);
      const std::uint64_t first = number(lo, item);
      const std::uint64_t last = number(hi, item + (dash == std::string_view::npos ? 0 : dash + 1));
      if (first > last) fail("range \"" + std::string(range) + "\" runs backwards", item);
      if (last - first >= max_hosts_ - out.size()) {
        fail("expands to more than " + std::to_string(max_hosts_) + " hosts", item);
      }
      for (std::uint64_t v = first; v <= last; ++v) {
        std::string digits = std::to_string(v);
        if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
        out.push_back(std::move(digits));
      }
      item = comma + 1;
    }
    return out;
  }

  std::uint64_t number(std::string_view digits, std::size_t position) const {
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (digits.empty() || digits.size() > 18 || ec != std::errc() || end != digits.data() + digits.size()) {
      fail("expected a number or a range like 01-03 in the brackets, got \"" + std::string(digits) + "\"",
           position);
    }
    return v;
  }

  std::string_view list_;
  std::size_t max_hosts_;
};

const std::string* first_set(const EnvMap& env, std::initializer_list<const char*> names,
                             std::string* which) {
  for (const char* name : names) {
    const auto it = env.find(name);
    if (it != env.end() && !it->second.empty()) {
      *which = name;
      return &it->second;
    }
  }
  return nullptr;
}

std::uint64_t parse_unsigned(const std::string& name, const std::string& value) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc() || end != value.data() + value.size()) {
    throw SlurmError(name + ": expected a non-negative integer, got \"" + value + "\"");
  }
  return v;
}

int parse_count(const std::string& name, const std::string& value, std::uint64_t max) {
  const std::uint64_t v = parse_unsigned(name, value);
  if (v > max) throw SlurmError(name + ": expected at most " + std::to_string(max) + ", got " + value);
  return static_cast<int>(v);
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view list, std::size_t max_hosts) {
  return HostlistParser(list, max_hosts).expand();
}

int slurm_rdzv_port(std::uint64_t job_id) {
  return kSlurmPortBase + static_cast<int>(job_id % kSlurmPortSpan);
}

std::string slurm_job_token(std::uint64_t job_id, std::uint64_t uid) {
  return "slurm-job-" + std::to_string(job_id) + "-uid-" + std::to_string(uid);
}

NodesSpec SlurmStep::nodes(double rdzv_timeout_s) const {
  NodesSpec spec;
  spec.nnodes = nnodes;
  spec.node_rank = node_rank;
  spec.rdzv_endpoint = rdzv_endpoint;
  spec.rdzv_timeout_s = rdzv_timeout_s;
  return spec;
}

std::optional<SlurmStep> read_slurm_step(const EnvMap& env) {
  const auto job = env.find("SLURM_JOB_ID");
  if (job == env.end()) return std::nullopt;
  SlurmStep step;
  step.job_id = parse_unsigned("SLURM_JOB_ID", job->second);

  std::string list_var;
  const std::string* list =
      first_set(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &list_var);
  if (!list) throw SlurmError("SLURM_JOB_ID is set but SLURM_JOB_NODELIST (and SLURM_STEP_NODELIST) is not");
  try {
    step.hosts = expand_hostlist(*list);
  } catch (const SlurmError& e) {
    throw SlurmError(list_var + ": " + e.what());
  }

  std::string count_var;
  const std::string* count =
      first_set(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"}, &count_var);
  step.nnodes = count ? parse_count(count_var, *count, 65536) : static_cast<int>(step.hosts.size());
  if (step.nnodes < 1 || static_cast<std::size_t>(step.nnodes) != step.hosts.size()) {
    throw SlurmError(count_var + "=" + std::to_string(step.nnodes) + " but " + list_var + "=\"" + *list +
                     "\" names " + std::to_string(step.hosts.size()) + " hosts");
  }

  const bool in_step = env.contains("SLURM_STEP_ID") || env.contains("SLURM_STEPID");
  if (!in_step && step.nnodes > 1) {
    throw SlurmError("xlaunch runs in the batch script of a " + std::to_string(step.nnodes) +
                     "-node allocation (SLURM_STEP_ID is not set) and cannot start the other nodes: "
                     "run it as `srun --ntasks-per-node=1 xlaunch ...`");
  }
  if (in_step) {
    if (const auto tasks = env.find("SLURM_STEP_NUM_TASKS"); tasks != env.end()) {
      const int n = parse_count("SLURM_STEP_NUM_TASKS", tasks->second, 1u << 30);
      if (n != step.nnodes) {
        throw SlurmError("srun started " + std::to_string(n) + " tasks on " + std::to_string(step.nnodes) +
                         " nodes (SLURM_STEP_NUM_TASKS=" + tasks->second +
                         "): xlaunch starts the ranks itself and wants one task per node: "
                         "`srun --ntasks-per-node=1 xlaunch ...`");
      }
    }
  }

  if (const auto id = env.find("SLURM_NODEID"); id != env.end()) {
    step.node_rank = parse_count("SLURM_NODEID", id->second, 65535);
  } else if (step.nnodes > 1) {
    throw SlurmError("SLURM_NODEID is not set in a " + std::to_string(step.nnodes) + "-node step");
  }
  if (step.node_rank >= step.nnodes) {
    throw SlurmError("SLURM_NODEID=" + std::to_string(step.node_rank) + " but the step has only " +
                     std::to_string(step.nnodes) + " nodes");
  }
  step.rdzv_endpoint = step.hosts.front() + ":" + std::to_string(slurm_rdzv_port(step.job_id));
  return step;
}

std::optional<std::string> resolve_job_token(const EnvMap& env, std::uint64_t process_uid) {
  if (const auto it = env.find(kJobTokenVariable); it != env.end() && !it->second.empty()) return it->second;
  const auto job = env.find("SLURM_JOB_ID");
  if (job == env.end()) return std::nullopt;
  const std::uint64_t job_id = parse_unsigned("SLURM_JOB_ID", job->second);
  const auto uid = env.find("SLURM_JOB_UID");
  return slurm_job_token(job_id, uid != env.end() ? parse_unsigned("SLURM_JOB_UID", uid->second) : process_uid);
}

}  // namespace xtrain
