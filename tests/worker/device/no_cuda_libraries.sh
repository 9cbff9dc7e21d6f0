#!/usr/bin/env bash
# An xtrain-worker built with CUDA starts, and trains on the CPU, on a machine without any CUDA
# library. In a private mount namespace every directory that holds CUDA, cuBLAS or NCCL libraries
# is covered by an empty tmpfs (a directory the worker itself needs loses only those files), and
# LD_LIBRARY_PATH is cleared. Then:
#   - xtrain-worker and xlaunch have no NEEDED entry for a CUDA library
#   - the demo's model trains 3 steps with device cpu, and with device auto (which says "CPU")
#   - xlaunch runs it on 2 CPU ranks
#   - device cuda is one error line naming `device` and the missing library, exit 2, no run dir:
#     first NCCL is missing; then, with XTRAIN_NCCL_LIBRARY naming a kept NCCL, the CUDA runtime
# Needs root for the namespace (CI runs as root); elsewhere it skips (exit 77) and says why.
# Usage: tests/worker/device/no_cuda_libraries.sh BIN_DIR
set -euo pipefail
bin=$(cd "$1" && pwd)
plugin="$bin/../lib/libxtrain-cuda.so"
cuda_libs='^lib(cuda|cudart|cublas|cublasLt|nccl|cudnn[a-z_]*|nvrtc|nvJitLink)\.so'

