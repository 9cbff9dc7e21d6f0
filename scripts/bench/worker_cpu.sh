#!/usr/bin/env bash
# Training-step throughput of xtrain's CPU backend against our PyTorch GPT in eager mode, at the
# same shapes and thread count, for two model sizes; prints a table (docs/PERF.md, "CPU worker").
# Usage: scripts/bench/worker_cpu.sh [--steps N] [--threads N (default 1)] [--runs N]
#   (build dir: $XTRAIN_BUILD_DIR or build/; PyTorch: /usr/bin/python3 with python3-torch)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${XTRAIN_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" xtrain-bench-cpu >/dev/null
exec /usr/bin/python3 "$root/scripts/bench/worker_cpu.py" --bench-bin "$build/bin/xtrain-bench-cpu" "$@"
