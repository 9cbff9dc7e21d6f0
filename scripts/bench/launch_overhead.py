#!/usr/bin/python3
"""Launcher benchmark: xlaunch next to torchrun (torch.distributed.run), in one run.

Measures
  1. launch overhead: 1 and 8 ranks of /bin/true, start to reaped exit; median wall time over
     --runs runs (--torchrun-runs for torchrun) and peak RSS;
  2. crash-to-exit: 4 ranks, rank 1 exits 3 after 0.5 s while the others sleep (healthy, they
     stop on SIGTERM); time from the crash (the rank's own clock, just before it exits) to the
     launcher's exit; default term timeouts;
  3. log throughput: 4 ranks print --lines lines each (`yes | head`) as fast as they can; lines
     per second through the supervisor (console to /dev/null, per-rank files), next to the same
     4 commands writing straight to /dev/null.

Peak RSS is GNU time's %M (wait4's ru_maxrss) in one extra run: the largest single process among
the launcher and the descendants it reaped, not the sum over the tree. (Measured through
/usr/bin/time because ru_maxrss survives exec: a child forked from this Python would report
Python's own ~10 MiB.)

Run with Debian's python (it has torch): /usr/bin/python3 scripts/bench/launch_overhead.py
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# Debian's torch 1.13 needs --redirects 1 --tee 1 (the default --redirects 0 crashes at start).
TORCHRUN = ["/usr/bin/python3", "-m", "torch.distributed.run", "--standalone", "--monitor_interval=0.1",
            "--redirects", "1", "--tee", "1"]
CRASH_SCRIPT = ('if [ "$RANK" = 1 ]; then sleep 0.5; date +%s.%N > "$CRASH_FILE"; exit 3; fi; exec sleep 60')


def timed(argv, cwd, env=None):
    """Runs argv to its end; returns (wall seconds, exit status)."""
    start = time.perf_counter()
    code = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode
    return time.perf_counter() - start, code


def peak_rss_mib(argv, cwd):
    """GNU time's maximum resident set size of argv's process tree (largest process), in MiB."""
    with tempfile.NamedTemporaryFile(mode="r") as out:
        subprocess.run(["/usr/bin/time", "-f", "%M", "-o", out.name] + argv, cwd=cwd, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        return int(out.read().split()[-1]) / 1024


def xlaunch_spec(tmp, name, nproc, command, extra=None):
    spec = {"name": name, "run_dir": os.path.join(tmp, "runs", name), "nproc_per_node": nproc, "device": "cpu",
            "worker": {"command": command}}
    spec.update(extra or {})
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def launch_overhead(args, tmp, nproc):
    """{tool: (median wall s, peak RSS MiB)} for xlaunch, torchrun and a shell starting the ranks."""
    spec = xlaunch_spec(tmp, f"true{nproc}", nproc, ["/bin/true"])
    rows = {}
    for tool, argv, runs in (("xlaunch", [args.xlaunch, spec], args.runs),
                             ("torchrun", TORCHRUN + [f"--nproc_per_node={nproc}", "--no_python", "/bin/true"],
                              args.torchrun_runs),
                             ("no launcher", ["/bin/sh", "-c", f"for i in $(seq {nproc}); do /bin/true & done; wait"],
                              args.runs)):
        results = [timed(argv, tmp) for _ in range(runs)]
        bad = [code for _, code in results if code != 0]
        if bad:
            sys.exit(f"{tool} with {nproc} ranks of /bin/true failed: exit codes {bad}")
        rows[tool] = (statistics.median(w for w, _ in results), peak_rss_mib(argv, tmp))
    return rows


def crash_to_exit(args, tmp):
    crash_file = os.path.join(tmp, "crash")
    env = dict(os.environ, CRASH_FILE=crash_file)
    spec = xlaunch_spec(tmp, "crash", 4, ["/bin/sh", "-c", CRASH_SCRIPT])
    rows = {}
    for tool, argv in (("xlaunch", [args.xlaunch, spec]),
                       ("torchrun", TORCHRUN + ["--nproc_per_node=4", "--no_python", "/bin/sh", "-c", CRASH_SCRIPT])):
        latencies, codes = [], set()
        for _ in range(args.crash_runs):
            _, code = timed(argv, tmp, env)
            exited = time.time()
            with open(crash_file) as f:
                latencies.append(exited - float(f.read()))
            codes.add(code)
        rows[tool] = (statistics.median(latencies), sorted(codes))
    return rows


def log_throughput(args, tmp):
    """Lines per second: (xlaunch, torchrun, the same commands without a launcher)."""
    script = f'yes "rank $RANK {"x" * 60}" | head -n {args.lines}'
    spec = xlaunch_spec(tmp, "lines", 4, ["/bin/sh", "-c", script])
    runs = {"xlaunch": [args.xlaunch, spec],
            "torchrun": TORCHRUN + ["--nproc_per_node=4", "--no_python", "/bin/sh", "-c", script],
            "no launcher": ["/bin/sh", "-c", f"for RANK in 0 1 2 3; do {script} > /dev/null & done; wait"]}
    rates = []
    for tool, argv in runs.items():
        wall, code = timed(argv, tmp)
        if code != 0:
            sys.exit(f"{tool}: the throughput run failed with exit code {code}")
        rates.append(4 * args.lines / wall)
    for rank in range(4):
        with open(os.path.join(tmp, "runs", "lines", "logs", f"rank-{rank}.log"), "rb") as f:
            got = f.read().count(b"\n") - 1  # minus the attempt separator
        if got != args.lines:
            sys.exit(f"xlaunch: rank {rank} log has {got} lines, expected {args.lines}")
    return rates


def ms(seconds):
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--xlaunch", default="build/bin/xlaunch")
    parser.add_argument("--runs", type=int, default=10, help="runs per xlaunch launch measurement")
    parser.add_argument("--torchrun-runs", type=int, default=5)
    parser.add_argument("--crash-runs", type=int, default=3)
    parser.add_argument("--lines", type=int, default=250000, help="lines per rank for the throughput test")
    args = parser.parse_args()
    args.xlaunch = os.path.abspath(args.xlaunch)
    tmp = tempfile.mkdtemp(prefix="xlaunch-bench-")
    try:
        print(f"# xlaunch {args.xlaunch}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
        print("| measurement | xlaunch | torchrun | torchrun / xlaunch |")
        print("| --- | --- | --- | --- |")
        for nproc in (1, 8):
            rows = launch_overhead(args, tmp, nproc)
            (xw, xm), (tw, tm), (sw, _) = rows["xlaunch"], rows["torchrun"], rows["no launcher"]
            print(f"| {nproc} rank(s) of /bin/true: median wall ({args.runs} / {args.torchrun_runs} runs; "
                  f"a shell alone: {ms(sw)}) | {ms(xw)} | {ms(tw)} | {tw / xw:.0f}x |")
            print(f"| {nproc} rank(s) of /bin/true: peak RSS (largest process) | {xm:.1f} MiB "
                  f"| {tm:.1f} MiB | {tm / xm:.0f}x |")
        crash = crash_to_exit(args, tmp)
        (xc, xcodes), (tc, tcodes) = crash["xlaunch"], crash["torchrun"]
        print(f"| crash to exit, 4 ranks, median of {args.crash_runs} (exit codes {xcodes} / {tcodes}) "
              f"| {ms(xc)} | {ms(tc)} | {tc / xc:.0f}x |")
        xl, tl, dl = log_throughput(args, tmp)
        print(f"| log throughput, 4 x {args.lines} lines of 68 bytes (no launcher: {dl / 1e6:.1f} M lines/s) "
              f"| {xl / 1e6:.2f} M lines/s | {tl / 1e6:.2f} M lines/s | xlaunch {xl / tl:.1f}x faster |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
