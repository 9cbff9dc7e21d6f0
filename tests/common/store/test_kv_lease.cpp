// Leases on the rendezvous store (common/store/kv_lease.hpp and the server's lease hook): a holder that
// closes its connection or falls silent is reported once, with what it said it was, and the
// hook's edits wake waiting clients; keepalives keep a lease; RELEASE, refused leases and the
// server's own shutdown report nothing; the holder's side gives a silent server up within its
// timeout; and abort() ends a client's call in progress at once.
#include <atomic>
#include <future>
#include <mutex>
#include <thread>

#include <catch2/catch.hpp>

#include "common/store/kv_lease.hpp"
#include "tests/common/store/kv_test_util.hpp"

using namespace xtrain::kv;
using namespace xtrain::kv::testing;
using namespace std::chrono_literals;

namespace {

// What the server's lease hook saw. The hook also writes "lost/<name>" = why, as a real hook
// publishes a loss, so that tests can wait for it through a client.
class LossLog {
 public:
  LeaseLostHook hook() {
    return [this](StoreEditor& store, const LeaseLoss& loss) {
      {
        std::lock_guard lock(mutex_);
        losses_.push_back(loss);
      }
      store.set("lost/" + loss.name, loss.why);
    };
  }
  std::vector<LeaseLoss> losses() {
    std::lock_guard lock(mutex_);
    return losses_;
  }

 private:
  std::mutex mutex_;
  std::vector<LeaseLoss> losses_;
};

// A store that answers HELLO and LEASE and then falls silent (a frozen host, a cut link): it
// reads every keepalive and answers none.
class SilentServer {
 public:
  SilentServer() {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    socklen_t len = sizeof addr;
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&addr), len) == 0);
    REQUIRE(::listen(listener_, 4) == 0);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~SilentServer() {
    ::shutdown(listener_, SHUT_RDWR);
    if (client_ >= 0) ::shutdown(client_, SHUT_RDWR);
    thread_.join();
    if (client_ >= 0) ::close(client_);
    ::close(listener_);
  }
  Endpoint endpoint() const { return Endpoint{"127.0.0.1", port_}; }

 private:
  void serve() {
    client_ = ::accept(listener_, nullptr, nullptr);
    if (client_ < 0) return;
    std::vector<char> payload;
    for (int answered = 0; read_frame(client_, payload, 60s); ++answered) {
      if (answered < 2) {  // HELLO, LEASE
        const auto frame = encode_frame(Response{});
        (void)::send(client_, frame.data(), frame.size(), MSG_NOSIGNAL);
      }
    }
  }

  int listener_ = -1;
  std::atomic<int> client_{-1};
  std::uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace

TEST_CASE("kv lease: a holder that closes its connection is reported once, with its info", "[kv][lease]") {
  LossLog log;
  KvServerThread server(loopback_any_port(), kToken, {}, log.hook());
  KvClient watcher(server.local_endpoint(), kToken, quick());
  auto holder = std::make_unique<KvClient>(server.local_endpoint(), kToken, quick());
  holder->lease("lease/1", R"({"node":1})", 5s);
  auto reported = std::async(std::launch::async, [&] { return watcher.get("lost/lease/1", 5s); });
  CHECK(reported.wait_for(200ms) == std::future_status::timeout);  // held: nothing to report

  holder.reset();  // closes the connection without RELEASE, as a killed process does
  CHECK(reported.get() == "the connection closed");  // the hook's SET woke the waiting GET
  const auto losses = log.losses();
  REQUIRE(losses.size() == 1);
  CHECK(losses[0].name == "lease/1");
  CHECK(losses[0].info == R"({"node":1})");
  CHECK_THAT(losses[0].peer, Catch::StartsWith("127.0.0.1:"));
}

