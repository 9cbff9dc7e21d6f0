#include <catch2/catch.hpp>

#include "common/gpu/nccl_id.hpp"

using namespace xtrain;

TEST_CASE("nccl id round-trips through hex", "[nccl_id]") {
  NcclIdBytes id{};
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<std::uint8_t>(i * 37 + 11);
  const std::string hex = encode_nccl_id(id);
  CHECK(hex.size() == 256);
  CHECK(hex.substr(0, 4) == "0b30");
  CHECK(decode_nccl_id(hex) == id);
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  CHECK(decode_nccl_id(upper) == id);
}

TEST_CASE("nccl id decoder rejects a wrong length", "[nccl_id]") {
  CHECK_THROWS_WITH(decode_nccl_id(std::string(255, 'a')),
                    "XTRAIN_NCCL_ID: expected 256 hex characters, got 255");
  CHECK_THROWS_WITH(decode_nccl_id(""), "XTRAIN_NCCL_ID: expected 256 hex characters, got 0");
}

TEST_CASE("nccl id decoder names the first non-hex character", "[nccl_id]") {
  std::string hex(256, 'f');
  hex[17] = 'g';
  CHECK_THROWS_WITH(decode_nccl_id(hex), "XTRAIN_NCCL_ID: character 17 is 'g', expected a hex digit");
  hex[17] = '\n';
  CHECK_THROWS_WITH(decode_nccl_id(hex), "XTRAIN_NCCL_ID: character 17 is byte 0x0a, expected a hex digit");
}
