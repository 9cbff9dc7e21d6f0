// The rendezvous store over real TCP on 127.0.0.1: concurrent clients, deferred GET/WAIT
// answers, timeouts and connection failures with messages that say what was missing, a wrong
// token refused, and garbage, oversized or pipelined frames closing only the offending
// connection while the store and the other clients carry on.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/store/kv_client.hpp"
#include "common/store/kv_server.hpp"
#include "tests/common/store/kv_test_util.hpp"

using namespace xtrain::kv;
using namespace xtrain::kv::testing;
using namespace std::chrono_literals;


TEST_CASE("kv server: every op through one client", "[kv][server]") {
  KvServerThread server(loopback_any_port(), kToken);
  KvClient client(server.local_endpoint(), kToken, quick());

  const std::string binary("\0bytes\xff\0", 8);
  client.set("plain", "hello");
  client.set("binary", binary);
  CHECK(client.get("plain", 0ms) == "hello");
  CHECK(client.get("binary", 1s) == binary);
  client.set("plain", "replaced");
  CHECK(client.get("plain", 0ms) == "replaced");

  CHECK(client.add("counter", 5) == 5);
  CHECK(client.add("counter", -7) == -2);
  CHECK(client.get("counter", 0ms) == "-2");  // counters are readable decimal values
  client.set("seeded", "40");
  CHECK(client.add("seeded", 2) == 42);
  CHECK_THROWS_WITH(client.add("plain", 1), Catch::Contains("\"plain\" is not a decimal integer"));
  client.set("huge", std::to_string(INT64_MAX));
  CHECK_THROWS_WITH(client.add("huge", 1), Catch::Contains("overflows"));

  CHECK(client.get_many({"binary", "plain", "counter"}, 0ms) == std::vector<std::string>{binary, "replaced", "-2"});
  CHECK_THROWS_AS(client.get_many({"plain", "absent"}, 0ms), KvTimeoutError);
  CHECK(client.check({"plain", "binary", "counter"}));
  CHECK_FALSE(client.check({"plain", "absent"}));
  client.wait({"plain", "counter"}, 0ms);

  CHECK(client.remove("plain"));
  CHECK_FALSE(client.remove("plain"));
  CHECK_FALSE(client.check({"plain"}));

  // Values that add up to more than a frame: refused by the server, and the connection stays usable.
  client.set("half", std::string(kMaxFrameBytes / 2, 'x'));
  CHECK_THROWS_WITH(client.get_many({"half", "half", "half"}, 0ms), Catch::Contains("MGET") && Catch::Contains("frame limit"));
  CHECK(client.get_many({"half"}, 0ms).front().size() == kMaxFrameBytes / 2);

  // Too large to send: refused locally, and the connection stays usable.
  CHECK_THROWS_WITH(client.set("big", std::string(kMaxFrameBytes, 'x')),
                    Catch::Contains("SET \"big\"") && Catch::Contains("frame limit"));
  client.set("after-big", "ok");
  CHECK(client.get("after-big", 0ms) == "ok");
}

TEST_CASE("kv server: concurrent clients agree", "[kv][server]") {
  KvServerThread server(loopback_any_port(), kToken);
  constexpr int kClients = 8;
  constexpr int kAddsEach = 50;

  std::vector<std::future<std::vector<std::int64_t>>> results;
  for (int c = 0; c < kClients; ++c) {
    results.push_back(std::async(std::launch::async, [&, c] {
      KvClient client(server.local_endpoint(), kToken, quick());
      std::vector<std::int64_t> seen;
      for (int i = 0; i < kAddsEach; ++i) seen.push_back(client.add("counter", 1));
      client.set("client/" + std::to_string(c), "value-" + std::to_string(c));
      // Everyone waits for everyone, then reads every other client's key.
      std::vector<std::string> all;
      for (int o = 0; o < kClients; ++o) all.push_back("client/" + std::to_string(o));
      client.wait(all, 10s);
      for (int o = 0; o < kClients; ++o) {
        REQUIRE(client.get("client/" + std::to_string(o), 0ms) == "value-" + std::to_string(o));
      }
      return seen;
    }));
  }
  std::vector<std::int64_t> all_seen;
  for (auto& f : results) {
    const auto seen = f.get();
    CHECK(std::is_sorted(seen.begin(), seen.end()));
    all_seen.insert(all_seen.end(), seen.begin(), seen.end());
  }
  // ADD is atomic: every value 1..N was handed out exactly once.
  std::sort(all_seen.begin(), all_seen.end());
  std::vector<std::int64_t> expected(kClients * kAddsEach);
  std::iota(expected.begin(), expected.end(), 1);
  CHECK(all_seen == expected);
  KvClient reader(server.local_endpoint(), kToken, quick());
  CHECK(reader.get("counter", 0ms) == std::to_string(kClients * kAddsEach));
}

