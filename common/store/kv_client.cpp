#include "common/store/kv_client.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace xtrain::kv {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A socket-level failure; the caller decides whether it is worth another try.
struct IoFailure {
  std::string what;
  bool timed_out = false;
};

std::string seconds(milliseconds ms) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << static_cast<double>(ms.count()) / 1000.0 << " s";
  return out.str();
}

int poll_timeout_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 60'000));  // re-checked in a loop
}

// Waits until `fd` is ready for `events` or the deadline passes (IoFailure naming `waiting`).
// Looks at least once, even when the deadline has passed already.
void wait_ready(int fd, short events, Clock::time_point deadline, const std::string& waiting) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (n > 0) return;
    if (n < 0 && errno != EINTR) throw IoFailure{std::string("poll: ") + std::strerror(errno)};
    if (Clock::now() >= deadline) throw IoFailure{"timed out waiting for " + waiting, true};
  }
}

void write_all(int fd, const char* data, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    const ssize_t sent = ::send(fd, data, n, MSG_NOSIGNAL);
    if (sent > 0) {
      data += sent;
      n -= static_cast<size_t>(sent);
    } else if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      wait_ready(fd, POLLOUT, deadline, "room to send");
    } else {
      throw IoFailure{std::string("send: ") + std::strerror(errno)};
    }
  }
}

void read_exact(int fd, char* data, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    const ssize_t got = ::recv(fd, data, n, 0);
    if (got > 0) {
      data += got;
      n -= static_cast<size_t>(got);
    } else if (got == 0) {
      throw IoFailure{"connection closed by the server"};
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      wait_ready(fd, POLLIN, deadline, "an answer");
    } else {
      throw IoFailure{std::string("recv: ") + std::strerror(errno)};
    }
  }
}

Response receive(int fd, Clock::time_point deadline) {
  std::array<char, kFrameHeaderBytes> header{};
  read_exact(fd, header.data(), header.size(), deadline);
  std::vector<char> payload(decode_frame_length(header));
  read_exact(fd, payload.data(), payload.size(), deadline);
  return decode_response(payload);
}

// Non-blocking connect to one address, finished by the deadline; returns the socket.
int connect_to(const addrinfo& ai, Clock::time_point deadline) {
  const int fd = ::socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai.ai_protocol);
  if (fd < 0) throw IoFailure{std::string("socket: ") + std::strerror(errno)};
  try {
    if (::connect(fd, ai.ai_addr, ai.ai_addrlen) != 0) {
      if (errno != EINPROGRESS) throw IoFailure{std::strerror(errno)};
      wait_ready(fd, POLLOUT, deadline, "the connection");
      int error = 0;
      socklen_t len = sizeof error;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
      if (error != 0) throw IoFailure{std::strerror(error)};
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

std::string quoted_list(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) out += (i ? ", \"" : "\"") + keys[i] + "\"";
  if (keys.size() > kShown) out += " and " + std::to_string(keys.size() - kShown) + " more";
  return out;
}

std::uint32_t to_wire_timeout(milliseconds timeout) {
  return static_cast<std::uint32_t>(std::clamp<long long>(timeout.count(), 0, UINT32_MAX));
}

std::string describe(const Request& q) {
  std::string out = op_name(q.op);
  if (!q.keys.empty()) out += " " + quoted_list(q.keys);
  return out;
}

// The address this end of a connected socket has: the interface the server is reached through.
std::string socket_local_address(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "";
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw = addr.ss_family == AF_INET6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr)
                                               : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&addr)->sin_addr);
  return ::inet_ntop(addr.ss_family, raw, text, sizeof(text)) ? text : "";
}

}  // namespace

KvClient::KvClient(Endpoint endpoint, std::string token, KvClientOptions options)
    : endpoint_(std::move(endpoint)), token_(std::move(token)), options_(options) {
  if (token_.empty()) throw std::invalid_argument("KvClient: the job token is empty");
  connect_until(Clock::now() + options_.connect_timeout);
}

KvClient::~KvClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::string KvClient::where() const { return "rendezvous store at " + endpoint_.str(); }

