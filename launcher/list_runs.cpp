#include "launcher/list_runs.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/exit_codes.hpp"
#include "launcher/report/run_reader.hpp"
#include "launcher/run/run_dir.hpp"

namespace xtrain::launcher {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Row {
  RunInfo run;
  std::string label;  // the RUN column: the run dir's path under the listed directory
  std::optional<long> step;
  std::optional<long> total;
  std::optional<double> loss;
};

// Progress from the metrics' last step record, else from rank 0's result in summary.json.
Row make_row(RunInfo run, std::string label) {
  Row row{std::move(run), std::move(label), std::nullopt, std::nullopt, std::nullopt};
  row.total = row.run.total_steps;
  if (const auto last = last_step_record(run_files::metrics(row.run.dir))) {
    row.step = last->step;
    row.loss = last->loss;
    return row;
  }
  const json ranks = row.run.summary.is_object() ? row.run.summary.value("ranks", json::array()) : json::array();
  if (!ranks.empty() && ranks.front().value("result", json()).is_object()) {
    const json& result = ranks.front().at("result");
    if (result.value("step", json()).is_number_integer()) row.step = result.at("step").get<long>();
    if (result.value("loss", json()).is_number()) row.loss = result.at("loss").get<double>();
  }
  return row;
}

std::vector<Row> find_runs(const std::string& dir) {
  std::vector<Row> rows;
  if (auto self = read_run_info(dir)) {  // DIR is itself a run directory
    rows.push_back(make_row(std::move(*self), fs::path(dir).filename().string()));
    return rows;
  }
  // Run dirs directly under DIR, and one level deeper: a job's per-node run dirs (NAME/node-K).
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_directory(ec)) continue;
    const std::string name = entry.path().filename().string();
    if (auto run = read_run_info(entry.path().string())) {
      rows.push_back(make_row(std::move(*run), name));
      continue;
    }
    for (const auto& inner : fs::directory_iterator(entry.path(), ec)) {
      if (!inner.is_directory(ec)) continue;
      if (auto run = read_run_info(inner.path().string())) {
        rows.push_back(make_row(std::move(*run), name + "/" + inner.path().filename().string()));
      }
    }
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    const double ta = a.run.started.value_or(0), tb = b.run.started.value_or(0);
    return ta != tb ? ta < tb : a.run.dir < b.run.dir;
  });
  return rows;
}

json row_json(const Row& row) {
  const auto optional = [](const auto& v) { return v ? json(*v) : json(nullptr); };
  const RunInfo& run = row.run;
  return {{"dir", run.dir},
          {"name", run.name},
          {"state", state_label(run)},
          {"exit_code", optional(run.exit_code)},
          {"started_at", run.started ? json(format_local_time(*run.started)) : json(nullptr)},
          {"duration_s", optional(run.duration_s)},
          {"step", optional(row.step)},
          {"total_steps", optional(row.total)},
          {"loss", row.loss && std::isfinite(*row.loss) ? json(*row.loss) : json(nullptr)}};
}

std::vector<std::string> row_cells(const Row& row) {
  const RunInfo& run = row.run;
  std::string step = row.step ? std::to_string(*row.step) : "-";
  if (row.step && row.total) step += "/" + std::to_string(*row.total);
  return {row.label,
          state_label(run),
          run.started ? format_local_time(*run.started) : "-",
          run.duration_s ? duration_text(*run.duration_s) : "-",
          step,
          row.loss && std::isfinite(*row.loss) ? fmt::format("{:.4f}", *row.loss) : "-"};
}

void print_table(const std::vector<Row>& rows) {
  std::vector<std::vector<std::string>> table = {{"RUN", "STATE", "STARTED", "DURATION", "STEP", "LOSS"}};
  for (const Row& row : rows) table.push_back(row_cells(row));
  std::vector<size_t> widths(table.front().size(), 0);
  for (const auto& cells : table) {
    for (size_t c = 0; c < cells.size(); ++c) widths[c] = std::max(widths[c], cells[c].size());
  }
  for (const auto& cells : table) {
    std::string line;
    for (size_t c = 0; c < cells.size(); ++c) {
      const bool last = c + 1 == cells.size();
      line += last ? cells[c] : fmt::format("{:<{}}  ", cells[c], widths[c]);
    }
    std::cout << line << "\n";
  }
}

}  // namespace

int list_runs(const CliOptions& options) {
  const std::string& dir = options.run_dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw CliError("\"" + dir + "\" is not a directory");
  const std::vector<Row> rows = find_runs(dir);
  if (options.json) {
    json out = json::array();
    for (const Row& row : rows) out.push_back(row_json(row));
    std::cout << out.dump(2) << std::endl;
  } else if (rows.empty()) {
    std::cout << "xlaunch: no runs under " << dir << std::endl;
  } else {
    print_table(rows);
  }
  return exit_code::kSuccess;
}

}  // namespace xtrain::launcher
