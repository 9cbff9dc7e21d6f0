#!/usr/bin/env bash
# The rendezvous store across two network namespaces (scripts/netns/two_nodes.sh): the server
# on node 1 (10.77.0.1), clients on node 2 (10.77.0.2), over a veth pair as between machines.
# Checks: a client that starts before the server retries until it is up; SET/GET/ADD/WAIT from
# both nodes; a WAIT timeout names the missing key; a wrong token is refused; the server listens
# only on the endpoint's address; two Gloo ranks, one per node, all-reduce through the store;
# SIGTERM stops the server cleanly.
#   scripts/netns/kv_smoke.sh BUILD/bin/xtrain-kv-tool
# Needs root; exits 77 (skipped) where network namespaces are unavailable.
set -euo pipefail
tool=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
source "$here/two_nodes.sh"
two_nodes_up
tmp=$(mktemp -d)
trap 'two_nodes_down; rm -rf "$tmp"' EXIT

# Foreground commands only: a backgrounded function would be a subshell, and $! its pid. Background
# ones use `ip netns exec` directly, which execs the command, so $! is the command's own pid.
on1() { ip netns exec "$XT_NS1" "$@"; }
on2() { ip netns exec "$XT_NS2" "$@"; }
fail() { echo "kv_smoke: FAILED: $*" >&2; exit 1; }
expect_eq() { [[ "$1" == "$2" ]] || fail "$3: expected '$2', got '$1'"; }

export XTRAIN_JOB_TOKEN="smoke-$$-$RANDOM$RANDOM"
endpoint="$XT_ADDR1:29400"

# A client on node 2 comes first and must wait for the server.
ip netns exec "$XT_NS2" "$tool" get "$endpoint" early 20000 >"$tmp/early.out" 2>"$tmp/early.err" &
early=$!
two_nodes_track "$early"
sleep 0.5
kill -0 "$early" 2>/dev/null || fail "the early client gave up before the server started: $(cat "$tmp/early.err")"

ip netns exec "$XT_NS1" "$tool" serve "$endpoint" >"$tmp/server.out" 2>"$tmp/server.err" &
server=$!
two_nodes_track "$server"

on2 "$tool" set "$endpoint" early "from node 2"
wait "$early" || fail "early client: $(cat "$tmp/early.err")"
expect_eq "$(cat "$tmp/early.out")" "from node 2" "GET by the client that started first"
grep -q "listening on $endpoint" "$tmp/server.out" || fail "server did not report its address"

expect_eq "$(on1 "$tool" add "$endpoint" arrivals 1)" 1 "ADD on node 1"
expect_eq "$(on2 "$tool" add "$endpoint" arrivals 1)" 2 "ADD on node 2"
on1 "$tool" set "$endpoint" node/0 here
on2 "$tool" wait "$endpoint" 5000 node/0 arrivals early

status=0
on2 "$tool" wait "$endpoint" 300 node/0 node/1 2>"$tmp/wait.err" || status=$?
expect_eq "$status" 3 "exit code of a WAIT that times out"
grep -q 'rendezvous store at 10.77.0.1:29400: gave up after 0.3 s waiting for 1 of 2 keys; missing: "node/1"' \
  "$tmp/wait.err" || fail "timeout message: $(cat "$tmp/wait.err")"

status=0
XTRAIN_JOB_TOKEN=wrong on2 "$tool" get "$endpoint" early 1000 2>"$tmp/token.err" || status=$?
expect_eq "$status" 1 "exit code with a wrong token"
grep -q "refused this client: wrong job token" "$tmp/token.err" || fail "wrong token: $(cat "$tmp/token.err")"
grep -q "refused the connection from $XT_ADDR2:[0-9]*: wrong job token" "$tmp/server.err" ||
  fail "the server did not log the refusal: $(cat "$tmp/server.err")"

# Bound to the endpoint's address, not to every interface of node 1.
status=0
XTRAIN_KV_CONNECT_TIMEOUT_MS=300 on1 "$tool" get 127.0.0.1:29400 early 100 2>"$tmp/loopback.err" || status=$?
expect_eq "$status" 1 "connecting to node 1's loopback"
grep -q "Connection refused" "$tmp/loopback.err" || fail "loopback: $(cat "$tmp/loopback.err")"

# Gloo: rank 0 on node 1, rank 1 on node 2, meeting through the store.
ip netns exec "$XT_NS1" "$tool" gloo "$endpoint" 0 2 "$XT_ADDR1" >"$tmp/gloo0.out" 2>"$tmp/gloo0.err" &
rank0=$!
two_nodes_track "$rank0"
on2 "$tool" gloo "$endpoint" 1 2 "$XT_ADDR2" >"$tmp/gloo1.out" 2>"$tmp/gloo1.err" ||
  fail "gloo rank 1: $(cat "$tmp/gloo1.err")"
wait "$rank0" || fail "gloo rank 0: $(cat "$tmp/gloo0.err")"
expect_eq "$(cat "$tmp/gloo0.out")" 3 "gloo all-reduce on node 1"
expect_eq "$(cat "$tmp/gloo1.out")" 3 "gloo all-reduce on node 2"

kill -TERM "$server"
status=0
wait "$server" || status=$?
expect_eq "$status" 0 "server exit code after SIGTERM"
echo "kv_smoke: passed (store on $endpoint in $XT_NS1, clients in $XT_NS2)"