TEST_CASE("kv server: GET and WAIT are answered when a later SET arrives", "[kv][server]") {
  KvServerThread server(loopback_any_port(), kToken);
  KvClient writer(server.local_endpoint(), kToken, quick());

  const auto started = Clock::now();
  auto getter = std::async(std::launch::async, [&] {
    KvClient client(server.local_endpoint(), kToken, quick());
    return client.get("late", 10s);
  });
  auto waiter = std::async(std::launch::async, [&] {
    KvClient client(server.local_endpoint(), kToken, quick());
    client.wait({"late", "later"}, 10s);
    return Clock::now();
  });
  std::this_thread::sleep_for(300ms);
  // Neither could have been answered yet.
  CHECK(getter.wait_for(0ms) == std::future_status::timeout);
  writer.set("late", "worth the wait");
  CHECK(getter.get() == "worth the wait");
  CHECK(Clock::now() - started >= 300ms);
  CHECK(waiter.wait_for(200ms) == std::future_status::timeout);  // still missing "later"

  const auto set_later = Clock::now();
  CHECK(writer.add("later", 1) == 1);  // ADD creates keys too
  CHECK(waiter.get() >= set_later);

  // The writer's own connection was never blocked by the waiters.
  CHECK(writer.get("late", 0ms) == "worth the wait");
}

TEST_CASE("kv server: a WAIT counts its keys down, repeated and deleted keys included", "[kv][server]") {
  KvServerThread server(loopback_any_port(), kToken);
  KvClient writer(server.local_endpoint(), kToken, quick());
  auto waiter = std::async(std::launch::async, [&] {
    KvClient client(server.local_endpoint(), kToken, quick());
    client.wait({"a", "b", "a", "c"}, 10s);
  });
  std::vector<std::future<std::string>> getters;  // many requests waiting for one key
  for (int i = 0; i < 16; ++i) {
    getters.push_back(std::async(std::launch::async, [&] {
      KvClient client(server.local_endpoint(), kToken, quick());
      return client.get("b", 10s);
    }));
  }
  std::this_thread::sleep_for(200ms);
  writer.set("a", "1");
  writer.set("b", "2");
  for (auto& g : getters) CHECK(g.get() == "2");
  CHECK(writer.remove("a"));  // gone again before the last key arrives
  writer.set("c", "3");
  CHECK(waiter.wait_for(300ms) == std::future_status::timeout);  // "a" is missing once more
  writer.set("a", "back");
  CHECK(waiter.wait_for(5s) == std::future_status::ready);
  waiter.get();
}

TEST_CASE("kv server: timeouts say what was missing", "[kv][server]") {
  KvServerThread server(loopback_any_port(), kToken);
  KvClient client(server.local_endpoint(), kToken, quick());
  const std::string where = server.local_endpoint().str();

  const auto started = Clock::now();
  try {
    client.get("node/1/host", 300ms);
    FAIL("GET of a key nobody sets returned");
  } catch (const KvTimeoutError& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains("rendezvous store at " + where));
    CHECK_THAT(message, Catch::Contains("gave up after 0.3 s waiting for key \"node/1/host\""));
    CHECK(e.missing() == std::vector<std::string>{"node/1/host"});
  }
  CHECK(Clock::now() - started >= 300ms);
  CHECK(Clock::now() - started < 3s);

  client.set("node/0/host", "10.77.0.1");
  try {
    client.wait({"node/0/host", "node/1/host", "node/2/host"}, 200ms);
    FAIL("WAIT for keys nobody sets returned");
  } catch (const KvTimeoutError& e) {
    CHECK_THAT(e.what(), Catch::Contains("waiting for 2 of 3 keys; missing: \"node/1/host\", \"node/2/host\""));
    CHECK(e.missing() == std::vector<std::string>{"node/1/host", "node/2/host"});
  }
  // A timeout is an answer: the connection still works.
  CHECK(client.get("node/0/host", 0ms) == "10.77.0.1");
  CHECK_THROWS_AS(client.get("absent", 0ms), KvTimeoutError);
}

