#!/usr/bin/python3
"""How far apart two cores of this machine run the same work, with nothing of xtrain's running.

One process pinned to each of two cores repeats the same small matrix product (single-threaded,
a few milliseconds each) for a while; each sample is the time of one product. Over a window of
32 samples per core, as the straggler detector judges a rank (launcher/agent/stragglers.hpp), it prints
how often and for how long one core's window median was at least 1.3, 1.4 and 1.5 times the
other's. On bare metal both cores run alike; on a virtual machine the host can slow one of them
with nothing in the guest to show for it.

  scripts/bench/core_drift.py [SECONDS] [CORE_A CORE_B]     (default 40 s, cores 0 and 1)
"""
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402  (after the thread settings, which it reads at import)

WINDOW = 32
SAMPLE_MS = 6.0  # the work of one sample: about a small model's step


def operands():
    rng = np.random.default_rng(1)
    return rng.standard_normal((192, 192), dtype=np.float32), rng.standard_normal((192, 192), dtype=np.float32)


def sample_reps():
    """Products per sample: about SAMPLE_MS here, by the median of 20 timed products (the same count
    for both cores, so their samples are the same work)."""
    a, b = operands()
    times = []
    for _ in range(20):
        t = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t)
    return max(1, round(SAMPLE_MS / 1000 / statistics.median(times)))


def run_pinned(core, reps, seconds, out_path):
    """In a child: samples of `reps` products on `core` for `seconds`, one duration in ms per line."""
    os.sched_setaffinity(0, {core})
    a, b = operands()
    with open(out_path, "w") as out:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = time.perf_counter()
            for _ in range(reps):
                a @ b
            out.write(f"{(time.perf_counter() - t) * 1000:.4f}\n")


def episodes(flags):
    runs, n = [], 0
    for f in flags:
        if f:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    return runs + ([n] if n else [])


def main(argv):
    seconds = float(argv[0]) if argv else 40.0
    cores = (int(argv[1]), int(argv[2])) if len(argv) >= 3 else (0, 1)
    paths = [f"/tmp/core_drift.{os.getpid()}.{c}" for c in cores]
    reps = sample_reps()
    children = []
    for core, path in zip(cores, paths):
        pid = os.fork()
        if pid == 0:
            try:
                run_pinned(core, reps, seconds, path)
            finally:
                os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    samples = []
    for path in paths:
        with open(path) as f:
            samples.append([float(x) for x in f])
        os.unlink(path)
    a, b = samples
    n = min(len(a), len(b))
    ratios = []
    for i in range(WINDOW, n + 1):
        ma, mb = statistics.median(a[i - WINDOW:i]), statistics.median(b[i - WINDOW:i])
        ratios.append(max(ma / mb, mb / ma))
    print(f"# {os.cpu_count()} cores, cores {cores[0]} and {cores[1]}, {seconds:.0f} s, {n} samples of "
          f"{statistics.median(a + b):.1f} ms (median), windows of {WINDOW}")
    print(f"largest window-median ratio: {max(ratios):.2f}")
    for bar in (1.3, 1.4, 1.5):
        runs = episodes([r >= bar for r in ratios])
        share = sum(runs) / len(ratios)
        print(f">= {bar}x: {share:.1%} of windows, {len(runs)} episodes, longest {max(runs, default=0)} samples")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
