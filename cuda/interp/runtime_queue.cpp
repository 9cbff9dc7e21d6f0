// Interpret mode's CUDA runtime: when issued work runs. A GPU runs a stream's work after the host
// has issued it, while the host goes on; work on different streams runs in any order their
// events allow. So here work waits in its stream's queue until the host waits for it, and then
// runs as little and in the order that is worst for a missing wait: a wait for a stream or an
// event runs only that work and what it waits for; a wait for the whole device runs everything,
// and of the streams whose next work may run, the one whose next work was issued last goes first.
// Three kinds of host bug then show up on the CPU as they would on a GPU, instead of passing
// because everything ran at once:
//   - a stream that uses another's result without waiting for its event (it runs before it);
//   - the host reading what one stream wrote after waiting for another (it has not run);
//   - the host touching pinned memory that a copy in flight still uses: an upload's source that
//     the host changes before the copy runs is a fault naming the byte (a GPU would copy the new
//     bytes), and a download's destination holds 0xFF bytes (NaN in fp32 and bf16) until the
//     copy runs, so a host that reads it without waiting reads garbage.
// Queries (cudaStreamQuery, cudaEventQuery) answer "not ready" while work is pending; asked again
// about the same stream or event with no work issued since, they finish it, so polling loops end.
// Gated work (interpret mode's NCCL collectives, which wait for other processes) runs once its
// gate opens: a query then answers "not ready" for as long as the gate is closed, and a host wait
// waits for it; a gate that will never open (a peer that exited) is a fault at a host wait, where
// a GPU's host would block for good, and only "not ready" to a query, as on a GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "cuda/interp/kernel_fault.hpp"
#include "cuda/interp/runtime_state.hpp"
#include "cuda/interp/stream_work.hpp"

namespace xtrain::interp {

// The source of a copy from pinned memory, as the host left it when it issued the copy.
struct Runtime::PinnedSource {
  const std::uint8_t* at = nullptr;
  std::vector<std::uint8_t> issued;
  bool device_wrote = false;  // an earlier copy in stream order wrote into it: its change is no host's

