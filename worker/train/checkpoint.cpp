#include "worker/train/checkpoint.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <vector>

#include "common/atomic_file.hpp"
#include "common/path_notes.hpp"
#include "worker/formats/crc32c.hpp"
#include "worker/formats/file_io.hpp"
#include "worker/formats/hf_model.hpp"
#include "worker/formats/safetensors.hpp"
#include "worker/train/lr_schedule.hpp"

namespace xtrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kWtePadding = "wte_padding";
constexpr const char* kStateChecksumKey = "crc32c";
constexpr int kUncheckedStateVersion = 1;  // format_version 1: state.json carries no checksum of its own

// Model fields that must be the same on resume: they fix the tensor shapes.
constexpr const char* kModelKeys[] = {"n_layer", "n_head", "n_embd", "seq_len", "vocab_size"};

std::string to_hex(std::uint64_t x) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

std::optional<std::uint64_t> from_hex(const std::string& s) {
  if (s.size() != 16) return std::nullopt;
  std::uint64_t x = 0;
  for (char c : s) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return std::nullopt;
    x = x << 4 | static_cast<std::uint64_t>(digit);
  }
  return x;
}

std::vector<std::int64_t> wte_padding_shape(const ModelDims& d) { return {d.Vp - d.V, d.C}; }

json spec_section(const JobSpec& spec, const char* section) { return to_json(spec)[section]; }

FileChecksum write_optimizer_file(const std::string& path, const ParamLayout& layout, const float* params,
                                  const float* m, const float* v, std::int64_t adam_t, const HostAccess& memory) {
  const ModelDims& d = layout.dims();
  const auto total = static_cast<std::int64_t>(layout.total());
  std::vector<SafetensorsTensor> tensors = {{"m", {total}, m}, {"v", {total}, v}};
  if (d.Vp > d.V) {
    tensors.push_back({kWtePadding, wte_padding_shape(d), params + layout.wte() + static_cast<size_t>(d.V) * d.C});
  }
  return write_safetensors(path, tensors,
                           {{"adam_step", std::to_string(adam_t)}, {"layout", "xtrain flat parameter buffer"}},
                           memory);
}

// The CRC-32C of state.json's content: of the object without its own "crc32c" key, serialised
// compactly (nlohmann sorts keys and writes numbers round-trip, so the value survives any
// reformatting but not a changed value, key or word). A bit flipped in the file either breaks the
// JSON or changes what this sees.
std::string state_checksum(json state) {
  state.erase(kStateChecksumKey);
  const std::string canonical = state.dump();
  return crc32c_hex(crc32c(canonical.data(), canonical.size()));
}

// state.json's "files": {"model.safetensors": {"bytes": N, "crc32c": "8 hex digits"}, ...}.
using FileChecksums = std::map<std::string, FileChecksum>;

json state_json(const JobSpec& spec, const TrainState& state, const FileChecksums& files) {
  json words = json::array();
  for (auto w : state.sampler.words) words.push_back(to_hex(w));
  json sums = json::object();
  for (const auto& [name, sum] : files) sums[name] = {{"bytes", sum.bytes}, {"crc32c", crc32c_hex(sum.crc32c)}};
  json out = {{"format", kCheckpointFormat},
          {"format_version", kCheckpointFormatVersion},
          {"step", state.step},
          {"sampler", {{"algorithm", "xoshiro256**"}, {"state", words}}},
          {"model", spec_section(spec, "model")},
          {"train", spec_section(spec, "train")},
          {"data", {{"train", spec.data.train}, {"train_tokens", state.train_tokens}}},
          {"files", sums}};
  out[kStateChecksumKey] = state_checksum(out);
  return out;
}

// Removes a directory so that no crash leaves it half-deleted under a complete-looking name:
// renamed to a .tmp-* name first (which resume ignores and the next save removes).
void remove_checkpoint_dir(const fs::path& dir) {
  const fs::path doomed = dir.string() + kCheckpointTmpMarker + std::to_string(::getpid()) + "-old";
  fs::rename(dir, doomed);
  fsync_directory(dir.parent_path().string());
  fs::remove_all(doomed);
}

