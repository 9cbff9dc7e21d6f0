// The rendezvous store's server: node 0's xlaunch runs it; every xlaunch and every Gloo rank
// talks to it with common/store/kv_client.hpp. Wire format: common/store/kv_protocol.hpp.
//
// Event-driven on an asio io_context the caller provides (all handlers run on one strand, so the
// caller may run that io_context on any number of threads). GET and WAIT for missing keys are
// answered later, when a SET or ADD supplies the keys or the request's timeout passes, without
// blocking other connections. A connection that does not open with HELLO and the right token
// within the handshake time is answered kRefused and closed; a malformed or oversized frame, or
// a request sent before the previous answer, closes only that connection.
//
// Memory is bounded: at most max_connections connections, each holding at most one frame
// (kMaxHelloFrameBytes before the handshake, kMaxFrameBytes after) and one answer; the stored
// keys and values together at most max_store_bytes (a SET beyond it is answered kError).
//
// Cost per event, whatever the number of clients: a SET or ADD touches only the requests waiting
// for that key, and a waiting WAIT counts its missing keys down (no rescan of its key list), so N
// clients that each set one key and wait for all N cost O(N) in all, not O(N^2).
//
// Leases (kv_protocol.hpp): a lease's connection has its own deadline timer, pushed back by every
// frame it sends; when the timer finds it silent for its limit, or the connection ends before
// RELEASE, the server calls the lease hook and closes the connection. No timer runs for anything
// else, and nothing is polled.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/store/kv_protocol.hpp"

namespace boost::asio {
class io_context;
}

namespace xtrain::kv {

namespace detail {
struct ServerState;  // the store and its connections, shared with pending handlers
}

// A lease that ended without RELEASE: its holder closed the connection or fell silent.
struct LeaseLoss {
  std::string name;  // the LEASE's key
  std::string info;  // the LEASE's value: what the holder said it is
  std::string peer;  // the holder's address, host:port
  std::string why;   // "the connection closed", "silent for 3.0 s (the lease's limit)", ...
};

// The store as a lease hook sees it: operations on the server's strand that wake waiting GET and
// WAIT requests as a client's SET or ADD would. set and add throw std::runtime_error saying why
// (the store is full, ADD on a value that is not an integer).
class StoreEditor {
 public:
  explicit StoreEditor(detail::ServerState& state) : state_(state) {}
  bool contains(const std::string& key) const;
  void set(const std::string& key, std::string value);
  std::int64_t add(const std::string& key, std::int64_t delta);

 private:
  detail::ServerState& state_;
};

// Called on the server's strand for each lost lease (never while the server is stopping). It must
// not block: every connection waits while it runs.
using LeaseLostHook = std::function<void(StoreEditor& store, const LeaseLoss& loss)>;

struct KvServerLimits {
  std::size_t max_connections = 1024;
  std::size_t max_store_bytes = std::size_t{64} << 20;  // keys + values + 64 bytes per entry
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};
};

class KvServer {
 public:
  // Binds to `bind` (its host resolved; port 0 = any free port) and starts accepting.
  // Throws std::runtime_error naming the address when it cannot listen there (in use, not an
  // address of this machine), and std::invalid_argument for an empty token.
  KvServer(boost::asio::io_context& io, const Endpoint& bind, std::string token,
           KvServerLimits limits = {}, LeaseLostHook on_lease_lost = {});
  // Closes everything at once. Like any asio object, destroy it on a thread that runs `io`, or
  // while `io` is not running (stopped or out of work).
  ~KvServer();
  KvServer(const KvServer&) = delete;
  KvServer& operator=(const KvServer&) = delete;

  // The address and port actually bound (the port is the chosen one when `bind` asked for 0).
  const Endpoint& local_endpoint() const { return local_; }

  // Closes the listening socket and every connection; waiting requests get no answer (their
  // clients see the connection close). Safe from any thread; asynchronous.
  void stop();

 private:
  std::shared_ptr<detail::ServerState> state_;
  Endpoint local_;
};

// A KvServer with its own io_context on its own thread: for callers whose own thread makes
// blocking calls (xlaunch's rendezvous on node 0 uses a KvClient to its own server).
class KvServerThread {
 public:
  KvServerThread(const Endpoint& bind, std::string token, KvServerLimits limits = {},
                 LeaseLostHook on_lease_lost = {});
  ~KvServerThread();  // stops the server and joins the thread
  KvServerThread(const KvServerThread&) = delete;
  KvServerThread& operator=(const KvServerThread&) = delete;

  const Endpoint& local_endpoint() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xtrain::kv
