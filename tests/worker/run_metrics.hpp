// Reading a finished run's metrics.jsonl in the end-to-end tests (CPU and CUDA).
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace xtrain::test {

// Calls `each` with every training-loss record of the run's metrics.jsonl, in file order.
inline void for_each_loss_record(const std::filesystem::path& run_dir,
                                 const std::function<void(const nlohmann::json&)>& each) {
  std::ifstream in(run_dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("loss")) each(j);
  }
}

// step -> training loss (a step recorded twice would keep its last value; see loss_record_counts).
inline std::map<long, double> read_losses(const std::filesystem::path& run_dir) {
  std::map<long, double> out;
  for_each_loss_record(run_dir, [&](const nlohmann::json& j) { out[j.at("step").get<long>()] = j.at("loss").get<double>(); });
  return out;
}

// step -> how many training-loss records metrics.jsonl holds for it.
inline std::map<long, int> loss_record_counts(const std::filesystem::path& run_dir) {
  std::map<long, int> out;
  for_each_loss_record(run_dir, [&](const nlohmann::json& j) { ++out[j.at("step").get<long>()]; });
  return out;
}

}  // namespace xtrain::test