// The step a checkpoint directory's name encodes ("step-00000030"), nullopt for another name
// (an explicit checkpoint.resume may be a copy under any name).
std::optional<std::int64_t> step_of_directory(const std::string& dir) {
  fs::path path = fs::path(dir).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();  // "x/step-00000030/"
  return checkpoint_step(path.filename().string());
}

// state.json's own checksum (format_version 2 on; verify_checksums says when there is none) and
// its step against the directory's name.
void verify_state_content(const json& state, const std::string& dir) {
  const std::string file = kCheckpointStateFile;
  if (state["format_version"] != kUncheckedStateVersion) {
    const json recorded = state.value(kStateChecksumKey, json());
    if (!recorded.is_string()) {
      throw CheckpointDamage(dir, file + ": /" + kStateChecksumKey + " is missing or malformed");
    }
    const std::string actual = state_checksum(state);
    if (actual != recorded.get<std::string>()) {
      throw CheckpointDamage(dir, file + ": damaged: its CRC-32C is " + actual + " but its crc32c key records " +
                                      recorded.get<std::string>());
    }
  }
  const json step = state.value("step", json());
  if (!step.is_number_unsigned()) throw CheckpointDamage(dir, file + ": /step is missing or malformed");
  const auto named = step_of_directory(dir);
  if (named && *named != step.get<std::int64_t>()) {
    throw CheckpointDamage(dir, file + ": step is " + step.dump() + " but the directory's name says " +
                                    std::to_string(*named));
  }
}

// state.json parsed, its format and its own checksum checked.
json read_state(const std::string& dir) {
  const std::string path = (fs::path(dir) / kCheckpointStateFile).string();
  std::string text;
  try {
    InputFile in(path);
    text.resize(in.size());
    in.read_at(0, text.data(), in.size());
  } catch (const FileError& e) {
    throw CheckpointDamage(dir, std::string(kCheckpointStateFile) + ": " + e.message());
  }
  json state = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (state.is_discarded() || !state.is_object()) {
    throw CheckpointDamage(dir, std::string(kCheckpointStateFile) + ": not a JSON object (truncated or corrupt)");
  }
  if (!state.contains("format") || state["format"] != kCheckpointFormat) {
    throw CheckpointDamage(dir, std::string(kCheckpointStateFile) + ": format is not \"" + kCheckpointFormat + "\"");
  }
  const json version = state.value("format_version", json());
  if (version != kCheckpointFormatVersion && version != kUncheckedStateVersion) {
    throw CheckpointDamage(dir, std::string(kCheckpointStateFile) + ": format_version is " + version.dump() +
                                    ", expected " + std::to_string(kCheckpointFormatVersion) + " (or " +
                                    std::to_string(kUncheckedStateVersion) + ")");
  }
  verify_state_content(state, dir);
  return state;
}

// A field of state.json, by JSON pointer, with the type checked.
const json& state_field(const json& state, const std::string& dir, const char* pointer, bool (json::*is)() const) {
  const json::json_pointer p(pointer);
  if (!state.contains(p) || !(state.at(p).*is)()) {
    throw CheckpointError(dir, std::string(kCheckpointStateFile) + ": " + pointer + " is missing or malformed");
  }
  return state.at(p);
}

// Opens a checkpoint file's header; errors name the checkpoint and the file.
SafetensorsFile open_tensor_file(const std::string& dir, const char* name) {
  try {
    return SafetensorsFile((fs::path(dir) / name).string());
  } catch (const FileError& e) {
    throw CheckpointDamage(dir, std::string(name) + ": " + e.message());
  }
}

// The files a check leaves out: none; the tensor files, which a load checks as it reads them; or
// the optimizer's, which a model's use never reads.
enum class Unread { kNone, kTensors, kOptimizer };

