// `xlaunch ls [DIR] [--json]`: the runs under DIR (default runs/), one line each, oldest first.
#pragma once

#include "launcher/cli/cli.hpp"

namespace xtrain::launcher {

int list_runs(const CliOptions& options);

}  // namespace xtrain::launcher
