#include "common/job_spec.hpp"

#include "common/did_you_mean.hpp"
#include "common/number_format.hpp"
#include "common/path_notes.hpp"
#include "common/worker_env.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace xtrain {
namespace {

using nlohmann::json;

std::string show(const json& value) {
  std::string s = value.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

std::string join_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

// What other trainers call a key of ours (nanoGPT, llm.c, Hugging Face's Trainer and config.json),
// for "did you mean" where spelling alone does not find it. A name maps to ours only in the
// section that has that key.
const std::map<std::string, std::string>& key_synonyms() {
  static const std::map<std::string, std::string> synonyms = {
      {"learning_rate", "lr"},          {"min_learning_rate", "min_lr"},   {"max_steps", "steps"},
      {"max_iters", "steps"},           {"num_iterations", "steps"},       {"warmup_iters", "warmup_steps"},
      {"warmup", "warmup_steps"},       {"lr_warmup_steps", "warmup_steps"}, {"max_grad_norm", "grad_clip"},
      {"clip_grad_norm", "grad_clip"},  {"adam_beta1", "beta1"},           {"adam_beta2", "beta2"},
      {"adam_epsilon", "eps"},          {"eval_interval", "eval_every"},   {"eval_steps", "eval_every"},
      {"val_loss_every", "eval_every"}, {"eval_iters", "eval_batches"},    {"val_max_steps", "eval_batches"},
      {"log_interval", "log_every"},    {"logging_steps", "log_every"},    {"block_size", "seq_len"},
      {"n_ctx", "seq_len"},             {"n_positions", "seq_len"},        {"max_seq_len", "seq_len"},
      {"context_length", "seq_len"},    {"num_hidden_layers", "n_layer"},  {"num_layers", "n_layer"},
      {"num_attention_heads", "n_head"}, {"num_heads", "n_head"},          {"hidden_size", "n_embd"},
      {"d_model", "n_embd"},            {"save_every", "every"},           {"save_steps", "every"},
      {"checkpoint_every", "every"},    {"save_total_limit", "keep"},      {"keep_last", "keep"}};
  return synonyms;
}

// Every key of the spec, each section an object, with its default value.
const json& spec_key_tree();

// Each section's fields are listed once, in describe(); the Reader and the Writer walk that list.
// Range arguments are inclusive bounds.
class Reader {
 public:
  Reader(const json& object, std::string path) : object_(object), path_(std::move(path)) {
    if (!object_.is_object()) throw SpecError(path_, "expected an object, got " + show(object_));
  }

  void integer(const char* key, int& out, long long min, long long max = INT_MAX) {
    std::int64_t wide = out;
    integer(key, wide, min, max);
    out = static_cast<int>(wide);
  }
  void integer(const char* key, std::int64_t& out, long long min, long long max = LLONG_MAX) {
    const json* v = take(key);
    if (!v) return;
    if (!v->is_number_integer() && !(v->is_number_float() && is_whole(v->get<double>()))) {
      throw SpecError(field(key), "expected an integer" + bounds(min, max) + ", got " + show(*v));
    }
    const long long x = v->is_number_unsigned() ? static_cast<long long>(std::min<std::uint64_t>(
                                                      v->get<std::uint64_t>(), LLONG_MAX))
                        : v->is_number_integer() ? v->get<long long>()
                                                 : static_cast<long long>(v->get<double>());
    if (x < min || x > max) {
      throw SpecError(field(key), "expected an integer" + bounds(min, max) + ", got " + show(*v));
    }
    out = x;
  }
  void number(const char* key, double& out, double min, double max = HUGE_VAL, bool min_open = false) {
    const json* v = take(key);
    if (!v) return;
    const std::string expected = "expected a number " + std::string(min_open ? "> " : ">= ") +
                                 format_number(min) +
                                 (max == HUGE_VAL ? "" : " and <= " + format_number(max));
    if (!v->is_number()) throw SpecError(field(key), expected + ", got " + show(*v));
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < min || (min_open && x == min) || x > max) {
      throw SpecError(field(key), expected + ", got " + show(*v));
    }
    out = x;
  }
  void string(const char* key, std::string& out, std::initializer_list<const char*> choices = {}) {
    const json* v = take(key);
    if (!v) return;
    std::string expected = "expected a non-empty string";
    if (choices.size() > 0) {
      expected = "expected one of";
      for (const char* c : choices) expected += std::string(c == *choices.begin() ? " \"" : ", \"") + c + "\"";
    }
    if (!v->is_string() || v->get<std::string>().empty()) {
      throw SpecError(field(key), expected + ", got " + show(*v));
    }
    const std::string s = v->get<std::string>();
    refuse_nul(field(key), *v);
    if (choices.size() > 0 &&
        std::none_of(choices.begin(), choices.end(), [&](const char* c) { return s == c; })) {
      throw SpecError(field(key), expected + ", got " + show(*v));
    }
    out = s;
  }
  void boolean(const char* key, bool& out) {
    const json* v = take(key);
    if (!v) return;
    if (!v->is_boolean()) throw SpecError(field(key), "expected true or false, got " + show(*v));
    out = v->get<bool>();
  }
  void count_or_auto(const char* key, std::optional<int>& out) {
    const json* v = take(key);
    if (!v) return;
    if (v->is_string() && v->get<std::string>() == "auto") {
      out.reset();
      return;
    }
    if (!v->is_number_integer() || v->get<long long>() < 1 || v->get<long long>() > 4096) {
      throw SpecError(field(key), "expected \"auto\" or an integer >= 1, got " + show(*v));
    }
    out = v->get<int>();
  }
  void string_list(const char* key, std::vector<std::string>& out) {
    const json* v = take(key);
    if (!v) return;
    if (!v->is_array() || v->empty()) {
      throw SpecError(field(key), "expected a non-empty list of strings (argv), got " + show(*v));
    }
    std::vector<std::string> list;
    for (size_t i = 0; i < v->size(); ++i) {
      const json& item = (*v)[i];
      if (!item.is_string() || item.get<std::string>().empty()) {
        throw SpecError(field(key) + "[" + std::to_string(i) + "]",
                        "expected a non-empty string, got " + show(item));
      }
      refuse_nul(field(key) + "[" + std::to_string(i) + "]", item);
      list.push_back(item.get<std::string>());
    }
    out = std::move(list);
  }
  void string_map(const char* key, std::map<std::string, std::string>& out) {
    const json* v = take(key);
    if (!v) return;
    if (!v->is_object()) throw SpecError(field(key), "expected an object of strings, got " + show(*v));
    for (const auto& [name, value] : v->items()) {
      if (name.empty() || name.find('=') != std::string::npos || name.find('\0') != std::string::npos) {
        throw SpecError(field(key), "expected environment variable names without '=' or NUL characters, got " +
                                        show(json(name)));
      }
      const std::string where = field(key) + "." + name;
      refuse_nul(where, value);
      if (value.is_string()) out[name] = value.get<std::string>();
      else if (value.is_number() || value.is_boolean()) out[name] = value.dump();
      else throw SpecError(where, "expected a string, number or boolean, got " + show(value));
    }
  }
  // A string with a NUL character: no path, argument or environment value can hold one (the
  // system would end it there, so "a\u0000b" would silently name "a").
  static void refuse_nul(const std::string& where, const json& v) {
    if (v.is_string() && v.get<std::string>().find('\0') != std::string::npos) {
      throw SpecError(where, "expected a string without NUL characters (\\u0000), got " + show(v));
    }
  }
  // A key that was renamed: its presence is an error that names the new key.
  void replaced(const char* key, const char* new_key, const char* new_values) {
    if (object_.contains(key)) {
      throw SpecError(field(key), std::string("was replaced by ") + field(new_key) + ": " + new_values);
    }
  }
  template <class Section>
  void section(const char* key, Section& out) {
    const json* v = take(key);
    if (!v) return;
    Reader nested(*v, field(key));
    describe(nested, out);
    nested.reject_unknown();
  }

  void reject_unknown() const {
    for (const auto& [key, value] : object_.items()) {
      if (seen_.count(key)) continue;
      const std::string close = closest_name(key, seen_all_, 2);
      std::string hint = close.empty() ? "" : " (did you mean \"" + close + "\"?)";
      // Another trainer's name for one of our keys, named from here: "lr" in train, "train.lr"
      // elsewhere (nanoGPT's configs are flat: learning_rate at the top level is train.lr).
      const auto synonym = other_trainer_key_names().find(key);
      const std::string ours = synonym != other_trainer_key_names().end() ? synonym->second : "";
      const std::string prefix = path_.empty() ? "" : path_ + ".";
      if (!ours.empty()) {
        const bool here = ours.rfind(prefix, 0) == 0 && ours.find('.', prefix.size()) == std::string::npos;
        hint = " (did you mean \"" + (here ? ours.substr(prefix.size()) : ours) + "\"?)";
      } else if (const std::string there = hint.empty() ? key_elsewhere(key) : ""; !there.empty()) {
        hint = " (did you mean \"" + there + "\"?)";
      }
      std::string known;
      for (const auto& k : seen_all_) known += (known.empty() ? "" : ", ") + k;
      throw SpecError(field(key.c_str()), "unknown key" + hint + "; expected one of: " + known);
    }
  }

 private:
  // The spec's path of `key` in another section than this one ("model.n_layer" for a train.n_layer,
  // "train.steps" for a top-level steps), else "".
  std::string key_elsewhere(const std::string& key) const {
    const json& all = spec_key_tree();
    if (!path_.empty() && all.contains(key)) return key;
    for (const auto& [section, fields] : all.items()) {
      if (fields.is_object() && section != path_ && fields.contains(key)) return section + "." + key;
    }
    return "";
  }

  const json* take(const char* key) {
    seen_all_.push_back(key);
    auto it = object_.find(key);
    if (it == object_.end()) return nullptr;
    seen_.insert(key);
    return &*it;
  }
  std::string field(const char* key) const { return join_path(path_, key); }
  static bool is_whole(double x) { return std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9e15; }
  static std::string bounds(long long min, long long max) {
    std::string s = " >= " + std::to_string(min);
    if (max != INT_MAX && max != LLONG_MAX) s += " and <= " + std::to_string(max);
    return s;
  }

  const json& object_;
  std::string path_;
  std::set<std::string> seen_;
  std::vector<std::string> seen_all_;
};

class Writer {
 public:
  // every_key: empty strings and lists too (the spec's every key, for spec_key_tree).
  explicit Writer(json& out, bool every_key = false) : out_(out), every_key_(every_key) { out_ = json::object(); }
  template <class T> void integer(const char* key, const T& v, long long, long long = 0) { out_[key] = v; }
  void number(const char* key, const double& v, double, double = 0, bool = false) { out_[key] = v; }
  // Empty strings and lists mean "not set" (the reader rejects them), so they are left out.
  void string(const char* key, const std::string& v, std::initializer_list<const char*> = {}) {
    if (!v.empty() || every_key_) out_[key] = v;
  }
  void boolean(const char* key, const bool& v) { out_[key] = v; }
  void count_or_auto(const char* key, const std::optional<int>& v) {
    out_[key] = v ? json(*v) : json("auto");
  }
  void string_list(const char* key, const std::vector<std::string>& v) {
    if (!v.empty() || every_key_) out_[key] = v;
  }
  void string_map(const char* key, const std::map<std::string, std::string>& v) { out_[key] = v; }
  void replaced(const char*, const char*, const char*) {}
  template <class Section>
  void section(const char* key, const Section& v) {
    Writer nested(out_[key], every_key_);
    describe(nested, const_cast<Section&>(v));
  }

