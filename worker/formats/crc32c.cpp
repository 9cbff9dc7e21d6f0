#include "worker/formats/crc32c.hpp"

#include <array>
#include <cstdio>
#include <cstring>

namespace xtrain {
namespace {

constexpr std::uint32_t kPolynomial = 0x82F63B78u;  // reflected

// table[k][b]: the CRC of byte b followed by k zero bytes, for slicing by 8.
using Tables = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    std::uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kPolynomial : 0u);
    t[0][b] = c;
  }
  for (int k = 1; k < 8; ++k) {
    for (int b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  }
  return t;
}

constexpr Tables kTables = make_tables();

std::uint32_t update_portable(std::uint32_t crc, const std::uint8_t* p, size_t n) {
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);  // little-endian: the first byte in the low bits
    word ^= crc;
    crc = kTables[7][word & 0xFF] ^ kTables[6][(word >> 8) & 0xFF] ^ kTables[5][(word >> 16) & 0xFF] ^
          kTables[4][(word >> 24) & 0xFF] ^ kTables[3][(word >> 32) & 0xFF] ^ kTables[2][(word >> 40) & 0xFF] ^
          kTables[1][(word >> 48) & 0xFF] ^ kTables[0][word >> 56];
  }
  for (; n > 0; --n, ++p) crc = (crc >> 8) ^ kTables[0][(crc ^ *p) & 0xFF];
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t update_sse42_chain(std::uint32_t crc, const std::uint8_t* p, size_t n) {
  std::uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  auto c32 = static_cast<std::uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}

// One crc32 instruction chain runs at a third of the unit's speed (its latency is 3 cycles, its
// throughput 1), so large inputs go through three chains at once, over three stripes of a block,
// then fold them: the state after A then B is shift(state after A, |B|) ^ (B's state from 0),
// where shift (running a state over |B| zero bytes) is linear in the state, so four 256-entry
// tables per stripe length apply it.
constexpr size_t kStripe = 4096;

using ShiftTables = std::array<std::array<std::uint32_t, 256>, 4>;

ShiftTables make_shift_tables(size_t zero_bytes) {
  static const std::array<std::uint8_t, 2 * kStripe> kZeros{};
  std::array<std::uint32_t, 32> basis;
  for (int bit = 0; bit < 32; ++bit) basis[bit] = update_sse42_chain(1u << bit, kZeros.data(), zero_bytes);
  ShiftTables t{};
  for (int k = 0; k < 4; ++k) {
    for (std::uint32_t b = 0; b < 256; ++b) {
      for (int j = 0; j < 8; ++j) t[k][b] ^= (b >> j & 1u) ? basis[8 * k + j] : 0u;
    }
  }
  return t;
}

std::uint32_t shift(const ShiftTables& t, std::uint32_t c) {
  return t[0][c & 0xFF] ^ t[1][(c >> 8) & 0xFF] ^ t[2][(c >> 16) & 0xFF] ^ t[3][c >> 24];
}

__attribute__((target("sse4.2"))) std::uint32_t update_sse42(std::uint32_t crc, const std::uint8_t* p, size_t n) {
  static const ShiftTables kOne = make_shift_tables(kStripe), kTwo = make_shift_tables(2 * kStripe);
  for (; n >= 3 * kStripe; n -= 3 * kStripe, p += 3 * kStripe) {
    std::uint64_t a = crc, b = 0, c = 0;
    for (size_t i = 0; i < kStripe; i += 8) {
      std::uint64_t wa, wb, wc;
      std::memcpy(&wa, p + i, 8);
      std::memcpy(&wb, p + kStripe + i, 8);
      std::memcpy(&wc, p + 2 * kStripe + i, 8);
      a = __builtin_ia32_crc32di(a, wa);
      b = __builtin_ia32_crc32di(b, wb);
      c = __builtin_ia32_crc32di(c, wc);
    }
    crc = shift(kTwo, static_cast<std::uint32_t>(a)) ^ shift(kOne, static_cast<std::uint32_t>(b)) ^
          static_cast<std::uint32_t>(c);
  }
  return update_sse42_chain(crc, p, n);
}

std::uint32_t update_any(std::uint32_t crc, const std::uint8_t* p, size_t n) {
  using UpdateFn = std::uint32_t (*)(std::uint32_t, const std::uint8_t*, size_t);
  static const UpdateFn chosen = [] {
    __builtin_cpu_init();  // may run before libgcc's own initialisation
    return __builtin_cpu_supports("sse4.2") ? update_sse42 : update_portable;
  }();
  return chosen(crc, p, n);
}
#else
std::uint32_t update_any(std::uint32_t crc, const std::uint8_t* p, size_t n) { return update_portable(crc, p, n); }
#endif

// Polynomials over GF(2) modulo the CRC's, in the reflected order of its state: the top bit is
// x^0, the bottom bit x^31. a * b, one bit of `a` at a time against b, x b, x^2 b, ...
std::uint32_t multiply_mod_p(std::uint32_t a, std::uint32_t b) {
  std::uint32_t product = 0;
  for (std::uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
    if (a & bit) product ^= b;
    b = (b >> 1) ^ ((b & 1u) ? kPolynomial : 0u);  // b * x
  }
  return product;
}

// The state `state` becomes after `bytes` zero bytes: state * x^(8 bytes), by squaring.
std::uint32_t after_zeros(std::uint32_t state, std::uint64_t bytes) {
  std::uint32_t power = 1u << 23;  // x^8
  for (; bytes != 0; bytes >>= 1) {
    if (bytes & 1u) state = multiply_mod_p(state, power);
    power = multiply_mod_p(power, power);
  }
  return state;
}

}  // namespace

// The state is linear in the stream's bits once the initial value's share is set aside, and two
// streams of one length share it: changing bytes xors the state with the change's own state (the
// difference of the two pieces' CRCs, whose initial values and final xors cancel) run over the
// `after` bytes that followed them.
void Crc32c::replace(const void* was, const void* now, size_t count, std::uint64_t after) {
  state_ ^= after_zeros(crc32c(was, count) ^ crc32c(now, count), after);
}

// A's final value is its state xor the initial value, so running it over |B| zero bytes gives what
// A's state adds to B's past B's own initial value's share; B's CRC carries the rest.
std::uint32_t crc32c_combine(std::uint32_t first, std::uint32_t second, std::uint64_t second_bytes) {
  return after_zeros(first, second_bytes) ^ second;
}

void Crc32c::update(const void* data, size_t bytes) {
  state_ = update_any(state_, static_cast<const std::uint8_t*>(data), bytes);
}

std::string crc32c_hex(std::uint32_t value) {
  char out[9];
  std::snprintf(out, sizeof out, "%08x", value);
  return out;
}

std::uint32_t crc32c(const void* data, size_t bytes) {
  Crc32c c;
  c.update(data, bytes);
  return c.value();
}

std::uint32_t crc32c_portable(const void* data, size_t bytes) {
  return ~update_portable(0xFFFFFFFFu, static_cast<const std::uint8_t*>(data), bytes);
}

}  // namespace xtrain
