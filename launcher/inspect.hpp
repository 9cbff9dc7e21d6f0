// The subcommands that look at a run directory: status, logs, stop.
#pragma once

#include "launcher/cli/cli.hpp"

namespace xtrain::launcher {

int show_status(const CliOptions& options);  // xlaunch status RUN_DIR [--json]
int show_logs(const CliOptions& options);    // xlaunch logs RUN_DIR [--rank R] [--follow]
int stop_run(const CliOptions& options);     // xlaunch stop RUN_DIR

}  // namespace xtrain::launcher
