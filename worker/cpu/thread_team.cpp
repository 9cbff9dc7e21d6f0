#include "worker/cpu/thread_team.hpp"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

namespace xtrain {
namespace {

// How long a waiting member polls before it sleeps: longer than the gaps between the products
// of one token (the layernorms and adds between them take microseconds), so that within a token
// nobody sleeps; a sleeper costs a wake-up of tens of microseconds on a virtual machine, where
// the wake is an interrupt between virtual CPUs. Between tokens (sampling, printing) and after
// the last one, members sleep.
constexpr std::chrono::microseconds kSpin{200};

// Returns once `word` differs from `value`: polls it for kSpin, then sleeps on it. Every 64 polls
// it yields the core: the member it waits for may be queued on this very core (the scheduler puts
// a woken thread beside its waker when no core is idle, as when OpenBLAS's idle threads spin on
// the others), and would otherwise start only when this one sleeps, kSpin later.
void wait_for_change(const std::atomic<unsigned>& word, unsigned value) {
  const auto give_up = std::chrono::steady_clock::now() + kSpin;
  for (int polls = 1; word.load(std::memory_order_acquire) == value; ++polls) {
    if (polls % 64 != 0) {
      _mm_pause();
    } else if (std::chrono::steady_clock::now() > give_up) {
      word.wait(value, std::memory_order_acquire);
    } else {
      std::this_thread::yield();
    }
  }
}

// fn on one member; noexcept, so that an exception ends the process on the calling thread as it
// does on a helper, instead of leaving the helpers running on a destroyed fn.
void call(const std::function<void(int, int)>& fn, int member, int members) noexcept { fn(member, members); }

}  // namespace

TeamShare team_share(int count, int member, int members) {
  const long long n = count;  // count x members may pass an int
  return {static_cast<int>(n * member / members), static_cast<int>(n * (member + 1) / members)};
}

ThreadTeam::ThreadTeam(int members) {
  if (members < 1) throw std::invalid_argument("ThreadTeam: " + std::to_string(members) + " members, expected >= 1");
  helpers_.reserve(static_cast<size_t>(members - 1));
  for (int m = 1; m < members; ++m) helpers_.emplace_back([this, m] { help(m); });
}

ThreadTeam::~ThreadTeam() {
  stopping_.store(true, std::memory_order_relaxed);
  round_.fetch_add(1, std::memory_order_release);
  round_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

void ThreadTeam::run(const std::function<void(int, int)>& fn) {
  if (helpers_.empty()) {
    call(fn, 0, 1);
    return;
  }
  work_ = &fn;
  unfinished_.store(static_cast<unsigned>(helpers_.size()), std::memory_order_relaxed);
  round_.fetch_add(1, std::memory_order_release);  // publishes work_ and unfinished_
  round_.notify_all();
  call(fn, 0, members());
  for (unsigned left; (left = unfinished_.load(std::memory_order_acquire)) != 0;) wait_for_change(unfinished_, left);
  work_ = nullptr;
}

void ThreadTeam::split(size_t count, size_t grain, size_t align,
                       const std::function<void(size_t, size_t)>& fn) {
  const size_t parts = std::clamp<size_t>(count / std::max<size_t>(grain, 1), 1, static_cast<size_t>(members()));
  if (parts == 1) {
    fn(0, count);
    return;
  }
  auto boundary = [&](size_t part) {
    if (part >= parts) return count;
    const size_t at = count / parts * part + count % parts * part / parts;  // count * part / parts
    return at / std::max<size_t>(align, 1) * std::max<size_t>(align, 1);
  };
  run([&](int member, int) {
    const auto part = static_cast<size_t>(member);
    if (part < parts) fn(boundary(part), boundary(part + 1));
  });
}

void ThreadTeam::help(int member) {
  // The round before the first run (a helper that read round_ itself when it started could read
  // it after a first run had begun, and miss that run).
  unsigned seen = 0;
  for (;;) {
    wait_for_change(round_, seen);
    seen = round_.load(std::memory_order_acquire);
    if (stopping_.load(std::memory_order_relaxed)) return;
    call(*work_, member, members());
    if (unfinished_.fetch_sub(1, std::memory_order_acq_rel) == 1) unfinished_.notify_one();
  }
}

}  // namespace xtrain
