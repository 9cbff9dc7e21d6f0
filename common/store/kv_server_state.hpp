// The rendezvous store server's insides: the store, its connections and their waits, shared by
// kv_server.cpp (the store, the server) and kv_connection.cpp (one client); nothing else includes it.
#pragma once

// <utility> first: Boost 1.74's asio needs std::exchange declared before it in C++20 mode.
#include <utility>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "common/store/kv_protocol.hpp"
#include "common/store/kv_server.hpp"

namespace xtrain::kv::detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

inline constexpr std::size_t kEntryOverheadBytes = 64;  // a map node, counted against max_store_bytes

inline std::size_t entry_cost(const std::string& key, const std::string& value) {
  return key.size() + value.size() + kEntryOverheadBytes;
}

inline Response error_response(Status status, std::string why) {
  Response r;
  r.status = status;
  r.value = std::move(why);
  return r;
}

class Connection;

struct ServerState {
  ServerState(asio::io_context& io, std::string token_, KvServerLimits limits_, LeaseLostHook lease_hook_)
      : strand(asio::make_strand(io)), acceptor(strand), accept_retry(strand), token(std::move(token_)),
        limits(limits_), lease_hook(std::move(lease_hook_)) {}

  void accept();
  void shutdown();
  // A SET or ADD created or changed `key`: answer the requests that were waiting for it.
  void notify(const std::string& key);
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  Response set(const std::string& key, std::string value);
  Response add(const std::string& key, std::int64_t delta);
  void lease_lost(const LeaseLoss& loss);

  asio::strand<asio::io_context::executor_type> strand;
  tcp::acceptor acceptor;
  asio::steady_timer accept_retry;
  const std::string token;
  const KvServerLimits limits;
  const LeaseLostHook lease_hook;
  std::weak_ptr<ServerState> self;  // for handlers, set by KvServer's constructor
  bool stopped = false;

  std::unordered_map<std::string, std::string> store;
  std::size_t store_bytes = 0;
  std::unordered_set<std::shared_ptr<Connection>> connections;  // every open one
  // The requests waiting for each missing key; a key's entry goes when the key is set.
  std::unordered_map<std::string, std::unordered_set<std::shared_ptr<Connection>>> waiters;
  std::unordered_map<std::string, std::string> leases;  // held lease name -> its holder's address
};

// One client. All its handlers run on the server's strand. At most one request is in progress
// (being waited on or answered); reading continues meanwhile, so a client that disconnects
// while waiting is noticed at once.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<ServerState> state, tcp::socket socket);
  void start();  // the handshake's time limit, then the first read

  // Ends the connection; `why` (when not empty) is logged as the reason.
  void close(const std::string& why);

  // One of the keys this connection waits for appeared; the server has already dropped it from
  // that key's waiters. Only the last one costs a look at the whole key list.
  void key_arrived();

 private:
  struct HeldLease {
    std::string name;
    std::string info;
    std::chrono::milliseconds limit;
  };

  // Reading: a frame's header, then its body, then the request it holds.
  void read_header();
  void on_header(error_code ec);
  void on_body(error_code ec);
  void handle(Request request);

  // Leases. The deadline: frames do not touch the timer (they only stamp last_frame_): when it
  // fires early it is re-armed for what is left of the limit. When it finds the holder silent,
  // the holder may still have spoken while this server was busy (its frame waiting in the socket,
  // or its read's handler in the queue before this one): the verdict is taken behind them.
  void take_lease(Request request);
  void watch_silence(Clock::duration after);
  void judge_silence();
  void drop_lease();

  // GET, WAIT and MGET: answered now, or registered for each distinct missing key until they
  // all exist (answer) or the request's time limit passes (reply_timeout). stop_waiting()
  // unregisters the waiting request (if any) and hands it back.
  void answer_or_wait(Request request);
  void wait_for(const std::vector<std::string>& missing);
  void answer(const Request& request);
  void reply_timeout(const Request& request);
  Request stop_waiting();

  void refuse_and_close(const std::string& why);
  void reply(Response response, bool close_after = false);
  // One timer for the handshake and each wait: a cancelled or re-armed timer's handler may
  // already be queued, so each arming has a generation and a stale handler does nothing.
  template <typename OnExpiry>
  void arm_timer(std::chrono::milliseconds after, OnExpiry on_expiry);
  void cancel_timer();

  std::shared_ptr<ServerState> state_;
  tcp::socket socket_;
  asio::steady_timer timer_;  // the handshake limit, then each waiting request's limit
  std::uint64_t timer_generation_ = 0;
  asio::steady_timer lease_timer_;  // the lease's silence limit
  std::optional<HeldLease> lease_;
  Clock::time_point last_frame_;    // when the last frame began to arrive
  std::string peer_;
  std::array<char, kFrameHeaderBytes> header_{};
  std::vector<char> body_;
  std::vector<char> out_;
  std::optional<Request> waiting_;  // a GET or WAIT whose keys are not all there yet
  std::size_t missing_count_ = 0;   // its distinct keys still missing
  bool authenticated_ = false;
  bool busy_ = false;  // a request is in progress: waiting, or its answer being written
  bool closed_ = false;
};

}  // namespace xtrain::kv::detail
