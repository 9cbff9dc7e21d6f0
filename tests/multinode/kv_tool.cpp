// xtrain-kv-tool: the rendezvous store and a Gloo all-reduce through it, one command at a time,
// for test scripts that run the pieces in different network namespaces or processes.
// The job token comes from XTRAIN_JOB_TOKEN; clients try to connect for 20 s, or
// XTRAIN_KV_CONNECT_TIMEOUT_MS. Exit codes: 0 done, 1 failed (message on stderr),
// 2 bad command line, 3 a GET/WAIT timed out.
//
//   xtrain-kv-tool serve ENDPOINT                  until SIGTERM/SIGINT; prints "listening on H:P",
//                                                  logs refusals and closed connections to stderr
//   xtrain-kv-tool set ENDPOINT KEY VALUE
//   xtrain-kv-tool get ENDPOINT KEY TIMEOUT_MS     prints the value
//   xtrain-kv-tool add ENDPOINT KEY DELTA          prints the new value
//   xtrain-kv-tool wait ENDPOINT TIMEOUT_MS KEY...
//   xtrain-kv-tool gloo ENDPOINT RANK WORLD HOST   all-reduce of (RANK+1) over 1000 floats,
//                                                  listening on HOST; prints the sum
#include <utility>  // before Boost: asio needs std::exchange in C++20 mode

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "common/store/kv_client.hpp"
#include "common/store/kv_server.hpp"
#include "common/log.hpp"
#include "worker/comm/gloo_kv_store.hpp"

using namespace xtrain::kv;
using std::chrono::milliseconds;

namespace {

std::string token() {
  const char* t = std::getenv("XTRAIN_JOB_TOKEN");
  if (!t || !*t) throw std::invalid_argument("XTRAIN_JOB_TOKEN is not set");
  return t;
}

KvClient connect(const std::string& endpoint) {
  KvClientOptions options;
  const char* limit = std::getenv("XTRAIN_KV_CONNECT_TIMEOUT_MS");
  options.connect_timeout = milliseconds(limit ? std::stoll(limit) : 20'000);
  return KvClient(parse_endpoint(endpoint), token(), options);
}

int serve(const std::string& endpoint) {
  xtrain::init_logging("kv-tool");  // the server's events, to stderr
  boost::asio::io_context io;
  KvServer server(io, parse_endpoint(endpoint), token());
  std::cout << "listening on " << server.local_endpoint().str() << std::endl;
  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](const boost::system::error_code&, int) { server.stop(); });
  io.run();
  return 0;
}

int gloo_allreduce(const std::string& endpoint, int rank, int world, const std::string& host) {
  KvClient client = connect(endpoint);
  xtrain::GlooKvStore kv_store(client, std::chrono::seconds(20));
  gloo::rendezvous::PrefixStore store("kv-tool", kv_store);
  gloo::transport::tcp::attr attr;
  attr.hostname = host;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
  context->setTimeout(std::chrono::seconds(20));
  context->connectFullMesh(store, device);

  std::vector<float> data(1000, static_cast<float>(rank + 1));
  gloo::AllreduceOptions opts(context);
  opts.setOutput(data.data(), data.size());
  opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
  gloo::allreduce(opts);
  const float expected = static_cast<float>(world * (world + 1) / 2);
  for (float v : data) {
    if (v != expected) {
      std::cerr << "gloo all-reduce: got " << v << ", expected " << expected << "\n";
      return 1;
    }
  }
  std::cout << expected << std::endl;
  return 0;
}

int run(const std::vector<std::string>& a) {
  const auto need = [&](size_t n) {
    if (a.size() < n) throw std::invalid_argument("usage: see the top of tests/multinode/kv_tool.cpp");
  };
  need(2);
  const std::string& cmd = a[0];
  if (cmd == "serve") return serve(a[1]);
  if (cmd == "set") {
    need(4);
    connect(a[1]).set(a[2], a[3]);
  } else if (cmd == "get") {
    need(4);
    std::cout << connect(a[1]).get(a[2], milliseconds(std::stoll(a[3]))) << std::endl;
  } else if (cmd == "add") {
    need(4);
    std::cout << connect(a[1]).add(a[2], std::stoll(a[3])) << std::endl;
  } else if (cmd == "wait") {
    need(4);
    connect(a[1]).wait(std::vector<std::string>(a.begin() + 3, a.end()), milliseconds(std::stoll(a[2])));
  } else if (cmd == "gloo") {
    need(5);
    return gloo_allreduce(a[1], std::stoi(a[2]), std::stoi(a[3]), a[4]);
  } else {
    throw std::invalid_argument("unknown command \"" + cmd + "\"");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const KvTimeoutError& e) {
    std::cerr << e.what() << "\n";
    return 3;
  } catch (const std::invalid_argument& e) {
    std::cerr << "xtrain-kv-tool: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