 private:
  json& out_;
  bool every_key_;
};

template <class V> void describe(V& v, WorkerSpec& s) {
  v.string_list("command", s.command);
  v.string_map("env", s.env);
}
template <class V> void describe(V& v, LauncherSpec& s) {
  v.integer("max_restarts", s.max_restarts, 0, 1000);
  v.number("term_timeout_s", s.term_timeout_s, 0);
  v.number("preempt_grace_s", s.preempt_grace_s, 0);
  v.number("heartbeat_timeout_s", s.heartbeat_timeout_s, 0);
  v.number("timeout_s", s.timeout_s, 0);
  v.string("tee", s.tee, {"all", "rank0", "none"});
  v.integer("master_port", s.master_port, 0, 65535);
}
template <class V> void describe(V& v, NodesSpec& s) {
  v.integer("nnodes", s.nnodes, 1, 65536);
  v.integer("node_rank", s.node_rank, 0, 65535);
  v.string("rdzv_endpoint", s.rdzv_endpoint);
  v.number("rdzv_timeout_s", s.rdzv_timeout_s, 0, HUGE_VAL, true);
  v.number("keepalive_interval_s", s.keepalive_interval_s, 0.01, 3600);
  v.number("keepalive_timeout_s", s.keepalive_timeout_s, 0.02, 3600);
}
template <class V> void describe(V& v, ModelSpec& s) {
  v.integer("n_layer", s.n_layer, 1, 1024);
  v.integer("n_head", s.n_head, 1, 1024);
  v.integer("n_embd", s.n_embd, 1, 65536);
  v.integer("seq_len", s.seq_len, 1, 1 << 20);
  v.integer("vocab_size", s.vocab_size, 2, 1 << 24);
  v.integer("init_seed", s.init_seed, 0);
  v.string("init_from", s.init_from);
}
template <class V> void describe(V& v, DataSpec& s) {
  v.string("train", s.train);
  v.string("val", s.val);
  v.number("val_fraction", s.val_fraction, 0, 0.5, true);
}
template <class V> void describe(V& v, TrainSpec& s) {
  v.integer("steps", s.steps, 1);
  v.integer("batch_size", s.batch_size, 1);
  v.integer("micro_batch_size", s.micro_batch_size, 1);
  v.number("lr", s.lr, 0, HUGE_VAL, true);
  v.number("min_lr", s.min_lr, 0);
  v.integer("warmup_steps", s.warmup_steps, 0);
  v.number("weight_decay", s.weight_decay, 0);
  v.number("beta1", s.beta1, 0, 0.999999);
  v.number("beta2", s.beta2, 0, 0.999999);
  v.number("eps", s.eps, 0, HUGE_VAL, true);
  v.number("grad_clip", s.grad_clip, 0);
  v.integer("seed", s.seed, 0);
  v.integer("eval_every", s.eval_every, 0);
  v.integer("eval_batches", s.eval_batches, 1);
  v.string("eval_multiple_choice", s.eval_multiple_choice);
  v.integer("eval_multiple_choice_examples", s.eval_multiple_choice_examples, 0);
  v.integer("log_every", s.log_every, 1);
  v.string("precision", s.precision, {"auto", "bf16", "tf32", "fp32"});
  v.replaced("matmul_precision", "precision", "\"auto\" (bf16 on CUDA, fp32 on CPU), \"bf16\", \"tf32\" or \"fp32\"");
  v.string("cuda_graph", s.cuda_graph, {"auto", "on", "off"});
  v.boolean("deterministic", s.deterministic);
}
template <class V> void describe(V& v, SampleSpec& s) {
  v.integer("tokens", s.tokens, 0, 1 << 20);
  v.number("temperature", s.temperature, 0, HUGE_VAL, true);
  v.integer("top_k", s.top_k, 0);
  v.string("prompt", s.prompt);
}
template <class V> void describe(V& v, CheckpointSpec& s) {
  v.integer("every", s.every, 0);
  v.integer("keep", s.keep, 1);
  v.string("resume", s.resume);
}
template <class V> void describe(V& v, JobSpec& s) {
  v.string("name", s.name);
  v.string("run_dir", s.run_dir);
  v.count_or_auto("nproc_per_node", s.nproc_per_node);
  v.integer("cpu_ranks", s.cpu_ranks, 1, 4096);
  v.string("device", s.device, {"auto", "cuda", "cpu"});
  v.string("backend", s.backend, {"auto", "nccl", "gloo"});
  v.string("tokenizer", s.tokenizer);
  v.section("worker", s.worker);
  v.section("launcher", s.launcher);
  v.section("nodes", s.nodes);
  v.section("model", s.model);
  v.section("data", s.data);
  v.section("train", s.train);
  v.section("sample", s.sample);
  v.section("checkpoint", s.checkpoint);
}

const json& spec_key_tree() {
  static const json keys = [] {
    json out;
    Writer writer(out, /*every_key=*/true);
    JobSpec defaults;
    describe(writer, defaults);
    return out;
  }();
  return keys;
}

}  // namespace

