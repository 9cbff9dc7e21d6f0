#!/usr/bin/env bash
# Per-token time of generate's KV-cached decoder, next to the memory-bandwidth floor and PyTorch
# eager with a KV cache, on GPT-2 124M's shape, one thread each or --threads N each
# (docs/PERF.md, "Generation").
# Usage: scripts/bench/generate_cpu.sh [--rounds N] [--runs N] [--threads N]
#   (build dir: $XTRAIN_BUILD_DIR or build/; PyTorch: /usr/bin/python3 with python3-torch)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${XTRAIN_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" xtrain-bench-generate >/dev/null
exec /usr/bin/python3 "$root/scripts/bench/generate_cpu.py" --bench-bin "$build/bin/xtrain-bench-generate" "$@"
