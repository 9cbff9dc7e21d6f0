// Float buffers as file code reads and fills them: host memory in place, or memory the host cannot
// address (a GPU's) a piece at a time, so that writing or loading a checkpoint costs a GPU rank a
// few MiB of host memory, not a host copy of the parameters and both AdamW moments (12 bytes a
// parameter: 1.5 GB at GPT-2 124M, 19 GB at 1.5B, on every rank that loads one).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace xtrain {

class Backend;

class HostAccess {
 public:
  // Pieces of at most this many floats (4 MiB): what a GPU copies through its pinned buffers.
  static constexpr size_t kPiece = size_t{1} << 20;

  // n floats of the device's `src` on the host, valid until the next call.
  using View = std::function<const float*(const float* src, size_t n)>;
  // Copies n host floats to the device's `dst`; returns once `host` may be reused.
  using Store = std::function<void(float* dst, const float* host, size_t n)>;

  HostAccess() = default;  // host memory, read and written in place
  HostAccess(View view, Store store, size_t piece = kPiece);

  bool in_place() const { return !view_; }

  // Each piece that fill and fill_whole hand over (each call, in place) advances WorkProgress
  // (common/work_progress.hpp) by its bytes: a long load or draw beats as it goes. What read hands
  // over is counted by whoever consumes it (a file's write), not twice.

  // Calls take(host, offset, n) over [src, src + count) in order: once in place, else a piece at a
  // time (`host` valid during the call).
  void read(const float* src, size_t count,
            const std::function<void(const float* host, size_t offset, size_t n)>& take) const;
  // [src, src + count) on the host at once, for what needs all of a tensor (a transpose); valid
  // until the next call.
  const float* whole(const float* src, size_t count) const;

  // Fills [dst, dst + count): fill(host, offset, n) writes those n floats to `host`, which is dst
  // + offset in place, else a piece of staging that is then stored.
  void fill(float* dst, size_t count, const std::function<void(float* host, size_t offset, size_t n)>& fill) const;
  // The same at once, for what produces all of a tensor together (a transpose).
  void fill_whole(float* dst, size_t count, const std::function<void(float* host)>& fill) const;

 private:
  View view_;
  Store store_;
  size_t piece_ = kPiece;
  mutable std::vector<float> staging_;  // fill's pieces: reused, never more than the largest asked
};

// The backend's float memory for the host: in place where the host can read it (the CPU backend's
// own, after synchronize(), so that nothing queued still uses it), else a piece at a time through
// download_view (on a GPU, its pinned buffer, read where the copy left it) and upload.
HostAccess host_access(Backend& backend);

}  // namespace xtrain
