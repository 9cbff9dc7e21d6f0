#include "common/store/kv_lease.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace xtrain::kv {

using Clock = std::chrono::steady_clock;

KvLease::KvLease(const Endpoint& endpoint, const std::string& token, const std::string& name,
                 const std::string& info, KvLeaseOptions options, std::function<void(const std::string&)> on_lost)
    : client_(endpoint, token, KvClientOptions{options.connect_timeout, options.connect_timeout}),
      options_(options), on_lost_(std::move(on_lost)) {
  client_.lease(name, info, options_.timeout);
  thread_ = std::thread([this] { run(); });
}

KvLease::~KvLease() { release(); }

void KvLease::run() {
  auto last_answer = Clock::now();  // the LEASE's answer
  std::unique_lock lock(mutex_);
  for (;;) {
    if (wake_.wait_until(lock, last_answer + options_.interval, [this] { return released_; })) return;
    lock.unlock();
    std::string failure;
    // The answer is due `timeout` after the last one, but the server always gets what is left of
    // the timeout after the interval: a late wake-up of this thread is not the server's silence.
    const auto due = std::max(last_answer + options_.timeout, Clock::now() + options_.timeout - options_.interval);
    try {
      client_.keepalive(std::chrono::ceil<std::chrono::milliseconds>(due - Clock::now()));  // ends >= due
      last_answer = Clock::now();
    } catch (const KvError& e) {
      failure = Clock::now() >= due ? fmt::format("no answer to keepalives for {:.1f} s",
                                                  std::chrono::duration<double>(options_.timeout).count())
                                    : e.what();
    }
    lock.lock();
    if (failure.empty()) continue;
    if (released_) return;
    lost_ = true;
    lock.unlock();
    on_lost_(failure);
    return;
  }
}

void KvLease::release() {
  {
    std::lock_guard lock(mutex_);
    if (released_) return;
    released_ = true;
  }
  wake_.notify_all();
  thread_.join();
  if (lost_) return;
  try {
    client_.release();
  } catch (const KvError&) {
    // The server is gone or going (node 0 closes its store at the end): nothing left to release.
  }
}

}  // namespace xtrain::kv
