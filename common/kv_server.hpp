// The rendezvous store's server: node 0's xlaunch runs it; every xlaunch and every Gloo rank
// talks to it with common/kv_client.hpp. Wire format: common/kv_protocol.hpp.
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
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/kv_protocol.hpp"

namespace boost::asio {
class io_context;
}

namespace xtrain::kv {

namespace detail {
struct ServerState;  // the store and its connections, shared with pending handlers
}

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
           KvServerLimits limits = {});
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
  KvServerThread(const Endpoint& bind, std::string token, KvServerLimits limits = {});
  ~KvServerThread();  // stops the server and joins the thread
  KvServerThread(const KvServerThread&) = delete;
  KvServerThread& operator=(const KvServerThread&) = delete;

  const Endpoint& local_endpoint() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xtrain::kv
