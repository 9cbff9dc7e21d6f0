#!/usr/bin/env bash
# A real SLURM on this machine: munged, slurmctld and slurmd with a one-node configuration, all in
# a temporary directory on their own ports, then:
#   1. `sbatch --wait` of scripts/slurm/xtrain.sbatch, with no XLAUNCH: exit code 0, the ranks' logs,
#      summary.json
#   2. a job whose ranks sleep, `scancel`ed while running: summary.json says stopped by SIGTERM
#      (xlaunch exit 143), and none of its processes survives
#   scripts/slurm/ci-test.sh XLAUNCH TEST_WORKER
# Needs root (installs slurm-wlm and munge from Debian when missing); exits 77 (skipped) without.
set -euo pipefail
if [[ $(id -u) != 0 ]]; then
  echo "slurm ci-test: skipped: starting slurmd and munged needs root" >&2
  exit 77
fi
xlaunch=$(realpath "$1")
test_worker=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge >/dev/null
fi
tmp=$(mktemp -d /tmp/xtrain-slurm.XXXXXX)
chmod 755 "$tmp"
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "slurm ci-test: FAILED: $*" >&2
  for f in "$tmp"/log/*.log; do echo "---- $f" >&2; tail -20 "$f" >&2; done
  exit 1
}

mkdir -p "$tmp/log" "$tmp/state" "$tmp/spool" "$tmp/munge" "$tmp/work"
chmod 700 "$tmp/munge"
# munge: our own key and socket, so that nothing of the machine's is touched.
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge/munge.key"
munged --force --key-file="$tmp/munge/munge.key" --socket="$tmp/munge/socket" \
  --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/log/munged.log" --seed-file="$tmp/munge/seed"
pids+=("$(cat "$tmp/munge/munged.pid")")

host=$(hostname -s)
base_port=$((17000 + $$ % 1000 * 2))
cpus=$(nproc)
cat >"$tmp/slurm.conf" <<EOF
ClusterName=xtrainci
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$base_port
SlurmdPort=$((base_port + 1))
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/socket
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillWait=10
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$tmp/slurm.conf"
slurmctld -D -i -f "$SLURM_CONF" >"$tmp/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" >"$tmp/log/slurmd.out" 2>&1 &
pids+=($!)
# sinfo's output whole, then grep: `sinfo | grep -q` under pipefail fails if sinfo dies of SIGPIPE.
for _ in $(seq 100); do
  grep -qE '^(idle|mix)' <<<"$(sinfo -h -o %t 2>/dev/null)" && break
  sleep 0.2
done
grep -qE '^(idle|mix)' <<<"$(sinfo -h -o %t)" || fail "the node never became idle: $(sinfo 2>&1)"
echo "slurm ci-test: slurmctld and slurmd up on $host (ports $base_port, $((base_port + 1)))"

cd "$tmp/work"
cat >job.json <<EOF
{"name": "ci", "device": "cpu", "nproc_per_node": 2, "launcher": {"term_timeout_s": 3},
 "worker": {"command": ["$test_worker", "--pid-dir", "$tmp/work/pids", "--print-env", "--print", "trained", "--sleep", "0.5"]}}
EOF
mkdir -p pids
# 1. A job that succeeds, submitted as the README says (no XLAUNCH: the submit directory's build/bin/xlaunch;
#    no RUN_DIR), twice, as a job is resubmitted after its time limit: both in runs/job/node-0, where a
#    training job's second submission resumes from the first one's checkpoints.
mkdir -p build/bin
ln -s "$xlaunch" build/bin/xlaunch
for n in 1 2; do
  status=0
  sbatch --wait --nodes=1 -o "$tmp/work/ok-$n-%j.out" "$here/xtrain.sbatch" job.json >sbatch.out 2>&1 || status=$?
  [[ $status == 0 ]] || fail "sbatch --wait (submission $n) exited $status: $(cat sbatch.out ok-*.out 2>/dev/null)"
done
summary=runs/job/node-0/summary.json
[[ -f $summary ]] || fail "no $summary: $(cat ok-*.out)"
[[ $(grep -c "^==== xlaunch: attempt 1 of 1 at " runs/job/node-0/logs/rank-0.log) == 2 ]] ||
  fail "the second submission did not run in the first one's run directory: $(ls runs)"
/usr/bin/python3 - "$summary" <<'EOF' || fail "summary: $(cat "$summary")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["status"] == "succeeded" and d["exit_code"] == 0, d
assert [r["exit_code"] for r in d["ranks"]] == [0, 0], d["ranks"]
EOF
grep -q "^\[rank 1\] trained" ok-*.out || fail "the ranks' lines are not in the job's output: $(cat ok-*.out)"
grep -q "^trained" runs/job/node-0/logs/rank-0.log || fail "logs/rank-0.log"
grep -q "^ENV SLURM_JOB_ID=" runs/job/node-0/logs/rank-0.log || fail "the ranks did not see SLURM's environment"
echo "slurm ci-test: sbatch --wait twice: exit 0, one run directory, summary.json and logs as expected"

# 2. scancel a running job.
rm -f pids/*
cat >sleepy.json <<EOF
{"name": "sleepy", "device": "cpu", "nproc_per_node": 2, "launcher": {"term_timeout_s": 3},
 "worker": {"command": ["$test_worker", "--pid-dir", "$tmp/work/pids", "--grandchild", "--sleep", "600"]}}
EOF
job=$(XLAUNCH=$xlaunch RUN_DIR="$tmp/work/runs/cancel" sbatch --parsable --nodes=1 -o "$tmp/work/cancel-%j.out" \
  "$here/xtrain.sbatch" sleepy.json)
for _ in $(seq 150); do
  [[ -f pids/rank-0.pid && -f pids/rank-1.pid && -f pids/grandchild-1.pid ]] && break
  sleep 0.2
done
[[ -f pids/rank-1.pid ]] || fail "job $job never started its ranks: $(cat cancel-*.out 2>/dev/null)"
scancel "$job"
for _ in $(seq 150); do
  [[ -z $(squeue -h -j "$job" 2>/dev/null) ]] && break
  sleep 0.2
done
[[ -z $(squeue -h -j "$job" 2>/dev/null) ]] || fail "job $job still queued 30 s after scancel"
summary=runs/cancel/node-0/summary.json
for _ in $(seq 50); do [[ -f $summary ]] && break; sleep 0.1; done
/usr/bin/python3 - "$summary" <<'EOF' || fail "summary after scancel: $(cat "$summary" 2>&1)"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["status"] == "stopped" and d["exit_code"] == 143, (d["status"], d["exit_code"], d["exit_reason"])
EOF
# Alive: exists and is not a zombie (an orphan's zombie waits for init, not for us).
alive() { [[ -r /proc/$1/stat ]] && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]; }
for f in pids/*.pid; do
  pid=$(cat "$f")
  ! alive "$pid" || fail "$(basename "$f" .pid) (pid $pid) survived scancel: $(cat "/proc/$pid/stat")"
done
echo "slurm ci-test: scancel: xlaunch stopped with 143 (SIGTERM), no rank or grandchild survived"
echo "slurm ci-test: passed"
