#!/usr/bin/env bash
# xlaunch on two "nodes" (network namespaces joined by a veth pair, scripts/netns/two_nodes.sh),
# each node running 2 ranks, node 0's rendezvous store on 10.77.0.1:
#   token      a client without the job token (or with a wrong one) is refused by node 0's store
#   gang       rank 3 (node 1) is killed by SIGKILL: both xlaunch exit 137, both summaries name
#              node 1 rank 3, and every rank on node 0 is stopped within the grace period
#   absent     node 1 never starts: node 0 exits 125 after nodes.rdzv_timeout_s, naming node 1
#   hang       rank 2 (node 1) stops its heartbeats: both xlaunch exit 124 naming node 1 rank 2
#   lost       node 0's xlaunch is SIGKILLed: node 1 stops its ranks and exits 125 (node_lost)
#   kill1      node 1's xlaunch is SIGKILLed: node 0 stops its ranks and exits 125 naming node 1
#   cut        node 1's end of the link goes down (connections fall silent, no reset): both nodes
#              stop their ranks and exit 125, each naming the other
#              (lost, kill1, cut: within 5 s of the event, + 1 s margin for a loaded machine; the
#              5 s are nodes.keepalive_timeout_s = 3 s to notice, then the ranks' SIGTERM and exit)
#   kubeflow   two "pods" with only the environment Kubeflow's PyTorchJob gives them (PET_* and MASTER_*
#              by IP address, no DNS, no spec, no node flags) and the job token a Secret would add; the
#              worker pod starts 2 s before the master's store listens; the ranks get torchrun's
#              variables; then the master pod is killed: the worker pod exits 125 (node_lost)
#   (cut leaves the link down: the cases after it that need the link run in another invocation)
#   training   (when XTRAIN_WORKER is given) a 2x2 job of the real xtrain-worker over Gloo: its
#              losses match a single-process run of the same global batch (1e-5 relative)
#   ddp        a PyTorch DDP script (tests/launcher/ddp_train.py) on 2 nodes x 1 rank under xlaunch
#              with torchrun's static flags, with its c10d flags (--rdzv-id, no XTRAIN_JOB_TOKEN) and
#              under torchrun itself: the same losses and parameter digest, bit for bit, as 2 ranks
#              on one node
#   two_node_launch.sh XLAUNCH TEST_WORKER KV_TOOL [XTRAIN_WORKER] [CASES...]
# Needs root; exits 77 (skipped) where network namespaces are unavailable, and says why.
set -euo pipefail
xlaunch=$(realpath "$1")
test_worker=$(realpath "$2")
kv_tool=$(realpath "$3")
xtrain_worker=${4:+$(realpath "$4")}
shift $(($# < 4 ? $# : 4))
cases=("$@")
((${#cases[@]})) || cases=(token gang absent hang lost kill1 kubeflow cut training ddp)
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../scripts/netns/two_nodes.sh"
two_nodes_up
tmp=$(mktemp -d)
trap 'two_nodes_down; rm -rf "$tmp"' EXIT

fail() { echo "two_node_launch: FAILED: $*" >&2; exit 1; }
expect_eq() { [[ "$1" == "$2" ]] || fail "$3: expected '$2', got '$1'"; }
json_get() { /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {"d": d}))' "$@"; }
port=29500
export XTRAIN_JOB_TOKEN="two-node-$$-$RANDOM$RANDOM"

# spec NAME NNODES WORKER_JSON_ARGV: a test-worker job on 2 CPU ranks per node.
spec() {
  local name=$1 argv=$2
  ((++port))
  cat >"$tmp/$name.json" <<EOF
{"name": "$name", "device": "cpu", "nproc_per_node": 2,
 "worker": {"command": $argv},
 "launcher": {"term_timeout_s": 3},
 "nodes": {"nnodes": 2, "rdzv_endpoint": "$XT_ADDR1:$port", "rdzv_timeout_s": 5}}
EOF
}

# launch NODE NAME [ARGS...]: xlaunch for node NODE in its namespace, in the background; sets $pid.
launch() {
  local node=$1 name=$2 ns
  shift 2
  ns=$([[ $node == 0 ]] && echo "$XT_NS1" || echo "$XT_NS2")
  ip netns exec "$ns" "$xlaunch" "$tmp/$name.json" --set nodes.node_rank="$node" \
    --run-dir "$tmp/$name-node$node" "$@" >"$tmp/$name-node$node.out" 2>"$tmp/$name-node$node.err" &
  pid=$!
  two_nodes_track "$pid"
}

launch_both() {  # launch_both NAME: node 0, then node 1; sets $node0 and $node1
  launch 0 "$1"
  node0=$pid
  launch 1 "$1"
  node1=$pid
}

finish() {  # finish PID: sets $rc to its exit code (not in a subshell: only the parent can wait)
  rc=0
  wait "$1" || rc=$?
}

# A lost node ends the job on every other node within this long (see the header).
bound_s=5
margin_s=1
declare -A rc_of

# ended_after NAME NODE T0: seconds from the epoch time T0 to NODE's end, by its summary.json
# (finished_at, written as xlaunch ends; a node that exits first need not be waited for first).
ended_after() {
  json_get "$tmp/$1-node$2/summary.json" \
    "'%.2f' % (__import__('datetime').datetime.fromisoformat(d['finished_at'].replace('Z', '+00:00')).timestamp() - $3)"
}

within_bound() {  # within_bound SECONDS WHAT
  awk -v t="$1" -v b="$((bound_s + margin_s))" 'BEGIN { exit !(t <= b) }' ||
    fail "$2 took $1 s (bound: $bound_s s + $margin_s s margin)"
}

await_ranks() {  # await_ranks PID_DIR: until all 4 ranks have written their pid files (10 s at most)
  local r
  for r in 0 1 2 3; do
    for _ in $(seq 100); do [[ -f $1/rank-$r.pid ]] && break; sleep 0.1; done
    [[ -f $1/rank-$r.pid ]] || fail "rank $r never started"
  done
}

no_rank_survives() {  # no_rank_survives PID_DIR WHAT
  local r p
  for r in 0 1 2 3; do
    p=$(cat "$1/rank-$r.pid")
    for _ in $(seq 30); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    ! kill -0 "$p" 2>/dev/null || fail "rank $r (pid $p) survived $2"
  done
}

case_token() {
  spec token "[\"$test_worker\", \"--sleep\", \"30\"]"
  launch 0 token
  local node0=$pid status=0
  sleep 1
  XTRAIN_JOB_TOKEN=wrong XTRAIN_KV_CONNECT_TIMEOUT_MS=3000 ip netns exec "$XT_NS2" "$kv_tool" get \
    "$XT_ADDR1:$port" xlaunch/a1/node/0 1000 2>"$tmp/token.err" || status=$?
  expect_eq "$status" 1 "kv-tool exit code with a wrong token"
  grep -q "refused this client: wrong job token" "$tmp/token.err" || fail "wrong token: $(cat "$tmp/token.err")"
  # The same request with the token gets node 0's registration.
  ip netns exec "$XT_NS2" "$kv_tool" get "$XT_ADDR1:$port" xlaunch/a1/node/0 3000 >"$tmp/token.out" ||
    fail "with the token: $(cat "$tmp/token.out")"
  grep -q '"local_world_size":2' "$tmp/token.out" || fail "node 0's registration: $(cat "$tmp/token.out")"
  grep -q "refused the connection from $XT_ADDR2:[0-9]*: wrong job token" "$tmp/token-node0.err" ||
    fail "node 0 did not log the refusal: $(cat "$tmp/token-node0.err")"
  kill -TERM "$node0"
  finish "$node0"; expect_eq "$rc" 143 "node 0 stopped by SIGTERM during the rendezvous"
  echo "two_node_launch: token: passed (refused without the token; node 0 then stopped with 143)"
}

case_gang() {
  spec gang "[\"$test_worker\", \"--pid-dir\", \"$tmp/gang-pids\", \"--sleep\", \"60\", \"--rank\", \"3\", \"--sleep\", \"1\", \"--signal\", \"9\"]"
  mkdir -p "$tmp/gang-pids"
  local started=$SECONDS
  launch_both gang
  finish "$node1"; expect_eq "$rc" 137 "node 1's exit code"
  finish "$node0"; expect_eq "$rc" 137 "node 0's exit code"
  local took=$((SECONDS - started))
  ((took < 15)) || fail "the gang took $took s to stop (rank 3 died after 1 s, grace period 3 s)"
  local node
  for node in 0 1; do
    local summary="$tmp/gang-node$node/summary.json"
    expect_eq "$(json_get "$summary" 'd["exit_code"]')" 137 "node $node summary exit_code"
    expect_eq "$(json_get "$summary" 'd["root_cause"]["node"], d["root_cause"]["rank"], d["root_cause"]["signal"]')" \
      "(1, 3, 9)" "node $node summary root cause (node, rank, signal)"
  done
  for r in 0 1 2 3; do
    local p
    p=$(cat "$tmp/gang-pids/rank-$r.pid")
    ! kill -0 "$p" 2>/dev/null || fail "rank $r (pid $p) survived"
  done
  grep -q "^\[node 1 rank 3\]\|node 1: rank 3" "$tmp/gang-node0.err" "$tmp/gang-node0.out" ||
    fail "node 0 did not name node 1 rank 3: $(cat "$tmp/gang-node0.err")"
  echo "two_node_launch: gang: passed (node 1 rank 3 killed; both nodes exit 137 in $took s)"
}

case_absent() {
  spec absent "[\"$test_worker\", \"--sleep\", \"30\"]"
  local started=$SECONDS
  launch 0 absent
  local node0=$pid
  finish "$node0"; expect_eq "$rc" 125 "node 0's exit code when node 1 never starts"
  local took=$((SECONDS - started))
  ((took >= 4 && took < 15)) || fail "node 0 gave up after $took s (nodes.rdzv_timeout_s = 5)"
  grep -q "1 of 2 nodes never arrived within nodes.rdzv_timeout_s = 5 s: node 1" "$tmp/absent-node0.err" ||
    fail "node 0's message: $(cat "$tmp/absent-node0.err")"
  expect_eq "$(json_get "$tmp/absent-node0/summary.json" 'd["status"], d["exit_code"]')" "('launch_failed', 125)" \
    "node 0's summary"
  echo "two_node_launch: absent: passed (node 0 exits 125 after $took s naming node 1)"
}

case_hang() {  # rank 2 (node 1) stops its heartbeats: both nodes exit 124 naming it
  spec hang "[\"$test_worker\", \"--heartbeat\", \"0.2\", \"--sleep\", \"30\", \"--rank\", \"2\", \"--heartbeat-for\", \"1\"]"
  sed -i 's/"term_timeout_s": 3/"term_timeout_s": 3, "heartbeat_timeout_s": 2/' "$tmp/hang.json"
  launch_both hang
  finish "$node1"; expect_eq "$rc" 124 "node 1's exit code (hang)"
  finish "$node0"; expect_eq "$rc" 124 "node 0's exit code (hang)"
  expect_eq "$(json_get "$tmp/hang-node0/summary.json" 'd["status"], d["root_cause"]["node"], d["root_cause"]["rank"]')" \
    "('hung', 1, 2)" "node 0's summary (hang)"
  echo "two_node_launch: hang: passed (node 1 rank 2 hung; both nodes exit 124)"
}

# lost_case NAME EVENT: both nodes run 2 sleeping ranks each; EVENT (a shell command) strikes at
# $event_at; then waits for both xlaunch (rc_of[PID]).
lost_case() {
  spec "$1" "[\"$test_worker\", \"--pid-dir\", \"$tmp/$1-pids\", \"--sleep\", \"60\"]"
  mkdir -p "$tmp/$1-pids"
  launch_both "$1"
  await_ranks "$tmp/$1-pids"
  event_at=$(date +%s.%N)
  eval "$2"
  local pid
  for pid in "$node0" "$node1"; do
    rc_of[$pid]=0
    { wait "$pid" || rc_of[$pid]=$?; } 2>/dev/null  # without bash's "Killed" notice
  done
}

# expect_lost NAME NODE LOST_NODE: NODE exited 125 within the bound, and its summary and console
# name LOST_NODE; sets $after (seconds from the event to NODE's end).
expect_lost() {
  local pid
  pid=$([[ $2 == 0 ]] && echo "$node0" || echo "$node1")
  expect_eq "${rc_of[$pid]}" 125 "$1: node $2's exit code"
  after=$(ended_after "$1" "$2" "$event_at")
  within_bound "$after" "$1: node $2"
  expect_eq "$(json_get "$tmp/$1-node$2/summary.json" 'd["status"], d["exit_code"], d["root_cause"]["node"], d["root_cause"]["kind"]')" \
    "('node_lost', 125, $3, 'node_lost')" "$1: node $2's summary (status, exit code, lost node, kind)"
  grep -q "job node_lost .*xlaunch exits 125" "$tmp/$1-node$2.err" || fail "$1: node $2's console: $(tail -3 "$tmp/$1-node$2.err")"
}

case_lost() {  # node 0's xlaunch is killed with SIGKILL: node 1 stops its ranks and exits 125
  lost_case lost 'kill -KILL "$node0"'
  expect_lost lost 1 0
  grep -q "lost node 0" "$tmp/lost-node1.err" || fail "node 1 does not name node 0: $(cat "$tmp/lost-node1.err")"
  no_rank_survives "$tmp/lost-pids" "the loss of node 0"
  echo "two_node_launch: lost: passed (node 0 killed; node 1 exits 125 node_lost after $after s, no rank survives)"
}

case_kill1() {  # node 1's xlaunch is killed with SIGKILL: node 0 stops its ranks and exits 125
  lost_case kill1 'kill -KILL "$node1"'
  expect_lost kill1 0 1
  grep -q "node 1: its xlaunch is lost" "$tmp/kill1-node0.err" ||
    fail "node 0 does not name node 1: $(cat "$tmp/kill1-node0.err")"
  no_rank_survives "$tmp/kill1-pids" "the loss of node 1"
  echo "two_node_launch: kill1: passed (node 1 killed; node 0 exits 125 node_lost after $after s, no rank survives)"
}

case_cut() {  # node 1's link goes down: silence both ways; each node gives the other up
  lost_case cut two_nodes_cut
  expect_lost cut 0 1
  local after0=$after
  expect_lost cut 1 0
  grep -q "node 1: its xlaunch is lost (10.77.0.2:[0-9]*: silent for 3.0 s" "$tmp/cut-node0.err" ||
    fail "node 0 does not say node 1 fell silent: $(cat "$tmp/cut-node0.err")"
  grep -q "node 0's store is lost: no answer to keepalives for 3.0 s" "$tmp/cut-node1.err" ||
    fail "node 1 does not say node 0 fell silent: $(cat "$tmp/cut-node1.err")"
  no_rank_survives "$tmp/cut-pids" "the cut"
  echo "two_node_launch: cut: passed (link down; node 0 exits 125 after $after0 s naming node 1," \
    "node 1 after $after s naming node 0; no rank survives)"
}

# pod NAME NODE ARGS...: xlaunch in NODE's namespace with nothing in its environment but what
# Kubeflow's operator sets for replica NODE of 2 (2 ranks each), PATH and the job token.
pod() {
  local name=$1 node=$2 ns
  shift 2
  ns=$([[ $node == 0 ]] && echo "$XT_NS1" || echo "$XT_NS2")
  ip netns exec "$ns" env -i PATH="$PATH" XTRAIN_JOB_TOKEN="$XTRAIN_JOB_TOKEN" PYTHONUNBUFFERED=1 \
    MASTER_ADDR="$XT_ADDR1" MASTER_PORT="$port" WORLD_SIZE=2 RANK="$node" \
    PET_MASTER_ADDR="$XT_ADDR1" PET_MASTER_PORT="$port" PET_NNODES=2 PET_NODE_RANK="$node" PET_NPROC_PER_NODE=2 \
    "$xlaunch" --run-dir "$tmp/$name-node$node" "$@" >"$tmp/$name-node$node.out" 2>"$tmp/$name-node$node.err" &
  pid=$!
  two_nodes_track "$pid"
}

case_kubeflow() {
  ((++port))
  mkdir -p "$tmp/kubeflow-pids"
  local args=(--set launcher.term_timeout_s=3 --set nodes.rdzv_timeout_s=20 --
              "$test_worker" --print-env --pid-dir "$tmp/kubeflow-pids" --sleep 60)
  pod kubeflow 1 "${args[@]}"
  node1=$pid
  sleep 2
  kill -0 "$node1" 2>/dev/null || fail "kubeflow: the worker pod gave up before the master started: $(cat "$tmp/kubeflow-node1.err")"
  pod kubeflow 0 "${args[@]}"
  node0=$pid
  await_ranks "$tmp/kubeflow-pids"
  local r v
  for r in 0 1 2 3; do
    for _ in $(seq 50); do grep -q "^ENV TORCHELASTIC_RUN_ID=" "$tmp/kubeflow-node$((r / 2))/logs/rank-$r.log" 2>/dev/null && break; sleep 0.1; done
    for v in "RANK=$r" "WORLD_SIZE=4" "LOCAL_RANK=$((r % 2))" "GROUP_RANK=$((r / 2))" "GROUP_WORLD_SIZE=2" \
             "ROLE_RANK=$r" "ROLE_WORLD_SIZE=4" "ROLE_NAME=default" "MASTER_ADDR=$XT_ADDR1" \
             "TORCHELASTIC_RESTART_COUNT=0" "TORCHELASTIC_MAX_RESTARTS=0"; do
      grep -qx "ENV $v" "$tmp/kubeflow-node$((r / 2))/logs/rank-$r.log" ||
        fail "kubeflow: rank $r lacks $v: $(grep '^ENV' "$tmp/kubeflow-node$((r / 2))/logs/rank-$r.log" | tr '\n' ' ')"
    done
  done
  local ids
  ids=$(grep -h "^ENV TORCHELASTIC_RUN_ID=" "$tmp"/kubeflow-node*/logs/rank-*.log | sort -u)
  [[ $(wc -l <<<"$ids") == 1 ]] || fail "kubeflow: the ranks disagree on TORCHELASTIC_RUN_ID: $ids"
  event_at=$(date +%s.%N)
  kill -KILL "$node0"
  for pid in "$node0" "$node1"; do
    rc_of[$pid]=0
    { wait "$pid" || rc_of[$pid]=$?; } 2>/dev/null
  done
  expect_lost kubeflow 1 0
  no_rank_survives "$tmp/kubeflow-pids" "the loss of the master pod"
  echo "two_node_launch: kubeflow: passed (PET_* pods, worker first; torchrun's variables on 4 ranks;" \
    "master pod killed: the worker pod exits 125 node_lost after $after s)"
}

case_training() {
  [[ -n "$xtrain_worker" ]] || fail "training needs the xtrain-worker path"
  head -c 20000 /dev/urandom | base64 >"$tmp/data.txt"
  ((++port))
  local common='"device": "cpu", "backend": "gloo",
    "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "seq_len": 16, "vocab_size": 256},
    "data": {"train": "'"$tmp/data.txt"'"},
    "train": {"steps": 4, "batch_size": 8, "micro_batch_size": 2, "lr": 0.001, "warmup_steps": 0, "log_every": 1},
    "checkpoint": {"every": 0}'
  cat >"$tmp/training.json" <<EOF
{"name": "training", "nproc_per_node": 2, "worker": {"command": ["$xtrain_worker"]}, $common,
 "nodes": {"nnodes": 2, "rdzv_endpoint": "$XT_ADDR1:$port", "rdzv_timeout_s": 30}}
EOF
  cat >"$tmp/single.json" <<EOF
{"name": "single", "nproc_per_node": 1, "worker": {"command": ["$xtrain_worker"]}, $common,
 "train": {"steps": 4, "batch_size": 8, "micro_batch_size": 8, "lr": 0.001, "warmup_steps": 0, "log_every": 1}}
EOF
  launch_both training
  finish "$node1"; expect_eq "$rc" 0 "node 1 (training): $(tail -5 "$tmp/training-node1.err")"
  finish "$node0"; expect_eq "$rc" 0 "node 0 (training): $(tail -5 "$tmp/training-node0.err")"
  expect_eq "$(json_get "$tmp/training-node1/summary.json" 'd["world_size"], [r["rank"] for r in d["ranks"]]')" \
    "(4, [2, 3])" "node 1's ranks"
  grep -q "world 4\|world_size 4\|4 ranks\|of 4" "$tmp/training-node0/logs/rank-0.log" ||
    fail "rank 0 does not report a world of 4: $(head -5 "$tmp/training-node0/logs/rank-0.log")"
  [[ ${XT_KEEP:-} ]] && cp -r "$tmp" "$XT_KEEP"
  "$xlaunch" "$tmp/single.json" --run-dir "$tmp/single" >"$tmp/single.out" 2>"$tmp/single.err" ||
    fail "single-process run: $(tail -5 "$tmp/single.err")"
  /usr/bin/python3 - "$tmp/training-node0/metrics.jsonl" "$tmp/single/metrics.jsonl" <<'EOF' || fail "losses differ"
import json, sys
def losses(path):
    return [(r["step"], r["loss"]) for r in map(json.loads, open(path)) if "loss" in r and "step" in r]
two, one = losses(sys.argv[1]), losses(sys.argv[2])
assert len(two) >= 4 and [s for s, _ in two] == [s for s, _ in one], (two, one)
for (step, a), (_, b) in zip(two, one):
    print(f"step {step}: 2x2 {a:.7f}  single {b:.7f}  rel {abs(a - b) / abs(b):.2e}")
    assert abs(a - b) <= 1e-5 * abs(b), f"step {step}: {a} vs {b}"
EOF
  echo "two_node_launch: training: passed (2x2 Gloo losses match one process)"
}

case_ddp() {
  local python=/usr/bin/python3 script="$here/../launcher/ddp_train.py" node ns if port_static port_c10d port_torchrun
  "$python" -c 'import torch' 2>/dev/null || fail "ddp: $python cannot import torch (scripts/install-deps.sh --test)"
  port_static=$((++port)) port_c10d=$((++port)) port_torchrun=$((++port))
  # Rank 0's "step"/"digest" lines from a log file.
  result() { sed -n -E 's/^((step|digest) .*)$/\1/p' "$@"; }
  # Gloo binds where the host name resolves, which is not inside a namespace: name the veth.
  on_node() {  # on_node NODE CMD...: in the background, output to $tmp/ddp-<tag>-node<NODE>.out
    local n=$1
    shift
    ns=$([[ $n == 0 ]] && echo "$XT_NS1" || echo "$XT_NS2")
    if=$([[ $n == 0 ]] && echo "xtv$$a" || echo "xtv$$b")
    ip netns exec "$ns" env GLOO_SOCKET_IFNAME="$if" PYTHON_EXEC="$python" "$@" \
      >"$tmp/ddp-$tag-node$n.out" 2>&1 &
    pid=$!
    two_nodes_track "$pid"
  }
  both() {  # both TAG FLAGS...: node 0 and node 1 with FLAGS plus --node-rank; waits for both
    tag=$1
    shift
    local pids=() n
    for n in 0 1; do
      on_node "$n" "$@" --node_rank "$n" --nproc_per_node 1 --log_dir "$tmp/ddp-$tag-node$n" "$script" --steps 20
      pids+=("$pid")
    done
    for n in 0 1; do finish "${pids[$n]}"; expect_eq "$rc" 0 "ddp $tag node $n: $(tail -5 "$tmp/ddp-$tag-node$n.out")"; done
  }
  both static "$xlaunch" --nnodes 2 --master_addr "$XT_ADDR1" --master_port "$port_static"
  both c10d env -u XTRAIN_JOB_TOKEN "$xlaunch" --nnodes=2 --rdzv-backend=c10d --rdzv-endpoint="$XT_ADDR1:$port_c10d" \
    --rdzv-id="ddp-$$"
  both torchrun "$python" -m torch.distributed.run --nnodes 2 --master_addr "$XT_ADDR1" --master_port "$port_torchrun" \
    --redirects 1 --tee 1
  tag=single
  on_node 0 "$xlaunch" --standalone --nproc_per_node 2 --log_dir "$tmp/ddp-single" "$script" --steps 20
  finish "$pid"; expect_eq "$rc" 0 "ddp on one node: $(tail -5 "$tmp/ddp-single-node0.out")"
  result "$tmp"/ddp-single/ddp_train-*/logs/rank-0.log >"$tmp/ddp-single.result"
  [[ $(grep -c '^step ' "$tmp/ddp-single.result") == 20 ]] || fail "ddp on one node: $(cat "$tmp/ddp-single-node0.out")"
  result "$tmp"/ddp-static-node0/ddp_train-*/logs/rank-0.log >"$tmp/ddp-static.result"
  result "$tmp"/ddp-c10d-node0/ddp_train-*/logs/rank-0.log >"$tmp/ddp-c10d.result"
  result "$tmp"/ddp-torchrun-node0/*/attempt_0/0/stdout.log >"$tmp/ddp-torchrun.result"
  for tag in static c10d torchrun; do
    diff -u "$tmp/ddp-single.result" "$tmp/ddp-$tag.result" >"$tmp/ddp-$tag.diff" ||
      fail "ddp: 2 nodes ($tag) differ from one node: $(cat "$tmp/ddp-$tag.diff")"
  done
  grep -q "world 2" "$tmp/ddp-single.result" || fail "ddp: not a world of 2: $(cat "$tmp/ddp-single.result")"
  echo "two_node_launch: ddp: passed (2 nodes under xlaunch static, xlaunch c10d --rdzv-id and torchrun:" \
       "the same 20 losses and digest as one node: $(tail -1 "$tmp/ddp-single.result"))"
}

for c in "${cases[@]}"; do "case_$c"; done
echo "two_node_launch: all passed (${cases[*]})"
