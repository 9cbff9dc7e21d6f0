#include "worker/comm/gloo_kv_store.hpp"

namespace xtrain {

GlooKvStore::GlooKvStore(kv::KvClient& client, std::chrono::milliseconds timeout)
    : client_(client), timeout_(timeout) {}

void GlooKvStore::set(const std::string& key, const std::vector<char>& data) {
  client_.set(key, std::string_view(data.data(), data.size()));
}

std::vector<char> GlooKvStore::get(const std::string& key) {
  const std::string value = client_.get(key, timeout_);
  return std::vector<char>(value.begin(), value.end());
}

void GlooKvStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooKvStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  client_.wait(keys, timeout);
}

}  // namespace xtrain
