#include "common/heartbeat_record.hpp"

#include <cerrno>
#include <cstring>
#include <ctime>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

namespace xtrain {
namespace {

constexpr int kReadAttempts = 8;

bool read_copy(int fd, void* out, size_t bytes) {
  ssize_t n;
  do {
    n = ::pread(fd, out, bytes, 0);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(bytes);
}

bool read_copy(int fd, HeartbeatRecord& out) { return read_copy(fd, &out, sizeof out); }

bool is_record(const HeartbeatRecord& r) {
  return r.magic == kHeartbeatMagic && r.version >= kHeartbeatVersion && r.size >= sizeof(HeartbeatRecord);
}

// "layer 7", "(the embeddings)", "(the output layer)" for a forward or backward detail.
std::string layer_text(const HeartbeatRecord& r) {
  if (r.detail < 0) return "(the embeddings)";
  if (r.detail >= r.n_layer) return "(the output layer)";
  return fmt::format("layer {}", r.detail);
}

std::string bucket_text(const HeartbeatRecord& r) {
  if (r.comm_bucket < 0) return "for the gradient all-reduces";
  if (r.comm_bucket >= r.n_layer) return "on the embeddings' all-reduce bucket";
  return fmt::format("on all-reduce bucket {}", r.comm_bucket);
}

std::string micro_text(const HeartbeatRecord& r) {
  return r.micro_steps > 1 ? fmt::format(" (micro-step {} of {})", r.micro_step + 1, r.micro_steps) : "";
}

}  // namespace

std::optional<HeartbeatRecord> read_heartbeat_record(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  HeartbeatRecord a{}, b{};
  bool same = false;
  bool ok = read_copy(fd, a) && is_record(a);
  for (int attempt = 0; ok && attempt < kReadAttempts; ++attempt) {
    ok = read_copy(fd, b);
    same = ok && std::memcmp(&a, &b, sizeof a) == 0;
    if (same && a.sequence % 2 == 0) break;
    a = b;
  }
  ::close(fd);
  // Identical copies with an odd sequence: the writer stopped in an update (SIGSTOP, killed).
  // The record is as good as it will get.
  if (!ok || !same) return std::nullopt;
  return a;
}

std::optional<RankBusyTimes> read_rank_busy_times(const std::string& path) {
  const std::optional<HeartbeatRecord> head = read_heartbeat_record(path);
  if (!head || head->rank_busy_count <= 0) return std::nullopt;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  const size_t bytes = sizeof(HeartbeatRecord) + sizeof(float) * static_cast<size_t>(head->rank_busy_count);
  std::vector<char> a(bytes), b(bytes);
  bool ok = read_copy(fd, a.data(), bytes), same = false;
  for (int attempt = 0; ok && attempt < kReadAttempts; ++attempt) {
    ok = read_copy(fd, b.data(), bytes);
    same = ok && a == b;
    HeartbeatRecord r;
    std::memcpy(&r, a.data(), sizeof r);
    if (same && r.sequence % 2 == 0) break;
    a.swap(b);
  }
  ::close(fd);
  HeartbeatRecord r;
  std::memcpy(&r, a.data(), sizeof r);
  if (!ok || !same || !is_record(r) || r.rank_busy_count != head->rank_busy_count) return std::nullopt;
  RankBusyTimes out{r.last_step, std::vector<float>(static_cast<size_t>(r.rank_busy_count))};
  std::memcpy(out.busy_ms.data(), a.data() + sizeof r, sizeof(float) * out.busy_ms.size());
  return out;
}

std::string phase_name(std::uint16_t phase) {
  static const char* const kNames[] = {"startup",   "connecting", "data",          "forward",  "backward",
                                       "gradient_wait", "step_sync", "optimizer", "validation", "checkpoint",
                                       "checkpoint_wait", "sampling", "done"};
  if (phase < std::size(kNames)) return kNames[phase];
  return "phase_" + std::to_string(phase);
}

bool waits_on_peers(const HeartbeatRecord& record) {
  switch (static_cast<WorkerPhase>(record.phase)) {
    case WorkerPhase::kConnecting:
    case WorkerPhase::kGradientWait:
    case WorkerPhase::kStepSync:
    case WorkerPhase::kCheckpointWait: return true;
    default: return false;
  }
}

std::string describe_phase(const HeartbeatRecord& r, bool plural) {
  const char* is = plural ? "are" : "is";
  const char* waits = plural ? "wait" : "waits";
  const std::string step = fmt::format("of step {}", r.step);
  switch (static_cast<WorkerPhase>(r.phase)) {
    case WorkerPhase::kStartup: return fmt::format("{} starting up", is);
    case WorkerPhase::kConnecting: return fmt::format("{} connecting to {} peers", is, plural ? "their" : "its");
    case WorkerPhase::kData: return fmt::format("{} gathering the batch {}{}", is, step, micro_text(r));
    case WorkerPhase::kForward: return fmt::format("{} in forward {} {}{}", is, layer_text(r), step, micro_text(r));
    case WorkerPhase::kBackward: return fmt::format("{} in backward {} {}{}", is, layer_text(r), step, micro_text(r));
    case WorkerPhase::kGradientWait: return fmt::format("{} {} {}", waits, bucket_text(r), step);
    case WorkerPhase::kStepSync: return fmt::format("{} in the end-of-step all-reduce {}", waits, step);
    case WorkerPhase::kOptimizer: return fmt::format("{} in the optimizer update {}", is, step);
    case WorkerPhase::kValidation: return fmt::format("{} validating after step {}", is, r.step);
    case WorkerPhase::kCheckpoint: return fmt::format("{} writing the checkpoint {}", is, step);
    case WorkerPhase::kCheckpointWait: return fmt::format("{} for the checkpoint {} to be written", waits, step);
    case WorkerPhase::kSampling: return fmt::format("{} sampling text", is);
    case WorkerPhase::kDone: return fmt::format("{} finished training", plural ? "have" : "has");
  }
  return fmt::format("{} in {}", is, phase_name(r.phase));
}

nlohmann::json to_json(const HeartbeatRecord& r, std::int64_t now_ns) {
  const auto age = [now_ns](std::int64_t then) { return static_cast<double>(now_ns - then) / 1e9; };
  const auto phase = static_cast<WorkerPhase>(r.phase);
  const bool layered = phase == WorkerPhase::kForward || phase == WorkerPhase::kBackward;
  const bool bucketed = phase == WorkerPhase::kGradientWait && r.comm_bucket >= 0;
  return {{"step", r.step},
          {"total_steps", r.total_steps},
          {"micro_step", r.micro_step},
          {"micro_steps", r.micro_steps},
          {"phase", phase_name(r.phase)},
          {"layer", layered ? nlohmann::json(r.detail) : nlohmann::json(nullptr)},
          {"bucket", bucketed ? nlohmann::json(r.comm_bucket) : nlohmann::json(nullptr)},
          {"text", describe_phase(r)},
          {"last_step", r.last_step},
          {"loss", r.last_step > 0 ? nlohmann::json(r.last_loss) : nlohmann::json(nullptr)},
          {"busy_ms", r.busy_ms},
          {"step_ms", r.step_ms},
          {"tokens_per_s", r.tokens_per_s},
          {"eta_s", r.eta_s},
          {"phase_age_s", age(r.phase_since_ns)},
          {"updated_age_s", age(r.updated_ns)}};
}

std::optional<double> heartbeat_age_s(const std::string& path, std::int64_t now_ns) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  const std::int64_t mtime = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  return static_cast<double>(now_ns - mtime) / 1e9;
}

std::int64_t realtime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace xtrain
