#!/usr/bin/env bash
# xlaunch and xtrain-worker on CPUs without x86-64-v3 (common/worker_cpu.hpp), emulated by QEMU's
# user mode (Debian's qemu-user, installed by scripts/install-deps.sh --test):
#   Nehalem (2008, no AVX) and SandyBridge (AVX, no AVX2): xlaunch exits 126 naming the missing
#     features, before any rank starts (no run directory); the worker exits 2 with one error line,
#     where without the check it died of SIGILL (132) in the CPU backend;
#   max (every feature QEMU emulates, x86-64-v3 included): the same commands pass the check.
#   worker_cpu_test.sh XLAUNCH WORKER
set -euo pipefail
xlaunch=$(realpath "$1")
worker=$(realpath "$2")
fail() { echo "worker_cpu: FAILED: $*" >&2; exit 1; }
qemu=$(command -v qemu-x86_64) || fail "no qemu-x86_64; scripts/install-deps.sh --test installs Debian's qemu-user"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
printf 'a fortune a day\n%.0s' {1..200} > text.txt
cat > job.json <<JSON
{"name": "cpu", "nproc_per_node": 1, "device": "cpu", "run_dir": "$tmp/run",
 "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "seq_len": 16, "vocab_size": 256},
 "data": {"train": "$tmp/text.txt", "val_fraction": 0.1},
 "train": {"steps": 1, "batch_size": 2, "micro_batch_size": 2, "warmup_steps": 0, "eval_every": 0}}
JSON

# run CPU PROGRAM ARGS...: its exit code in $rc, its stderr in err.txt (without QEMU's warnings
# about features of the model it does not emulate).
run() {
  local cpu=$1; shift
  rc=0
  "$qemu" -cpu "$cpu" "$@" > out.txt 2> all-err.txt || rc=$?
  grep -v "^qemu-x86_64: warning: " all-err.txt > err.txt || true
}

for cpu in Nehalem SandyBridge; do
  missing="lacks AVX, AVX2"
  [[ $cpu == SandyBridge ]] && missing="lacks AVX2, FMA"
  run "$cpu" "$xlaunch" job.json
  [[ $rc == 126 ]] || fail "xlaunch on $cpu exited $rc, expected 126: $(tail -3 err.txt)"
  grep -q "^xlaunch: error: the worker ($worker) cannot run here: this CPU $missing" err.txt ||
    fail "xlaunch on $cpu: no error naming the missing features: $(cat err.txt)"
  [[ ! -e run ]] || fail "xlaunch on $cpu created the run directory"
  run "$cpu" "$xlaunch" --check job.json
  [[ $rc == 126 ]] || fail "xlaunch --check on $cpu exited $rc, expected 126"
  for command in "--job job.json" "generate model.bin --prompt a"; do
    # shellcheck disable=SC2086  # the command's words
    run "$cpu" "$worker" $command
    [[ $rc == 2 ]] || fail "xtrain-worker $command on $cpu exited $rc, expected 2: $(tail -3 err.txt)"
    [[ $(wc -l < err.txt) == 1 ]] && grep -q "^error: CPU: this CPU $missing" err.txt ||
      fail "xtrain-worker $command on $cpu: expected one error line naming the missing features: $(cat err.txt)"
  done
done

# The control: where QEMU emulates x86-64-v3, the same commands get past the check.
run max "$xlaunch" --check job.json
[[ $rc == 0 ]] || fail "xlaunch --check on QEMU's max CPU exited $rc: $(cat err.txt)"
grep -q "job.json is valid" out.txt || fail "xlaunch --check on QEMU's max CPU: $(cat out.txt)"
run max "$worker" generate model.bin --prompt a
[[ $rc == 2 ]] && grep -q "model.bin" err.txt && ! grep -q "CPU" err.txt ||
  fail "xtrain-worker generate on QEMU's max CPU: expected the missing model file's error: $(cat err.txt)"
echo "worker_cpu: xlaunch exits 126 and xtrain-worker 2 on Nehalem and SandyBridge, naming the missing features; both pass on QEMU's max CPU"