// The headers: the files exist, state.json parses, and the tensor files' headers agree with
// their sizes (which catches truncation), the optimizer's unless `unread` leaves it out. Reads no
// tensor data. Returns state.json.
json verify_structure(const std::string& dir, Unread unread = Unread::kNone) {
  json state = read_state(dir);
  open_tensor_file(dir, kModelWeightsFile);
  if (unread != Unread::kOptimizer) open_tensor_file(dir, kCheckpointOptimizerFile);
  return state;
}

// state.json's "files" as each file's recorded size and CRC-32C; nullopt for a checkpoint written
// before checksums were recorded.
std::optional<std::map<std::string, RecordedChecksum>> recorded_checksums(const std::string& dir, const json& state) {
  const json files = state.value("files", json());
  if (!files.is_object()) return std::nullopt;
  std::map<std::string, RecordedChecksum> out;
  for (const auto& [name, recorded] : files.items()) {
    const json bytes = recorded.is_object() ? recorded.value("bytes", json()) : json();
    const json crc = recorded.is_object() ? recorded.value("crc32c", json()) : json();
    const std::string hex = crc.is_string() ? crc.get<std::string>() : std::string();
    const bool hex_ok = hex.size() == 8 && hex.find_first_not_of("0123456789abcdef") == std::string::npos;
    if (!bytes.is_number_unsigned() || !hex_ok) {
      throw CheckpointDamage(dir, std::string(kCheckpointStateFile) + ": /files/" + name + " is not {bytes, crc32c}");
    }
    out[name] = {{bytes.get<std::uint64_t>(), static_cast<std::uint32_t>(std::stoul(hex, nullptr, 16))},
                 kCheckpointStateFile};
  }
  return out;
}

// Every file state.json lists has its recorded size and CRC-32C (a flipped bit in the weights
// changes no size and no header), but those `unread` leaves out. Reads each file it checks once.
// An older checkpoint's missing checksums are said here, once for each check of it.
void verify_checksums(const std::string& dir, const json& state, Unread unread = Unread::kNone) {
  const auto files = recorded_checksums(dir, state);
  if (state["format_version"] == kUncheckedStateVersion) {
    spdlog::info("{} is a format 1 checkpoint: its state.json carries no checksum of its own{}", dir,
                 files ? "" : ", nor of its other files, which are checked by their headers only");
  } else if (!files) {
    spdlog::info("{} records no checksums (an older checkpoint): its files are checked by their headers only", dir);
  }
  if (!files) return;
  for (const auto& [name, recorded] : *files) {
    if ((unread == Unread::kTensors && fs::path(name).extension() == ".safetensors") ||
        (unread == Unread::kOptimizer && name == kCheckpointOptimizerFile)) {
      continue;
    }
    const std::string path = (fs::path(dir) / name).string();
    try {
      check_recorded_checksum(path, checksum_file(path), recorded);
    } catch (const FileError& e) {
      throw CheckpointDamage(dir, name + ": " + e.message());
    }
  }
}

// The checkpoint's learning-rate schedule: `now` with the schedule keys train_then records.
TrainSpec schedule_then(const json& train_then, TrainSpec now) {
  const auto take = [&](const char* key, auto& field) {
    const json value = train_then.value(key, json());
    if (value.is_number()) field = value.get<std::remove_reference_t<decltype(field)>>();
  };
  take("steps", now.steps);
  take("lr", now.lr);
  take("min_lr", now.min_lr);
  take("warmup_steps", now.warmup_steps);
  return now;
}

// What a changed optimizer or computing key does to a run resumed after `step` completed steps.
std::string resume_effect(ResumeRule rule, long step) {
  if (rule == ResumeRule::kOptimizer) {
    return fmt::format("AdamW takes it from step {} on; its moments carry over", step + 1);
  }
  return "the learning-rate schedule and the batches are unchanged";
}

