#include "common/gpu/nccl_id.hpp"

#include <random>
#include <stdexcept>

namespace xtrain {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string encode_nccl_id(const NcclIdBytes& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(2 * id.size(), '\0');
  for (size_t i = 0; i < id.size(); ++i) {
    hex[2 * i] = kDigits[id[i] >> 4];
    hex[2 * i + 1] = kDigits[id[i] & 0xf];
  }
  return hex;
}

NcclIdBytes decode_nccl_id(std::string_view hex) {
  if (hex.size() != 2 * kNcclIdBytes) {
    throw std::invalid_argument("XTRAIN_NCCL_ID: expected " + std::to_string(2 * kNcclIdBytes) +
                                " hex characters, got " + std::to_string(hex.size()));
  }
  NcclIdBytes id{};
  for (size_t i = 0; i < hex.size(); ++i) {
    const int v = hex_value(hex[i]);
    if (v < 0) {
      const unsigned char c = static_cast<unsigned char>(hex[i]);
      static constexpr char kDigits[] = "0123456789abcdef";
      const std::string shown = (c >= 0x20 && c < 0x7f)
                                    ? std::string("'") + hex[i] + "'"
                                    : std::string("byte 0x") + kDigits[c >> 4] + kDigits[c & 0xf];
      throw std::invalid_argument("XTRAIN_NCCL_ID: character " + std::to_string(i) + " is " + shown +
                                  ", expected a hex digit");
    }
    id[i / 2] = static_cast<std::uint8_t>(i % 2 == 0 ? v << 4 : id[i / 2] | v);
  }
  return id;
}

NcclIdBytes random_nccl_id() {
  std::random_device random;
  NcclIdBytes id;
  for (std::uint8_t& b : id) b = static_cast<std::uint8_t>(random());
  return id;
}

std::filesystem::path interpret_nccl_meeting_dir(std::string_view id_hex, const char* temp_dir) {
  const std::filesystem::path base = temp_dir != nullptr && *temp_dir != '\0' ? temp_dir : "/tmp";
  return base / ("xtrain-interp-nccl-" + std::string(id_hex.substr(0, 32)));
}

}  // namespace xtrain
