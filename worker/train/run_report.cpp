#include "worker/train/run_report.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "common/atomic_file.hpp"
#include "common/checkpoint_dirs.hpp"
#include "common/number_format.hpp"

namespace xtrain {

void Fnv1a::add(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h_ ^= p[i];
    h_ *= 0x100000001b3ull;
  }
}

std::string Fnv1a::hex() const {
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h_));
  return out;
}

std::string fnv1a_hex(const void* data, size_t bytes) {
  Fnv1a h;
  h.add(data, bytes);
  return h.hex();
}

RunReport::RunReport(int rank, std::string run_dir, const std::string& heartbeat_file, std::string result_file)
    : rank_(rank),
      run_dir_(std::move(run_dir)),
      heartbeat_(heartbeat_file),
      result_file_(std::move(result_file)),
      started_(std::chrono::steady_clock::now()) {}

void RunReport::start_training(long first_step, long total_steps, long tokens_per_step, int log_every) {
  first_step_ = first_step;
  total_steps_ = total_steps;
  tokens_per_step_ = tokens_per_step;
  log_every_ = log_every > 0 ? log_every : 1;
  started_ = std::chrono::steady_clock::now();
  steps_timed_ = 0;
  interval_ms_ = 0;
  interval_busy_ms_.clear();
  interval_steps_ = 0;
  recent_ms_ = 0;
  if (rank_ == 0 && !run_dir_.empty()) drop_metrics_after(run_dir_ + "/metrics.jsonl", first_step);
}

double RunReport::training_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
}

double RunReport::tokens_per_second() const {
  const double s = training_seconds();
  return s > 0 ? static_cast<double>(steps_timed_ * tokens_per_step_) / s : 0.0;
}

void RunReport::step(const StepStats& s) {
  ++steps_timed_;
  interval_ms_ += s.step_ms;
  ++interval_steps_;
  interval_busy_ms_.resize(s.rank_busy_ms.size());
  for (size_t r = 0; r < s.rank_busy_ms.size(); ++r) interval_busy_ms_[r] += s.rank_busy_ms[r];
  recent_ms_ = recent_ms_ > 0 ? 0.9 * recent_ms_ + 0.1 * s.step_ms : s.step_ms;
  const double remaining_s = training_seconds() / static_cast<double>(steps_timed_) *
                             static_cast<double>(total_steps_ - s.step);
  heartbeat_.end_step(s, recent_ms_ > 0 ? static_cast<double>(tokens_per_step_) * 1000.0 / recent_ms_ : 0.0,
                      remaining_s);
  if (rank_ != 0) return;
  // The first step of a run is always shown, so a person sees where the loss starts.
  const bool first = s.step == first_step_ + 1;
  if (s.step % log_every_ != 0 && s.step != total_steps_ && !first) return;

  const double ms = interval_ms_ / static_cast<double>(interval_steps_);
  const double tok_s = ms > 0 ? static_cast<double>(tokens_per_step_) * 1000.0 / ms : 0.0;
  nlohmann::json rank_ms = nlohmann::json::array();
  for (double sum : interval_busy_ms_) rank_ms.push_back(sum / static_cast<double>(interval_steps_));
  interval_ms_ = 0;
  interval_busy_ms_.assign(interval_busy_ms_.size(), 0.0);
  interval_steps_ = 0;

  spdlog::info("step {}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {} tok/s | {:.1f} ms/step | ETA {}", s.step,
               total_steps_, s.loss, s.lr, s.grad_norm, with_thousands(static_cast<long long>(tok_s + 0.5)), ms,
               format_duration(remaining_s));
  append_metrics({{"step", s.step},
                  {"loss", s.loss},
                  {"lr", s.lr},
                  {"grad_norm", s.grad_norm},
                  {"tokens_per_s", tok_s},
                  {"ms_per_step", ms},
                  {"rank_step_ms", rank_ms},
                  {"elapsed_s", training_seconds()}});
}

void RunReport::validation(long step, double val_loss, std::optional<double> bits_per_byte,
                           std::optional<ChoiceAccuracy> choices, double seconds) {
  if (rank_ != 0) return;
  const double ppl = std::exp(val_loss);
  nlohmann::json record = {{"step", step}, {"val_loss", val_loss}, {"val_ppl", ppl}};
  std::string bpb, mc;
  if (bits_per_byte) {
    record["val_bpb"] = *bits_per_byte;
    bpb = fmt::format(" | {:.4f} bits/byte", *bits_per_byte);
  }
  if (choices) {
    record["mc_accuracy"] = choices->accuracy();
    record["mc_correct"] = choices->correct;
    record["mc_examples"] = choices->examples;
    mc = fmt::format(" | multiple-choice acc {:.4f} ({}/{})", choices->accuracy(), choices->correct, choices->examples);
  }
  spdlog::info("step {}/{} | val loss {:.4f} | perplexity {:.2f}{}{} | {:.1f} s", step, total_steps_, val_loss, ppl, bpb,
               mc, seconds);
  append_metrics(record);
}