// The spec fields a resumed run must keep (model shape, the train keys of the run); returns what
// the train keys that may change and did do: one line for the schedule's keys together, then one
// for each other key.
std::vector<std::string> check_against_spec(const json& state, const std::string& dir, const JobSpec& spec) {
  const json model_now = spec_section(spec, "model");
  const json train_now = spec_section(spec, "train");
  const json& model_then = state_field(state, dir, "/model", &json::is_object);
  const json& train_then = state_field(state, dir, "/train", &json::is_object);
  for (const char* key : kModelKeys) {
    if (model_then.value(key, json()) != model_now[key]) {
      throw CheckpointError(dir, std::string("model.") + key + " is " + model_then.value(key, json()).dump() +
                                     " but the spec says " + model_now[key].dump());
    }
  }
  std::vector<std::string> changes;
  std::string schedule_keys;  // "train.lr changed from 0.001 to 0.0005, train.steps changed from ..."
  const long step = state_field(state, dir, "/step", &json::is_number_unsigned).get<long>();
  for (const auto& [key, now] : train_now.items()) {
    const json then = train_then.value(key, json());
    if (then == now) continue;
    const std::optional<ResumeRule> rule = train_key_on_resume(key);
    if (!rule || *rule == ResumeRule::kKept) {
      throw CheckpointError(dir, "train." + key + " is " + then.dump() + " but the spec says " + now.dump() +
                                     "; a resumed run must keep it to read the same batches");
    }
    const std::string changed = "train." + key + " changed from " + then.dump() + " to " + now.dump();
    if (*rule == ResumeRule::kSchedule) {
      schedule_keys += (schedule_keys.empty() ? "" : ", ") + changed;
    } else {
      changes.push_back("resume: " + changed + ": " + resume_effect(*rule, step));
    }
  }
  if (!schedule_keys.empty()) {  // one line for the one schedule they make, first
    const TrainSpec then = schedule_then(train_then, spec.train);
    const std::string decay =
        then.steps != spec.train.steps ? fmt::format("the cosine decay now ends at step {}; ", spec.train.steps) : "";
    changes.insert(changes.begin(), "resume: " + schedule_keys + ": " + decay +
                                        schedule_change(then, spec.train, step) + "; AdamW's moments carry over");
  }
  return changes;
}

// The training split the checkpoint's sampler drew from has the size the data gives now.
std::uint64_t check_train_tokens(const json& state, const std::string& dir, std::uint64_t train_tokens) {
  const auto then = state_field(state, dir, "/data/train_tokens", &json::is_number_unsigned).get<std::uint64_t>();
  if (then != train_tokens) {
    throw CheckpointError(dir, "it was trained on " + std::to_string(then) +
                                   " training tokens but data.train now gives " + std::to_string(train_tokens) +
                                   "; a resumed run must sample from the same data");
  }
  return then;
}

// spec.tokenizer names a path that does not exist (any more).
bool tokenizer_gone(const JobSpec& spec) {
  std::error_code ec;
  return !spec.tokenizer.empty() && !fs::exists(spec.tokenizer, ec);
}

// An explicit checkpoint.resume path: a directory, and not a run directory or its checkpoints/
// (a user naming the run to go on from), or CheckpointError.
void require_checkpoint_directory(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    const std::string note = missing_path_note(dir, "checkpoints");
    throw CheckpointError(dir, fs::exists(dir, ec)  ? "is not a directory"
                               : note.empty()       ? "No such file or directory"
                                                    : "No such file or directory; " + note);
  }
  if (const auto holder = describe_checkpoint_holder(dir)) {
    throw CheckpointError(dir, "is " + *holder + ": set checkpoint.resume to one checkpoint");
  }
}

}  // namespace

