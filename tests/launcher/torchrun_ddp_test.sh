#!/usr/bin/env bash
# A real PyTorch DDP script (tests/launcher/ddp_train.py: Gloo, init_method env://) on one node,
# 2 ranks, launched three ways; rank 0's losses and final parameter digest must be the same bits:
#   torchrun   /usr/bin/python3 -m torch.distributed.run FLAGS ddp_train.py ARGS
#   xlaunch    xlaunch FLAGS ddp_train.py ARGS        (the same command line, torchrun replaced)
#   spec       xlaunch job.json                       (worker.command: python3 -u ddp_train.py ARGS)
#   torchrun_ddp_test.sh XLAUNCH
# Needs Debian's python3-torch in /usr/bin/python3 (scripts/install-deps.sh --test).
set -euo pipefail
xlaunch=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
script="$here/ddp_train.py"
python=/usr/bin/python3
fail() { echo "torchrun_ddp: FAILED: $*" >&2; exit 1; }
"$python" -c 'import torch' 2>/dev/null ||
  fail "$python cannot import torch; scripts/install-deps.sh --test installs Debian's python3-torch"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

args=(--steps 20)
# torchrun 1.13 under Python 3.11 crashes at start with its default --redirects 0;
# --redirects 1 --tee 1 avoids it and is a common form anyway. Both launchers put their logs
# under --log_dir: torchrun in <id>_<random>/attempt_0/<local rank>/, xlaunch in <name>-<time>/logs/.
flags=(--standalone --nproc_per_node=2 --redirects 1 --tee 1 --monitor_interval=0.1 --log_dir "$tmp/logs")

# Rank 0's "step"/"digest" lines, without xlaunch's "[rank 0] " prefix.
result() { sed -n -E 's/^(\[rank 0\] )?((step|digest) .*)$/\2/p' "$1"; }

"$python" -m torch.distributed.run "${flags[@]}" "$script" "${args[@]}" >torchrun.out 2>torchrun.err ||
  fail "torchrun: $(tail -5 torchrun.err)"
PYTHON_EXEC=$python "$xlaunch" "${flags[@]}" "$script" "${args[@]}" >xlaunch.out 2>xlaunch.err ||
  fail "xlaunch with torchrun's flags: $(tail -5 xlaunch.err)"
cat >job.json <<EOF
{"name": "ddp", "nproc_per_node": 2, "device": "cpu",
 "worker": {"command": ["$python", "-u", "$script", "--steps", "20"]}}
EOF
"$xlaunch" job.json >spec.out 2>spec.err || fail "xlaunch with a spec: $(tail -5 spec.err)"

# torchrun's console interleaves tee'd lines mid-line ("...405[default0]:"): its log file is the reference.
result logs/*/attempt_0/0/stdout.log >torchrun.result
[[ $(grep -c '^step ' torchrun.result) == 20 && $(grep -c '^digest ' torchrun.result) == 1 ]] ||
  fail "torchrun's rank 0 log lacks the 20 steps and the digest: $(cat torchrun.out)"
result xlaunch.out >xlaunch.result
result logs/ddp_train-*/logs/rank-0.log >xlaunch-log.result
result spec.out >spec.result
for run in xlaunch xlaunch-log spec; do
  diff -u torchrun.result $run.result >$run.diff || fail "$run differs from torchrun: $(cat $run.diff)"
done
grep -q "xlaunch: note: --monitor_interval is ignored" xlaunch.err || fail "no note for --monitor_interval"
echo "torchrun_ddp: 20 losses and the parameter digest are the same bits under torchrun, xlaunch with" \
     "torchrun's flags and xlaunch with a spec: $(tail -1 torchrun.result)"