std::string glob_pattern_of(const std::string& path) {
  const auto escaped = [](const std::string& literal) {
    std::string out;
    for (const char c : literal) {
      if (c == '\\' || std::strchr(kGlobCharacters, c) != nullptr) out += '\\';
      out += c;
    }
    return out;
  };
  std::error_code ec;
  for (size_t end = path.size(); end != 0 && end != std::string::npos; end = path.rfind('/', end - 1)) {
    const std::string part = path.substr(0, end);
    if (!is_glob_pattern(part)) break;  // nothing left to escape
    if (std::filesystem::exists(part, ec)) return escaped(part) + path.substr(end);
  }
  return path;
}

JobSpec parse_job_spec(const json& doc, const std::string& default_name) {
  JobSpec spec;
  Reader reader(doc, "");
  describe(reader, spec);
  reader.reject_unknown();
  if (spec.name.empty()) spec.name = default_name;
  if (spec.name.find('/') != std::string::npos || spec.name == "." || spec.name == "..") {
    throw SpecError("name", "expected a name without '/', got " + show(json(spec.name)));
  }
  if (spec.run_dir.empty()) spec.run_dir = "runs/" + spec.name;
  // Taken as it is, "~/runs/x" is a directory named "~" under the current one.
  if (spec.run_dir == "~" || spec.run_dir.starts_with("~/")) {
    throw SpecError("run_dir", show(json(spec.run_dir)) + " would be a directory named \"~\" here: " +
                                   missing_path_note(spec.run_dir, "run dirs"));
  }
  if (spec.nodes.node_rank >= spec.nodes.nnodes) {
    throw SpecError("nodes.node_rank", "expected an integer < nodes.nnodes (" +
                                           std::to_string(spec.nodes.nnodes) + "), got " +
                                           std::to_string(spec.nodes.node_rank));
  }
  if (spec.nodes.keepalive_timeout_s <= spec.nodes.keepalive_interval_s) {
    throw SpecError("nodes.keepalive_timeout_s", "expected a number > nodes.keepalive_interval_s (" +
                                                     format_number(spec.nodes.keepalive_interval_s) + "), got " +
                                                     format_number(spec.nodes.keepalive_timeout_s));
  }
  if (spec.train.min_lr > spec.train.lr) {
    throw SpecError("train.min_lr", "expected a number <= train.lr (" + format_number(spec.train.lr) +
                                        "), got " + format_number(spec.train.min_lr));
  }
  if (!spec.train.eval_multiple_choice.empty() && spec.train.eval_every == 0) {
    throw SpecError("train.eval_multiple_choice", "is scored at each validation, but train.eval_every is 0 (none); "
                                                  "set train.eval_every");
  }
  for (const auto& [name, value] : spec.worker.env) {
    if (is_contract_variable(name)) {
      throw SpecError("worker.env." + name, "is set by xlaunch for each rank and cannot be overridden");
    }
  }
  if (spec.device == "cpu" && spec.backend == "nccl") {
    throw SpecError("backend", "\"nccl\" needs GPUs, but device is \"cpu\"; use \"gloo\" or \"auto\"");
  }
  return spec;
}

