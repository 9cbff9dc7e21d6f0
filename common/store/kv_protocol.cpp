#include "common/store/kv_protocol.hpp"

#include <charconv>

namespace xtrain::kv {
namespace {

class Writer {
 public:
  Writer() { bytes_.resize(kFrameHeaderBytes); }  // header filled in by finish()

  void u8(std::uint8_t v) { bytes_.push_back(static_cast<char>(v)); }
  void u32(std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes_.push_back(static_cast<char>(v >> shift));
  }
  void i64(std::int64_t v) {
    const auto u = static_cast<std::uint64_t>(v);
    for (int shift = 56; shift >= 0; shift -= 8) bytes_.push_back(static_cast<char>(u >> shift));
  }
  void bytes(std::string_view s) {
    if (s.size() > kMaxFrameBytes) throw ProtocolError("a field of " + std::to_string(s.size()) +
                                                       " bytes does not fit in a frame");
    u32(static_cast<std::uint32_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  void keys(const std::vector<std::string>& keys) {
    u32(static_cast<std::uint32_t>(keys.size()));
    for (const auto& k : keys) bytes(k);
  }

  std::vector<char> finish() {
    const size_t payload = bytes_.size() - kFrameHeaderBytes;
    if (payload > kMaxFrameBytes) {
      throw ProtocolError("message of " + std::to_string(payload) + " bytes exceeds the " +
                          std::to_string(kMaxFrameBytes) + "-byte frame limit");
    }
    for (size_t i = 0; i < kFrameHeaderBytes; ++i) {
      bytes_[i] = static_cast<char>(payload >> (8 * (kFrameHeaderBytes - 1 - i)));
    }
    return std::move(bytes_);
  }

 private:
  std::vector<char> bytes_;
};

class Reader {
 public:
  explicit Reader(std::span<const char> payload) : data_(payload) {}

  std::uint8_t u8() { return static_cast<std::uint8_t>(take(1)[0]); }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    for (char c : take(4)) v = (v << 8) | static_cast<std::uint8_t>(c);
    return v;
  }
  std::int64_t i64() {
    std::uint64_t v = 0;
    for (char c : take(8)) v = (v << 8) | static_cast<std::uint8_t>(c);
    return static_cast<std::int64_t>(v);
  }
  std::string bytes() {
    const std::uint32_t n = u32();
    const auto s = take(n);
    return std::string(s.begin(), s.end());
  }
  std::vector<std::string> keys() {
    const std::uint32_t n = u32();
    // Each key needs at least its 4-byte length: a count beyond that is a lie, not a reason
    // to reserve memory.
    if (n > remaining() / 4) throw ProtocolError("key count " + std::to_string(n) + " exceeds the frame");
    std::vector<std::string> out;
    out.reserve(n);
    for (std::uint32_t i = 0; i < n; ++i) out.push_back(bytes());
    return out;
  }
  void expect_end() const {
    if (pos_ != data_.size()) {
      throw ProtocolError(std::to_string(data_.size() - pos_) + " unexpected bytes after the message");
    }
  }

 private:
  size_t remaining() const { return data_.size() - pos_; }
  std::span<const char> take(size_t n) {
    if (n > remaining()) {
      throw ProtocolError("truncated message: needed " + std::to_string(n) + " more bytes, " +
                          std::to_string(remaining()) + " left");
    }
    auto s = data_.subspan(pos_, n);
    pos_ += n;
    return s;
  }

  std::span<const char> data_;
  size_t pos_ = 0;
};

// Key counts each op accepts: {min, max}.
std::pair<size_t, size_t> key_count_range(Op op) {
  switch (op) {
    case Op::kHello:
    case Op::kKeepalive:
    case Op::kRelease: return {0, 0};
    case Op::kSet:
    case Op::kGet:
    case Op::kAdd:
    case Op::kDelete:
    case Op::kLease: return {1, 1};
    case Op::kWait:
    case Op::kCheck:
    case Op::kMultiGet: return {1, SIZE_MAX};
  }
  throw ProtocolError("unknown op " + std::to_string(static_cast<int>(op)));
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::kHello: return "HELLO";
    case Op::kSet: return "SET";
    case Op::kGet: return "GET";
    case Op::kAdd: return "ADD";
    case Op::kWait: return "WAIT";
    case Op::kCheck: return "CHECK";
    case Op::kDelete: return "DELETE";
    case Op::kLease: return "LEASE";
    case Op::kKeepalive: return "KEEPALIVE";
    case Op::kRelease: return "RELEASE";
    case Op::kMultiGet: return "MGET";
  }
  return "?";
}

std::vector<char> encode_frame(const Request& request) {
  Writer w;
  w.u8(static_cast<std::uint8_t>(request.op));
  w.u32(request.timeout_ms);
  w.i64(request.number);
  w.keys(request.keys);
  w.bytes(request.value);
  return w.finish();
}

std::vector<char> encode_frame(const Response& response) {
  Writer w;
  w.u8(static_cast<std::uint8_t>(response.status));
  w.i64(response.number);
  w.bytes(response.value);
  w.keys(response.keys);
  return w.finish();
}

std::size_t decode_frame_length(const std::array<char, kFrameHeaderBytes>& header, std::size_t limit) {
  std::size_t n = 0;
  for (char c : header) n = (n << 8) | static_cast<std::uint8_t>(c);
  if (n == 0) throw ProtocolError("empty frame");
  if (n > limit) {
    throw ProtocolError("frame of " + std::to_string(n) + " bytes exceeds the " +
                        std::to_string(limit) + "-byte limit");
  }
  return n;
}

Request decode_request(std::span<const char> payload) {
  Reader r(payload);
  Request q;
  const std::uint8_t op = r.u8();
  if (op < static_cast<std::uint8_t>(Op::kHello) || op > static_cast<std::uint8_t>(Op::kMultiGet)) {
    throw ProtocolError("unknown op " + std::to_string(op));
  }
  q.op = static_cast<Op>(op);
  q.timeout_ms = r.u32();
  q.number = r.i64();
  q.keys = r.keys();
  q.value = r.bytes();
  r.expect_end();
  const auto [min_keys, max_keys] = key_count_range(q.op);
  if (q.keys.size() < min_keys || q.keys.size() > max_keys) {
    throw ProtocolError(std::string(op_name(q.op)) + " with " + std::to_string(q.keys.size()) +
                        " keys");
  }
  return q;
}

Response decode_response(std::span<const char> payload) {
  Reader r(payload);
  Response s;
  const std::uint8_t status = r.u8();
  if (status > static_cast<std::uint8_t>(Status::kError)) {
    throw ProtocolError("unknown status " + std::to_string(status));
  }
  s.status = static_cast<Status>(status);
  s.number = r.i64();
  s.value = r.bytes();
  s.keys = r.keys();
  r.expect_end();
  return s;
}

bool token_equals(std::string_view expected, std::string_view given) {
  // Walk all of `given` whatever it holds; the time depends on its length only.
  unsigned char diff = expected.size() == given.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    const char e = expected.empty() ? 0 : expected[i % expected.size()];
    diff |= static_cast<unsigned char>(e ^ given[i]);
  }
  return diff == 0;
}

std::string Endpoint::str() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Endpoint parse_endpoint(std::string_view text) {
  const auto fail = [&](const std::string& why) {
    return std::invalid_argument("rendezvous endpoint \"" + std::string(text) +
                                 "\": expected host:port or [v6-address]:port, " + why);
  };
  Endpoint ep;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) throw fail("the '[' has no ']'");
    ep.host = std::string(text.substr(1, close - 1));
    if (close + 1 >= text.size() || text[close + 1] != ':') throw fail("no ':port' after ']'");
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) throw fail("no ':port'");
    ep.host = std::string(text.substr(0, colon));
    if (ep.host.find(':') != std::string::npos) throw fail("an IPv6 address needs [brackets]");
    port = text.substr(colon + 1);
  }
  if (ep.host.empty()) throw fail("the host is empty");
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    throw fail("the port \"" + std::string(port) + "\" is not a number in 0..65535");
  }
  ep.port = static_cast<std::uint16_t>(value);
  return ep;
}

}  // namespace xtrain::kv