TEST_CASE("kv client: connecting retries until the server starts, then gives up clearly", "[kv][client]") {
  const std::uint16_t port = free_port();
  const Endpoint endpoint{"127.0.0.1", port};

  SECTION("the server comes up late") {
    auto client = std::async(std::launch::async, [&] {
      KvClient c(endpoint, kToken, quick(10s));
      return c.get("ready", 5s);
    });
    std::this_thread::sleep_for(500ms);
    KvServerThread server(endpoint, kToken);
    KvClient(endpoint, kToken, quick()).set("ready", "yes");
    CHECK(client.get() == "yes");
  }
  SECTION("the server never comes") {
    const auto started = Clock::now();
    CHECK_THROWS_WITH(KvClient(endpoint, kToken, quick(400ms)),
                      Catch::Contains("rendezvous store at " + endpoint.str()) &&
                          Catch::Contains("could not connect within") &&
                          Catch::Contains("Connection refused"));
    CHECK(Clock::now() - started >= 400ms);
  }
  SECTION("the host does not resolve") {
    CHECK_THROWS_WITH(KvClient(Endpoint{"no-such-host.invalid", port}, kToken, quick(200ms)),
                      Catch::Contains("cannot resolve \"no-such-host.invalid\""));
  }
}

TEST_CASE("kv server: a wrong token is refused at once", "[kv][server]") {
  KvServerThread server(loopback_any_port(), kToken);
  const auto started = Clock::now();
  CHECK_THROWS_WITH(KvClient(server.local_endpoint(), "other-job", quick(30s)),
                    Catch::Contains("refused this client: wrong job token") &&
                        Catch::Contains(server.local_endpoint().str()));
  CHECK(Clock::now() - started < 5s);  // a refusal is not retried for the whole connect timeout

  // The raw view: the answer is kRefused and the server hangs up.
  RawSocket raw(server.local_endpoint().port);
  raw.send(Request{Op::kHello, {}, kToken + "x", kProtocolVersion, 0});
  const Response r = raw.receive(2s);
  CHECK(r.status == Status::kRefused);
  CHECK(r.value == "wrong job token");
  CHECK(raw.closed_within(2s));

  // Requests before HELLO are not served, even with the right token afterwards.
  RawSocket eager(server.local_endpoint().port);
  eager.send(Request{Op::kGet, {"k"}, "", 0, 0});
  CHECK(eager.receive(2s).status == Status::kRefused);
  CHECK(eager.closed_within(2s));

  RawSocket old_client(server.local_endpoint().port);
  old_client.send(Request{Op::kHello, {}, kToken, kProtocolVersion - 1, 0});
  CHECK_THAT(old_client.receive(2s).value,
             Catch::Contains("client speaks protocol version " + std::to_string(kProtocolVersion - 1) +
                             ", this server speaks " + std::to_string(kProtocolVersion)));

  KvClient good(server.local_endpoint(), kToken, quick());
  good.set("still", "works");
  CHECK(good.get("still", 0ms) == "works");
}

