// The wire format of the rendezvous key-value store (common/store/kv_server.hpp serves it,
// common/store/kv_client.hpp speaks it).
//
// Every message is a frame: a 4-byte big-endian payload length, then the payload. A connection
// opens with HELLO carrying the protocol version and the job token; the server answers kOk, or
// kRefused and closes. After that the client sends one request and reads its response, one at a
// time (a request sent before the previous response arrived is a protocol error).
//
// Leases make a client's death visible: after LEASE a connection must send a frame at least every
// `timeout_ms` (KEEPALIVE, answered at once, is the cheapest). When it falls silent that long, or
// closes, before RELEASE, the server reports the lease lost (common/store/kv_server.hpp's hook) and closes
// it; the client, for its part, gives the server up when a KEEPALIVE goes unanswered that long.
//
// Request payload:  op u8 | timeout_ms u32 | number i64 | key count u32 | (len u32, bytes)* |
//                   value len u32 | value bytes
// Response payload: status u8 | number i64 | value len u32 | value bytes | key count u32 |
//                   (len u32, bytes)*
// Integers are big-endian; keys and values are arbitrary bytes. A payload must be consumed
// exactly: short or trailing bytes make the frame malformed.
//
// Threat model: the token keeps other jobs (a stale job on the same port, another user's job)
// out of the store; it travels in clear text, so anyone who can read the network between the
// nodes can read it. Tokens are compared in constant time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace xtrain::kv {

inline constexpr std::uint32_t kProtocolVersion = 2;  // 2: LEASE, KEEPALIVE, RELEASE, MGET
inline constexpr std::size_t kFrameHeaderBytes = 4;
// Largest payload of any frame. Rendezvous data is small (Gloo's biggest value is one rank's
// addresses to all peers, about 100 bytes per peer); the limit bounds a connection's memory.
inline constexpr std::size_t kMaxFrameBytes = std::size_t{1} << 20;
// Largest payload before the handshake succeeded: a stranger gets no more than this much memory.
inline constexpr std::size_t kMaxHelloFrameBytes = 4096;

enum class Op : std::uint8_t {
  kHello = 1,   // value = token, number = protocol version
  kSet = 2,     // keys = {key}, value
  kGet = 3,     // keys = {key}, timeout_ms: wait until the key exists
  kAdd = 4,     // keys = {key}, number = delta; the value is a decimal integer (missing = 0)
  kWait = 5,    // keys (one or more), timeout_ms: wait until all exist
  kCheck = 6,   // keys (one or more): do all exist now?
  kDelete = 7,  // keys = {key}
  kLease = 8,      // keys = {name}, value = what the holder is (reported with its loss),
                   // timeout_ms = the longest silence allowed (> 0); one lease per connection
  kKeepalive = 9,  // no keys: renews the lease (any frame does); answered at once
  kRelease = 10,   // no keys: ends the lease cleanly; number = 1 if one was held
  kMultiGet = 11,  // keys (one or more), timeout_ms: like WAIT, and the answer has their values
};

enum class Status : std::uint8_t {
  kOk = 0,       // GET: value; MGET: keys = the values, in the order asked; ADD: number = new
                 // value; CHECK/DELETE: number = 1 (yes) or 0 (no)
  kTimeout = 1,  // GET/WAIT: keys = those still missing when the time was up
  kRefused = 2,  // HELLO: value = why (wrong token, other protocol version); the server closes
  kError = 3,    // value = why (store full, ADD on a value that is not an integer, lease refused)
};

struct Request {
  Op op = Op::kHello;
  std::vector<std::string> keys;
  std::string value;
  std::int64_t number = 0;
  std::uint32_t timeout_ms = 0;  // GET/WAIT: 0 = answer at once
};

struct Response {
  Status status = Status::kOk;
  std::int64_t number = 0;
  std::string value;              // GET's value, or the reason for kRefused/kError
  std::vector<std::string> keys;  // kTimeout: the missing keys; MGET's kOk: the values
};

// A malformed or oversized frame. The server closes that connection; the client gives up.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

const char* op_name(Op op);

// Whole frames (header + payload), ready to write. Throw ProtocolError if over kMaxFrameBytes.
std::vector<char> encode_frame(const Request& request);
std::vector<char> encode_frame(const Response& response);

// The payload length a header announces; throws ProtocolError when it is 0 or over `limit`.
std::size_t decode_frame_length(const std::array<char, kFrameHeaderBytes>& header,
                                std::size_t limit = kMaxFrameBytes);

// Payload (without the header) to message. A request is also checked for the shape its op
// needs (key counts); both throw ProtocolError saying what is wrong.
Request decode_request(std::span<const char> payload);
Response decode_response(std::span<const char> payload);

// Equality in time that depends only on the lengths, not on where the first difference is.
bool token_equals(std::string_view expected, std::string_view given);

// "host:port" or "[v6-address]:port".
struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
  std::string str() const;
};

// Throws std::invalid_argument naming the text and what was expected. Port 0 is allowed (a
// server picks a free port).
Endpoint parse_endpoint(std::string_view text);

}  // namespace xtrain::kv
