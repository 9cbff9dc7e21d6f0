#include "worker/cpu/thread_team.hpp"

#include <immintrin.h>

#include <chrono>
#include <stdexcept>
#include <string>

namespace xtrain {
namespace {

// How long a waiting member polls before it sleeps: longer than the gaps between the products
// of one token (the layernorms and adds between them take microseconds), so that within a token
// nobody sleeps; a sleeper costs a wake-up of tens of microseconds on a virtual machine, where
// the wake is an interrupt between virtual CPUs. Between tokens (sampling, printing) and after
// the last one, members sleep.
constexpr std::chrono::microseconds kSpin{200};

// Returns once `word` differs from `value`: polls it for kSpin, then sleeps on it.
void wait_for_change(const std::atomic<unsigned>& word, unsigned value) {
  const auto give_up = std::chrono::steady_clock::now() + kSpin;
  for (int polls = 1; word.load(std::memory_order_acquire) == value; ++polls) {
    if (polls % 64 != 0) {
      _mm_pause();
    } else if (std::chrono::steady_clock::now() > give_up) {
      word.wait(value, std::memory_order_acquire);
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
