#!/usr/bin/python3
"""Rendezvous at scale, simulated: N nodes meet at node 0's store on loopback, run one attempt's
rendezvous and end-of-attempt exchange, and leave. xtrain's side is xlaunch's own code
(launcher/rendezvous/rendezvous.hpp through xtrain-bench-rdzv, scripts/bench/rendezvous_scale.cpp); next to
it, in the same run, PyTorch's TCPStore (Debian's torch 1.13) carrying the same requests.

Per N, both sides run the same script of steps, paced the same way by this driver:
  meet  every node connects to node 0's store (its own connection and job token), registers
        {addr, local_world_size, pid} under node/<k>; node 0 waits for all N registrations, reads
        them (checks every rank count), publishes the plan; every node reads the plan, then opens
        its watcher connection (a GET on its stop key, as xlaunch's watcher thread does);
  end   every node reports done/<k>; node 0 waits for all N, publishes the verdict; every node
        reads it, releases its watcher, reports left/<k>; node 0 waits for all N left/<k>.
The time of a step runs from this driver's "go" (written to every process at once) to the last
node's return (CLOCK_MONOTONIC, which every process shares). Node 0 runs in a process of its own:
its peak RSS is VmHWM at the end, next to its RSS just before the meet. xtrain's nodes also hold
a lease (a third connection and a keepalive a second) that TCPStore has no counterpart for.

TCPStore's best settings here: world_size=None and wait_for_workers=False (no init barrier),
nodes as threads in --procs processes (its calls release the GIL), one client per node and one
per watcher, 120 s timeout; multi_tenant does not apply (one server). Both sides use the same
number of processes, on the same machine.

Run with Debian's python (it has torch):
  /usr/bin/python3 scripts/bench/rendezvous_scale.py [--nodes 256,1024,4096] [--procs 8]
                   [--bench build/bin/xtrain-bench-rdzv] [--ranks-per-node 8] [--backend nccl]
"""
import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.abspath(__file__)
TARGET_NODES, TARGET_S = 4096, 2.0


