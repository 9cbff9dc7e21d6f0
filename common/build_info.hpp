// Which build a program is, for --version and the run's summary.json: the project's version and the
// git commit the build was made from.
#pragma once

#include <string>

namespace xtrain {

// "0.1.0 (commit 1a2b3c4d5e6f)"; the commit is "unknown" for a build outside a git checkout and ends
// in "-dirty" for one with uncommitted changes.
std::string build_version();

// When the command line is exactly `PROGRAM --version`: prints "PROGRAM <build_version()>" on stdout
// and returns true.
bool print_version_if_asked(int argc, char** argv, const char* program);

}  // namespace xtrain
