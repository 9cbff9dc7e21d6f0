// <utility> first: Boost 1.74's asio needs std::exchange declared before it in C++20 mode.
#include <utility>

#include "common/store/kv_server.hpp"

#include <array>
#include <charconv>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace xtrain::kv {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kEntryOverheadBytes = 64;  // a map node, counted against max_store_bytes

std::size_t entry_cost(const std::string& key, const std::string& value) {
  return key.size() + value.size() + kEntryOverheadBytes;
}

std::optional<std::int64_t> parse_integer(const std::string& text) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

Response error_response(Status status, std::string why) {
  Response r;
  r.status = status;
  r.value = std::move(why);
  return r;
}

}  // namespace

namespace detail {
class Connection;
}
using detail::Connection;

struct detail::ServerState {
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
class detail::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<detail::ServerState> state, tcp::socket socket)
      : state_(std::move(state)), socket_(std::move(socket)), timer_(state_->strand), lease_timer_(state_->strand) {
    error_code ec;
    const auto remote = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("unknown peer") : remote.address().to_string() + ":" + std::to_string(remote.port());
  }

  void start() {
    arm_timer(state_->limits.handshake_timeout, [this] {
      if (!authenticated_) refuse_and_close("no handshake within the time limit");
    });
    read_header();
  }

  // Ends the connection; `why` (when not empty) is logged as the reason.
  void close(const std::string& why) {
    if (closed_) return;
    closed_ = true;
    if (!why.empty()) spdlog::warn("rendezvous store: closed the connection from {}: {}", peer_, why);
    stop_waiting();
    cancel_timer();
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    if (lease_) {
      const LeaseLoss loss{lease_->name, lease_->info, peer_, why.empty() ? "the connection closed" : why};
      drop_lease();
      state_->lease_lost(loss);
    }
    state_->connections.erase(shared_from_this());
  }

  // One of the keys this connection waits for appeared; the server has already dropped it from
  // that key's waiters. Only the last one costs a look at the whole key list.
  void key_arrived() {
    if (!waiting_ || --missing_count_ > 0) return;
    const auto missing = state_->missing(waiting_->keys);
    if (!missing.empty()) return wait_for(missing);  // a key that came and was deleted again
    cancel_timer();
    answer(stop_waiting());
  }

 private:
  void read_header() {
    asio::async_read(socket_, asio::buffer(header_),
                     [self = shared_from_this()](error_code ec, std::size_t) { self->on_header(ec); });
  }

  void on_header(error_code ec) {
    if (closed_) return;
    if (ec) return close(ec == asio::error::eof ? "" : ec.message());
    last_frame_ = Clock::now();
    std::size_t length = 0;
    try {
      length = decode_frame_length(header_, authenticated_ ? kMaxFrameBytes : kMaxHelloFrameBytes);
    } catch (const ProtocolError& e) {
      return close(std::string("malformed frame: ") + e.what());
    }
    body_.resize(length);
    asio::async_read(socket_, asio::buffer(body_),
                     [self = shared_from_this()](error_code ec, std::size_t) { self->on_body(ec); });
  }

  void on_body(error_code ec) {
    if (closed_) return;
    if (ec) return close(ec == asio::error::eof ? "" : ec.message());
    if (busy_) return close("protocol error: a request arrived before the previous one was answered");
    Request request;
    try {
      request = decode_request(body_);
    } catch (const ProtocolError& e) {
      return close(std::string("malformed frame: ") + e.what());
    }
    handle(std::move(request));
    if (!closed_) read_header();
  }

  void handle(Request request) {
    busy_ = true;
    if (!authenticated_) {
      if (request.op != Op::kHello) return refuse_and_close("the first request was not HELLO");
      if (request.number != kProtocolVersion) {
        return refuse_and_close("client speaks protocol version " + std::to_string(request.number) +
                                ", this server speaks " + std::to_string(kProtocolVersion));
      }
      if (!token_equals(state_->token, request.value)) return refuse_and_close("wrong job token");
      authenticated_ = true;
      cancel_timer();
      spdlog::debug("rendezvous store: accepted a client from {}", peer_);
      return reply(Response{});
    }
    switch (request.op) {
      case Op::kHello: return close("protocol error: HELLO twice");
      case Op::kGet:
      case Op::kWait:
      case Op::kMultiGet: return answer_or_wait(std::move(request));
      case Op::kSet: {
        Response r = state_->set(request.keys[0], std::move(request.value));
        reply(std::move(r));
        return state_->notify(request.keys[0]);
      }
      case Op::kAdd: {
        Response r = state_->add(request.keys[0], request.number);
        const bool changed = r.status == Status::kOk;
        reply(std::move(r));
        if (changed) state_->notify(request.keys[0]);
        return;
      }
      case Op::kCheck: {
        Response r;
        r.number = state_->missing(request.keys).empty() ? 1 : 0;
        return reply(std::move(r));
      }
      case Op::kDelete: {
        Response r;
        const auto it = state_->store.find(request.keys[0]);
        if (it != state_->store.end()) {
          state_->store_bytes -= entry_cost(it->first, it->second);
          state_->store.erase(it);
          r.number = 1;
        }
        return reply(std::move(r));
      }
      case Op::kLease: return take_lease(std::move(request));
      case Op::kKeepalive: return reply(Response{});  // on_header has already renewed the lease
      case Op::kRelease: {
        Response r;
        r.number = lease_ ? 1 : 0;
        drop_lease();
        return reply(std::move(r));
      }
    }
  }

  void take_lease(Request request) {
    const std::string& name = request.keys[0];
    if (lease_) return reply(error_response(Status::kError, "this connection holds the lease \"" + lease_->name + "\" already"));
    if (request.timeout_ms == 0) return reply(error_response(Status::kError, "LEASE needs a silence limit (timeout_ms > 0)"));
    if (const auto held = state_->leases.find(name); held != state_->leases.end()) {
      return reply(error_response(Status::kError, "the lease \"" + name + "\" is held by " + held->second));
    }
    state_->leases.emplace(name, peer_);
    lease_ = HeldLease{name, std::move(request.value), std::chrono::milliseconds(request.timeout_ms)};
    watch_silence(lease_->limit);
    reply(Response{});
  }

  // The lease's deadline. Frames do not touch the timer (they only stamp last_frame_): when it
  // fires early it is re-armed for what is left of the limit. When it finds the holder silent,
  // the holder may still have spoken while this server was busy (its frame waiting in the socket,
  // or its read's handler in the queue before this one): the verdict is taken behind them.
  void watch_silence(Clock::duration after) {
    lease_timer_.expires_after(after);
    lease_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || self->closed_ || !self->lease_) return;
      const auto silent = Clock::now() - self->last_frame_;
      if (silent < self->lease_->limit) return self->watch_silence(self->lease_->limit - silent);
      asio::post(self->state_->strand, [self] { self->judge_silence(); });
    });
  }

  void judge_silence() {
    if (closed_ || !lease_) return;
    error_code ignored;
    const auto silent = Clock::now() - last_frame_;
    if (silent < lease_->limit) return watch_silence(lease_->limit - silent);
    if (socket_.available(ignored) > 0) return watch_silence(lease_->limit);  // read once this server catches up
    close(fmt::format("silent for {:.1f} s, its lease's limit", std::chrono::duration<double>(lease_->limit).count()));
  }

  void drop_lease() {
    if (!lease_) return;
    state_->leases.erase(lease_->name);
    lease_.reset();
    lease_timer_.cancel();
  }

  void answer_or_wait(Request request) {
    const auto missing = state_->missing(request.keys);
    if (missing.empty()) return answer(request);
    if (request.timeout_ms == 0) return reply_timeout(request);
    waiting_ = std::move(request);
    wait_for(missing);
    arm_timer(std::chrono::milliseconds(waiting_->timeout_ms), [this] {
      if (waiting_) reply_timeout(stop_waiting());
    });
  }

  // Registers the waiting request for each distinct missing key.
  void wait_for(const std::vector<std::string>& missing) {
    missing_count_ = 0;
    for (const auto& key : missing) missing_count_ += state_->waiters[key].insert(shared_from_this()).second ? 1 : 0;
  }

  // The keys of a GET or WAIT all exist now.
  void answer(const Request& request) {
    Response r;
    if (request.op == Op::kGet) r.value = state_->store.at(request.keys[0]);
    if (request.op == Op::kMultiGet) {
      for (const auto& key : request.keys) r.keys.push_back(state_->store.at(key));
    }
    reply(std::move(r));
  }

  void reply_timeout(const Request& request) {
    Response r;
    r.status = Status::kTimeout;
    r.keys = state_->missing(request.keys);
    reply(std::move(r));
  }

  // Unregisters the waiting request (if any) and hands it back.
  Request stop_waiting() {
    if (!waiting_) return Request{};
    for (const auto& key : waiting_->keys) {
      const auto it = state_->waiters.find(key);
      if (it == state_->waiters.end()) continue;
      it->second.erase(shared_from_this());
      if (it->second.empty()) state_->waiters.erase(it);
    }
    Request request = std::move(*waiting_);
    waiting_.reset();
    return request;
  }

  void refuse_and_close(const std::string& why) {
    cancel_timer();  // the handshake limit: this is the answer
    spdlog::warn("rendezvous store: refused the connection from {}: {}", peer_, why);
    reply(error_response(Status::kRefused, why), /*close_after=*/true);
  }

  void reply(Response response, bool close_after = false) {
    if (closed_) return;
    try {
      out_ = encode_frame(response);
    } catch (const ProtocolError& e) {  // MGET of more values than a frame holds
      out_ = encode_frame(error_response(Status::kError, e.what()));
    }
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this(), close_after](error_code ec, std::size_t) {
                        self->busy_ = false;
                        if (ec) return self->close(ec.message());
                        if (close_after) self->close("");
                      });
  }

  template <typename OnExpiry>
  void arm_timer(std::chrono::milliseconds after, OnExpiry on_expiry) {
    const std::uint64_t generation = ++timer_generation_;
    timer_.expires_after(after);
    timer_.async_wait([self = shared_from_this(), generation, on_expiry](error_code ec) {
      // A cancelled or re-armed timer's handler may already be queued: the generation tells.
      if (ec || self->closed_ || generation != self->timer_generation_) return;
      on_expiry();
    });
  }

  void cancel_timer() {
    ++timer_generation_;
    timer_.cancel();
  }

  struct HeldLease {
    std::string name;
    std::string info;
    std::chrono::milliseconds limit;
  };

  std::shared_ptr<detail::ServerState> state_;
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

