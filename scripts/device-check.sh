#!/usr/bin/env bash
# The prepared GPU check, run from the repository root on the GPU machine (one H200: NVIDIA
# driver, CUDA with nvcc, CMake, ninja, PyTorch; none of our Debian packages; no network).
# In under 8 minutes: prints the GPU, runs the CUDA tests (the [gpu] ones included), the GPU
# benchmark against PyTorch and the scaling driver, and writes under $OUT (or ./device-out):
#   summary.md       what ran, on what, with what result (read this first)
#   gpu_bench.md/.json, gpu_scaling.md/.json   the benchmark tables
#   logs.tar.gz      every log: nvidia-smi, libraries, tests, benchmark, scaling
#
# Programs: dist/xtrain-bundle.tar.xz, made on the build machine by scripts/make-bundle.sh and
# carried along (device tool: carry ["dist"]); without it, a build here is attempted (it needs
# our Debian packages, which that machine lacks, so expect the bundle to be the way).
# Options: --sanitize   run compute-sanitizer (memcheck, racecheck) over the [ops] tests instead
#                       of the benchmark.
# Budget: XTRAIN_CHECK_BUDGET_S (default 450 s) bounds the whole run.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-$root/device-out}
mkdir -p "$out"
logs=$(mktemp -d /tmp/xtrain-check-logs.XXXXXX)
budget=${XTRAIN_CHECK_BUDGET_S:-450}
sanitize=0
[[ "${1:-}" == "--sanitize" ]] && sanitize=1
export PYTHONUNBUFFERED=1
summary="$out/summary.md"
: >"$summary"

say() { echo "$*" | tee -a "$summary"; }
left() { echo $((budget - SECONDS)); }
finish() {
  say ""
  say "total: ${SECONDS} s of a ${budget} s budget"
  tar -C "$logs" -czf "$out/logs.tar.gz" . 2>/dev/null
  rm -rf "$logs"
}
trap finish EXIT

say "# xtrain device check, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say ""
say "## GPU"
if nvidia-smi >"$logs/nvidia-smi.txt" 2>&1; then
  say '```'
  nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.sm,clocks.max.sm,temperature.gpu \
    --format=csv | tee -a "$summary"
  say '```'
  gpus=$(nvidia-smi -L | grep -c '^GPU ')
else
  say "nvidia-smi failed (no GPU or driver): only the tests that need no GPU can run"
  gpus=0
fi
command -v nvcc >/dev/null && nvcc --version | tail -1 >>"$logs/nvidia-smi.txt"

say ""
say "## Programs"
bundle_dir=""
if [[ -f dist/xtrain-bundle.tar.xz ]]; then
  rm -rf /tmp/xtrain-bundle
  tar -C /tmp -xJf dist/xtrain-bundle.tar.xz
  bundle_dir=/tmp/xtrain-bundle
  built=$(sed -n 's/.*"source_digest": "\(.*\)".*/\1/p' "$bundle_dir/BUNDLE.json")
  here=$(scripts/make-bundle.sh --digest)
  say "bundle dist/xtrain-bundle.tar.xz: $(tr -d '\n' <"$bundle_dir/BUNDLE.json" | tr -s ' ')"
  if [[ "$built" != "$here" ]]; then
    say "WARNING: the bundle was built from other sources ($built) than this tree ($here): results are the bundle's"
  fi
  bin="$bundle_dir/bin"
  libpath="$bundle_dir/lib"
else
  say "no dist/xtrain-bundle.tar.xz: trying to build here (needs gloo, spdlog, fmt, boost, openblas, catch2)"
  if cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
       >"$logs/build.log" 2>&1 &&
     cmake --build build-device -j "$(nproc)" --target xlaunch xtrain-worker xtrain-cuda xtrain-bench-gpu test_cuda \
       >>"$logs/build.log" 2>&1; then
    bin="$root/build-device/bin"
    libpath=""
    say "built in build-device/"
  else
    say "FAILED: no bundle and no build (last lines of the build log follow); make one with scripts/make-bundle.sh"
    say '```'
    tail -5 "$logs/build.log" | tee -a "$summary"
    say '```'
    exit 1
  fi
fi

