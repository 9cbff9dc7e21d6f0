#!/usr/bin/env bash
# Start time of xtrain-worker on the CPU with the CUDA backend as a plugin, next to the same worker
# with the CUDA libraries loaded at start (and, with --baseline PATH, a worker built before the
# plugin); prints a table (docs/PERF.md, "Worker start").
# Usage: scripts/bench/worker_start.sh [--runs N] [--baseline PATH]   (build dir: $XTRAIN_BUILD_DIR or build/)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${XTRAIN_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" xtrain-worker >/dev/null
exec python3 "$root/scripts/bench/worker_start.py" --worker "$build/bin/xtrain-worker" "$@"