  bool overlaps(const void* p, size_t bytes) const {
    const auto* b = static_cast<const std::uint8_t*>(p);
    return b < at + issued.size() && at < b + bytes;
  }
};

namespace {

cudaError_t record_fault(cudaError_t code, const std::string& what) {
  Runtime& r = rt();
  r.sticky = r.last = code;
  r.detail = what;
  std::fprintf(stderr, "CUDA interpret mode: %s\n", what.c_str());
  return code;
}

cudaError_t run_now(const WorkItem& item) {
  try {
    item.run();
  } catch (const KernelFault& f) {
    return record_fault(f.code(), f.what());
  } catch (const std::exception& e) {
    return record_fault(cudaErrorLaunchFailure, item.what + ": " + e.what());
  }
  return cudaSuccess;
}

std::vector<CUstream_st*> all_streams() {
  std::vector<CUstream_st*> all = rt().streams;
  all.push_back(&rt().legacy);
  return all;
}

// Queues one piece of work and returns its seq.
std::uint64_t push(CUstream_st* s, WorkItem work, std::uint64_t after) {
  Runtime& r = rt();
  const std::uint64_t seq = r.next_seq++;
  s->pending.push_back(PendingWork{seq, after, std::move(work)});
  r.polled = nullptr;
  return seq;
}

// The legacy stream waits for all work issued before on blocking streams, and they for its
// (CUDA Runtime API, "stream synchronization behavior"); non-blocking streams wait for nothing.
void push_implicit_waits(CUstream_st* s) {
  const auto blocking = [](const CUstream_st* x) { return !(x->flags & cudaStreamNonBlocking); };
  CUstream_st* legacy = &rt().legacy;
  if (s == legacy) {
    for (CUstream_st* other : rt().streams) {
      if (blocking(other) && !other->pending.empty()) push(s, WorkItem{"implicit wait", {}}, other->pending.back().seq);
    }
  } else if (blocking(s) && !legacy->pending.empty()) {
    push(s, WorkItem{"implicit wait", {}}, legacy->pending.back().seq);
  }
}

bool gate_open(const PendingWork& w) { return !w.work.gate || w.work.gate().open; }

// A host wait for closed gated work: polls its gate until it opens (true). A gate that never
// will is a fault, which drops the pending work (false: the wait returns, the fault its error).
bool wait_for_gate(const PendingWork& w) {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    const GateState state = w.work.gate();
    if (state.open) return true;
    if (!state.stuck.empty()) {
      record_fault(cudaErrorLaunchFailure, w.work.what + ": " + state.stuck +
                                               "; a GPU's host would wait here for good (poll the stream with "
                                               "cudaStreamQuery and the communicator's error instead)");
      drop_pending_work();
      return false;
    }
  }
}

void run_head(CUstream_st* s) {
  PendingWork next = std::move(s->pending.front());
  s->pending.pop_front();
  if (next.work.run && run_now(next.work) != cudaSuccess) drop_pending_work();
}

// The stream whose queue holds pending work `seq` (queues are in seq order); nullptr once it has run.
CUstream_st* stream_holding(std::uint64_t seq) {
  for (CUstream_st* s : all_streams()) {
    const auto at = std::lower_bound(s->pending.begin(), s->pending.end(), seq,
                                     [](const PendingWork& w, std::uint64_t x) { return w.seq < x; });
    if (at != s->pending.end() && at->seq == seq) return s;
  }
  return nullptr;
}

// Only what `seq` needs: its stream's earlier work and what that waits for, so that a host
// waiting for one stream does not get another's for free. Without `block` it stops at closed
// gated work; returns whether `seq` has run.
bool advance_through(std::uint64_t seq, bool block) {
  while (CUstream_st* at = stream_holding(seq)) {
    while (CUstream_st* before = stream_holding(at->pending.front().after)) at = before;
    if (!gate_open(at->pending.front()) && (!block || !wait_for_gate(at->pending.front()))) return done(seq);
    run_head(at);
  }
  return true;
}

}  // namespace

bool done(std::uint64_t seq) { return seq == 0 || stream_holding(seq) == nullptr; }

void finish_through(std::uint64_t seq) { advance_through(seq, true); }
void finish_stream(CUstream_st* s) {
  if (!s->pending.empty()) finish_through(s->pending.back().seq);
}
// The next work of every stream is a candidate if what it waits for has run; the one issued last
// goes first. The oldest pending work is always a candidate (what it waits for was issued before
// it), so this never deadlocks; gated work is one once its gate opens, which is waited for.
void finish_all() {
  for (;;) {
    CUstream_st* chosen = nullptr;
    const PendingWork* gated = nullptr;
    for (CUstream_st* s : all_streams()) {
      if (s->pending.empty() || !done(s->pending.front().after)) continue;
      if (!gate_open(s->pending.front())) {
        gated = &s->pending.front();
      } else if (chosen == nullptr || s->pending.front().seq > chosen->pending.front().seq) {
        chosen = s;
      }
    }
    if (chosen == nullptr && gated == nullptr) return;  // nothing pending
    if (chosen != nullptr) {
      run_head(chosen);
    } else if (wait_for_gate(*gated)) {
      run_head(stream_holding(gated->seq));
    }
  }
}

bool still_busy(const void* target, std::uint64_t last) {
  if (done(last)) return false;
  if (rt().polled != target) {
    rt().polled = target;
    return true;
  }
  return !advance_through(last, false);
}

void drop_pending_work() {
  for (CUstream_st* s : all_streams()) s->pending.clear();
  rt().pinned_sources.clear();
}

