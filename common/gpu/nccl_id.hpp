// NCCL unique id codec: 128 bytes travel as 256 lowercase hex characters in XTRAIN_NCCL_ID.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace xtrain {

inline constexpr size_t kNcclIdBytes = 128;  // sizeof(ncclUniqueId), fixed by NCCL's ABI
using NcclIdBytes = std::array<std::uint8_t, kNcclIdBytes>;

std::string encode_nccl_id(const NcclIdBytes& id);

// Throws std::invalid_argument naming the problem: wrong length or the first non-hex character.
NcclIdBytes decode_nccl_id(std::string_view hex);

}  // namespace xtrain