json read_job_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw SpecError("", path + ": cannot read the job spec (" + std::strerror(errno) + ")");
  try {
    return json::parse(in, nullptr, true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    // nlohmann's message carries the line and column: "parse error at line 3, column 5: ..."
    std::string what = e.what();
    const auto at = what.find("parse error");
    throw SpecError("", path + ": malformed JSON: " + (at == std::string::npos ? what : what.substr(at)));
  }
}

void apply_override(json& doc, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw SpecError("--set", "expected KEY=VALUE with a dotted KEY, got \"" + assignment + "\"");
  }
  const std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = text;

  json* node = &doc;
  std::string walked;
  size_t start = 0;
  while (true) {
    const auto dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty()) throw SpecError("--set", "empty component in key \"" + key + "\"");
    if (!node->is_object()) {
      throw SpecError(walked, "--set " + assignment + ": cannot set a field inside a " +
                                  std::string(node->type_name()));
    }
    walked = join_path(walked, part);
    if (dot == std::string::npos) {
      (*node)[part] = value;
      return;
    }
    node = &(*node)[part];
    if (node->is_null()) *node = json::object();
    start = dot + 1;
  }
}

const std::map<std::string, std::string>& other_trainer_key_names() {
  static const std::map<std::string, std::string> paths = [] {
    std::map<std::string, std::string> out;
    for (const auto& [name, key] : key_synonyms()) {
      out[name] = "";
      for (const auto& [section, fields] : spec_key_tree().items()) {
        if (fields.is_object() && fields.contains(key)) out[name] = section + "." + key;
      }
    }
    return out;
  }();
  return paths;
}

