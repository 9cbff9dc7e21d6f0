#!/usr/bin/env python3
"""Data-parallel scaling on 1, 2, 4 and 8 GPUs of this machine with a fixed per-GPU batch.

Each world size runs xtrain-bench-gpu under the real xlaunch (worker.command), so ranks start,
get their NCCL id and all-reduce exactly as xtrain-worker's do. Prints, and writes to
OUT/gpu_scaling.md and .json:

    GPUs | tok/s (global) | speedup | efficiency | all-reduce hidden
       1 |            ... |   1.00x |      100% |               n/a

"all-reduce hidden" is the share of the gradient all-reduce's own time that overlapping it with
backward took off the step: 1 - (step - compute-only step) / all-reduce alone (see
scripts/bench/gpu_bench.cpp). World sizes above the GPU count are listed as not run.

Usage: gpu_scaling.py --bin DIR [--out DIR] [--shape gpt2|mid] [--gpus 1,2,4,8] [--steps N]
Our binaries get XTRAIN_LD_LIBRARY_PATH as their LD_LIBRARY_PATH when it is set.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_bench import SHAPES, xtrain_env  # noqa: E402


def gpu_count():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
        return sum(1 for line in out.splitlines() if line.startswith("GPU "))
    except (OSError, subprocess.TimeoutExpired):
        return 0


def run_world(a, shape, n, work):
    result = os.path.join(work, f"world{n}.json")
    data = os.path.join(work, "unused.txt")  # xlaunch wants a data path; the bench makes its own batch
    with open(data, "w") as f:
        f.write("x" * 1000)
    cmd = [os.path.join(a.bin, "xtrain-bench-gpu"), "--steps", str(a.steps), "--warmup", str(a.warmup),
           "--out", result]
    for k in ("layers", "heads", "embd", "seq", "vocab", "batch"):
        cmd += ["--" + k, str(shape[k])]
    spec = {"name": f"scaling-{n}", "device": "cuda", "backend": "nccl", "worker": {"command": cmd},
            "launcher": {"timeout_s": 600, "term_timeout_s": 5}, "nodes": {"rdzv_timeout_s": 120},
            "model": {"n_layer": shape["layers"], "n_head": shape["heads"], "n_embd": shape["embd"],
                      "seq_len": shape["seq"], "vocab_size": shape["vocab"]},
            "data": {"train": data}}
    spec_path = os.path.join(work, f"world{n}-job.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    p = subprocess.run([os.path.join(a.bin, "xlaunch"), spec_path, "--run-dir", os.path.join(work, f"run{n}"),
                        "--nproc-per-node", str(n), "--tee", "rank0"], capture_output=True, text=True,
                       env=xtrain_env(), timeout=900)
    if p.returncode != 0 or not os.path.exists(result):
        tail = (p.stdout + p.stderr).strip().splitlines()[-5:]
        return None, f"xlaunch exit {p.returncode}: " + " | ".join(tail)
    return json.load(open(result)), ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="directory holding xlaunch and xtrain-bench-gpu")
    ap.add_argument("--out", default=os.environ.get("OUT", "device-out"))
    ap.add_argument("--shape", default="gpt2", choices=sorted(SHAPES))
    ap.add_argument("--gpus", default="1,2,4,8")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    shape = SHAPES[a.shape]
    have = gpu_count()
    rows = []
    with tempfile.TemporaryDirectory(prefix="xtrain-scaling-") as work:
        for n in (int(x) for x in a.gpus.split(",")):
            if n > have:
                rows.append({"gpus": n, "error": f"not run: {have} GPU(s) on this machine"})
                continue
            got, err = run_world(a, shape, n, work)
            rows.append({"gpus": n, **got} if got else {"gpus": n, "error": err})
            print(json.dumps(rows[-1]), flush=True)
    base = next((r["tokens_per_s"] for r in rows if r["gpus"] == 1 and "tokens_per_s" in r), None)
    lines = [f"shape {a.shape} ({shape['layers']}x{shape['embd']}, T={shape['seq']}), {shape['batch']} sequences "
             f"per GPU, {a.steps} timed steps (median)", "",
             "GPUs | tok/s (global) | speedup | efficiency | all-reduce hidden"]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['gpus']:>4} | {r['error']}")
            continue
        speedup = r["tokens_per_s"] / base if base else float("nan")
        hidden = f"{100 * r['hidden_share']:.0f}%" if r["hidden_share"] >= 0 else "n/a"
        lines.append(f"{r['gpus']:>4} | {r['tokens_per_s']:>14,.0f} | {speedup:>6.2f}x | "
                     f"{100 * speedup / r['gpus']:>9.0f}% | {hidden:>17}")
    table = "\n".join(lines)
    print("\n" + table)
    with open(os.path.join(a.out, "gpu_scaling.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(a.out, "gpu_scaling.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
