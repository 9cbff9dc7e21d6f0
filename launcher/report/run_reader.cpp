#include "launcher/report/run_reader.hpp"

#include <cmath>
#include <ctime>
#include <filesystem>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "common/job_spec.hpp"
#include "launcher/plan/plan.hpp"
#include "launcher/run/run_dir.hpp"

namespace xtrain::launcher {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr std::int64_t kTailBytes = 64 * 1024;     // last_step_record's first look
constexpr std::int64_t kMaxTailBytes = 4 << 20;    // and its last

json read_or_null(const std::string& path) {
  try {
    return read_json_file(path).value_or(json());
  } catch (const std::exception&) {
    return nullptr;
  }
}

double number(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<double>() : kNaN;
}

std::optional<double> time_of(const json& object, const char* key) {
  const auto it = object.is_object() ? object.find(key) : object.end();
  if (it == object.end() || !it->is_string()) return std::nullopt;
  return parse_iso_time(it->get<std::string>());
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A metrics line as a record: step records carry "loss", validation records "val_loss".
enum class RecordKind { kNone, kStep, kValidation };

RecordKind parse_record(const std::string& line, StepRecord& step, ValRecord& validation) {
  const json record = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object() || !record.contains("step") || !record.at("step").is_number_integer()) {
    return RecordKind::kNone;
  }
  const long at = record.at("step").get<long>();
  if (record.contains("loss") && record.at("loss").is_number()) {
    step = StepRecord{at,
                      number(record, "loss"),
                      number(record, "lr"),
                      number(record, "grad_norm"),
                      number(record, "tokens_per_s"),
                      number(record, "ms_per_step"),
                      number(record, "elapsed_s"),
                      number(record, "tokens"),
                      {}};
    if (const auto it = record.find("rank_step_ms"); it != record.end() && it->is_array()) {
      for (const json& ms : *it) step.rank_step_ms.push_back(ms.is_number() ? ms.get<double>() : kNaN);
    }
    return RecordKind::kStep;
  }
  if (record.contains("val_loss") && record.at("val_loss").is_number()) {
    validation = ValRecord{at, record.at("val_loss").get<double>(), number(record, "mc_accuracy")};
    return RecordKind::kValidation;
  }
  return RecordKind::kNone;
}

std::optional<JobSpec> own_worker_spec(const json& job) {
  if (!job.is_object()) return std::nullopt;
  try {
    JobSpec spec = parse_job_spec(job);
    if (is_own_worker(spec)) return spec;
  } catch (const SpecError&) {
  }
  return std::nullopt;
}

}  // namespace

std::optional<RunInfo> read_run_info(const std::string& dir) {
  RunInfo run;
  run.dir = dir;
  run.job = read_or_null(run_files::job(dir));
  run.state = read_or_null(run_files::state(dir));
  try {
    run.summary = read_json_file(run_files::summary(dir)).value_or(json());
  } catch (const std::exception&) {
    run.summary_unreadable = true;
  }
  if (why_not_a_run_dir(dir)) return std::nullopt;
  run.name = run.job.is_object() && run.job.value("name", json()).is_string()
                 ? run.job.at("name").get<std::string>()
                 : fs::path(dir).filename().string();
  if (const auto spec = own_worker_spec(run.job)) {
    run.total_steps = spec->train.steps;
    run.tokens_per_step = static_cast<double>(spec->train.batch_size) * spec->model.seq_len;
  }
  const json& latest = run.summary.is_object() ? run.summary : run.state;
  run.started = time_of(latest, "started_at");
  if (run.summary.is_object()) {
    const std::string status = run.summary.value("status", "");
    run.run_state = status == "succeeded"   ? RunState::kCompleted
                    : status == "preempted" ? RunState::kPreempted
                    : status == "stopped"   ? RunState::kStopped
                                            : RunState::kFailed;
    if (run.summary.value("exit_code", json()).is_number_integer()) run.exit_code = run.summary.at("exit_code").get<int>();
    const double duration = number(run.summary, "duration_s");
    if (!std::isnan(duration)) run.duration_s = duration;
  } else if (supervisor_running(dir)) {
    run.run_state = RunState::kRunning;
    run.phase = run.state.is_object() ? run.state.value("status", "starting") : "starting";
    if (run.started) run.duration_s = now_s() - *run.started;
  } else {
    run.run_state = RunState::kLost;
    const auto updated = time_of(run.state, "updated_at");
    if (run.started && updated) run.duration_s = *updated - *run.started;
  }
  return run;
}