TEST_CASE("kv server: garbage, oversized and pipelined frames close only their connection", "[kv][server]") {
  KvServerLimits limits;
  limits.handshake_timeout = 300ms;
  KvServerThread server(loopback_any_port(), kToken, limits);
  const std::uint16_t port = server.local_endpoint().port;
  KvClient good(server.local_endpoint(), kToken, quick());
  good.set("precious", "intact");

  // A waiter that must survive everything below.
  auto waiter = std::async(std::launch::async, [&] {
    KvClient c(server.local_endpoint(), kToken, quick());
    return c.get("finale", 20s);
  });

  SECTION("a huge length before the handshake") {
    RawSocket s(port);
    s.send(std::vector<char>{'\x7f', '\xff', '\xff', '\xff'});
    CHECK(s.closed_within(2s));
  }
  SECTION("a hello-sized limit applies before the handshake") {
    RawSocket s(port);
    Request hello{Op::kHello, {}, std::string(kMaxHelloFrameBytes, 't'), kProtocolVersion, 0};
    s.send(hello);
    CHECK(s.closed_within(2s));
  }
  SECTION("random bytes") {
    RawSocket s(port);
    std::vector<char> noise(1000);
    std::uint32_t x = 12345;
    for (auto& c : noise) c = static_cast<char>((x = x * 1664525u + 1013904223u) >> 24);
    s.send(noise);
    CHECK(s.closed_within(2s));
  }
  SECTION("an HTTP request") {
    RawSocket s(port);
    const std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    s.send(std::vector<char>(http.begin(), http.end()));
    CHECK(s.closed_within(2s));
  }
  SECTION("an oversized frame after the handshake") {
    RawSocket s(port);
    s.hello();
    const std::uint32_t n = kMaxFrameBytes + 1;
    s.send(std::vector<char>{static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                             static_cast<char>(n >> 8), static_cast<char>(n)});
    CHECK(s.closed_within(2s));
  }
  SECTION("a malformed frame after the handshake") {
    RawSocket s(port);
    s.hello();
    auto frame = encode_frame(Request{Op::kSet, {"precious"}, "overwritten?", 0, 0});
    frame.pop_back();  // the payload is one byte short of what its fields say...
    frame[3] = static_cast<char>(frame[3] - 1);  // ...and the header agrees with the new size
    s.send(frame);
    CHECK(s.closed_within(2s));
  }
  SECTION("a second request before the first one's answer") {
    RawSocket s(port);
    s.hello();
    auto frames = encode_frame(Request{Op::kGet, {"never"}, "", 0, 10'000});
    const auto second = encode_frame(Request{Op::kSet, {"precious"}, "overwritten?", 0, 0});
    frames.insert(frames.end(), second.begin(), second.end());
    s.send(frames);
    CHECK(s.closed_within(2s));
  }
  SECTION("HELLO twice") {
    RawSocket s(port);
    s.hello();
    s.send(Request{Op::kHello, {}, kToken, kProtocolVersion, 0});
    CHECK(s.closed_within(2s));
  }
  SECTION("silence after connecting") {
    RawSocket s(port);
    CHECK(s.closed_within(3s));  // the 300 ms handshake limit
  }
  SECTION("disconnecting while waiting") {
    {
      RawSocket s(port);
      s.hello();
      s.send(Request{Op::kWait, {"finale", "never"}, "", 0, 60'000});
    }  // closed: the server must forget the waiter and not write to it later
    std::this_thread::sleep_for(100ms);
  }

  CHECK(good.get("precious", 0ms) == "intact");
  good.set("finale", "done");
  CHECK(waiter.get() == "done");
  KvClient fresh(server.local_endpoint(), kToken, quick());
  CHECK(fresh.get("precious", 0ms) == "intact");
}

TEST_CASE("kv server: memory and connection limits", "[kv][server]") {
  KvServerLimits limits;
  limits.max_store_bytes = 4096;
  limits.max_connections = 2;
  KvServerThread server(loopback_any_port(), kToken, limits);

  auto first = std::make_unique<KvClient>(server.local_endpoint(), kToken, quick());
  KvClient second(server.local_endpoint(), kToken, quick());

  CHECK_THROWS_WITH(first->set("big", std::string(5000, 'x')),
                    Catch::Contains("the store is full") && Catch::Contains("of 4096 bytes used"));
  first->set("small", std::string(1000, 'x'));
  CHECK(second.get("small", 0ms).size() == 1000);
  CHECK_FALSE(second.check({"big"}));

  // A third connection is closed at once; the client retries until its deadline.
  CHECK_THROWS_WITH(KvClient(server.local_endpoint(), kToken, quick(500ms)),
                    Catch::Contains("could not connect"));
  first.reset();  // frees a slot
  KvClient third(server.local_endpoint(), kToken, quick(5s));
  CHECK(third.get("small", 0ms).size() == 1000);
}

TEST_CASE("kv client: a server that goes away fails the waiting call and the ones after", "[kv][client]") {
  auto server = std::make_unique<KvServerThread>(loopback_any_port(), kToken);
  KvClient client(server->local_endpoint(), kToken, quick());
  auto waiting = std::async(std::launch::async, [&] { return client.get("never", 30s); });
  std::this_thread::sleep_for(200ms);
  server.reset();
  CHECK_THROWS_WITH(waiting.get(), Catch::Contains("GET \"never\": connection closed by the server"));
  CHECK_THROWS_WITH(client.set("k", "v"), Catch::Contains("SET \"k\": not sent, the connection was lost earlier"));
}

TEST_CASE("kv server: refuses to start without a token or on a foreign address", "[kv][server]") {
  CHECK_THROWS_AS(KvServerThread(loopback_any_port(), ""), std::invalid_argument);
  KvServerThread taken(loopback_any_port(), kToken);
  CHECK_THROWS_WITH(KvServerThread(taken.local_endpoint(), kToken),
                    Catch::Contains("cannot listen on " + taken.local_endpoint().str()));
  // 192.0.2.1 (TEST-NET-1) is not an address of this machine.
  CHECK_THROWS_WITH(KvServerThread(Endpoint{"192.0.2.1", 0}, kToken),
                    Catch::Contains("cannot listen on 192.0.2.1:0"));
}
