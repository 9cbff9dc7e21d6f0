#include "worker/comm/gloo_communicator.hpp"

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "common/store/kv_client.hpp"
#include "worker/comm/gloo_kv_store.hpp"

namespace xtrain {
namespace {

// Gloo's messages start with source locations ("[./gloo/x.cc:147] ") and may run over several
// lines: keep the first line of the message itself.
std::string gloo_message(const char* what) {
  std::string s(what);
  while (s.size() > 1 && s[0] == '[') {
    const size_t close = s.find("] ");
    if (close == std::string::npos) break;
    s.erase(0, close + 2);
  }
  const size_t nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  return s;
}

// SIGPIPE ignored, for the reason the constructor's comment gives; a handler installed on purpose stays.
void ignore_sigpipe() {
  struct sigaction current = {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    struct sigaction ignore = {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, nullptr);
  }
}

std::string seconds(std::chrono::milliseconds ms) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << static_cast<double>(ms.count()) / 1000.0 << " s";
  return out.str();
}

}  // namespace

GlooCommunicator::GlooCommunicator(int rank, int world_size, gloo::rendezvous::Store& store,
                                   const GlooOptions& options)
    : rank_(rank), world_size_(world_size), op_timeout_(options.op_timeout) {
  ignore_sigpipe();
  const auto started = std::chrono::steady_clock::now();
  try {
    gloo::transport::tcp::attr attr;
    if (!options.hostname.empty()) {
      attr.hostname = options.hostname;
    } else {
      attr.iface = options.iface;
    }
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::PrefixStore prefixed(options.prefix, store);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
    // connectFullMesh waits for the peers' addresses and connections within the context's timeout.
    context->setTimeout(options.connect_timeout);
    context->connectFullMesh(prefixed, device);
    context->setTimeout(options.op_timeout);
    context_ = std::move(context);
  } catch (const std::exception& e) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - started);
    throw CommunicatorError("gloo rendezvous: rank " + std::to_string(rank) + " of " +
                            std::to_string(world_size) + " waited " + seconds(waited) +
                            " (limit " + seconds(options.connect_timeout) + ") for its peers at " +
                            options.store_name + " (run id " + options.prefix +
                            ") and gave up: " + gloo_message(e.what()));
  }
  thread_ = std::thread([this] { communication_loop(); });
}

GlooCommunicator::~GlooCommunicator() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  thread_.join();
}

std::string GlooCommunicator::describe_failure(const char* what, const std::exception& e) const {
  return std::string("gloo ") + what + ": rank " + std::to_string(rank_) + " of " +
         std::to_string(world_size_) + " failed (a peer died, or none answered within " +
         seconds(op_timeout_) + "): " + gloo_message(e.what());
}

void GlooCommunicator::communication_loop() {
  for (;;) {
    Task task;
    bool skip = false;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
      skip = failure_ != nullptr;  // after a failure the peers are out of step: run nothing more
    }
    std::exception_ptr error;
    if (!skip) {
      try {
        task(next_tag_++);
      } catch (...) {
        error = std::current_exception();
      }
    }
    {
      std::lock_guard lock(mutex_);
      if (error && !failure_) failure_ = error;
      --in_flight_;
    }
    work_done_.notify_all();
  }
}

void GlooCommunicator::enqueue(Task task) {
  {
    std::lock_guard lock(mutex_);
    if (failure_) std::rethrow_exception(failure_);
    queue_.push_back(std::move(task));
    ++in_flight_;
  }
  work_ready_.notify_one();
}

void GlooCommunicator::wait_idle() {
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, [&] { return in_flight_ == 0; });
  if (failure_) std::rethrow_exception(failure_);
}

void GlooCommunicator::run_blocking(Task task) {
  enqueue(std::move(task));
  wait_idle();
}

void GlooCommunicator::sum_then_scale(float* data, size_t count, std::uint32_t tag) {
  if (count == 0) return;
  try {
    // The new-style allreduce reduces each segment once and then distributes the result, so
    // every rank ends with the same bits (the legacy ring algorithms do not guarantee that).
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, count);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTag(tag);
    gloo::allreduce(opts);
  } catch (const std::exception& e) {  // gloo::EnforceNotMet, gloo::IoException
    throw CommunicatorError(describe_failure("all-reduce", e));
  }
  // The same factor applied to the same bits: identical on every rank.
  const float scale = 1.0f / static_cast<float>(world_size_);
  for (size_t i = 0; i < count; ++i) data[i] *= scale;
}

void GlooCommunicator::start_all_reduce_average(GradBucket bucket) {
  enqueue([this, bucket](std::uint32_t tag) {
    if (bucket_observer_) bucket_observer_(bucket.id);
    sum_then_scale(bucket.data, bucket.count, tag);
    if (bucket_observer_) bucket_observer_(-1);
  });
}

void GlooCommunicator::finish_all_reduces() { wait_idle(); }

void GlooCommunicator::all_reduce_average(float* data, size_t count) {
  run_blocking([this, data, count](std::uint32_t tag) { sum_then_scale(data, count, tag); });
}

void GlooCommunicator::broadcast(float* data, size_t count, int root) {
  run_blocking([this, data, count, root](std::uint32_t tag) {
    try {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(data, count);
      opts.setRoot(root);
      opts.setTag(tag);
      gloo::broadcast(opts);
    } catch (const std::exception& e) {
      throw CommunicatorError(describe_failure("broadcast", e));
    }
  });
}

void GlooCommunicator::barrier() {
  run_blocking([this](std::uint32_t tag) {
    try {
      gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      gloo::barrier(opts);
    } catch (const std::exception& e) {
      throw CommunicatorError(describe_failure("barrier", e));
    }
  });
}

std::unique_ptr<Communicator> make_gloo_communicator(const WorkerEnv& env, double connect_timeout_s) {
  GlooOptions options;
  options.prefix = env.run_id;
  options.connect_timeout = std::chrono::milliseconds(static_cast<long long>(connect_timeout_s * 1000));
  const int rank = env.where.rank;
  const int world = env.where.world_size;
  if (env.store_endpoint.empty()) {
    const std::string dir = (env.run_dir.empty() ? std::string(".") : env.run_dir) + "/rendezvous";
    std::filesystem::create_directories(dir);
    gloo::rendezvous::FileStore store(dir);
    options.store_name = dir;
    return std::make_unique<GlooCommunicator>(rank, world, store, options);
  }
  // Several nodes: listen where the peers can reach us.
  const char* iface = std::getenv("GLOO_SOCKET_IFNAME");
  if (iface && *iface) {
    options.hostname.clear();
    options.iface = iface;
  } else {
    options.hostname = env.node_addr;
  }
  kv::KvClientOptions client_options;
  client_options.connect_timeout = options.connect_timeout;
  kv::KvClient client(kv::parse_endpoint(env.store_endpoint), env.job_token, client_options);
  GlooKvStore store(client, options.connect_timeout);
  options.store_name = "rendezvous store " + env.store_endpoint;
  return std::make_unique<GlooCommunicator>(rank, world, store, options);
}

}  // namespace xtrain