// With its size and the rate it was written at, so that slow storage shows in the log.
void RunReport::checkpoint(long step, const std::string& path, double seconds) {
  if (rank_ != 0) return;
  const std::uint64_t bytes = checkpoint_bytes(path);
  const double mib_per_s = seconds > 0 ? static_cast<double>(bytes) / (1 << 20) / seconds : 0.0;
  spdlog::info("step {}/{} | checkpoint {} | {} in {:.2f} s ({:.0f} MiB/s)", step, total_steps_, path,
               format_bytes(bytes), seconds, mib_per_s);
}

void RunReport::append_metrics(const nlohmann::json& record) const {
  if (run_dir_.empty()) return;
  const std::string path = run_dir_ + "/metrics.jsonl";
  std::ofstream out(path, std::ios::app);
  out << record.dump() << '\n';
  if (!out) spdlog::warn("{}: could not append a metrics record", path);
}

void RunReport::write_result(const RankResult& r) const {
  if (result_file_.empty()) return;
  nlohmann::json doc = r.extra;
  doc["rank"] = r.rank;
  doc["status"] = r.status;
  doc["step"] = r.step;
  if (r.loss) doc["loss"] = *r.loss;
  if (r.val_loss) {
    doc["val_loss"] = *r.val_loss;
    doc["val_ppl"] = std::exp(*r.val_loss);
  }
  if (r.val_bpb) doc["val_bpb"] = *r.val_bpb;
  if (r.mc) {
    doc["mc_accuracy"] = r.mc->accuracy();
    doc["mc_correct"] = r.mc->correct;
    doc["mc_examples"] = r.mc->examples;
  }
  if (!r.param_digest.empty()) doc["param_digest"] = r.param_digest;
  if (!r.error.empty()) doc["error"] = r.error;
  if (!r.failure_kind.empty()) doc["failure_kind"] = r.failure_kind;
  try {
    const auto parent = std::filesystem::path(result_file_).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    write_file_atomic(result_file_, doc.dump(2) + "\n");
  } catch (const std::exception& e) {
    spdlog::warn("result file: {}", e.what());
  }
}

// The records are appended in step order, and every resume drops those after its step first, so
// the records to drop are the file's tail: it is read backwards, a block at a time, down to the last
// record at or before `step`, and cut there. Reading the whole file took 7 s for a million records;
// this reads the tail, and the cut (ftruncate, then fsync) never rewrites the records it keeps.
void drop_metrics_after(const std::string& path, long step) {
  constexpr off_t kBlock = 64 * 1024;
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return;
  }
  off_t line_end = st.st_size;  // the records from here on are dropped
  std::string unread;           // the file's bytes [line_end - unread.size(), line_end) not yet looked at
  bool failed = false;
  while (line_end > 0 && !failed) {
    // The last line: from after the '\n' before its own last byte, reading further back until one shows.
    size_t newline = std::string::npos;
    while (true) {
      if (unread.size() >= 2) newline = unread.rfind('\n', unread.size() - 2);
      const off_t loaded_from = line_end - static_cast<off_t>(unread.size());
      if (newline != std::string::npos || loaded_from == 0) break;
      const off_t from = std::max<off_t>(0, loaded_from - kBlock);
      std::string block(static_cast<size_t>(loaded_from - from), '\0');
      if (::pread(fd, block.data(), block.size(), from) != static_cast<ssize_t>(block.size())) {
        failed = true;
        break;
      }
      unread.insert(0, block);
    }
    if (failed) break;
    const size_t start = newline == std::string::npos ? 0 : newline + 1;
    std::string_view line = std::string_view(unread).substr(start);
    if (line.ends_with('\n')) line.remove_suffix(1);
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool torn = record.is_discarded() || !record.is_object();
    if (!torn && !(record.contains("step") && record["step"].is_number() && record["step"].get<long>() > step)) break;
    line_end -= static_cast<off_t>(unread.size() - start);
    unread.resize(start);
  }
  if (!failed && line_end < st.st_size && (::ftruncate(fd, line_end) != 0 || ::fsync(fd) != 0)) failed = true;
  if (failed) spdlog::warn("{}: could not drop the records after step {}: {}", path, step, std::strerror(errno));
  ::close(fd);
}

}  // namespace xtrain
