// Helpers for the store's tests: a token, quick client options, free ports, and a raw socket for
// sending what a well-behaved client never would.
#pragma once

#include <array>
#include <chrono>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "common/store/kv_client.hpp"
#include "common/store/kv_server.hpp"

namespace xtrain::kv::testing {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline const std::string kToken = "test-token-0123456789";

inline Endpoint loopback_any_port() { return Endpoint{"127.0.0.1", 0}; }

// Reads exactly n bytes from a socket within `within`; false on its end, an error or the time.
inline bool read_exact(int fd, char* data, size_t n, std::chrono::milliseconds within) {
  const auto deadline = Clock::now() + within;
  while (n > 0) {
    pollfd p{fd, POLLIN, 0};
    if (Clock::now() >= deadline) return false;
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t got = ::recv(fd, data, n, 0);
    if (got <= 0) return false;
    data += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// One frame's payload (kv_protocol.hpp), or false.
inline bool read_frame(int fd, std::vector<char>& payload, std::chrono::milliseconds within) {
  std::array<char, kFrameHeaderBytes> header{};
  if (!read_exact(fd, header.data(), header.size(), within)) return false;
  payload.resize(decode_frame_length(header));
  return read_exact(fd, payload.data(), payload.size(), within);
}

inline KvClientOptions quick(std::chrono::milliseconds connect = 5s) {
  KvClientOptions o;
  o.connect_timeout = connect;
  o.io_timeout = 5s;
  return o;
}

// A plain TCP socket for sending what a well-behaved client never would.
class RawSocket {
 public:
  explicit RawSocket(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  }
  ~RawSocket() { ::close(fd_); }

  void send(const std::vector<char>& bytes) {
    // The server may already have closed: a failed send is fine, closed_within() tells.
    (void)::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }
  void send(const Request& q) { send(encode_frame(q)); }
  void hello(const std::string& token = kToken) {
    send(Request{Op::kHello, {}, token, kProtocolVersion, 0});
    const Response r = receive(2s);
    REQUIRE(r.status == Status::kOk);
  }

  Response receive(std::chrono::milliseconds within) {
    std::vector<char> payload;
    REQUIRE(read_frame(fd_, payload, within));
    return decode_response(payload);
  }

  // True when the server closed the connection (reading hits end of file or a reset) within
  // `within`; answers that arrive first are skipped.
  bool closed_within(std::chrono::milliseconds within) {
    const auto deadline = Clock::now() + within;
    char buf[4096];
    while (Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
    }
    return false;
  }

 private:
  int fd_ = -1;
};

// A port nobody listens on right now (taken from a server that is gone again).
inline std::uint16_t free_port() {
  KvServerThread probe(loopback_any_port(), kToken);
  return probe.local_endpoint().port;
}


}  // namespace xtrain::kv::testing
