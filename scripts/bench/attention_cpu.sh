#!/usr/bin/env bash
# Causal attention on the CPU, one thread: the flash attention against the (T,T) attention it
# replaced, forward and backward time of one layer and the memory of a whole model's attention, at
# the demo, mid and GPT-2 small shapes; prints a Markdown table (docs/PERF.md, "CPU attention").
# --threads N adds the flash attention on a team of N threads (and times every row in wall time).
# Usage: scripts/bench/attention_cpu.sh [--reps N] [--avx2] [--threads N]
#   (build dir: $XTRAIN_BUILD_DIR or build/)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${XTRAIN_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" xtrain-bench-attention-cpu >/dev/null
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load average $(cut -d' ' -f1 /proc/loadavg)"
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 exec "$build/bin/xtrain-bench-attention-cpu" "$@"
