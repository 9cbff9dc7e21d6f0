// Gloo's rendezvous store over the rendezvous key-value store (common/store/kv_client.hpp), so Gloo
// ranks on different machines meet through node 0's xlaunch instead of a shared directory.
// Wrap it in a gloo::rendezvous::PrefixStore with a per-run-and-attempt prefix, as with the
// FileStore: keys of earlier attempts stay in the store.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "common/store/kv_client.hpp"

namespace xtrain {

class GlooKvStore final : public gloo::rendezvous::Store {
 public:
  // `client` must outlive the store. `timeout` bounds get() and wait(keys) without a timeout.
  GlooKvStore(kv::KvClient& client, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits (up to the timeout) for the key, as Gloo's own stores do.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  kv::KvClient& client_;
  std::chrono::milliseconds timeout_;
};

}  // namespace xtrain