void KvClient::connect_until(Clock::time_point deadline) {
  const auto started = Clock::now();
  milliseconds backoff{50};
  std::string last_error;
  while (!try_connect_once(deadline, last_error)) {
    if (Clock::now() >= deadline) {
      throw KvError(where() + ": could not connect within " +
                    seconds(std::chrono::duration_cast<milliseconds>(Clock::now() - started)) +
                    " (last error: " + last_error + ")");
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
    backoff = std::min(backoff * 2, milliseconds(1000));
  }
}

bool KvClient::try_connect_once(Clock::time_point deadline, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(endpoint_.port);
  if (const int rc = ::getaddrinfo(endpoint_.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    error = "cannot resolve \"" + endpoint_.host + "\": " + ::gai_strerror(rc);
    return false;
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, &::freeaddrinfo);
  for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    int fd = -1;
    try {
      // One attempt may not use up the whole deadline: a dropped SYN should not stall retries.
      fd = connect_to(*ai, std::min(deadline, Clock::now() + std::chrono::seconds(5)));
      Request hello;
      hello.op = Op::kHello;
      hello.value = token_;
      hello.number = kProtocolVersion;
      const auto answer_by = Clock::now() + options_.io_timeout;
      const std::vector<char> frame = encode_frame(hello);
      write_all(fd, frame.data(), frame.size(), answer_by);
      const Response reply = receive(fd, answer_by);
      if (reply.status != Status::kOk) {
        ::close(fd);
        // A refusal is an answer, not a transient failure: do not retry.
        throw KvError(where() + " refused this client: " + reply.value +
                      " (every node must use the same job token: XTRAIN_JOB_TOKEN, or the one "
                      "derived from the SLURM job)");
      }
      fd_ = fd;
      local_address_ = socket_local_address(fd);
      return true;
    } catch (const IoFailure& e) {
      if (fd >= 0) ::close(fd);
      // An attempt cut short by the deadline says less than the failure before it.
      if (!e.timed_out || error.empty()) error = e.what;
    } catch (const ProtocolError& e) {
      ::close(fd);
      error = std::string("not a rendezvous store: ") + e.what();
    }
  }
  return false;
}

void KvClient::fail(const std::string& what) {
  {
    std::lock_guard lock(abort_mutex_);
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  broken_ = what;
  throw KvError(where() + ": " + what);
}

void KvClient::abort(const std::string& why) {
  std::lock_guard lock(abort_mutex_);
  if (aborted_.empty()) aborted_ = why;
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);  // wakes a poll() or recv() in progress
}

Response KvClient::call(const Request& request, milliseconds waits_for) {
  return call_within(request, waits_for + options_.io_timeout);
}

Response KvClient::call_within(const Request& request, milliseconds limit) {
  std::lock_guard lock(mutex_);
  if (!broken_.empty()) {
    throw KvError(where() + ": " + describe(request) + ": not sent, the connection was lost earlier (" +
                  broken_ + ")");
  }
  const auto deadline = Clock::now() + limit;
  std::vector<char> frame;
  try {
    frame = encode_frame(request);
  } catch (const ProtocolError& e) {  // too large to send: the connection is still fine
    throw KvError(where() + ": " + describe(request) + ": " + e.what());
  }
  try {
    write_all(fd_, frame.data(), frame.size(), deadline);
    return receive(fd_, deadline);
  } catch (const IoFailure& e) {
    std::string why;
    {
      std::lock_guard aborting(abort_mutex_);
      why = aborted_;
    }
    if (why.empty()) why = e.what + (e.timed_out ? " (" + seconds(limit) + ")" : "");
    fail(describe(request) + ": " + why);
  } catch (const ProtocolError& e) {
    fail(describe(request) + ": malformed answer: " + e.what());
  }
}

void KvClient::expect_ok(const Request& request, const Response& response) const {
  if (response.status != Status::kOk) throw KvError(where() + ": " + describe(request) + ": " + response.value);
}

void KvClient::set(const std::string& key, std::string_view value) {
  Request q{Op::kSet, {key}, std::string(value), 0, 0};
  expect_ok(q, call(q, milliseconds(0)));
}

std::string KvClient::get(const std::string& key, milliseconds timeout) {
  Request q{Op::kGet, {key}, {}, 0, to_wire_timeout(timeout)};
  Response r = call(q, timeout);
  if (r.status == Status::kTimeout) {
    throw KvTimeoutError(where() + ": gave up after " + seconds(timeout) + " waiting for key \"" +
                             key + "\" to be set",
                         {key});
  }
  expect_ok(q, r);
  return std::move(r.value);
}

std::int64_t KvClient::add(const std::string& key, std::int64_t delta) {
  Request q{Op::kAdd, {key}, {}, delta, 0};
  const Response r = call(q, milliseconds(0));
  expect_ok(q, r);
  return r.number;
}

void KvClient::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  wait_for_keys(Op::kWait, keys, timeout);
}

std::vector<std::string> KvClient::get_many(const std::vector<std::string>& keys, milliseconds timeout) {
  return wait_for_keys(Op::kMultiGet, keys, timeout).keys;
}

Response KvClient::wait_for_keys(Op op, const std::vector<std::string>& keys, milliseconds timeout) {
  Request q{op, keys, {}, 0, to_wire_timeout(timeout)};
  Response r = call(q, timeout);
  if (r.status == Status::kTimeout) {
    const std::string message = where() + ": gave up after " + seconds(timeout) + " waiting for " +
                                std::to_string(r.keys.size()) + " of " + std::to_string(keys.size()) +
                                " keys; missing: " + quoted_list(r.keys);
    throw KvTimeoutError(message, std::move(r.keys));
  }
  expect_ok(q, r);
  return r;
}

bool KvClient::check(const std::vector<std::string>& keys) {
  Request q{Op::kCheck, keys, {}, 0, 0};
  const Response r = call(q, milliseconds(0));
  expect_ok(q, r);
  return r.number != 0;
}

bool KvClient::remove(const std::string& key) {
  Request q{Op::kDelete, {key}, {}, 0, 0};
  const Response r = call(q, milliseconds(0));
  expect_ok(q, r);
  return r.number != 0;
}

void KvClient::lease(const std::string& name, std::string_view info, milliseconds silence_limit) {
  Request q{Op::kLease, {name}, std::string(info), 0, to_wire_timeout(silence_limit)};
  expect_ok(q, call(q, milliseconds(0)));
}

void KvClient::keepalive(milliseconds timeout) {
  const Request q{Op::kKeepalive, {}, {}, 0, 0};
  expect_ok(q, call_within(q, timeout));
}

void KvClient::release() {
  const Request q{Op::kRelease, {}, {}, 0, 0};
  expect_ok(q, call(q, milliseconds(0)));
}

}  // namespace xtrain::kv
