#!/usr/bin/env bash
# Configures and builds xtrain into build/ (or $XTRAIN_BUILD_DIR). Extra arguments are build targets.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${XTRAIN_BUILD_DIR:-$root/build}
jobs=${XTRAIN_JOBS:-$(nproc)}
if [[ ! -f "$build/build.ninja" ]]; then
  mkdir -p "$build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$build/configure.log" 2>&1 ||
    { cat "$build/configure.log"; exit 1; }
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build" -j "$jobs" "${targets[@]}"
