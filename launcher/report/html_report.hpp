// The run report: one self-contained HTML file (inline SVG charts drawn by launcher/report/svg_chart.hpp,
// a few lines of plain JavaScript for tooltips, no network) with the run's spec, state, root
// cause, progress, charts of metrics.jsonl, restarts and stragglers. `xlaunch report RUN_DIR`
// writes it for any run; the supervisor rewrites RUN_DIR/report.html while the run goes
// (launcher/report/live_report.hpp) and at its end.
#pragma once

#include <string>

#include "launcher/cli/cli.hpp"
#include "launcher/report/run_reader.hpp"

namespace xtrain::launcher {

// The page for `run` as it is now; `metrics` already read (update()d) by the caller.
std::string render_report(const RunInfo& run, const MetricsLog& metrics);

// Reads the run and writes its report to `path` atomically (temp name, rename).
void write_report(const RunInfo& run, const MetricsLog& metrics, const std::string& path);

// xlaunch report RUN_DIR [--out FILE]
int report_command(const CliOptions& options);

}  // namespace xtrain::launcher