TEST_CASE("kv lease: keepalives keep a lease, and silence past its limit loses it", "[kv][lease]") {
  LossLog log;
  KvServerThread server(loopback_any_port(), kToken, {}, log.hook());
  RawSocket raw(server.local_endpoint().port);
  raw.hello();
  raw.send(Request{Op::kLease, {"lease/2"}, "node 2", 0, 300});
  REQUIRE(raw.receive(2s).status == Status::kOk);
  for (int i = 0; i < 8; ++i) {  // 800 ms, well past the limit, in keepalives 100 ms apart
    std::this_thread::sleep_for(100ms);
    raw.send(Request{Op::kKeepalive, {}, "", 0, 0});
    REQUIRE(raw.receive(2s).status == Status::kOk);
  }
  CHECK(log.losses().empty());

  const auto silent_from = Clock::now();
  KvClient watcher(server.local_endpoint(), kToken, quick());
  CHECK(watcher.get("lost/lease/2", 5s) == "silent for 0.3 s, its lease's limit");
  const auto noticed = Clock::now() - silent_from;
  CHECK(noticed >= 250ms);  // the limit counts from the last keepalive, sent just before
  CHECK(noticed < 1500ms);
  CHECK(raw.closed_within(2s));  // and the server hung up
  CHECK(log.losses().size() == 1);
}

TEST_CASE("kv lease: RELEASE, refused leases and the server's shutdown report nothing", "[kv][lease]") {
  LossLog log;
  auto server = std::make_unique<KvServerThread>(loopback_any_port(), kToken, KvServerLimits{}, log.hook());
  const Endpoint at = server->local_endpoint();
  auto first = std::make_unique<KvClient>(at, kToken, quick());
  first->lease("lease/3", "first", 5s);
  CHECK_THROWS_WITH(first->lease("lease/other", "again", 5s), Catch::Contains("holds the lease \"lease/3\" already"));
  KvClient second(at, kToken, quick());
  CHECK_THROWS_WITH(second.lease("lease/3", "second", 5s),
                    Catch::Contains("LEASE \"lease/3\"") && Catch::Contains("is held by 127.0.0.1:"));
  RawSocket raw(at.port);
  raw.hello();
  raw.send(Request{Op::kLease, {"lease/4"}, "", 0, 0});
  const Response no_limit = raw.receive(2s);
  CHECK(no_limit.status == Status::kError);
  CHECK(no_limit.value == "LEASE needs a silence limit (timeout_ms > 0)");

  first->release();
  first.reset();
  second.lease("lease/3", "second", 5s);  // free again
  std::this_thread::sleep_for(200ms);
  CHECK(log.losses().empty());

  server.reset();  // closes "second"'s connection with its lease: the server's end is no loss
  CHECK(log.losses().empty());
}

TEST_CASE("kv lease: the holder keeps it with keepalives and gives a silent server up", "[kv][lease]") {
  SECTION("a live server: held, then released cleanly") {
    LossLog log;
    KvServerThread server(loopback_any_port(), kToken, {}, log.hook());
    std::atomic<int> lost{0};
    {
      KvLease lease(server.local_endpoint(), kToken, "lease/5", "node 5", {50ms, 200ms, 5s},
                    [&](const std::string&) { ++lost; });
      std::this_thread::sleep_for(600ms);  // three times the limit
      CHECK(lost == 0);
      CHECK(log.losses().empty());
    }  // released
    std::this_thread::sleep_for(300ms);
    CHECK(log.losses().empty());
  }
  SECTION("a server that stops answering") {
    SilentServer silent;
    std::promise<std::string> why;
    const auto started = Clock::now();
    KvLease lease(silent.endpoint(), kToken, "lease/6", "node 6", {50ms, 300ms, 5s},
                  [&](const std::string& reason) { why.set_value(reason); });
    auto lost = why.get_future();
    REQUIRE(lost.wait_for(3s) == std::future_status::ready);
    const auto noticed = Clock::now() - started;
    CHECK(lost.get() == "no answer to keepalives for 0.3 s");
    CHECK(noticed >= 300ms);
    CHECK(noticed < 1500ms);
  }
}

TEST_CASE("kv client: abort ends the call in progress at once, and every later one, with its reason",
          "[kv][client]") {
  KvServerThread server(loopback_any_port(), kToken);
  KvClient client(server.local_endpoint(), kToken, quick());
  auto waiting = std::async(std::launch::async, [&] { return client.get("never", 30s); });
  std::this_thread::sleep_for(100ms);
  const auto aborted = Clock::now();
  client.abort("the attempt ended");
  CHECK_THROWS_WITH(waiting.get(), Catch::Contains("GET \"never\": the attempt ended"));
  CHECK(Clock::now() - aborted < 1s);
  CHECK_THROWS_WITH(client.set("k", "v"), Catch::Contains("not sent, the connection was lost earlier") &&
                                              Catch::Contains("the attempt ended"));
}
