// A lease on the rendezvous store (common/store/kv_protocol.hpp), kept on its own connection by its
// own thread: what makes one side's death visible to the other within a bounded time, where TCP
// alone would say nothing (a cut link or a frozen host leaves a connection silent, not closed).
//
// The thread sends a KEEPALIVE every `interval` and expects its answer within `timeout` of the
// previous one; the server expects a frame within `timeout` of the previous one. So with the
// defaults (1 s, 3 s) each side gives the other up at most 3 s after the last sign of life, at a
// cost of one 25-byte request and one 21-byte answer a second. Between keepalives the thread
// sleeps on a condition variable: release() wakes it at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/store/kv_client.hpp"

namespace xtrain::kv {

struct KvLeaseOptions {
  std::chrono::milliseconds interval{1000};         // a KEEPALIVE this often
  std::chrono::milliseconds timeout{3000};          // silence after which either side gives up
  std::chrono::milliseconds connect_timeout{10000};  // to connect and take the lease
};

class KvLease {
 public:
  // Connects, takes the lease `name` (the server reports `info` with its loss) and starts
  // renewing it. Throws KvError when the connection or the LEASE fails. `on_lost(why)` runs on
  // the lease's thread, once, when the server stops answering or the connection fails; it must
  // not call release() or destroy the lease.
  KvLease(const Endpoint& endpoint, const std::string& token, const std::string& name, const std::string& info,
          KvLeaseOptions options, std::function<void(const std::string& why)> on_lost);
  ~KvLease();  // release()
  KvLease(const KvLease&) = delete;
  KvLease& operator=(const KvLease&) = delete;

  // Ends the lease cleanly (RELEASE: the server does not report it lost) and stops the thread.
  // Returns at once unless a keepalive is in flight (then at most `timeout`). Idempotent.
  void release();

 private:
  void run();

  KvClient client_;
  const KvLeaseOptions options_;
  const std::function<void(const std::string&)> on_lost_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool released_ = false;
  bool lost_ = false;
  std::thread thread_;
};

}  // namespace xtrain::kv
