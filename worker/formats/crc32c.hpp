// CRC-32C (Castagnoli), the checksum of checkpoint files: it detects every error of up to 32
// consecutive bits and any odd number of flipped bits, and x86 computes it in hardware (SSE4.2's
// crc32 instruction, 8 bytes per instruction, three chains at once), chosen at run time;
// elsewhere a table-driven version (slicing by 8) gives the same values. Standard parameters: reflected polynomial
// 0x82F63B78, initial value and final xor 0xFFFFFFFF; crc32c("123456789") = 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace xtrain {

// The checksum of a byte stream, fed in pieces.
class Crc32c {
 public:
  void update(const void* data, size_t bytes);
  std::uint32_t value() const { return ~state_; }
  // Makes this the checksum of the same stream with `count` bytes, which ended `after` bytes
  // before its end, changed from `was` to `now` (a header whose contents are known only once
  // the data behind it have gone by), without going over the stream again.
  void replace(const void* was, const void* now, size_t count, std::uint64_t after);

 private:
  std::uint32_t state_ = 0xFFFFFFFFu;
};

std::uint32_t crc32c(const void* data, size_t bytes);
// The CRC-32C of a stream A then B from A's and B's own and B's length, without reading either
// again (a file's header and its data, each checksummed as it went by).
std::uint32_t crc32c_combine(std::uint32_t first, std::uint32_t second, std::uint64_t second_bytes);
std::string crc32c_hex(std::uint32_t value);  // 8 lowercase hex digits

// The portable version, whatever the CPU (for tests that compare it with the hardware one).
std::uint32_t crc32c_portable(const void* data, size_t bytes);

}  // namespace xtrain
