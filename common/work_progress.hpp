// Long work on a thread says that it advances, in bytes, and the hook that thread installed runs
// each time another `every_bytes` of them have gone by. Reads, writes and checksums of checkpoint
// and model files (worker/formats/file_io.hpp, the digest check of a safetensors file's load), the
// weights a rank draws, loads or moves to and from a GPU (worker/model/host_access.hpp) and a CPU
// rank's first touch of its buffers (worker/cpu/huge_page_buffer.hpp) advance it; xtrain-worker
// installs its heartbeat's beat, so that xlaunch's watchdog sees a rank that writes a checkpoint of
// many GB, or draws a large model's weights, as alive however slow the work, and one whose disk
// stalls as hung. Scoped and per thread: the hook is gone with its WorkProgress, and another
// thread's work does not beat for this one.
#pragma once

#include <cstdint>
#include <functional>

namespace xtrain {

class WorkProgress {
 public:
  static constexpr std::uint64_t kEveryBytes = 64ull << 20;  // a beat per 0.1-0.3 s of a slow disk
  explicit WorkProgress(std::function<void()> hook, std::uint64_t every_bytes = kEveryBytes);
  ~WorkProgress();
  WorkProgress(const WorkProgress&) = delete;
  WorkProgress& operator=(const WorkProgress&) = delete;

  // `bytes` more were done on this thread.
  static void advance(std::uint64_t bytes);

 private:
  std::function<void()> hook_;
  std::uint64_t every_bytes_;
  std::uint64_t pending_ = 0;  // bytes since the hook last ran
  WorkProgress* outer_;        // the one this replaced on this thread, restored when it goes
};

}  // namespace xtrain
