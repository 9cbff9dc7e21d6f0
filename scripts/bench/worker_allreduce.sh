#!/usr/bin/env bash
# The all-reduce's share of a data-parallel step at 2 CPU ranks over Gloo, with and without the
# overlap of the per-layer buckets with backward (docs/PERF.md, "Data-parallel (CPU)").
# Usage: scripts/bench/worker_allreduce.sh [ROUNDS]   (default 20; build dir: $XTRAIN_BUILD_DIR or build/)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${XTRAIN_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" xtrain-bench-allreduce >/dev/null
echo "# $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), 2 ranks x 1 OpenBLAS thread, load average $(cut -d' ' -f1 /proc/loadavg) at start"
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$build/bin/xtrain-bench-allreduce" "${1:-20}"
