// NCCL unique id codec: 128 bytes travel as 256 lowercase hex characters in XTRAIN_NCCL_ID.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace xtrain {

inline constexpr size_t kNcclIdBytes = 128;  // sizeof(ncclUniqueId), fixed by NCCL's ABI
using NcclIdBytes = std::array<std::uint8_t, kNcclIdBytes>;

std::string encode_nccl_id(const NcclIdBytes& id);

// Throws std::invalid_argument naming the problem: wrong length or the first non-hex character.
NcclIdBytes decode_nccl_id(std::string_view hex);

// An id of random bytes: all that CUDA interpret mode's NCCL needs (no bootstrap address, only an
// id that no other job's ranks share), from xlaunch or its plugin's ncclGetUniqueId.
NcclIdBytes random_nccl_id();

// Where the ranks of CUDA interpret mode's NCCL (cuda/interp/nccl_exchange.hpp) that share the id
// `id_hex` meet: `temp_dir` (their TMPDIR; /tmp when null or empty), then
// "xtrain-interp-nccl-" and the id's first 32 hex characters (128 bits tell one id from another).
// The ranks remove it as they end; xlaunch removes what ranks it stopped by a signal left there.
std::filesystem::path interpret_nccl_meeting_dir(std::string_view id_hex, const char* temp_dir);

}  // namespace xtrain
