// CRC-32C against the standard's check value and RFC 3720's (iSCSI) test vectors, and the
// hardware path against the portable one on every length and alignment.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "worker/formats/crc32c.hpp"

using namespace xtrain;

TEST_CASE("CRC-32C matches the published check values", "[crc32c]") {
  const std::string check = "123456789";
  CHECK(crc32c(check.data(), check.size()) == 0xE3069283u);
  CHECK(crc32c(nullptr, 0) == 0u);
  std::vector<std::uint8_t> zeros(32, 0), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i) up[i] = static_cast<std::uint8_t>(i), down[i] = static_cast<std::uint8_t>(31 - i);
  CHECK(crc32c(zeros.data(), 32) == 0x8A9136AAu);  // RFC 3720, B.4
  CHECK(crc32c(ones.data(), 32) == 0x62A8AB43u);
  CHECK(crc32c(up.data(), 32) == 0x46DD794Eu);
  CHECK(crc32c(down.data(), 32) == 0x113FDB5Cu);
  CHECK(crc32c_hex(0xE3069283u) == "e3069283");
  CHECK(crc32c_hex(0x1u) == "00000001");
}

TEST_CASE("CRC-32C is the same whatever the pieces, alignment and implementation", "[crc32c]") {
  std::vector<std::uint8_t> data(3 * 3 * 4096 + 100);  // several three-stripe blocks, and a tail
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& b : data) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<std::uint8_t>(x);
  }
  for (size_t offset : {0, 1, 3, 7}) {
    for (size_t n : {0, 1, 7, 8, 9, 63, 64, 65, 1000, 4091, 12287, 12288, 12289, 24576, 36864 + 91}) {
      INFO("offset " << offset << ", " << n << " bytes");
      const std::uint32_t whole = crc32c(data.data() + offset, n);
      CHECK(whole == crc32c_portable(data.data() + offset, n));
      Crc32c pieces;
      pieces.update(data.data() + offset, n / 3);
      pieces.update(data.data() + offset + n / 3, n - n / 3);
      CHECK(pieces.value() == whole);
    }
  }
}

TEST_CASE("CRC-32C replace gives the checksum of the stream with the bytes changed", "[crc32c]") {
  // 5 MiB and a bit, so that the bytes after a change run the squaring over many bits of length.
  std::vector<std::uint8_t> stream((5 << 20) + 37);
  std::uint64_t x = 0x2545F4914F6CDD1Dull;
  for (auto& b : stream) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<std::uint8_t>(x >> 24);
  }
  for (size_t at : {size_t{0}, size_t{1}, size_t{4096}, stream.size() - 9, stream.size() - 1}) {
    for (size_t count : {0, 1, 8, 9, 4096 + 3}) {
      if (at + count > stream.size()) continue;
      INFO(count << " bytes at " << at);
      std::vector<std::uint8_t> changed = stream;
      for (size_t i = 0; i < count; ++i) changed[at + i] = static_cast<std::uint8_t>(~changed[at + i] + i);
      Crc32c crc;
      crc.update(stream.data(), stream.size());
      crc.replace(stream.data() + at, changed.data() + at, count, stream.size() - at - count);
      CHECK(crc.value() == crc32c(changed.data(), changed.size()));
      // and the stream goes on from there as the changed one would
      crc.update(stream.data(), 100);
      Crc32c direct;
      direct.update(changed.data(), changed.size());
      direct.update(stream.data(), 100);
      CHECK(crc.value() == direct.value());
    }
  }
}

TEST_CASE("CRC-32C combine gives the checksum of two streams one after the other", "[crc32c]") {
  std::vector<std::uint8_t> stream((3 << 20) + 11);
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& b : stream) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<std::uint8_t>(x >> 32);
  }
  for (size_t split : {size_t{0}, size_t{1}, size_t{8}, size_t{4097}, stream.size() - 1, stream.size()}) {
    INFO("split at " << split);
    const std::uint32_t a = crc32c(stream.data(), split), b = crc32c(stream.data() + split, stream.size() - split);
    CHECK(crc32c_combine(a, b, stream.size() - split) == crc32c(stream.data(), stream.size()));
  }
}
