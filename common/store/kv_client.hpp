// A blocking client of the rendezvous store (common/store/kv_server.hpp).
//
// The constructor keeps trying to connect until its deadline (node 0 may start after the
// others), then authenticates with the job token. Every call has a deadline; failures throw
// KvError with one line naming the endpoint, the operation and what it waited for. The client
// never retries a call behind the caller's back: after a lost connection every call throws, and
// a new KvClient reconnects. Calls are serialised by a mutex, so threads may share one client;
// abort() is the one call that does not wait for the call in progress.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/store/kv_protocol.hpp"

namespace xtrain::kv {

class KvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// GET or WAIT ran out of time; missing() names the keys that never appeared.
class KvTimeoutError : public KvError {
 public:
  KvTimeoutError(const std::string& message, std::vector<std::string> missing)
      : KvError(message), missing_(std::move(missing)) {}
  const std::vector<std::string>& missing() const { return missing_; }

 private:
  std::vector<std::string> missing_;
};

struct KvClientOptions {
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};  // retrying connects
  // Limit for calls that do not wait for keys (SET, ADD, CHECK, DELETE), and the slack added
  // to a GET/WAIT's own timeout before the client stops waiting for the server's answer.
  std::chrono::milliseconds io_timeout{std::chrono::seconds(30)};
};

class KvClient {
 public:
  // Throws KvError when no connection succeeded before the deadline (naming the last error),
  // or at once when the server refused the token.
  KvClient(Endpoint endpoint, std::string token, KvClientOptions options = {});
  ~KvClient();
  KvClient(const KvClient&) = delete;
  KvClient& operator=(const KvClient&) = delete;

  void set(const std::string& key, std::string_view value);
  // Waits until `key` exists; KvTimeoutError after `timeout`.
  std::string get(const std::string& key, std::chrono::milliseconds timeout);
  // Atomically adds `delta` to the decimal integer stored at `key` (missing = 0); returns the sum.
  std::int64_t add(const std::string& key, std::int64_t delta);
  // Waits until every key exists; KvTimeoutError naming the missing ones after `timeout`.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Like wait(), and returns their values in order (all must fit in one frame, kMaxFrameBytes).
  std::vector<std::string> get_many(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Whether every key exists now.
  bool check(const std::vector<std::string>& keys);
  // Removes `key`; whether it existed.
  bool remove(const std::string& key);

  // Leases (kv_protocol.hpp): take `name` for this connection, the server reporting `info` when
  // it is lost; renew it (answer due within `timeout`); end it cleanly. common/store/kv_lease.hpp keeps one.
  void lease(const std::string& name, std::string_view info, std::chrono::milliseconds silence_limit);
  void keepalive(std::chrono::milliseconds timeout);
  void release();

  // From any thread: fails the call in progress at once, and every later one, with `why` (the
  // socket is shut down; the server sees the connection close).
  void abort(const std::string& why);

  const Endpoint& endpoint() const { return endpoint_; }
  // This end's address on the connection (the interface through which the server is reached).
  const std::string& local_address() const { return local_address_; }

 private:
  using Clock = std::chrono::steady_clock;

  void connect_until(Clock::time_point deadline);
  bool try_connect_once(Clock::time_point deadline, std::string& error);  // false: retry later
  Response call(const Request& request, std::chrono::milliseconds waits_for);
  Response call_within(const Request& request, std::chrono::milliseconds limit);  // waits_for + io
  Response wait_for_keys(Op op, const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  void expect_ok(const Request& request, const Response& response) const;
  [[noreturn]] void fail(const std::string& what);  // closes the socket for good, throws KvError
  std::string where() const;                           // "rendezvous store at host:port"

  Endpoint endpoint_;
  std::string token_;
  KvClientOptions options_;
  std::mutex mutex_;  // one call at a time
  int fd_ = -1;
  std::string local_address_;
  std::string broken_;  // why the connection was lost; non-empty = every call fails
  // fd_'s closing and abort()'s shutdown of it, which must not hit a reused descriptor number.
  std::mutex abort_mutex_;
  std::string aborted_;  // abort()'s reason
};

}  // namespace xtrain::kv