cudaError_t issue(cudaStream_t stream, WorkItem item, std::uint64_t after, std::uint64_t* seq) {
  Runtime& r = rt();
  std::lock_guard lock(r.mutex);
  if (seq != nullptr) *seq = 0;
  if (r.sticky != cudaSuccess) return r.sticky;
  CUstream_st* s = resolve(stream);
  if (s->capturing) {
    if (s->invalidated) {
      return refuse(cudaErrorStreamCaptureInvalidated, "the capture was invalidated by an earlier call");
    }
    s->recorded.push_back(std::move(item));
    return cudaSuccess;
  }
  if (s == &r.legacy) {
    for (CUstream_st* other : r.streams) {
      if (other->capturing && !(other->flags & cudaStreamNonBlocking)) {
        other->invalidated = true;
        return refuse(cudaErrorStreamCaptureImplicit,
                      item.what + " on the legacy stream while a blocking stream is captured");
      }
    }
  }
  push_implicit_waits(s);
  const std::uint64_t pushed = push(s, std::move(item), after);
  if (seq != nullptr) *seq = pushed;
  return cudaSuccess;
}

cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<void()> work) {
  return issue(stream, WorkItem{what, std::move(work)});
}

bool advance_stream(cudaStream_t stream) {
  std::lock_guard lock(rt().mutex);
  const CUstream_st* s = resolve(stream);
  return s->pending.empty() || advance_through(s->pending.back().seq, false);
}

cudaError_t enqueue_gated(cudaStream_t stream, const char* what, std::function<GateState()> gate,
                          std::function<void()> work) {
  std::lock_guard lock(rt().mutex);
  if (resolve(stream)->capturing) {
    return refuse(cudaErrorStreamCaptureUnsupported,
                  std::string(what) + ": interpret mode does not capture work that waits for another process");
  }
  return issue(stream, WorkItem{what, std::move(work), std::move(gate)});
}

cudaError_t issue_pinned_copy(CUstream_st* s, void* dst, const void* src, size_t bytes) {
  Runtime& r = rt();
  std::shared_ptr<Runtime::PinnedSource> source;
  if (is_pinned_range(src, bytes)) {
    const auto* at = static_cast<const std::uint8_t*>(src);
    source = std::make_shared<Runtime::PinnedSource>(Runtime::PinnedSource{at, {at, at + bytes}});
  }
  const bool into_pinned = is_pinned_range(dst, bytes);
  // Until the copy runs a download's destination holds no data yet; 0xFF makes an early read
  // show (NaN). Not where a pending upload still reads those bytes: that order is the stream's.
  if (into_pinned && std::none_of(r.pinned_sources.begin(), r.pinned_sources.end(),
                                  [&](const auto& p) { return p->overlaps(dst, bytes); })) {
    std::memset(dst, 0xFF, bytes);
  }
  auto run = [dst, src, bytes, source, into_pinned] {
    Runtime& rr = rt();
    if (source != nullptr) {
      std::erase(rr.pinned_sources, source);
      if (!source->device_wrote) {
        const auto* now = static_cast<const std::uint8_t*>(src);
        const auto changed = std::mismatch(source->issued.begin(), source->issued.end(), now).first;
        if (changed != source->issued.end()) {
          throw std::runtime_error(
              "the host changed byte " + std::to_string(changed - source->issued.begin()) + " of its " +
              std::to_string(bytes) +
              "-byte pinned source after issuing the copy and before it ran; a GPU copies what is there when "
              "the copy runs, so wait for the copy (an event recorded after it) before reusing its source");
        }
      }
    }
    std::memmove(dst, src, bytes);
    if (into_pinned) {
      for (const auto& p : rr.pinned_sources) p->device_wrote = p->device_wrote || p->overlaps(dst, bytes);
    }
  };
  const cudaError_t e = issue(s, WorkItem{"cudaMemcpyAsync", std::move(run)});
  if (e == cudaSuccess && source != nullptr) r.pinned_sources.push_back(std::move(source));
  return e;
}

}  // namespace xtrain::interp
