// The rendezvous store server: its store (SET, ADD, the waits they end, leases lost), the
// acceptor, and the server's thread. One client's connection: kv_connection.cpp.
#include "common/store/kv_server_state.hpp"

#include <charconv>
#include <thread>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

namespace xtrain::kv {

using detail::Connection;
using detail::error_code;
using detail::tcp;
namespace asio = boost::asio;

namespace {

std::optional<std::int64_t> parse_integer(const std::string& text) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

}  // namespace

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