void detail::ServerState::accept() {
  acceptor.async_accept([weak = self](error_code ec, tcp::socket socket) {
    const auto state = weak.lock();
    if (!state || state->stopped) return;
    if (!ec) {
      if (state->connections.size() >= state->limits.max_connections) {
        spdlog::warn("rendezvous store: refused a connection: already {} open (the limit)",
                     state->connections.size());
      } else {
        auto connection = std::make_shared<Connection>(state, std::move(socket));
        state->connections.insert(connection);
        connection->start();
      }
    } else if (ec == asio::error::operation_aborted) {
      return;
    } else {
      // Out of file descriptors, say: retrying at once would spin.
      spdlog::warn("rendezvous store: accept failed: {}; retrying in 100 ms", ec.message());
      state->accept_retry.expires_after(std::chrono::milliseconds(100));
      state->accept_retry.async_wait([weak](error_code wait_ec) {
        const auto retrying = weak.lock();
        if (!wait_ec && retrying && !retrying->stopped) retrying->accept();
      });
      return;
    }
    state->accept();
  });
}

void detail::ServerState::shutdown() {
  if (stopped) return;
  stopped = true;
  error_code ignored;
  acceptor.close(ignored);
  accept_retry.cancel();
  const auto open = connections;  // close() erases from the set
  for (const auto& c : open) c->close("");
  waiters.clear();
}