json to_json(const JobSpec& spec) {
  json out;
  Writer writer(out);
  describe(writer, const_cast<JobSpec&>(spec));
  return out;
}

Precision resolve_precision(const TrainSpec& train, const std::string& device) {
  const bool cuda = device == "cuda";
  if (train.precision == "auto") return cuda ? Precision::bf16 : Precision::fp32;
  if (train.precision == "bf16") return Precision::bf16;
  if (train.precision == "fp32") return Precision::fp32;
  if (!cuda) {
    throw SpecError("train.precision", "\"tf32\" is a tensor-core mode of CUDA GPUs, and this job runs on CPU ranks; "
                                       "use \"fp32\" (or \"auto\"), or \"bf16\" to emulate the GPU's mixed precision");
  }
  return Precision::tf32;
}

void validate_for_training(const JobSpec& spec, int world_size) {
  const auto& m = spec.model;
  const auto& t = spec.train;
  if (m.n_embd % m.n_head != 0) {
    throw SpecError("model.n_embd", "expected a multiple of model.n_head (" + std::to_string(m.n_head) +
                                        "), got " + std::to_string(m.n_embd));
  }
  // The MLP's fused GELU products store 4 x n_embd columns, which cuBLASLt needs a multiple of 8.
  if (m.n_embd % 2 != 0) {
    throw SpecError("model.n_embd", "expected an even number (the MLP's fused GELU product needs 4 x n_embd to be "
                                    "a multiple of 8), got " + std::to_string(m.n_embd));
  }
  if (spec.data.train.empty()) {
    throw SpecError("data.train", "expected a text file, an llm.c token shard or a glob of shards; it is missing");
  }
  const long long per_step = 1LL * world_size * t.micro_batch_size;
  if (t.batch_size % per_step != 0) {
    throw SpecError("train.batch_size",
                    "expected a multiple of world size x train.micro_batch_size (" +
                        std::to_string(world_size) + " x " + std::to_string(t.micro_batch_size) + " = " +
                        std::to_string(per_step) + "), got " + std::to_string(t.batch_size));
  }
}

}  // namespace xtrain
