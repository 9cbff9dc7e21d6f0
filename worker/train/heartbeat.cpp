#include "worker/train/heartbeat.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace xtrain {
namespace {

void store_relaxed(std::int32_t& field, std::int32_t value) {
  std::atomic_ref<std::int32_t>(field).store(value, std::memory_order_relaxed);
}

}  // namespace

Heartbeat::Heartbeat(const std::string& path) : path_(path), record_(&private_) {
  if (!path.empty()) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0 && ::ftruncate(fd_, sizeof(HeartbeatRecord)) == 0) {
      void* mapped = ::mmap(nullptr, sizeof(HeartbeatRecord), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
      if (mapped != MAP_FAILED) {
        record_ = static_cast<HeartbeatRecord*>(mapped);
        mapped_bytes_ = sizeof(HeartbeatRecord);
      }
    }
  }
  HeartbeatRecord& r = *record_;
  r = HeartbeatRecord{};
  r.size = sizeof(HeartbeatRecord);
  r.version = kHeartbeatVersion;
  r.pid = static_cast<std::int32_t>(::getpid());
  r.detail = -1;
  r.comm_bucket = -1;
  r.micro_steps = 1;
  r.phase = static_cast<std::uint16_t>(WorkerPhase::kStartup);
  r.phase_since_ns = r.updated_ns = realtime_ns();
  std::atomic_thread_fence(std::memory_order_release);
  r.magic = kHeartbeatMagic;  // last: a reader never sees a record with this magic half-initialised
}

Heartbeat::~Heartbeat() {
  if (mapped_bytes_ > 0) ::munmap(record_, mapped_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

void Heartbeat::beat() const {
  if (fd_ >= 0) ::futimens(fd_, nullptr);
}

// The seqlock's writer side: odd while the fields change. The fences keep the compiler and the
// CPU from moving field stores outside the odd window.
void Heartbeat::begin_update() {
  std::atomic_ref<std::uint32_t> sequence(record_->sequence);
  sequence.store(sequence.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}

void Heartbeat::end_update(std::int64_t now_ns) {
  record_->updated_ns = now_ns;
  std::atomic_ref<std::uint32_t> sequence(record_->sequence);
  sequence.store(sequence.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

void Heartbeat::set_backtrace_signal(int signal) {
  begin_update();
  record_->backtrace_signal = static_cast<std::uint16_t>(signal);
  end_update(realtime_ns());
}

void Heartbeat::set_failure(RecordedFailure failure) {
  begin_update();
  record_->failure = static_cast<std::int32_t>(failure);
  end_update(realtime_ns());
}

void Heartbeat::set_plan(long total_steps, int micro_steps, int n_layer, int rank_busy_slots) {
  // The floats go after the record: the file grows first, then the record says how many there are.
  // (A mapping that cannot grow keeps the record alone: xlaunch then sees no busy times.)
  const size_t grown = sizeof(HeartbeatRecord) + sizeof(float) * static_cast<size_t>(std::max(rank_busy_slots, 0));
  if (mapped_bytes_ > 0 && grown > mapped_bytes_ && ::ftruncate(fd_, static_cast<off_t>(grown)) == 0) {
    void* mapped = ::mremap(record_, mapped_bytes_, grown, MREMAP_MAYMOVE);
    if (mapped != MAP_FAILED) {
      record_ = static_cast<HeartbeatRecord*>(mapped);
      mapped_bytes_ = grown;
      rank_busy_ = reinterpret_cast<float*>(record_ + 1);
    }
  }
  begin_update();
  record_->rank_busy_count = rank_busy_ ? rank_busy_slots : 0;
  record_->total_steps = total_steps;
  record_->micro_steps = micro_steps;
  record_->n_layer = n_layer;
  end_update(realtime_ns());
}

void Heartbeat::begin_step(long step) {
  begin_update();
  record_->step = step;
  record_->micro_step = 0;
  record_->phase = static_cast<std::uint16_t>(WorkerPhase::kData);
  record_->detail = -1;
  const std::int64_t now = realtime_ns();
  record_->phase_since_ns = now;
  end_update(now);
}

void Heartbeat::micro_step(int micro) {
  begin_update();
  record_->micro_step = micro;
  record_->phase = static_cast<std::uint16_t>(WorkerPhase::kData);
  record_->detail = -1;
  const std::int64_t now = realtime_ns();
  record_->phase_since_ns = now;
  end_update(now);
}

void Heartbeat::phase(WorkerPhase phase, int detail) {
  begin_update();
  record_->phase = static_cast<std::uint16_t>(phase);
  record_->detail = detail;
  const std::int64_t now = realtime_ns();
  record_->phase_since_ns = now;
  end_update(now);
}

void Heartbeat::end_step(const StepStats& s, double tokens_per_s, double eta_s) {
  begin_update();
  record_->last_step = s.step;
  record_->last_loss = static_cast<float>(s.loss);
  record_->busy_ms = static_cast<float>(s.busy_ms);
  record_->step_ms = static_cast<float>(s.step_ms);
  record_->tokens_per_s = static_cast<float>(tokens_per_s);
  record_->eta_s = static_cast<float>(eta_s);
  if (rank_busy_ && s.rank_busy_ms.size() == static_cast<size_t>(record_->rank_busy_count)) {
    for (size_t r = 0; r < s.rank_busy_ms.size(); ++r) rank_busy_[r] = static_cast<float>(s.rank_busy_ms[r]);
  }
  end_update(realtime_ns());
}

void Heartbeat::set_comm_bucket(int bucket) { store_relaxed(record_->comm_bucket, bucket); }

BeatWhileWaiting::BeatWhileWaiting(const Heartbeat& heartbeat)
    : thread_([this, &heartbeat] {
        // Four beats a second: well inside any heartbeat timeout, and no measurable cost.
        constexpr std::chrono::milliseconds kEvery{250};
        std::unique_lock lock(mutex_);
        while (!wake_.wait_for(lock, kEvery, [this] { return done_; })) heartbeat.beat();
      }) {}

BeatWhileWaiting::~BeatWhileWaiting() {
  {
    const std::lock_guard lock(mutex_);
    done_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

}  // namespace xtrain