std::string save_checkpoint(const std::string& run_dir, const JobSpec& spec, const ParamLayout& layout,
                            const float* params, const float* m, const float* v, const TrainState& state,
                            const std::vector<NamedFile>& tokenizer, const HostAccess& memory) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  const fs::path final_dir = root / checkpoint_dir_name(state.step);
  const fs::path tmp = final_dir.string() + kCheckpointTmpMarker + std::to_string(::getpid());
  FileChecksums sums;
  try {
    fs::create_directories(root);
    for (const auto& entry : fs::directory_iterator(root)) {
      if (is_partial_checkpoint(entry.path().filename().string())) {
        spdlog::info("removing partial checkpoint {} (left by an interrupted writer)", entry.path().string());
        fs::remove_all(entry.path());
      }
    }
    fs::create_directory(tmp);
    sums[kModelWeightsFile] = write_hf_model((tmp / kModelWeightsFile).string(), layout, params, memory);
    sums[kCheckpointOptimizerFile] =
        write_optimizer_file((tmp / kCheckpointOptimizerFile).string(), layout, params, m, v, state.adam_t, memory);
    const std::string config = hf_config(layout.dims()).dump(2) + "\n";
    write_file_atomic((tmp / kModelConfigFile).string(), config);
    sums[kModelConfigFile] = {config.size(), crc32c(config.data(), config.size())};
    for (const NamedFile& file : tokenizer) {
      write_file_atomic((tmp / file.name).string(), file.content);
      sums[file.name] = {file.content.size(), crc32c(file.content.data(), file.content.size())};
    }
    write_file_atomic((tmp / kCheckpointStateFile).string(), state_json(spec, state, sums).dump(2) + "\n");
    fsync_directory(tmp.string());
    if (fs::exists(final_dir)) remove_checkpoint_dir(final_dir);  // the same step saved again
    fs::rename(tmp, final_dir);
    fsync_directory(root.string());
  } catch (const fs::filesystem_error& e) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw FileError(e.path1().string(), e.code().message());
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
  const auto complete = complete_checkpoints(root);
  for (size_t i = static_cast<size_t>(std::max(spec.checkpoint.keep, 1)); i < complete.size(); ++i) {
    // Never the one just written: later steps here are another run's, which xlaunch moves aside.
    if (complete[i].second == final_dir) continue;
    try {
      remove_checkpoint_dir(complete[i].second);
    } catch (const std::exception& e) {  // the new checkpoint is safe; an old one lingering is not fatal
      spdlog::warn("could not remove old checkpoint {}: {}", complete[i].second.string(), e.what());
    }
  }
  return final_dir.string();
}

