// `xlaunch [OPTIONS] JOB.json`: plan -> run dir -> (detach) -> guard -> console -> supervisor.
#pragma once

#include "launcher/cli/cli.hpp"

namespace xtrain::launcher {

// Returns xlaunch's exit code. Throws SpecError (2) or LaunchError before anything started.
int run_job(const CliOptions& options);

}  // namespace xtrain::launcher
