#!/usr/bin/env bash
# The prepared GPU check, run from the repository root on the GPU machine (one H200: NVIDIA
# driver, CUDA with nvcc, CMake, ninja, PyTorch, transformers, tiktoken; none of our Debian
# packages; no network). Within its budget (default 450 s, under 8 minutes), most valuable first:
# prints the GPU, runs every [gpu] test (test_cuda whole, and the [gpu] cases of
# test_launcher_integration), our Hugging Face export against the real transformers, our
# tokenizer against the real tiktoken (and our tokenizer.json in Hugging Face's tokenizers),
# generation against transformers' generate, the GPU benchmark against PyTorch, compute-sanitizer
# over the kernel tests, and the scaling driver where there are several GPUs; writes under $OUT
# (or ./device-out):
#   summary.md       what ran, on what, with what result, and the tables (read this first)
#   gpu_bench.md/.json, gpu_scaling.md/.json   the benchmark tables
#   generate_gpu.json                          generation's numbers
#   gpu_profile.md   where GPT-2's step goes, per operation (the benchmark's run without a graph)
#   hf_export.json, tokenizer.json             the two comparisons' numbers
#   logs.tar.gz      every log: nvidia-smi, libraries, tests, checks, benchmark, sanitizer, scaling
#
# Programs: dist/xtrain-bundle.tar.xz, made on the build machine by scripts/make-bundle.sh and
# carried along (device tool: carry ["dist"]); or XTRAIN_CHECK_BIN_DIR, a bin/ with the CUDA
# plugin in ../lib (a build); else a build here is attempted (it needs our Debian packages, which
# that machine lacks, so expect the bundle to be the way). Without programs the PyTorch side of
# the benchmark still runs. GPT-2's vocabulary (for the tokenizer check): the bundle's gpt2/, or
# XTRAIN_GPT2_VOCAB, or scripts/fetch-gpt2-reference.sh's cache.
# Options: --sanitize   compute-sanitizer gets the benchmark's time (and the [gpu][train] cases
#                       too) instead of its slice at the end; no benchmark.
#          --only STEPS runs only these steps (comma-separated: tests, export, tokenizer, generate,
#                       bench, sanitizer, scaling); the others say "not run: not asked for". For a short
#                       second look after a fix, e.g. --only tests,sanitizer with a small budget.
#          --cases SPEC test_cuda runs the cases of this Catch2 test spec (e.g. "[gpu][attention]")
#                       instead of every case, and compute-sanitizer goes over the same cases.
# Environment: XTRAIN_CHECK_BUDGET_S (default 450) bounds the whole run: every step has a timeout
# cut to what is left of it. XTRAIN_PYTHON: the python3 with PyTorch (default python3).
# XTRAIN_BENCH_ARGS: more arguments for gpu_bench.py, after the defaults "--shapes
# gpt2,gpt2-b64,mid,demo --precisions bf16" (e.g. "--precisions bf16,tf32").
# Exit: 0 everything ran and passed; 1 a test, a check or the benchmark failed, or no programs;
# 2 a bad option (nothing ran); 3 no GPU (only what needs none ran: the tests that need none, the
# two comparisons).
# A check whose library or input is missing (transformers, tiktoken, the vocabulary,
# compute-sanitizer, or gVisor under it all) is "not run" with the reason, not a failure.
#
# Budget, in the order things run (each step's limit is the smaller of its cap and what is left
# after the reserves of the steps behind it, or half of what is left if that is more):
#   setup: nvidia-smi, the bundle, the libraries     ~10 s (caps 20-60 s each)
#   test_cuda, every case                            cap 150 s, leaves >= 300 s
#   test_launcher_integration "[gpu]"                cap 45 s, leaves >= 300 s
#   Hugging Face export vs transformers              cap 60 s, leaves >= 240 s
#   tokenizer vs tiktoken (3 MB of text)             cap 45 s, leaves >= 200 s
#   generation vs transformers (GPT-2 124M's shape)  cap 45 s, leaves >= 200 s
#   gpu_bench.py                                     what is left less 100 s; it starts no run it
#                                                    cannot finish and kills any at its deadline
#   compute-sanitizer, memcheck then racecheck       what is left less 20 s (about 80 s), one case
#                                                    per run, attention's first, then the other kernels'
#   gpu_scaling.py (2 GPUs or more)                  what is left less 20 s, if >= 90 s
#   logs.tar.gz                                      the last 20 s
set -uo pipefail
steps=tests,export,tokenizer,generate,bench,sanitizer,scaling
sanitize=0
only=""
cases=""
usage() {
  echo "device-check.sh: $1 (usage: device-check.sh [--sanitize] [--only STEP,...] [--cases SPEC]; steps: $steps)" >&2
  exit 2
}
while (( $# > 0 )); do
  case "$1" in
    --sanitize) sanitize=1 ;;
    --only | --cases)
      [[ $# -gt 1 && -n "$2" ]] || usage "$1 needs a value"
      if [[ "$1" == --only ]]; then only=$2; else cases=$2; fi
      shift ;;
    *) usage "unknown option '$1'" ;;
  esac
  shift
done
IFS=, read -ra asked <<<"$only"
for step in "${asked[@]}"; do
  [[ ",$steps," == *",$step,"* ]] || usage "--only: unknown step '$step'"
done
# wanted STEP: was STEP asked for (every step is, without --only)?
wanted() { [[ -z "$only" || ",$only," == *",$1,"* ]]; }
not_asked="not run: not asked for (--only $only)"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
out=${OUT:-$root/device-out}
mkdir -p "$out"
logs=$(mktemp -d /tmp/xtrain-check-logs.XXXXXX)
budget=${XTRAIN_CHECK_BUDGET_S:-450}
python=${XTRAIN_PYTHON:-python3}
export PYTHONUNBUFFERED=1
summary="$out/summary.md"
: >"$summary"
failed=0

say() { echo "$*" | tee -a "$summary"; }
left() { echo $((budget - SECONDS)); }
# limit CAP RESERVE: seconds a step may take: its cap, or what is left after RESERVE for the steps
# behind it, but at least half of what is left (a small budget is shared), and at least 1.
limit() {
  local l=$(( $(left) - $2 )) half=$(( $(left) / 2 ))
  (( l < half )) && l=$half
  (( l > $1 )) && l=$1
  (( l < 1 )) && l=1
  echo "$l"
}
# bounded LIMIT CMD...: CMD under timeout (SIGTERM at LIMIT s, at least 1: timeout's 0 is none;
# SIGKILL 5 s later).
bounded() {
  local l=$1
  shift
  (( l < 1 )) && l=1
  timeout -k 5 "$l" "$@"
}
timed_out() { [[ $1 -eq 124 || $1 -eq 137 ]] && echo " (timed out after $2 s)"; }
# shellcheck disable=SC2317  # run by the EXIT trap
finish() {
  say ""
  say "total: ${SECONDS} s of a ${budget} s budget"
  timeout -k 2 15 tar -C "$logs" -czf "$out/logs.tar.gz" . 2>/dev/null
  rm -rf "$logs"
}
trap finish EXIT

say "# xtrain device check, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say ""
say "## GPU"
gpus=0
if bounded 20 nvidia-smi >"$logs/nvidia-smi.txt" 2>&1; then
  say '```'
  bounded 20 nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.sm,clocks.max.sm,temperature.gpu \
    --format=csv 2>&1 | tee -a "$summary"
  say '```'
  gpus=$(bounded 20 nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
fi
if (( gpus == 0 )); then
  say "no GPU: nvidia-smi found none (or no driver); only the tests that need no GPU run, no benchmark"
fi
command -v nvcc >/dev/null && bounded 20 nvcc --version 2>&1 | tail -1 >>"$logs/nvidia-smi.txt"

say ""
say "## Programs"
bin=""
libpath=""
if [[ -n "${XTRAIN_CHECK_BIN_DIR:-}" ]]; then
  bin=$(cd "$XTRAIN_CHECK_BIN_DIR" && pwd)
  libpath="$bin/../lib"
  say "programs from XTRAIN_CHECK_BIN_DIR=$bin"
elif [[ -f dist/xtrain-bundle.tar.xz ]]; then
  rm -rf /tmp/xtrain-bundle
  if bounded 60 tar -C /tmp -xJf dist/xtrain-bundle.tar.xz; then
    bundle_dir=/tmp/xtrain-bundle
    built=$(sed -n 's/.*"source_digest": "\(.*\)".*/\1/p' "$bundle_dir/BUNDLE.json")
    here=$(bounded 30 scripts/make-bundle.sh --digest)
    say "bundle dist/xtrain-bundle.tar.xz: $(tr -d '\n' <"$bundle_dir/BUNDLE.json" | tr -s ' ')"
    if [[ "$built" != "$here" ]]; then
      say "WARNING: the bundle was built from other sources ($built) than this tree ($here): results are the bundle's"
    fi
    bin="$bundle_dir/bin"
    libpath="$bundle_dir/lib"
  else
    say "FAILED to unpack dist/xtrain-bundle.tar.xz"
  fi
else
  say "no dist/xtrain-bundle.tar.xz: trying to build here (needs gloo, spdlog, fmt, boost, openblas, catch2)"
  build_limit=$(limit 240 250)
  if bounded "$build_limit" cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
       >"$logs/build.log" 2>&1 &&
     bounded "$(limit 240 250)" cmake --build build-device -j "$(nproc)" --target xlaunch xtrain-worker xtrain-cuda \
       xtrain-bench-gpu test_cuda test_launcher_integration xtrain-test-worker xtrain-data xtrain-check-logits \
       >>"$logs/build.log" 2>&1; then
    bin="$root/build-device/bin"
    libpath="$root/build-device/lib"
    say "built in build-device/"
  else
    say "FAILED: no bundle and no build (last lines of the build log follow); make one with scripts/make-bundle.sh"
    say '```'
    tail -5 "$logs/build.log" | tee -a "$summary"
    say '```'
  fi
fi
[[ -z "$bin" ]] && failed=1

# CUDA runtime, cuBLASLt and NCCL of this machine: its toolkit first, then PyTorch's wheels.
find_lib_dir() {
  local name=$1 d hit site
  for d in ${CUDA_HOME:+$CUDA_HOME/lib64} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/lib/x86_64-linux-gnu /usr/lib64; do
    [[ -e "$d/$name" ]] && { echo "$d"; return; }
  done
  site=$(bounded 30 "$python" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
  for d in $site /usr/local /opt; do
    hit=$(bounded 20 find "$d" -name "$name" -print -quit 2>/dev/null)
    [[ -n "$hit" ]] && { dirname "$hit"; return; }
  done
}
if [[ -n "$bin" ]]; then
  for lib in libcudart.so.13 libcublasLt.so.13 libnccl.so.2; do
    dir=$(find_lib_dir "$lib")
    if [[ -n "$dir" ]]; then
      say "$lib: $dir"
      [[ ":$libpath:" == *":$dir:"* ]] || libpath="${libpath:+$libpath:}$dir"
    else
      say "$lib: NOT FOUND on this machine"
    fi
  done
  # The worker loads the CUDA plugin from ../lib beside its bin/ (worker/device/cuda_plugin_loader.hpp).
  plugin="$bin/../lib/libxtrain-cuda.so"
  [[ -f "$plugin" ]] || say "MISSING the CUDA plugin $plugin: the worker will train on the CPU (auto) or fail (cuda)"
  LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" bounded 30 ldd "$bin"/* "$plugin" >"$logs/ldd.txt" 2>&1
  if grep -q 'not found' "$logs/ldd.txt"; then
    say "MISSING libraries:"
    grep 'not found' "$logs/ldd.txt" | sort -u | tee -a "$summary"
  fi
fi
export XTRAIN_LD_LIBRARY_PATH="$libpath"
# Our programs' environment (after `bounded LIMIT`): the libraries above first.
ours=(env "LD_LIBRARY_PATH=$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")

# test_binary NAME LIMIT SPEC...: runs one Catch2 binary, its counts, failures and slowest cases
# into the summary.
test_binary() {
  local name=$1 lim=$2 rc
  shift 2
  if [[ ! -x "$bin/$name" ]]; then
    say "$name: MISSING from $bin"
    failed=1
    return
  fi
  # -w NoTests: a filter that matches nothing fails, never passes vacuously
  bounded "$lim" "${ours[@]}" "$bin/$name" "$@" -w NoTests --durations yes >"$logs/$name.log" 2>&1
  rc=$?
  say "$name ${*:-(all cases)}: exit $rc$(timed_out "$rc" "$lim")"
  (( rc != 0 )) && failed=1
  say '```'
  grep -E '^(All tests passed|test cases:|assertions:|No test cases matched)' "$logs/$name.log" | tee -a "$summary"
  grep -B2 -A12 'FAILED:' "$logs/$name.log" | head -80 | tee -a "$summary"
  say "slowest cases:"
  grep -E '^[0-9]+\.[0-9]+ s: ' "$logs/$name.log" | sort -rn | head -6 | tee -a "$summary"
  say '```'
}

say ""
say "## Tests"
export XTRAIN_BIN_DIR="$bin"
if ! wanted tests; then
  say "$not_asked"
elif [[ -n "$bin" ]]; then
  if (( gpus == 0 )); then
    test_binary test_cuda "$(limit 180 20)" "~[gpu]~[.]"  # [.]: halves of other cases; --cases names [gpu] ones
  else
    test_binary test_cuda "$(limit 150 300)" ${cases:+"$cases"}
    test_binary test_launcher_integration "$(limit 45 300)" "[gpu]~[.]"
  fi
else
  say "not run: no programs"
fi

# missing NAME...: the programs among NAME that $bin lacks, or "no programs".
missing() {
  [[ -z "$bin" ]] && { echo "no programs"; return; }
  local p out=""
  for p in "$@"; do [[ -x "$bin/$p" ]] || out+=" $p"; done
  [[ -n "$out" ]] && echo "no$out in $bin"
}
# py_check NAME LIMIT SCRIPT ARGS...: a comparison script under LIMIT; its report (stdout) into
# the summary. Its exit 2 is "not run" (its line says why), any other failure fails the check.
py_check() {
  local name=$1 lim=$2 rc
  shift 2
  bounded "$lim" "$python" "$@" --timeout-s $(( lim > 10 ? lim - 5 : lim )) \
    >"$logs/$name.md" 2>"$logs/$name.log"
  rc=$?
  tee -a "$summary" <"$logs/$name.md"
  if [[ $rc -ne 0 && $rc -ne 2 ]]; then
    failed=1
    say "$name: exit $rc$(timed_out "$rc" "$lim")"
    grep -v '^\s*$' "$logs/$name.log" | tail -3 | tee -a "$summary"
  fi
}
# GPT-2's vocabulary, OpenAI's form (encoder.json + vocab.bpe): tiktoken's files.
vocab=${XTRAIN_GPT2_VOCAB:-}
for d in "${bundle_dir:-/nonexistent}/gpt2" "${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/xtrain/gpt2-reference/gpt2"; do
  [[ -z "$vocab" && -f "$d/encoder.json" && -f "$d/vocab.bpe" ]] && vocab=$d
done

say ""
say "## Hugging Face export, loaded by transformers, against our logits and tokens"
device=cuda
(( gpus == 0 )) && device=cpu
why=$(missing xlaunch xtrain-worker xtrain-check-logits)
if ! wanted export; then
  say "$not_asked"
elif [[ -n "$why" ]]; then
  say "not run: $why"
else
  py_check hf_export "$(limit 60 240)" scripts/check/hf_export_check.py --bin "$bin" --device "$device" \
    --json "$out/hf_export.json"
fi

# vocab_step STEP NAME TITLE PROGRAM LIMIT SCRIPT...: the section TITLE, in it py_check NAME over
# SCRIPT with our programs, GPT-2's vocabulary and $out/NAME.json, where STEP was asked for and
# PROGRAM and the vocabulary are here.
vocab_step() {
  local step=$1 name=$2 title=$3 program=$4 lim=$5 why
  shift 5
  say ""
  say "## $title"
  why=$(missing "$program")
  if ! wanted "$step"; then
    say "$not_asked"
  elif [[ -n "$why" ]]; then
    say "not run: $why"
  elif [[ -z "$vocab" ]]; then
    say "not run: no GPT-2 vocabulary (the bundle's gpt2/, XTRAIN_GPT2_VOCAB, or scripts/fetch-gpt2-reference.sh's cache)"
  else
    py_check "$name" "$lim" "$@" --bin "$bin" --vocab "$vocab" --json "$out/$name.json"
  fi
}
vocab_step tokenizer tokenizer "Tokenizer against tiktoken's gpt2, and our tokenizer.json in tokenizers" xtrain-data \
  "$(limit 45 200)" \
  scripts/check/tokenizer_check.py

# sanitize LIMIT SPEC...: compute-sanitizer over the test_cuda cases SPEC lists, into the summary
# (if asked for; LIMIT 0: not run, for want of time).
sanitize() {
  local lim=$1 rc
  shift
  say ""
  say "## compute-sanitizer"
  if ! wanted sanitizer; then
    say "$not_asked"
    return
  elif (( lim == 0 )); then
    say "not run: $(left) s left (--sanitize runs it instead of the benchmark)"
    return
  elif [[ -z "$bin" ]]; then
    say "not run: no programs"
    return
  fi
  bounded $(( lim + 10 )) "${ours[@]}" scripts/check/sanitizer.sh "$bin" "$lim" "$logs" "$@" >"$logs/sanitizer.md" 2>&1
  rc=$?
  tee -a "$summary" <"$logs/sanitizer.md"
  if [[ $rc -ne 0 && $rc -ne 3 ]]; then
    failed=1
    say "sanitizer.sh: exit $rc$(timed_out "$rc" $(( lim + 10 )))"
  fi
}
kernel_cases=("[gpu][attention]" "[gpu][ops]" "[gpu][bf16]")
[[ -n "$cases" ]] && kernel_cases=("$cases")

if (( gpus == 0 )); then
  say ""
  say "## compute-sanitizer"
  kind=$(scripts/check/runtime-kind.sh)
  say "runtime: ${kind%% *} (${kind#* })"
  say "not run: no GPU"
  say ""
  say "no GPU: the [gpu] tests, the benchmark and compute-sanitizer were not run"
  exit 3
fi

if [[ $sanitize -eq 1 ]]; then
  [[ -z "$cases" ]] && kernel_cases+=("[gpu][train]")
  sanitize $(( $(left) - 20 )) "${kernel_cases[@]}"
  say ""
  say "## Benchmark"
  say "not run: --sanitize gives its time to compute-sanitizer"
  exit $failed
fi

vocab_step generate generate_gpu "Generation (GPT-2 124M's shape, one GPU, against transformers)" xtrain-worker \
  "$(limit 45 200)" scripts/bench/generate_gpu.py

say ""
say "## Benchmark (one GPU, against PyTorch)"
sanitizer_reserve=100
wanted sanitizer || sanitizer_reserve=20
bench_deadline=$(( $(left) - sanitizer_reserve ))
impls=xtrain,eager,compile
[[ -z "$bin" ]] && impls=eager,compile
if ! wanted bench; then
  say "$not_asked"
elif (( bench_deadline > 20 )); then
  # gpu_bench.py kills its runs at the deadline itself; timeout is the backstop.
  # shellcheck disable=SC2086  # XTRAIN_BENCH_ARGS: words
  bounded $(( bench_deadline + 10 )) "$python" scripts/bench/gpu_bench.py --bin "$bin" --out "$out" \
    --impls "$impls" --deadline-s "$bench_deadline" --shapes gpt2,gpt2-b64,mid,demo --precisions bf16 \
    ${XTRAIN_BENCH_ARGS:-} >"$logs/bench.log" 2>&1
  rc=$?
  (( rc != 0 )) && failed=1
  say "gpu_bench.py: exit $rc$(timed_out "$rc" $(( bench_deadline + 10 )))"
  [[ -f "$out/gpu_bench.md" ]] && cat "$out/gpu_bench.md" >>"$summary"
  if [[ -f "$out/gpu_profile.md" ]]; then
    printf '\n' >>"$summary"
    cat "$out/gpu_profile.md" >>"$summary"
  fi
  grep -E '^(Traceback|[A-Za-z]*Error)' "$logs/bench.log" | head -5 | tee -a "$summary"
else
  say "not run: $(left) s left"
fi

# At least 30 s, or none.
sanitize $(( $(left) >= 50 ? $(left) - 20 : 0 )) "${kernel_cases[@]}"

say ""
say "## Scaling"
if ! wanted scaling; then
  say "$not_asked"
elif (( gpus < 2 )); then
  say "not run: $gpus GPU (the scaling table needs 2 or more; one GPU's rate is the benchmark's)"
elif [[ -z "$bin" ]]; then
  say "not run: no programs"
elif (( $(left) >= 90 )); then
  lim=$(limit 600 20)
  bounded "$lim" "$python" scripts/bench/gpu_scaling.py --bin "$bin" --out "$out" --steps 5 >"$logs/scaling.log" 2>&1
  rc=$?
  (( rc != 0 )) && failed=1
  say "gpu_scaling.py: exit $rc$(timed_out "$rc" "$lim")"
  [[ -f "$out/gpu_scaling.md" ]] && cat "$out/gpu_scaling.md" >>"$summary"
else
  say "not run: $(left) s left"
fi
exit $failed
