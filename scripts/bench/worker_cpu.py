#!/usr/bin/python3
"""Runs xtrain-bench-cpu and tests/worker/torch_reference.py's eager PyTorch GPT on the same shapes,
the same fixed batch and the same number of threads, alternating, and prints a Markdown table.

Both time whole training steps after a warmup: zero grads, forward, backward, gradient-norm
clipping and AdamW, and report the median step, in wall time and in the process's CPU time (all
threads). On a machine shared with other work, CPU time is not inflated by waiting for a core; at
one thread it is the step's work, and the ratio is taken on it. With more threads, idle threads'
spinning counts as CPU time, so the ratio is taken on wall time. Each shape runs --runs times,
alternating the two sides; the table gives the median of the runs' medians and the range of the
ratio over the runs.

Both sides run the same OpenBLAS (PyTorch's BLAS is the system's) with the same kernels: xtrain's
benchmark chooses them as xtrain-worker does (worker/cpu/openblas_core.hpp), and PyTorch gets the same
OPENBLAS_CORETYPE. PyTorch runs twice per shape and run, with OpenMP's default (spinning) wait
policy and with OMP_WAIT_POLICY=PASSIVE; the faster counts (on a shared 2-core machine spinning
OpenMP threads and OpenBLAS's threads fight over the cores, which says nothing about xtrain).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH_REFERENCE = os.path.join(ROOT, "tests", "worker", "torch_reference.py")

# name, layers, heads, embd, seq, vocab, batch: the two shapes of the CPU target (docs/PERF.md)
SIZES = [
    ("small (demo-like)", 4, 4, 128, 128, 256, 8),
    ("medium", 6, 6, 384, 256, 256, 4),
]


def run_json(cmd, env):
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def load():
    return open("/proc/loadavg").read().split()[0]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench-bin", required=True)
    p.add_argument("--steps", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    user_core = os.environ.get("OPENBLAS_CORETYPE")
    key = "cpu_ms_per_step" if a.threads == 1 else "ms_per_step"
    unit = "CPU" if a.threads == 1 else "wall"
    loads = [load()]
    rows = []
    for name, L, NH, C, T, V, B in SIZES:
        shape = ["--layers", L, "--heads", NH, "--embd", C, "--seq", T, "--vocab", V, "--batch", B,
                 "--steps", a.steps, "--warmup", a.warmup, "--threads", a.threads]
        shape = [str(x) for x in shape]
        torch_cmd = ["/usr/bin/python3", TORCH_REFERENCE, "bench"] + shape
        ours_runs, torch_runs = [], []
        for r in range(a.runs):
            ours = run_json([a.bench_bin] + shape, env)
            torch_env = dict(env, OPENBLAS_CORETYPE=ours["openblas_core"])
            spinning = run_json(torch_cmd, torch_env)
            passive = run_json(torch_cmd, dict(torch_env, OMP_WAIT_POLICY="PASSIVE"))
            torch = min(spinning, passive, key=lambda x: x[key])
            torch["wait_policy"] = "passive" if torch is passive else "default"
            ours_runs.append(ours)
            torch_runs.append(torch)
            loads.append(load())
            print(f"{name}, run {r + 1}: xtrain {ours['ms_per_step']:.1f} ms ({ours['cpu_ms_per_step']:.1f} CPU), "
                  f"pytorch {torch['ms_per_step']:.1f} ms ({torch['cpu_ms_per_step']:.1f} CPU, "
                  f"{torch['wait_policy']} wait), load {loads[-1]}", file=sys.stderr, flush=True)
        rows.append((name, L, NH, C, T, V, B, ours_runs, torch_runs))

    med = lambda runs, k: statistics.median(x[k] for x in runs)
    core = rows[0][7][0]["openblas_core"]
    chosen = "set by the user" if user_core is not None else "as xtrain-worker chooses it"
    print(f"{os.cpu_count()} cores ({cpu_model()}), {a.threads} thread(s) each (OpenBLAS for xtrain, "
          f"torch.set_num_threads for PyTorch {rows[0][8][0]['torch']}), OpenBLAS core {core} on both sides "
          f"({chosen}), {a.warmup} warmup + {a.steps} timed steps, median step of each run, median of {a.runs} "
          f"alternating runs; load average {' -> '.join(loads)}; ratio on {'CPU' if a.threads == 1 else 'wall'} "
          f"time\n")
    print(f"| model | L | NH | C | T | V | B | params | xtrain ms/step (CPU) | tok/s ({unit}) | PyTorch eager ms/step (CPU) "
          f"| tok/s ({unit}) | ratio | ratio range |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, L, NH, C, T, V, B, ours_runs, torch_runs in rows:
        ratios = sorted(t[key] / o[key] for o, t in zip(ours_runs, torch_runs))
        ours_ms, torch_ms = med(ours_runs, key), med(torch_runs, key)
        print(f"| {name} | {L} | {NH} | {C} | {T} | {V} | {B} | {ours_runs[0]['params'] / 1e6:.1f}M "
              f"| {med(ours_runs, 'ms_per_step'):.1f} ({med(ours_runs, 'cpu_ms_per_step'):.1f}) "
              f"| {B * T * 1000.0 / ours_ms:.0f} "
              f"| {med(torch_runs, 'ms_per_step'):.1f} ({med(torch_runs, 'cpu_ms_per_step'):.1f}) "
              f"| {B * T * 1000.0 / torch_ms:.0f} | {torch_ms / ours_ms:.2f}x "
              f"| {ratios[0]:.2f}-{ratios[-1]:.2f}x |")


if __name__ == "__main__":
    main()
