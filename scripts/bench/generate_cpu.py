#!/usr/bin/python3
"""Per-token time of xtrain-worker generate's decoder against the memory-bandwidth floor and
PyTorch eager, in one run on this machine (docs/PERF.md, "Generation").

GPT-2 124M's shape with random weights, fp32, --threads threads on both sides (1 unless given), a
64-token prompt, then 256 new tokens one at a time (greedy). xtrain-bench-generate times our
decoder and measures the read bandwidth of as many threads; the floor is the bytes of the weights
each token reads (all but wpe, of which one row) at that bandwidth. tests/worker/torch_reference.py
bench-generate runs PyTorch on the same weights and prompt with its best settings here:
inference_mode, a preallocated KV cache, addmv for one position, OpenBLAS's kernels as ours (the same
OPENBLAS_CORETYPE), and with --threads N both N threads and one, the faster counting in each round
(its per-op threading cost more than a second core gave it here: 57 ms a token on two, 29 on one). On one thread,
times are that thread's CPU time (the machine may be shared: waiting for a core is left out, stalls
on memory are not); on several, wall time (one thread's CPU time no longer measures the work); the
other is shown too. The report says how many greedy tokens both sides agree on. The sides alternate
--rounds times; the table takes the median of each side's runs.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH_REFERENCE = os.path.join(ROOT, "tests", "worker", "torch_reference.py")


def run_json(cmd, env):
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench-bin", required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--runs", type=int, default=3, help="timed generations per side and round")
    p.add_argument("--threads", type=int, default=1, help="threads on each side")
    a = p.parse_args()
    threads = str(a.threads)
    env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)
    timed = "cpu_ms_per_token" if a.threads == 1 else "ms_per_token"  # the column the ratios take
    ours, theirs = [], []
    with tempfile.TemporaryDirectory(prefix="xtrain-generate-bench-") as weights:
        for r in range(a.rounds):
            cmd = [a.bench_bin, "--runs", str(a.runs), "--threads", threads] + (["--out", weights] if r == 0 else [])
            ours.append(run_json(cmd, env))
            torch_env = dict(env, OPENBLAS_CORETYPE=ours[-1]["openblas_core"])
            tries = [run_json(["/usr/bin/python3", TORCH_REFERENCE, "bench-generate", weights, "--runs", str(a.runs),
                               "--threads", str(n)], dict(torch_env, OMP_NUM_THREADS=str(n), OPENBLAS_NUM_THREADS=str(n)))
                     for n in sorted({a.threads, 1}, reverse=True)]
            theirs.append(min(tries, key=lambda t: t[timed]))
            print(f"round {r + 1}: xtrain {ours[-1][timed]:.1f} ms/token (floor "
                  f"{ours[-1]['floor_ms_per_token']:.1f}), pytorch {theirs[-1][timed]:.1f}",
                  file=sys.stderr, flush=True)
    agree = min(next((i for i, (x, y) in enumerate(zip(o["tokens"], t["tokens"])) if x != y), len(o["tokens"]))
                for o, t in zip(ours, theirs))
    med = lambda runs, k: statistics.median(x[k] for x in runs)
    ms, floor, torch_ms = med(ours, timed), med(ours, "floor_ms_per_token"), med(theirs, timed)
    o = ours[0]
    clock = "CPU" if a.threads == 1 else "wall"
    print(f"GPT-2 124M shape, fp32, {a.threads} thread(s) each, {clock} time, prompt {o['prompt_tokens']} + {o['new_tokens']} new tokens, OpenBLAS core "
          f"{o['openblas_core']}, PyTorch {theirs[0]['torch']}; medians of {a.rounds} rounds x {a.runs} runs; load "
          f"{open('/proc/loadavg').read().split()[0]}\n")
    print("| | ms/token (CPU) | ms/token (wall) | tokens/s | vs floor |")
    print("|---|---|---|---|---|")
    floor_cells = f"{floor:.1f} |" if a.threads == 1 else f"| {floor:.1f}"
    print(f"| floor: {o['bytes_per_token'] / 1e6:.0f} MB/token at {med(ours, 'bandwidth_gb_s'):.1f} GB/s "
          f"| {floor_cells} | {1000 / floor:.1f} | 1.00x |")
    print(f"| xtrain (KV cache) | {med(ours, 'cpu_ms_per_token'):.1f} | {med(ours, 'ms_per_token'):.1f} | {1000 / ms:.1f} "
          f"| {ms / floor:.2f}x |")
    torch_threads = "/".join(str(n) for n in sorted({t["threads"] for t in theirs}))
    print(f"| PyTorch eager (KV cache), {torch_threads} thread(s) | {med(theirs, 'cpu_ms_per_token'):.1f} "
          f"| {med(theirs, 'ms_per_token'):.1f} | {1000 / torch_ms:.1f} | {torch_ms / floor:.2f}x |")
    same = (f"the same {agree} greedy tokens on both sides" if agree == len(o["tokens"]) else
            f"greedy tokens agree up to token {agree} of {len(o['tokens'])} (a near-tie of random weights)")
    print(f"\nxtrain is {torch_ms / ms:.2f}x PyTorch's speed; {same}")


if __name__ == "__main__":
    main()
