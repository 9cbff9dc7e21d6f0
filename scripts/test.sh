#!/usr/bin/env bash
# Quick start 2: set everything up on a fresh Debian 12 machine, build, and run the whole test suite.
# [gpu] tests run only where a GPU is visible; elsewhere ctest does not list them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh" --test
"$root/scripts/build.sh"
cd "${XTRAIN_BUILD_DIR:-$root/build}"
ctest --output-on-failure --timeout 900 "$@"
