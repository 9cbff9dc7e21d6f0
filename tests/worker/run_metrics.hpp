// Reading a finished run's metrics.jsonl in the end-to-end tests (CPU and CUDA).
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace xtrain::test {

// step -> training loss; a step logged twice (before a kill and again after the resume) keeps
// its last value.
inline std::map<long, double> read_losses(const std::filesystem::path& run_dir) {
  std::map<long, double> out;
  std::ifstream in(run_dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("loss")) out[j.at("step").get<long>()] = j.at("loss").get<double>();
  }
  return out;
}

}  // namespace xtrain::test