void detail::ServerState::notify(const std::string& key) {
  const auto it = waiters.find(key);
  if (it == waiters.end()) return;
  const auto waiting = std::move(it->second);  // key_arrived() may register on other keys
  waiters.erase(it);
  for (const auto& c : waiting) c->key_arrived();
}

void detail::ServerState::lease_lost(const LeaseLoss& loss) {
  if (stopped || !lease_hook) return;
  StoreEditor editor(*this);
  try {
    lease_hook(editor, loss);
  } catch (const std::exception& e) {
    spdlog::error("rendezvous store: reporting the loss of lease \"{}\" failed: {}", loss.name, e.what());
  }
}

bool StoreEditor::contains(const std::string& key) const { return state_.store.contains(key); }

void StoreEditor::set(const std::string& key, std::string value) {
  const Response r = state_.set(key, std::move(value));
  if (r.status != Status::kOk) throw std::runtime_error(r.value);
  state_.notify(key);
}

std::int64_t StoreEditor::add(const std::string& key, std::int64_t delta) {
  const Response r = state_.add(key, delta);
  if (r.status != Status::kOk) throw std::runtime_error(r.value);
  state_.notify(key);
  return r.number;
}

std::vector<std::string> detail::ServerState::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (!store.contains(k)) out.push_back(k);
  }
  return out;
}

