// The rendezvous store's wire format: every message survives a round trip byte for byte, and
// every way a frame can be malformed is refused with a ProtocolError saying what is wrong.
#include <catch2/catch.hpp>

#include "common/store/kv_protocol.hpp"

using namespace xtrain::kv;

namespace {

std::span<const char> payload_of(const std::vector<char>& frame) {
  std::array<char, kFrameHeaderBytes> header{};
  std::copy_n(frame.begin(), kFrameHeaderBytes, header.begin());
  REQUIRE(decode_frame_length(header) == frame.size() - kFrameHeaderBytes);
  return std::span<const char>(frame).subspan(kFrameHeaderBytes);
}

std::array<char, kFrameHeaderBytes> header_for(std::uint32_t n) {
  return {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
          static_cast<char>(n)};
}

}  // namespace

TEST_CASE("kv protocol: requests round-trip", "[kv][protocol]") {
  const std::string binary("a\0b\xff\x01", 5);
  const std::vector<Request> requests = {
      {Op::kHello, {}, "secret-token", kProtocolVersion, 0},
      {Op::kSet, {"key/1"}, binary, 0, 0},
      {Op::kSet, {binary}, "", 0, 0},
      {Op::kGet, {"k"}, "", 0, 4'000'000'000u},
      {Op::kAdd, {"counter"}, "", -9'000'000'000'000'000'000LL, 0},
      {Op::kWait, {"a", "b", "c"}, "", 0, 1500},
      {Op::kCheck, {"a", ""}, "", 0, 0},
      {Op::kDelete, {"gone"}, "", 0, 0},
      {Op::kLease, {"xlaunch/a1/lease/3"}, R"({"node":3})", 0, 3000},
      {Op::kKeepalive, {}, "", 0, 0},
      {Op::kRelease, {}, "", 0, 0},
  };
  for (const auto& q : requests) {
    const Request back = decode_request(payload_of(encode_frame(q)));
    CHECK(back.op == q.op);
    CHECK(back.keys == q.keys);
    CHECK(back.value == q.value);
    CHECK(back.number == q.number);
    CHECK(back.timeout_ms == q.timeout_ms);
  }
}

TEST_CASE("kv protocol: responses round-trip", "[kv][protocol]") {
  const std::vector<Response> responses = {
      {Status::kOk, 0, std::string("\0value\0", 7), {}},
      {Status::kOk, -42, "", {}},
      {Status::kTimeout, 0, "", {"missing/1", "missing/2"}},
      {Status::kRefused, 0, "wrong job token", {}},
      {Status::kError, 0, "the store is full", {}},
  };
  for (const auto& r : responses) {
    const Response back = decode_response(payload_of(encode_frame(r)));
    CHECK(back.status == r.status);
    CHECK(back.number == r.number);
    CHECK(back.value == r.value);
    CHECK(back.keys == r.keys);
  }
}

TEST_CASE("kv protocol: frame length limits", "[kv][protocol]") {
  CHECK(decode_frame_length(header_for(1)) == 1);
  CHECK(decode_frame_length(header_for(kMaxFrameBytes)) == kMaxFrameBytes);
  CHECK_THROWS_WITH(decode_frame_length(header_for(0)), "empty frame");
  CHECK_THROWS_WITH(decode_frame_length(header_for(kMaxFrameBytes + 1)),
                    Catch::Contains("exceeds the 1048576-byte limit"));
  CHECK_THROWS_WITH(decode_frame_length(header_for(0xffffffffu)), Catch::Contains("4294967295 bytes"));
  CHECK_THROWS_AS(decode_frame_length(header_for(5000), kMaxHelloFrameBytes), ProtocolError);

  // A message that would not fit is refused when encoding, not sent.
  Request big{Op::kSet, {"k"}, std::string(kMaxFrameBytes, 'x'), 0, 0};
  CHECK_THROWS_WITH(encode_frame(big), Catch::Contains("exceeds the 1048576-byte frame limit"));
  big.value.resize(kMaxFrameBytes - 64);
  CHECK(encode_frame(big).size() <= kFrameHeaderBytes + kMaxFrameBytes);
}

TEST_CASE("kv protocol: malformed payloads are refused", "[kv][protocol]") {
  const std::vector<char> set = encode_frame(Request{Op::kSet, {"key"}, "value", 0, 0});
  const auto payload = std::span<const char>(set).subspan(kFrameHeaderBytes);

  SECTION("truncated anywhere") {
    for (size_t n = 0; n < payload.size(); ++n) {
      CHECK_THROWS_AS(decode_request(payload.first(n)), ProtocolError);
    }
  }
  SECTION("trailing bytes") {
    std::vector<char> longer(payload.begin(), payload.end());
    longer.push_back('!');
    CHECK_THROWS_WITH(decode_request(longer), Catch::Contains("1 unexpected bytes"));
  }
  SECTION("unknown op") {
    std::vector<char> bad(payload.begin(), payload.end());
    bad[0] = 99;
    CHECK_THROWS_WITH(decode_request(bad), "unknown op 99");
    bad[0] = 0;
    CHECK_THROWS_WITH(decode_request(bad), "unknown op 0");
  }
  SECTION("a key count the frame cannot hold") {
    std::vector<char> bad(payload.begin(), payload.end());
    // op(1) timeout(4) number(8) then the key count
    bad[13] = '\x7f';
    CHECK_THROWS_WITH(decode_request(bad), Catch::Contains("exceeds the frame"));
  }
  SECTION("a key length beyond the payload") {
    std::vector<char> bad(payload.begin(), payload.end());
    bad[17] = '\x7f';  // first key's length, high byte
    CHECK_THROWS_WITH(decode_request(bad), Catch::Contains("truncated message"));
  }
  SECTION("the wrong number of keys for the op") {
    const auto shape_error = [](const Request& q) {
      const auto frame = encode_frame(q);
      return std::vector<char>(frame.begin() + kFrameHeaderBytes, frame.end());
    };
    CHECK_THROWS_WITH(decode_request(shape_error({Op::kSet, {}, "v", 0, 0})), "SET with 0 keys");
    CHECK_THROWS_WITH(decode_request(shape_error({Op::kGet, {"a", "b"}, "", 0, 0})), "GET with 2 keys");
    CHECK_THROWS_WITH(decode_request(shape_error({Op::kWait, {}, "", 0, 0})), "WAIT with 0 keys");
    CHECK_THROWS_WITH(decode_request(shape_error({Op::kHello, {"x"}, "t", 1, 0})), "HELLO with 1 keys");
    CHECK_THROWS_WITH(decode_request(shape_error({Op::kLease, {}, "", 0, 1000})), "LEASE with 0 keys");
    CHECK_THROWS_WITH(decode_request(shape_error({Op::kKeepalive, {"k"}, "", 0, 0})), "KEEPALIVE with 1 keys");
  }
  SECTION("unknown status in a response") {
    auto frame = encode_frame(Response{});
    frame[kFrameHeaderBytes] = 7;
    CHECK_THROWS_WITH(decode_response(std::span<const char>(frame).subspan(kFrameHeaderBytes)),
                      "unknown status 7");
  }
}

TEST_CASE("kv protocol: token comparison", "[kv][protocol]") {
  CHECK(token_equals("secret", "secret"));
  CHECK_FALSE(token_equals("secret", "secreT"));
  CHECK_FALSE(token_equals("secret", "Secret"));
  CHECK_FALSE(token_equals("secret", "secre"));
  CHECK_FALSE(token_equals("secret", "secretsecret"));  // a repetition is not a match
  CHECK_FALSE(token_equals("secret", ""));
  CHECK_FALSE(token_equals("", "x"));
  CHECK(token_equals(std::string("a\0b", 3), std::string("a\0b", 3)));
  CHECK_FALSE(token_equals(std::string("a\0b", 3), std::string("a\0c", 3)));
}

TEST_CASE("kv protocol: endpoints", "[kv][protocol]") {
  const Endpoint a = parse_endpoint("node01:29400");
  CHECK(a.host == "node01");
  CHECK(a.port == 29400);
  CHECK(a.str() == "node01:29400");
  const Endpoint b = parse_endpoint("[fe80::1]:80");
  CHECK(b.host == "fe80::1");
  CHECK(b.port == 80);
  CHECK(b.str() == "[fe80::1]:80");
  CHECK(parse_endpoint("10.77.0.1:0").port == 0);

  CHECK_THROWS_WITH(parse_endpoint("node01"), Catch::Contains("\"node01\"") && Catch::Contains("no ':port'"));
  CHECK_THROWS_WITH(parse_endpoint(":29400"), Catch::Contains("the host is empty"));
  CHECK_THROWS_WITH(parse_endpoint("node01:65536"), Catch::Contains("not a number in 0..65535"));
  CHECK_THROWS_WITH(parse_endpoint("node01:29x"), Catch::Contains("\"29x\""));
  CHECK_THROWS_WITH(parse_endpoint("node01:"), Catch::Contains("not a number"));
  CHECK_THROWS_WITH(parse_endpoint("fe80::1:80"), Catch::Contains("needs [brackets]"));
  CHECK_THROWS_WITH(parse_endpoint("[fe80::1:80"), Catch::Contains("has no ']'"));
}
