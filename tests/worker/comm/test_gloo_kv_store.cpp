// Gloo meeting through the rendezvous store instead of a shared directory: 2, 3 and 4 ranks
// (threads, each with its own store client and TCP device) connect the full mesh through
// GlooKvStore and all-reduce; a rank that never arrives fails the others with a message naming
// the key they waited for.
#include <chrono>
#include <exception>
#include <thread>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <catch2/catch.hpp>

#include "common/store/kv_server.hpp"
#include "worker/comm/gloo_kv_store.hpp"

using namespace std::chrono_literals;
using xtrain::GlooKvStore;
using xtrain::kv::Endpoint;
using xtrain::kv::KvClient;
using xtrain::kv::KvClientOptions;
using xtrain::kv::KvServerThread;

namespace {

const std::string kToken = "gloo-test-token";

// One rank: meet the others through the store under `prefix`, then sum `data` across ranks.
void rank_main(const Endpoint& store_at, const std::string& prefix, int rank, int world,
               std::chrono::milliseconds timeout, std::vector<float>& data) {
  KvClientOptions options;
  options.connect_timeout = 5s;
  KvClient client(store_at, kToken, options);
  GlooKvStore kv_store(client, timeout);
  gloo::rendezvous::PrefixStore store(prefix, kv_store);

  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
  context->setTimeout(timeout);
  context->connectFullMesh(store, device);

  gloo::AllreduceOptions opts(context);
  opts.setOutput(data.data(), data.size());
  opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
  opts.setTag(7);
  gloo::allreduce(opts);
}

}  // namespace

TEST_CASE("gloo kv store: connectFullMesh and allreduce across ranks", "[kv][gloo]") {
  KvServerThread server(Endpoint{"127.0.0.1", 0}, kToken);
  for (int world : {2, 3, 4}) {
    DYNAMIC_SECTION(world << " ranks") {
      constexpr size_t kCount = 100'003;  // not a multiple of anything Gloo segments by
      std::vector<std::vector<float>> data(static_cast<size_t>(world));
      std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
      std::vector<std::thread> ranks;
      for (int r = 0; r < world; ++r) {
        auto& mine = data[static_cast<size_t>(r)];
        mine.resize(kCount);
        for (size_t i = 0; i < kCount; ++i) mine[i] = static_cast<float>((r + 1) * (i % 97)) * 0.5f;
        ranks.emplace_back([&, r] {
          try {
            rank_main(server.local_endpoint(), "run-w" + std::to_string(world), r, world, 20s,
                      data[static_cast<size_t>(r)]);
          } catch (...) {
            errors[static_cast<size_t>(r)] = std::current_exception();
          }
        });
      }
      for (auto& t : ranks) t.join();
      for (auto& e : errors) {
        if (e) std::rethrow_exception(e);
      }
      // sum over r of (r+1) * (i % 97) * 0.5: small integers and halves, exact in float.
      const float ranks_sum = static_cast<float>(world * (world + 1) / 2);
      for (size_t i = 0; i < kCount; i += 997) {
        REQUIRE(data[0][i] == ranks_sum * static_cast<float>(i % 97) * 0.5f);
      }
      for (int r = 1; r < world; ++r) CHECK(data[static_cast<size_t>(r)] == data[0]);
    }
  }
}

TEST_CASE("gloo kv store: a rank that never arrives fails the others clearly", "[kv][gloo]") {
  KvServerThread server(Endpoint{"127.0.0.1", 0}, kToken);
  std::vector<float> data(16, 1.0f);
  const auto started = std::chrono::steady_clock::now();
  try {
    rank_main(server.local_endpoint(), "lonely", 0, 2, 500ms, data);
    FAIL("connectFullMesh returned without its peer");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), Catch::Contains("rendezvous store at " + server.local_endpoint().str()) &&
                             Catch::Contains("missing: \"lonely/1\""));
  }
  CHECK(std::chrono::steady_clock::now() - started < 5s);
}
