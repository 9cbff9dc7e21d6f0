#!/usr/bin/env bash
# Two "nodes" on one machine: two network namespaces joined by a veth pair.
#   node 1: namespace $XT_NS1, address $XT_ADDR1 (10.77.0.1/24) on interface $XT_IF1
#   node 2: namespace $XT_NS2, address $XT_ADDR2 (10.77.0.2/24) on interface $XT_IF2
# The addresses exist only inside namespaces this script creates, so they touch nothing else;
# the names carry this shell's pid, so concurrent runs do not collide.
#
# Run one command with them (it sees XT_NS1, XT_NS2, XT_ADDR1, XT_ADDR2, XT_IF1, XT_IF2 and runs
# things on a node with `ip netns exec "$XT_NS1" ...`); its exit code is this script's:
#   scripts/netns/two_nodes.sh CMD ARGS...
# Or source it from a test script:
#   source scripts/netns/two_nodes.sh
#   two_nodes_up                    # creates both; an EXIT trap runs two_nodes_down
#   some_cmd & two_nodes_track $!   # background processes to stop before the namespaces go
#   two_nodes_cut                   # node 2's end of the link goes down: packets vanish both ways,
#                                   # and open connections fall silent (no reset, no FIN)
# two_nodes_down stops the tracked processes (SIGTERM, SIGKILL after 5 s) and every process
# still inside either namespace, then deletes the namespaces (the veth pair goes with them).
# It runs on every exit, a failed test or Ctrl-C included.
#
# Needs root and iproute2. Where namespaces cannot be made it says why and exits 77, which
# ctest reports as "skipped".

XT_ADDR1=10.77.0.1
XT_ADDR2=10.77.0.2
XT_NS1="xt-$$-n1"
XT_NS2="xt-$$-n2"
XT_IF1="xtv$$a"
XT_IF2="xtv$$b"
XT_PIDS=()
XT_UP=0

two_nodes_track() { XT_PIDS+=("$@"); }

two_nodes_cut() { ip -n "$XT_NS2" link set "$XT_IF2" down; }

two_nodes_down() {
  local pid ns deadline
  for pid in "${XT_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  deadline=$((SECONDS + 5))
  for pid in "${XT_PIDS[@]}"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  XT_PIDS=()
  ((XT_UP)) || return 0
  for ns in "$XT_NS1" "$XT_NS2"; do
    # Whatever still runs in a namespace made by this script was started by this script.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$XT_IF1" 2>/dev/null || true  # only there if moving it into a namespace failed
  XT_UP=0
}

two_nodes_up() {
  if [[ $(id -u) != 0 ]]; then
    echo "two_nodes: skipped: network namespaces need root" >&2
    exit 77
  fi
  if ! command -v ip >/dev/null; then
    echo "two_nodes: skipped: no 'ip' command (apt-get install iproute2)" >&2
    exit 77
  fi
  trap two_nodes_down EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  local err
  if ! err=$(ip netns add "$XT_NS1" 2>&1); then
    echo "two_nodes: skipped: 'ip netns add $XT_NS1' failed: $err" >&2
    exit 77
  fi
  XT_UP=1
  ip netns add "$XT_NS2"
  local v1=$XT_IF1 v2=$XT_IF2
  ip link add "$v1" type veth peer name "$v2"
  ip link set "$v1" netns "$XT_NS1"
  ip link set "$v2" netns "$XT_NS2"
  ip -n "$XT_NS1" addr add "$XT_ADDR1/24" dev "$v1"
  ip -n "$XT_NS2" addr add "$XT_ADDR2/24" dev "$v2"
  local ns
  for ns in "$XT_NS1" "$XT_NS2"; do
    ip -n "$ns" link set lo up
  done
  ip -n "$XT_NS1" link set "$v1" up
  ip -n "$XT_NS2" link set "$v2" up
  export XT_NS1 XT_NS2 XT_ADDR1 XT_ADDR2 XT_IF1 XT_IF2
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  if (($# == 0)); then
    echo "usage: $0 CMD [ARGS...]" >&2
    exit 2
  fi
  two_nodes_up
  status=0
  "$@" || status=$?
  exit "$status"
fi