Response detail::ServerState::set(const std::string& key, std::string value) {
  const auto it = store.find(key);
  const std::size_t old_cost = it == store.end() ? 0 : entry_cost(key, it->second);
  const std::size_t new_bytes = store_bytes - old_cost + entry_cost(key, value);
  if (new_bytes > limits.max_store_bytes) {
    return error_response(Status::kError, "the store is full (" + std::to_string(store_bytes) +
                                              " of " + std::to_string(limits.max_store_bytes) +
                                              " bytes used)");
  }
  store_bytes = new_bytes;
  store[key] = std::move(value);
  return Response{};
}

Response detail::ServerState::add(const std::string& key, std::int64_t delta) {
  std::int64_t current = 0;
  if (const auto it = store.find(key); it != store.end()) {
    const auto parsed = parse_integer(it->second);
    if (!parsed) return error_response(Status::kError, "the value of \"" + key + "\" is not a decimal integer");
    current = *parsed;
  }
  std::int64_t sum = 0;
  if (__builtin_add_overflow(current, delta, &sum)) {
    return error_response(Status::kError, "adding " + std::to_string(delta) + " to " +
                                              std::to_string(current) + " overflows");
  }
  Response r = set(key, std::to_string(sum));
  if (r.status == Status::kOk) r.number = sum;
  return r;
}

KvServer::KvServer(asio::io_context& io, const Endpoint& bind, std::string token, KvServerLimits limits,
                   LeaseLostHook on_lease_lost) {
  if (token.empty()) throw std::invalid_argument("rendezvous store: the job token is empty");
  state_ = std::make_shared<detail::ServerState>(io, std::move(token), limits, std::move(on_lease_lost));
  state_->self = state_;

  tcp::resolver resolver(io);
  error_code ec;
  const auto candidates = resolver.resolve(bind.host, std::to_string(bind.port), ec);
  if (ec) {
    throw std::runtime_error("rendezvous store: cannot resolve the bind address \"" + bind.host +
                             "\": " + ec.message());
  }
  std::string errors;
  for (const auto& candidate : candidates) {
    auto& acceptor = state_->acceptor;
    error_code step;
    acceptor.open(candidate.endpoint().protocol(), step);
    // Restarts rebind at once although the previous round's connections linger in TIME_WAIT.
    if (!step) acceptor.set_option(tcp::acceptor::reuse_address(true), step);
    if (!step) acceptor.bind(candidate.endpoint(), step);
    if (!step) acceptor.listen(asio::socket_base::max_listen_connections, step);
    if (!step) {
      const auto at = acceptor.local_endpoint();
      local_ = Endpoint{at.address().to_string(), at.port()};
      spdlog::info("rendezvous store: listening on {}", local_.str());
      asio::post(state_->strand, [state = state_] { state->accept(); });
      return;
    }
    errors += (errors.empty() ? "" : "; ") + candidate.endpoint().address().to_string() + ": " + step.message();
    error_code ignored;
    acceptor.close(ignored);
  }
  throw std::runtime_error("rendezvous store: cannot listen on " + bind.str() + " (" + errors + ")");
}

KvServer::~KvServer() {
  // By contract the io_context is not running handlers concurrently (it runs on this thread,
  // or it has stopped): closing here breaks the state <-> connection references at once.
  state_->shutdown();
}

void KvServer::stop() {
  asio::post(state_->strand, [state = state_] { state->shutdown(); });
}

struct KvServerThread::Impl {
  asio::io_context io;
  std::unique_ptr<KvServer> server;
  std::thread thread;
};

KvServerThread::KvServerThread(const Endpoint& bind, std::string token, KvServerLimits limits,
                               LeaseLostHook on_lease_lost)
    : impl_(std::make_unique<Impl>()) {
  impl_->server = std::make_unique<KvServer>(impl_->io, bind, std::move(token), limits, std::move(on_lease_lost));
  impl_->thread = std::thread([io = &impl_->io] { io->run(); });
}

KvServerThread::~KvServerThread() {
  impl_->io.stop();
  impl_->thread.join();
  impl_->server.reset();  // the io_context is no longer running: safe to close from here
}

const Endpoint& KvServerThread::local_endpoint() const { return impl_->server->local_endpoint(); }

}  // namespace xtrain::kv