std::string state_label(const RunInfo& run) {
  const std::string code = run.exit_code ? " (" + std::to_string(*run.exit_code) + ")" : "";
  switch (run.run_state) {
    case RunState::kRunning: return run.phase.empty() ? "running" : run.phase;
    case RunState::kCompleted: return "completed";
    case RunState::kPreempted: return "preempted" + code;
    case RunState::kFailed: return "failed" + code;
    case RunState::kStopped: return "stopped" + code;
    case RunState::kLost: return run.summary_unreadable ? "lost (summary.json unreadable)" : "lost";
  }
  return "unknown";
}

MetricsLog::MetricsLog(std::string path) : path_(std::move(path)) {}

bool MetricsLog::update() {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  ::fstat(fd, &st);
  if (st.st_size < offset_) {  // rewritten: start again
    *this = MetricsLog(path_);
  }
  const std::int64_t before = records_;
  char buffer[64 * 1024];
  ssize_t n;
  while ((n = ::pread(fd, buffer, sizeof(buffer), offset_)) > 0) {
    offset_ += n;
    partial_.append(buffer, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t newline; (newline = partial_.find('\n', start)) != std::string::npos; start = newline + 1) {
      if (newline > start) parse_line(partial_.substr(start, newline - start));
    }
    partial_.erase(0, start);
  }
  ::close(fd);
  return records_ != before;
}

void MetricsLog::parse_line(const std::string& line) {
  StepRecord step;
  ValRecord validation;
  switch (parse_record(line, step, validation)) {
    case RecordKind::kStep:
      ++records_;
      superseded_ += steps_.count(step.step);
      steps_[step.step] = std::move(step);
      break;
    case RecordKind::kValidation:
      ++records_;
      superseded_ += validations_.count(validation.step);
      validations_[validation.step] = validation;
      break;
    case RecordKind::kNone:
      ++malformed_;
      break;
  }
}

std::optional<StepRecord> last_step_record(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  ::fstat(fd, &st);
  std::optional<StepRecord> found;
  for (std::int64_t window = kTailBytes; !found; window *= 2) {
    const std::int64_t start = std::max<std::int64_t>(0, st.st_size - window);
    std::string tail(static_cast<size_t>(st.st_size - start), '\0');
    const ssize_t n = ::pread(fd, tail.data(), tail.size(), start);
    tail.resize(n > 0 ? static_cast<size_t>(n) : 0);
    // Whole lines only: the first may be cut by the window, the last may still be being written.
    size_t end = tail.rfind('\n');
    while (end != std::string::npos && end > 0 && !found) {
      const size_t begin = tail.rfind('\n', end - 1);
      if (begin == std::string::npos && start > 0) break;
      const size_t from = begin == std::string::npos ? 0 : begin + 1;
      StepRecord step;
      ValRecord validation;
      if (parse_record(tail.substr(from, end - from), step, validation) == RecordKind::kStep) found = step;
      end = begin;
    }
    if (start == 0 || window >= kMaxTailBytes) break;
  }
  ::close(fd);
  return found;
}

std::string duration_text(double seconds) {
  if (!(seconds >= 0)) return "-";
  if (seconds < 60) return fmt::format("{:.{}f} s", seconds, seconds < 10 ? 2 : 1);
  const long long s = static_cast<long long>(seconds + 0.5);
  if (s < 3600) return fmt::format("{}m {:02}s", s / 60, s % 60);
  return fmt::format("{}h {:02}m", s / 3600, s / 60 % 60);
}

std::string format_local_time(double epoch_seconds) {
  const std::time_t t = static_cast<std::time_t>(epoch_seconds);
  std::tm parts{};
  localtime_r(&t, &parts);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &parts);
  return text;
}

std::optional<double> parse_iso_time(const std::string& text) {
  std::tm parts{};
  const char* rest = ::strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &parts);
  if (!rest) return std::nullopt;
  double fraction = 0;
  if (*rest == '.') fraction = std::strtod(rest, nullptr);
  return static_cast<double>(::timegm(&parts)) + fraction;
}

}  // namespace xtrain::launcher
