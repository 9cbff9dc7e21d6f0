#!/usr/bin/python3
"""Runs xtrain-bench-cpu and tests/worker/torch_reference.py's eager PyTorch GPT on the same shapes,
the same fixed batch and the same number of threads, one after the other, and prints a Markdown table.

Both time whole training steps after a warmup: zero grads, forward, backward, gradient-norm
clipping and AdamW, and report the median step (robust to the odd step slowed by another process
on a shared machine); tokens/s = B * T / median step.

PyTorch runs twice per shape, with OpenMP's default (spinning) wait policy and with
OMP_WAIT_POLICY=PASSIVE: on a shared or virtualised 2-core machine the spinning OpenMP threads
and OpenBLAS's threads fight over the cores and PyTorch can get 5-10x slower, which says nothing
about xtrain. The ratio is taken against the faster of the two.
"""
import argparse
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH_REFERENCE = os.path.join(ROOT, "tests", "worker", "torch_reference.py")

# name, layers, heads, embd, seq, vocab, batch
SIZES = [
    ("small (demo-like)", 4, 4, 128, 64, 256, 8),
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


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bench-bin", required=True)
    p.add_argument("--steps", type=int, default=9)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    load_before = open("/proc/loadavg").read().split()[0]
    rows = []
    for name, L, NH, C, T, V, B in SIZES:
        shape = ["--layers", L, "--heads", NH, "--embd", C, "--seq", T, "--vocab", V, "--batch", B,
                 "--steps", a.steps, "--warmup", a.warmup, "--threads", a.threads]
        shape = [str(x) for x in shape]
        ours = run_json([a.bench_bin] + shape, env)
        torch_cmd = ["/usr/bin/python3", TORCH_REFERENCE, "bench"] + shape
        spinning = run_json(torch_cmd, env)
        passive = run_json(torch_cmd, dict(env, OMP_WAIT_POLICY="PASSIVE"))
        torch = max(spinning, passive, key=lambda r: r["tokens_per_s"])
        torch["wait_policy"] = "passive" if torch is passive else "default"
        rows.append((name, L, NH, C, T, V, B, ours, torch))
        print(f"{name}: xtrain {ours['tokens_per_s']:.0f} tok/s, pytorch {spinning['tokens_per_s']:.0f} tok/s "
              f"(default OpenMP wait), {passive['tokens_per_s']:.0f} tok/s (passive)", file=sys.stderr, flush=True)

    print(f"{os.cpu_count()} cores ({cpu_model()}), {a.threads} threads each "
          f"(OpenBLAS for xtrain, torch.set_num_threads for PyTorch {rows[0][8]['torch']}), "
          f"{a.warmup} warmup + {a.steps} timed steps (median), one run, load average before: {load_before}\n")
    print("| model | L | NH | C | T | V | B | params | xtrain tok/s | ms/step | PyTorch eager tok/s | ms/step "
          "| OpenMP wait | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, L, NH, C, T, V, B, ours, torch in rows:
        print(f"| {name} | {L} | {NH} | {C} | {T} | {V} | {B} | {ours['params'] / 1e6:.1f}M "
              f"| {ours['tokens_per_s']:.0f} | {ours['ms_per_step']:.0f} "
              f"| {torch['tokens_per_s']:.0f} | {torch['ms_per_step']:.0f} | {torch['wait_policy']} "
              f"| {ours['tokens_per_s'] / torch['tokens_per_s']:.2f}x |")


if __name__ == "__main__":
    main()