if [[ -z "${XTRAIN_IN_NAMESPACE:-}" ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "SKIP: hiding the CUDA libraries needs a private mount namespace, which needs root (CI runs as root)"
    exit 77
  fi
  if ! unshare -m true 2>/dev/null; then
    echo "SKIP: unshare -m is not permitted here (a container without CAP_SYS_ADMIN)"
    exit 77
  fi
  exec unshare -m env XTRAIN_IN_NAMESPACE=1 "$0" "$@"
fi

fail() { echo "FAIL: $*" >&2; exit 1; }
mount --make-rprivate /
work=$(mktemp -d /tmp/xtrain-no-cuda.XXXXXX)
trap 'umount "$work/libnccl.so.2" 2>/dev/null; rm -rf "$work"' EXIT

# Where the CUDA libraries are: the loader's cache, the plugin's RUNPATH, the usual homes.
candidates=$(
  ldconfig -p | awk '{print $NF}'
  [[ -f "$plugin" ]] && readelf -d "$plugin" | sed -n 's/.*RUNPATH.*\[\(.*\)\]/\1/p' | tr ':' '\n' | sed 's|$|/x|'
  ls -d /usr/local/cuda*/lib* /usr/local/cuda*/targets/*/lib 2>/dev/null | sed 's|$|/x|'
)
dirs=$(for f in $candidates; do d=$(dirname "$f"); [[ -d "$d" ]] && realpath "$d"; done | sort -u)
needed_dirs=$(ldd "$bin/xtrain-worker" "$bin/xlaunch" | awk '$3 ~ /^\// {print $3}' | xargs -n1 dirname |
              xargs -n1 realpath | sort -u)

# Keep one NCCL reachable for the last case (a bind mount outlives the directory's cover).
nccl=$(for d in $dirs; do [[ -e "$d/libnccl.so.2" ]] && realpath "$d/libnccl.so.2" && break; done || true)
if [[ -n "$nccl" ]]; then
  touch "$work/libnccl.so.2"
  mount --bind "$nccl" "$work/libnccl.so.2"
fi

hidden=()
for d in $dirs; do
  libs=$(ls "$d" 2>/dev/null | grep -E "$cuda_libs" || true)
  [[ -z "$libs" ]] && continue
  if grep -qxF "$d" <<<"$needed_dirs"; then
    for f in $libs; do mount --bind /dev/null "$d/$f"; hidden+=("$d/$f"); done  # only those files
  else
    mount -t tmpfs -o ro none "$d"
    hidden+=("$d/")
  fi
done
echo "hidden: ${hidden[*]:-nothing (no CUDA library on this machine)}"
unset LD_LIBRARY_PATH

# Not vacuous: every CUDA library the loader knows of is gone, and the plugin cannot resolve its own.
for f in $(ldconfig -p | awk '{print $NF}' | grep -E '/lib(cudart|cublasLt|nccl)\.so' || true); do
  [[ -s "$f" && ! -c "$f" ]] && fail "$f is still there"
done
if [[ -f "$plugin" ]]; then
  # ldd's output whole first: `ldd | grep -q` under pipefail fails whenever grep stops reading early
  # and ldd dies of SIGPIPE.
  plugin_deps=$(ldd "$plugin" || true)
  grep -q 'libcudart.so.* => not found' <<<"$plugin_deps" || fail "the plugin still finds libcudart: $plugin_deps"
fi

for program in xtrain-worker xlaunch; do
  needed=$(readelf -d "$bin/$program" | grep NEEDED || true)
  if grep -Eq 'lib(cuda|cudart|cublas|cublasLt|nccl)' <<<"$needed"; then fail "$program links CUDA: $needed"; fi
done
echo "ok: xtrain-worker and xlaunch have no CUDA library among their NEEDED entries"

for i in $(seq 3000); do echo "line $i: the model learns a simple pattern of words while the loss falls"; done \
  >"$work/corpus.txt"
job() {  # job DEVICE RUN_DIR
  cat <<EOF
{"device": "$1", "run_dir": "$2",
 "model": {"n_layer": 4, "n_head": 4, "n_embd": 128, "seq_len": 64, "vocab_size": 256, "init_seed": 1337},
 "data": {"train": "$work/corpus.txt"},
 "train": {"steps": 3, "batch_size": 8, "micro_batch_size": 4, "log_every": 1},
 "checkpoint": {"resume": "never"}}
EOF
}
steps_logged() { cat "$1/metrics.jsonl" 2>/dev/null | grep -c '"step"' || true; }

for device in cpu auto; do
  job "$device" "$work/run-$device" >"$work/$device.json"
  rc=0
  "$bin/xtrain-worker" --job "$work/$device.json" >"$work/$device.log" 2>&1 || rc=$?
  [[ $rc -eq 0 ]] || fail "device $device: exit $rc"$'\n'"$(cat "$work/$device.log")"
  [[ $(steps_logged "$work/run-$device") -eq 3 ]] || fail "device $device: not 3 steps"$'\n'"$(cat "$work/$device.log")"
  grep -q "device $device: training on the CPU" "$work/$device.log" || fail "device $device: no device line"
  echo "ok: device $device trained 3 steps: $(grep "device $device:" "$work/$device.log" | sed 's/.*info: //;s/.*warning: //')"
done

job cpu "$work/run-xlaunch" >"$work/xlaunch.json"
rc=0
"$bin/xlaunch" "$work/xlaunch.json" --nproc-per-node 2 --tee rank0 >"$work/xlaunch.log" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || fail "xlaunch, 2 CPU ranks: exit $rc"$'\n'"$(cat "$work/xlaunch.log")"
[[ $(steps_logged "$work/run-xlaunch") -eq 3 ]] || fail "xlaunch: not 3 steps"
echo "ok: xlaunch trained 3 steps on 2 CPU ranks"

# device cuda: exit 2, stderr one line naming `device` and the cause, no run dir.
expect_cuda_error() {  # expect_cuda_error WHAT EXPECTED_TEXT [VAR=VALUE...]
  local what=$1 expected=$2 rc=0
  shift 2
  job cuda "$work/run-cuda" >"$work/cuda.json"
  env "$@" "$bin/xtrain-worker" --job "$work/cuda.json" >"$work/cuda.out" 2>"$work/cuda.err" || rc=$?
  [[ $rc -eq 2 ]] || fail "device cuda, $what: exit $rc, expected 2"$'\n'"$(cat "$work/cuda.err")"
  [[ $(wc -l <"$work/cuda.err") -eq 1 && ! -s "$work/cuda.out" ]] ||
    fail "device cuda, $what: expected one line on stderr, got:"$'\n'"$(cat "$work/cuda.out" "$work/cuda.err")"
  grep -q '^error: device: "cuda" asked for, but ' "$work/cuda.err" || fail "device cuda: $(cat "$work/cuda.err")"
  grep -qF -- "$expected" "$work/cuda.err" || fail "device cuda, $what: \"$expected\" not in: $(cat "$work/cuda.err")"
  [[ ! -e "$work/run-cuda" ]] || fail "device cuda, $what: the run dir was created"
  echo "ok: device cuda, $what: $(cat "$work/cuda.err")"
}
if [[ ! -f "$plugin" ]]; then
  expect_cuda_error "a build without CUDA" "libxtrain-cuda.so is not there"
else
  expect_cuda_error "no NCCL" "needs NCCL: cannot load libnccl"
  if [[ -n "$nccl" ]]; then
    expect_cuda_error "NCCL but no CUDA runtime" "cannot be loaded: lib" XTRAIN_NCCL_LIBRARY="$work/libnccl.so.2"
    grep -q "cannot open shared object file" "$work/cuda.err" || fail "not the loader's words: $(cat "$work/cuda.err")"
  fi
fi
