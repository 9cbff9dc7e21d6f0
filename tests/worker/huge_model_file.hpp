// An llm.c model file (version 3, fp32) far beyond any machine's memory (96 layers of 16,384
// channels: 309G parameters, 1.2 TB), written as a sparse file that takes no disk: its header and
// its size are all that a model file's reader checks before a command's memory check, so nothing
// reads its data unless that check lets it through.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "tests/worker/test_files.hpp"
#include "worker/model/param_layout.hpp"

namespace xtrain::test {

inline constexpr int kHugeLayers = 96, kHugeHeads = 128, kHugeChannels = 16384, kHugeContext = 1024;

inline std::string write_huge_llmc_model(const std::string& path) {
  ModelDims d;
  d.L = kHugeLayers;
  d.NH = kHugeHeads;
  d.C = kHugeChannels;
  d.T = kHugeContext;
  d.V = 256;
  d.Vp = 256;
  const std::int32_t header[256] = {20240326, 3, d.T, d.V, d.L, d.NH, d.C, d.Vp};
  write_bytes(path, std::string_view(reinterpret_cast<const char*>(header), sizeof header));
  std::filesystem::resize_file(path, sizeof header + ParamLayout(d).total() * sizeof(float));
  return path;
}

}  // namespace xtrain::test