# CUDA runtime, cuBLASLt and NCCL of this machine: its toolkit first, then PyTorch's wheels.
find_lib_dir() {
  local name=$1 d
  for d in ${CUDA_HOME:+$CUDA_HOME/lib64} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/lib/x86_64-linux-gnu /usr/lib64; do
    [[ -e "$d/$name" ]] && { echo "$d"; return; }
  done
  local site
  site=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
  for d in $site /usr/local /opt; do
    local hit
    hit=$(find "$d" -name "$name" -print -quit 2>/dev/null)
    [[ -n "$hit" ]] && { dirname "$hit"; return; }
  done
}
for lib in libcudart.so.13 libcublasLt.so.13 libnccl.so.2; do
  dir=$(find_lib_dir "$lib")
  if [[ -n "$dir" ]]; then
    say "$lib: $dir"
    [[ ":$libpath:" == *":$dir:"* ]] || libpath="${libpath:+$libpath:}$dir"
  else
    say "$lib: NOT FOUND on this machine"
  fi
done
export XTRAIN_LD_LIBRARY_PATH="$libpath"
run_ours() { LD_LIBRARY_PATH="$XTRAIN_LD_LIBRARY_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
# The worker loads the CUDA plugin from ../lib beside its bin/ (worker/cuda_plugin_loader.hpp).
plugin="$bin/../lib/libxtrain-cuda.so"
[[ -f "$plugin" ]] || say "MISSING the CUDA plugin $plugin: the worker will train on the CPU (auto) or fail (cuda)"
run_ours ldd "$bin"/* "$plugin" >"$logs/ldd.txt" 2>&1
if grep -q 'not found' "$logs/ldd.txt"; then
  say "MISSING libraries:"
  grep 'not found' "$logs/ldd.txt" | sort -u | tee -a "$summary"
fi

say ""
say "## Tests"
filter=()
[[ $gpus -eq 0 ]] && filter=("~[gpu]")
export XTRAIN_BIN_DIR="$bin"
test_limit=$(( $(left) < 300 ? $(left) : 300 ))
run_ours timeout -k 5 "$test_limit" "$bin/test_cuda" "${filter[@]}" --durations yes >"$logs/tests.log" 2>&1
test_rc=$?
say "test_cuda ${filter[*]:-(all cases)}: exit $test_rc$([[ $test_rc -eq 124 ]] && echo " (timed out after ${test_limit} s)")"
say '```'
grep -E '^(All tests passed|test cases:|assertions:)' "$logs/tests.log" | tee -a "$summary"
grep -B2 -A12 'FAILED:' "$logs/tests.log" | head -80 | tee -a "$summary"
say '```'

if [[ $gpus -eq 0 ]]; then
  say "no GPU: benchmark not run"
  exit $((test_rc != 0))
fi

if [[ $sanitize -eq 1 ]]; then
  say ""
  say "## compute-sanitizer"
  for tool in memcheck racecheck; do
    lim=$(( $(left) / 2 ))
    run_ours timeout -k 5 "$lim" compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin/test_cuda" "[ops]" \
      >"$logs/sanitizer-$tool.log" 2>&1
    say "$tool over [ops]: exit $? ($(grep -c '=========' "$logs/sanitizer-$tool.log") report lines)"
  done
  exit $((test_rc != 0))
fi

say ""
say "## Benchmark (one GPU, against PyTorch)"
bench_deadline=$(( $(left) - 70 ))
timeout -k 5 $(( bench_deadline + 30 )) python3 scripts/bench/gpu_bench.py --bin "$bin" --out "$out" \
  --deadline-s "$bench_deadline" >"$logs/bench.log" 2>&1
say "gpu_bench.py: exit $?"
[[ -f "$out/gpu_bench.md" ]] && cat "$out/gpu_bench.md" >>"$summary"

say ""
say "## Scaling"
if (( $(left) > 40 )); then
  timeout -k 5 $(( $(left) - 10 )) python3 scripts/bench/gpu_scaling.py --bin "$bin" --out "$out" --steps 5 \
    >"$logs/scaling.log" 2>&1
  say "gpu_scaling.py: exit $?"
  [[ -f "$out/gpu_scaling.md" ]] && cat "$out/gpu_scaling.md" >>"$summary"
else
  say "not run: $(left) s left"
fi
exit $((test_rc != 0))
