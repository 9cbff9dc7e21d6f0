// One client's connection to the rendezvous store: the handshake, each request, waits for keys,
// and the lease with its silence limit.
#include "common/store/kv_server_state.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace xtrain::kv::detail {

template <typename OnExpiry>
void Connection::arm_timer(std::chrono::milliseconds after, OnExpiry on_expiry) {
  const std::uint64_t generation = ++timer_generation_;
  timer_.expires_after(after);
  timer_.async_wait([self = shared_from_this(), generation, on_expiry](error_code ec) {
    // A cancelled or re-armed timer's handler may already be queued: the generation tells.
    if (ec || self->closed_ || generation != self->timer_generation_) return;
    on_expiry();
  });
}

Connection::Connection(std::shared_ptr<ServerState> state, tcp::socket socket)
    : state_(std::move(state)), socket_(std::move(socket)), timer_(state_->strand), lease_timer_(state_->strand) {
  error_code ec;
  const auto remote = socket_.remote_endpoint(ec);
  peer_ = ec ? std::string("unknown peer") : remote.address().to_string() + ":" + std::to_string(remote.port());
}

void Connection::start() {
  arm_timer(state_->limits.handshake_timeout, [this] {
    if (!authenticated_) refuse_and_close("no handshake within the time limit");
  });
  read_header();
}

void Connection::close(const std::string& why) {
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

void Connection::key_arrived() {
  if (!waiting_ || --missing_count_ > 0) return;
  const auto missing = state_->missing(waiting_->keys);
  if (!missing.empty()) return wait_for(missing);  // a key that came and was deleted again
  cancel_timer();
  answer(stop_waiting());
}

void Connection::read_header() {
  asio::async_read(socket_, asio::buffer(header_),
                   [self = shared_from_this()](error_code ec, std::size_t) { self->on_header(ec); });
}

void Connection::on_header(error_code ec) {
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

void Connection::on_body(error_code ec) {
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

void Connection::handle(Request request) {
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

void Connection::take_lease(Request request) {
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

void Connection::watch_silence(Clock::duration after) {
  lease_timer_.expires_after(after);
  lease_timer_.async_wait([self = shared_from_this()](error_code ec) {
    if (ec || self->closed_ || !self->lease_) return;
    const auto silent = Clock::now() - self->last_frame_;
    if (silent < self->lease_->limit) return self->watch_silence(self->lease_->limit - silent);
    asio::post(self->state_->strand, [self] { self->judge_silence(); });
  });
}

void Connection::judge_silence() {
  if (closed_ || !lease_) return;
  error_code ignored;
  const auto silent = Clock::now() - last_frame_;
  if (silent < lease_->limit) return watch_silence(lease_->limit - silent);
  if (socket_.available(ignored) > 0) return watch_silence(lease_->limit);  // read once this server catches up
  close(fmt::format("silent for {:.1f} s, its lease's limit", std::chrono::duration<double>(lease_->limit).count()));
}

void Connection::drop_lease() {
  if (!lease_) return;
  state_->leases.erase(lease_->name);
  lease_.reset();
  lease_timer_.cancel();
}

void Connection::answer_or_wait(Request request) {
  const auto missing = state_->missing(request.keys);
  if (missing.empty()) return answer(request);
  if (request.timeout_ms == 0) return reply_timeout(request);
  waiting_ = std::move(request);
  wait_for(missing);
  arm_timer(std::chrono::milliseconds(waiting_->timeout_ms), [this] {
    if (waiting_) reply_timeout(stop_waiting());
  });
}

void Connection::wait_for(const std::vector<std::string>& missing) {
  missing_count_ = 0;
  for (const auto& key : missing) missing_count_ += state_->waiters[key].insert(shared_from_this()).second ? 1 : 0;
}

void Connection::answer(const Request& request) {
  Response r;
  if (request.op == Op::kGet) r.value = state_->store.at(request.keys[0]);
  if (request.op == Op::kMultiGet) {
    for (const auto& key : request.keys) r.keys.push_back(state_->store.at(key));
  }
  reply(std::move(r));
}

void Connection::reply_timeout(const Request& request) {
  Response r;
  r.status = Status::kTimeout;
  r.keys = state_->missing(request.keys);
  reply(std::move(r));
}

Request Connection::stop_waiting() {
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

void Connection::refuse_and_close(const std::string& why) {
  cancel_timer();  // the handshake limit: this is the answer
  spdlog::warn("rendezvous store: refused the connection from {}: {}", peer_, why);
  reply(error_response(Status::kRefused, why), /*close_after=*/true);
}

void Connection::reply(Response response, bool close_after) {
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

void Connection::cancel_timer() {
  ++timer_generation_;
  timer_.cancel();
}

}  // namespace xtrain::kv::detail