namespace {

// What a resume checks of a candidate before it loads it: the structure and the small files; the
// tensor files are checked as they load.
void verify_before_load(const std::string& dir) { verify_checksums(dir, verify_structure(dir), Unread::kTensors); }

// The first checkpoint `use` takes of those `resume` names, newest first: none ("never"), the path
// (whose damage is an error), or under "auto" the complete ones in run_dir/checkpoints/, each
// damaged one skipped with a warning that begins with `context`. `use` returns its result or
// throws CheckpointDamage.
template <class Use>
auto first_usable(const std::string& run_dir, const std::string& resume, const char* context, const Use& use)
    -> std::optional<decltype(use(std::string()))> {
  if (resume == "never") return std::nullopt;
  if (resume != "auto") {
    require_checkpoint_directory(resume);
    return use(resume);
  }
  for (const auto& [step, dir] : complete_checkpoints(fs::path(run_dir) / "checkpoints")) {
    try {
      return use(dir.string());
    } catch (const CheckpointDamage& e) {
      spdlog::warn("{}: skipping damaged {}; trying the previous checkpoint", context, e.what());
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> find_resume_checkpoint(const std::string& run_dir, const std::string& resume) {
  return first_usable(run_dir, resume, "resume", [](const std::string& dir) {
    verify_checksums(dir, verify_structure(dir));
    return dir;
  });
}

std::optional<std::string> find_resume_candidate(const std::string& run_dir, const std::string& resume) {
  return first_usable(run_dir, resume, "resume", [](const std::string& dir) {
    verify_before_load(dir);
    return dir;
  });
}

std::optional<std::string> find_model_checkpoint(const std::string& run_dir) {
  return first_usable(run_dir, "auto", "model", [](const std::string& dir) {
    verify_checksums(dir, verify_structure(dir, Unread::kOptimizer), Unread::kOptimizer);
    return dir;
  });
}

std::optional<ResumedCheckpoint> resume_from_checkpoint(const std::string& run_dir, const JobSpec& spec,
                                                        const ParamLayout& layout, std::uint64_t train_tokens,
                                                        float* params, float* m, float* v, const HostAccess& memory) {
  return first_usable(run_dir, spec.checkpoint.resume, "resume", [&](const std::string& dir) {
    verify_before_load(dir);
    return ResumedCheckpoint{dir, load_checkpoint(dir, spec, layout, train_tokens, params, m, v, memory)};
  });
}

void verify_checkpoint_small_files(const std::string& dir) {
  verify_checksums(dir, read_state(dir), Unread::kTensors);
}

void resolve_training_model(JobSpec& spec, const json& doc, const std::optional<std::string>& resume_from) {
  const std::optional<ModelFileInfo> source = resolve_model_source(spec, doc, resume_from);
  if (resume_from && tokenizer_gone(spec)) {
    const std::string carried = directory_tokenizer(*resume_from);
    if (!carried.empty()) {
      spdlog::warn("tokenizer: {} is gone: the run goes on with the copy of its tokenizer that {} carries",
                   spec.tokenizer, *resume_from);
      spec.tokenizer = carried;
    }
  }
  if (resume_from || !source || source->format != ModelFormat::kCheckpoint) return;
  try {
    verify_checkpoint_small_files(source->path);
  } catch (const CheckpointError& e) {
    throw SpecError("model.init_from", e.what());
  }
}

bool needs_training_model_resolution(const JobSpec& spec) {
  return !spec.model.init_from.empty() || tokenizer_gone(spec);
}

std::optional<ResumeRule> train_key_on_resume(const std::string& key) {
  static const std::map<std::string, ResumeRule> rules = {
      // With the checkpoint's sampler state they fix every later step's batch.
      {"batch_size", ResumeRule::kKept},
      {"seed", ResumeRule::kKept},
      // The way on after a divergence: a lower rate, a longer warmup, a gradient clip.
      {"steps", ResumeRule::kSchedule},
      {"lr", ResumeRule::kSchedule},
      {"min_lr", ResumeRule::kSchedule},
      {"warmup_steps", ResumeRule::kSchedule},
      {"weight_decay", ResumeRule::kOptimizer},
      {"beta1", ResumeRule::kOptimizer},
      {"beta2", ResumeRule::kOptimizer},
      {"eps", ResumeRule::kOptimizer},
      {"grad_clip", ResumeRule::kOptimizer},
      {"micro_batch_size", ResumeRule::kComputing},
      {"eval_every", ResumeRule::kComputing},
      {"eval_batches", ResumeRule::kComputing},
      {"eval_multiple_choice", ResumeRule::kComputing},
      {"eval_multiple_choice_examples", ResumeRule::kComputing},
      {"log_every", ResumeRule::kComputing},
      {"precision", ResumeRule::kComputing},
      {"cuda_graph", ResumeRule::kComputing},
      {"deterministic", ResumeRule::kComputing}};
  const auto it = rules.find(key);
  if (it == rules.end()) return std::nullopt;
  return it->second;
}

std::uint64_t checkpoint_tensor_bytes(const ModelDims& dims) { return 12ull * ParamLayout(dims).total(); }

std::int64_t recorded_step(const std::string& dir) {
  const json state = read_state(dir);
  return state_field(state, dir, "/step", &json::is_number_unsigned).get<std::int64_t>();
}

std::string resume_for_attempt(const std::string& run_dir, const std::string& resume, int restart_count) {
  if (restart_count == 0 || resume == "auto") return resume;
  std::int64_t start = 0;
  if (resume != "never") {
    try {
      start = recorded_step(resume);
    } catch (const CheckpointError&) {
      return resume;  // gone since the first attempt: the resume says so itself
    }
  }
  const auto written = complete_checkpoints(fs::path(run_dir) / "checkpoints");
  if (written.empty() || written.front().first <= start) return resume;
  return "auto";
}

std::vector<std::string> check_checkpoint_fits(const std::string& dir, const JobSpec& spec,
                                               std::uint64_t train_tokens) {
  const json state = read_state(dir);
  std::vector<std::string> changes = check_against_spec(state, dir, spec);
  check_train_tokens(state, dir, train_tokens);
  return changes;
}

TrainState load_checkpoint(const std::string& dir, const JobSpec& spec, const ParamLayout& layout,
                           std::uint64_t train_tokens, float* params, float* m, float* v, const HostAccess& memory) {
  const json state = read_state(dir);
  const ModelDims& d = layout.dims();

  // The spec first: a mismatch there is the likeliest mistake and the clearest message.
  const std::vector<std::string> changes = check_against_spec(state, dir, spec);
  TrainState out;
  out.train_tokens = check_train_tokens(state, dir, train_tokens);
  out.step = state_field(state, dir, "/step", &json::is_number_unsigned).get<std::int64_t>();
  const json& words = state_field(state, dir, "/sampler/state", &json::is_array);
  if (words.size() != out.sampler.words.size()) {
    throw CheckpointError(dir, std::string(kCheckpointStateFile) + ": /sampler/state is not 4 words");
  }
  for (size_t i = 0; i < words.size(); ++i) {
    const auto w = words[i].is_string() ? from_hex(words[i].get<std::string>()) : std::nullopt;
    if (!w)
      throw CheckpointError(
          dir, std::string(kCheckpointStateFile) + ": /sampler/state/" + std::to_string(i) + " is not 16 hex digits");
    out.sampler.words[i] = *w;
  }

  // Then the tensor files: names and shapes, nothing extra, data intact (their whole bytes against
  // state.json's record as they load); all before any copy.
  const auto files = recorded_checksums(dir, state);
  const auto recorded = [&](const char* name) -> const RecordedChecksum* {
    if (!files) return nullptr;  // an older checkpoint: the data's own checksums only
    const auto it = files->find(name);
    if (it == files->end()) throw CheckpointDamage(dir, std::string(kCheckpointStateFile) + ": /files has no " + name);
    return &it->second;
  };
  SafetensorsFile optimizer = open_tensor_file(dir, kCheckpointOptimizerFile);
  const auto total = static_cast<std::int64_t>(layout.total());
  try {
    HfModelReader model((fs::path(dir) / kModelWeightsFile).string(), layout, d.T);  // our checkpoints keep T rows
    optimizer.get("m", {total});
    optimizer.get("v", {total});
    if (d.Vp > d.V) optimizer.get(kWtePadding, wte_padding_shape(d));
    if (optimizer.tensors().size() != (d.Vp > d.V ? 3u : 2u)) throw FileError(optimizer.path(), "unexpected tensors");
    const auto adam = optimizer.metadata().find("adam_step");
    if (adam == optimizer.metadata().end() || adam->second.empty() || adam->second.size() > 18 ||
        adam->second.find_first_not_of("0123456789") != std::string::npos) {
      throw FileError(optimizer.path(), "metadata adam_step is missing or not a count");
    }
    out.adam_t = std::stoll(adam->second);
    optimizer.load(recorded(kCheckpointOptimizerFile));
    model.load(params, memory, recorded(kModelWeightsFile));  // checks its data before it writes
  } catch (const FileError& e) {
    throw CheckpointDamage(dir, fs::path(e.path()).filename().string() + ": " + e.message());
  }

  // Nothing can fail from here on.
  for (const std::string& line : changes) spdlog::info("{}", line);
  if (d.Vp > d.V) {
    optimizer.copy(kWtePadding, wte_padding_shape(d), params + layout.wte() + static_cast<size_t>(d.V) * d.C,
                   memory);
  }
  optimizer.copy("m", {total}, m, memory);
  optimizer.copy("v", {total}, v, memory);
  return out;
}

}  // namespace xtrain