def reserve_open_files(more, what):
    """Raises the soft RLIMIT_NOFILE to make room for `more` descriptors, never beyond the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = len(os.listdir("/proc/self/fd")) + more
    if needed <= soft:
        return
    if hard != resource.RLIM_INFINITY and needed > hard:
        sys.exit(f"{what} needs {needed} open files, but the hard limit is {hard} (ulimit -Hn): raise it for "
                 f"this user (as root: `ulimit -Hn {needed}` in the shell that starts it, or a nofile line in "
                 f"/etc/security/limits.conf)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return -1


# ---- TCPStore's side: the roles the driver starts, speaking xtrain-bench-rdzv's line protocol ----

def tcpstore_role(args):
    from datetime import timedelta
    import torch.distributed as dist

    timeout = timedelta(seconds=120)
    n, port = args.nodes, args.port
    first, count = (0, 1) if args.tcpstore_role == "node0" else (args.first, args.count)
    reserve_open_files(2 * count + 64, f"TCPStore's side ({count} simulated nodes)")
    meet, end = threading.Event(), threading.Event()
    lock = threading.Lock()
    report = {"met": [0, 0, ""], "ended": [0, 0, ""]}
    joined = threading.Semaphore(0)

    def note(phase, error=None):
        with lock:
            entry = report[phase]
            if error is None:
                entry[0] = max(entry[0], time.monotonic_ns())
            else:
                entry[1] += 1
                entry[2] = entry[2] or str(error).replace("\n", " ")

    def client():
        return dist.TCPStore("127.0.0.1", port, world_size=None, is_master=False, timeout=timeout,
                             wait_for_workers=False)

    def key(name):
        return "xlaunch/a1/" + name

    master = None
    if args.tcpstore_role == "node0":
        master = dist.TCPStore("127.0.0.1", port, world_size=None, is_master=True, timeout=timeout,
                               wait_for_workers=False)

    def node(k):
        meet.wait()
        watcher = None
        try:
            store = master if k == 0 else client()
            store.set(key(f"node/{k}"), json.dumps({"addr": "127.0.0.1", "local_world_size": args.ranks_per_node,
                                                    "pid": os.getpid()}))
            if k == 0:
                keys = [key(f"node/{j}") for j in range(n)]
                store.wait(keys)
                mismatch = [j for j in range(n) if json.loads(store.get(keys[j]))["local_world_size"] != args.ranks_per_node]
                assert not mismatch, mismatch
                store.set(key("plan"), json.dumps({"run_id": "bench", "world_size": n * args.ranks_per_node,
                                                   "local_world_size": args.ranks_per_node, "master_addr": "127.0.0.1",
                                                   "master_port": 29500, "nccl_id": "0" * 256}))
            plan = json.loads(store.get(key("plan")))
            assert plan["world_size"] == n * args.ranks_per_node
            watcher = threading.Thread(target=lambda: client().get(key(f"stop/{k}")))
            watcher.start()
            note("met")
        except Exception as e:  # noqa: BLE001 - reported to the driver
            note("met", e)
        joined.release()
        end.wait()
        if watcher is None:
            return
        try:
            store.set(key(f"done/{k}"), json.dumps({"status": "succeeded"}))
            if k == 0:
                store.wait([key(f"done/{j}") for j in range(n)])
                store.add(key("stop_count"), 0)  # 1.13 has no CHECK: ADD 0 reads the counter
                store.set(key("end"), json.dumps({"silent": [], "stop": None}))
            json.loads(store.get(key("end")))
            store.set(key(f"stop/{k}"), json.dumps({"end": True}))  # releases this node's watcher
            watcher.join()
            store.set(key(f"left/{k}"), "1")
            if k == 0:
                store.wait([key(f"left/{j}") for j in range(n)])
            note("ended")
        except Exception as e:  # noqa: BLE001
            note("ended", e)

    threads = [threading.Thread(target=node, args=(k,)) for k in range(first, first + count)]
    for t in threads:
        t.start()
    rss_before = status_kib("VmRSS:")
    print("ready", flush=True)
    assert sys.stdin.readline().strip() == "meet"
    meet.set()
    for _ in threads:
        joined.acquire()
    print("met %d %d %s" % tuple(report["met"]), flush=True)
    assert sys.stdin.readline().strip() == "end"
    end.set()
    for t in threads:
        t.join()
    print("ended %d %d %s" % tuple(report["ended"]), flush=True)
    if master is not None:
        print(f"rss {status_kib('VmHWM:')} {rss_before}", flush=True)
    sys.stdout.flush()
    os._exit(0)  # TCPStore's server thread does not always let the interpreter finish


# ---- the driver ----

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def split(first, total, parts):
    """[first, first + total) in `parts` nearly equal (first, count) slices."""
    out, start = [], first
    for p in range(parts):
        count = total // parts + (1 if p < total % parts else 0)
        if count:
            out.append((start, count))
            start += count
    return out


def cpu_s(pid):
    """User + system CPU seconds of a process so far (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def loopback_bytes():
    """Bytes through this network namespace's loopback so far (each packet counted once)."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, data = line.partition(":")
            if name.strip() == "lo":
                return int(data.split()[0])
    return 0


def private_loopback():
    """Moves this process into a network namespace of its own (root only), so that its loopback
    counts this benchmark's packets alone. Returns False where that is not possible."""
    import ctypes
    clone_newnet = 0x40000000
    if os.geteuid() != 0 or ctypes.CDLL(None, use_errno=True).unshare(clone_newnet) != 0:
        return False
    return subprocess.run(["ip", "link", "set", "lo", "up"], check=False).returncode == 0


def simulate(argv_for, n, procs, limit_s, hold_s=0):
    """Runs one rendezvous of n nodes: argv_for(role, first, count, port) gives each process's argv.
    hold_s: the nodes stay met that long before the end (their leases' keepalives only); the
    result then has what that cost: node 0's and the other nodes' CPU, and loopback bytes."""
    port = free_port()
    spawn = lambda argv: subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    everyone = [spawn(argv_for("node0", 0, 1, port))]
    watchdog = threading.Timer(limit_s, lambda: [p.kill() for p in everyone])
    watchdog.start()

    def line(p, word):
        text = p.stdout.readline().split(" ", 3)
        if text[0].strip() != word:
            raise RuntimeError(f"{n} nodes: expected '{word}', got {' '.join(text)!r} (exit {p.poll()})")
        return text

    try:
        line(everyone[0], "ready")  # node 0's store listens
        everyone += [spawn(argv_for("nodes", f, c, port)) for f, c in split(1, n - 1, procs)]
        for p in everyone[1:]:
            line(p, "ready")
        result = {}
        for phase, reply in (("meet", "met"), ("end", "ended")):
            cpu_before = [cpu_s(p.pid) for p in everyone]
            go = time.monotonic_ns()
            for p in everyone:
                p.stdin.write(phase + "\n")
                p.stdin.flush()
            replies = [line(p, reply) for p in everyone]
            failures = sum(int(r[2]) for r in replies)
            errors = [r[3].strip() for r in replies if len(r) > 3 and r[3].strip()]
            if failures:
                raise RuntimeError(f"{n} nodes, {phase}: {failures} node(s) failed; first: {errors[0]}")
            result[phase + "_s"] = (max(int(r[1]) for r in replies) - go) / 1e9
            cpu = [cpu_s(p.pid) - c for p, c in zip(everyone, cpu_before)]
            result.update({phase + "_node0_cpu_s": cpu[0], phase + "_nodes_cpu_s": sum(cpu[1:])})
            if phase == "meet" and hold_s:
                cpu0, wire0 = [cpu_s(p.pid) for p in everyone], loopback_bytes()
                time.sleep(hold_s)
                cpu = [cpu_s(p.pid) - c for p, c in zip(everyone, cpu0)]
                result.update(hold_s=hold_s, node0_cpu_s=cpu[0], nodes_cpu_s=sum(cpu[1:]),
                              wire_bytes=loopback_bytes() - wire0)
        peak, before = (int(x) for x in line(everyone[0], "rss")[1:3])
        result.update(peak_mib=peak / 1024, before_mib=before / 1024)
        for p in everyone:
            p.stdin.close()
            if p.wait(timeout=30) != 0:
                raise RuntimeError(f"{n} nodes: a process exited {p.returncode}")
        return result
    finally:
        watchdog.cancel()
        for p in everyone:
            if p.poll() is None:
                p.kill()
                p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="256,1024,4096")
    ap.add_argument("--procs", type=int, default=8, help="processes simulating the nodes other than node 0")
    ap.add_argument("--bench", default=os.path.join(os.path.dirname(HERE), "../../build/bin/xtrain-bench-rdzv"))
    ap.add_argument("--ranks-per-node", type=int, default=8)
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--keepalive-nodes", type=int, default=1024, help="nodes for the keepalive's cost (0: skip)")
    ap.add_argument("--keepalive-s", type=float, default=10, help="how long they hold their leases")
    ap.add_argument("--limit-s", type=float, default=300, help="per simulation")
    ap.add_argument("--json", help="also write the results here")
    # The TCPStore roles this script starts for itself.
    ap.add_argument("--tcpstore-role", choices=["node0", "nodes"], help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--first", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tcpstore_role:
        args.nodes = int(args.nodes)
        return tcpstore_role(args)

    bench = os.path.abspath(args.bench)
    if not os.access(bench, os.X_OK):
        sys.exit(f"no {bench}: build it (cmake --build build --target xtrain-bench-rdzv) or pass --bench")
    common = ["--ranks-per-node", str(args.ranks_per_node)]

    def xtrain_argv(n):
        return lambda role, first, count, port: [bench, role, "--nodes", str(n), "--port", str(port), "--first",
                                                 str(first), "--count", str(count), "--backend", args.backend] + common

    def torch_argv(n):
        return lambda role, first, count, port: [sys.executable, HERE, "--tcpstore-role", role, "--nodes", str(n),
                                                 "--port", str(port), "--first", str(first), "--count",
                                                 str(count)] + common

    isolated = args.keepalive_nodes > 0 and private_loopback()
    rows = []
    for n in (int(x) for x in args.nodes.split(",")):
        row = {"nodes": n, "xtrain": simulate(xtrain_argv(n), n, args.procs, args.limit_s)}
        print(f"{n} nodes: xtrain {row['xtrain']}", file=sys.stderr, flush=True)
        if not args.skip_torch:
            try:
                row["tcpstore"] = simulate(torch_argv(n), n, args.procs, args.limit_s)
            except RuntimeError as e:
                row["tcpstore"] = {"error": str(e)}
            print(f"{n} nodes: TCPStore {row['tcpstore']}", file=sys.stderr, flush=True)
        rows.append(row)

    def cells(r):
        if r is None:
            return ["not run"] * 3
        if "error" in r:
            return ["failed"] * 3
        return [f"{r['meet_s']:.3f}", f"{r['end_s']:.3f}", f"{r['peak_mib']:.1f} ({r['before_mib']:.1f})"]

    print(f"Rendezvous at scale on loopback: {args.procs} processes simulate the nodes, {args.ranks_per_node} ranks "
          f"per node, backend {args.backend}; times from the driver's go to the last node's return; node 0's "
          f"peak RSS (RSS before the meet) in MiB")
    print("| nodes | xtrain meet s | xtrain end s | xtrain node 0 RSS | TCPStore meet s | TCPStore end s | "
          "TCPStore node 0 RSS | TCPStore / xtrain (meet + end) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        x, t = row["xtrain"], row.get("tcpstore")
        ratio = "-"
        if t and "error" not in t:
            ratio = f"{(t['meet_s'] + t['end_s']) / (x['meet_s'] + x['end_s']):.1f}x"
        print("| " + " | ".join([str(row["nodes"])] + cells(x) + cells(t) + [ratio]) + " |")
    for row in rows:
        if row.get("tcpstore", {}).get("error"):
            print(f"TCPStore at {row['nodes']} nodes: {row['tcpstore']['error']}")
    target = [r for r in rows if r["nodes"] == TARGET_NODES]
    if target:
        met = target[0]["xtrain"]["meet_s"]
        print(f"target: {TARGET_NODES} nodes meet in <= {TARGET_S} s: {'met' if met <= TARGET_S else 'MISSED'} "
              f"({met:.3f} s)")
    keepalive = None
    if args.keepalive_nodes:
        n, hold = args.keepalive_nodes, args.keepalive_s
        keepalive = simulate(xtrain_argv(n), n, args.procs, args.limit_s + hold, hold_s=hold)
        per_node_s = (n - 1) * hold
        wire = (f"{keepalive['wire_bytes'] / per_node_s:.0f} bytes/s per node on the wire (loopback, IP and TCP "
                f"headers and ACKs included)" if isolated else
                "wire bytes not measured (needs root for a private loopback)")
        print(f"keepalive cost: {n} nodes holding their leases for {hold:g} s (interval 1 s, timeout 3 s): {wire}; "
              f"payload 46 bytes/s per node (a 25-byte KEEPALIVE and its 21-byte answer, frame headers included); "
              f"node 0's CPU {keepalive['node0_cpu_s'] / per_node_s * 1e6:.1f} us/s per node "
              f"({keepalive['node0_cpu_s'] / hold * 100:.2f}% of a core for all {n - 1}); the nodes' CPU "
              f"{keepalive['nodes_cpu_s'] / per_node_s * 1e6:.1f} us/s per node")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "keepalive": keepalive}, f, indent=1)


if __name__ == "__main__":
    main()
