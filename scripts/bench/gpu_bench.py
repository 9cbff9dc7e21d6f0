#!/usr/bin/env python3
"""xtrain on one GPU against PyTorch (eager and torch.compile) on the same GPU and shapes.

For each shape: tokens/s, ms/step (median of timed steps after warm-up), device memory and MFU,
for xtrain-worker's step (xtrain-bench-gpu: the worker's exact per-step work) and for our PyTorch
reference model (tests/worker/torch_reference.py: same architecture, AdamW groups and clipping),
each in TF32 (tensor cores) and strict FP32.

MFU = tokens/s * (6N + 6LCT) / peak, N the model's parameters (tied embedding counted once,
padding excluded), L layers, C width, T sequence: 6N for the matrix products of forward and
backward, 6LCT for causal attention (PaLM's 12LCT halved, the masked half being no work). The
peak is MEASURED here on this card (an 8192^3 matrix product through PyTorch, median of 10),
for TF32 and FP32 separately, and each run is divided by the peak of its own precision.

Usage: gpu_bench.py --bin DIR [--out DIR] [--shapes demo,mid,gpt2] [--impls xtrain,eager,compile]
                    [--precisions tf32,fp32] [--steps N] [--warmup N] [--deadline-s S]
Runs are ordered by priority and skipped (and said so) once the deadline is near.
Internal: gpu_bench.py --torch-one JSON runs one PyTorch measurement and prints one JSON line.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# batch = sequences per step on one GPU
FALLBACK_DEMO = {"layers": 4, "heads": 4, "embd": 128, "seq": 128, "vocab": 256, "batch": 8}
SHAPES = {
    "mid": {"layers": 6, "heads": 8, "embd": 512, "seq": 512, "vocab": 50257, "batch": 16},
    "gpt2": {"layers": 12, "heads": 12, "embd": 768, "seq": 1024, "vocab": 50257, "batch": 8},
}


def demo_shape():
    """The model of configs/demo.json (the README's first command), at its micro-batch."""
    path = os.path.join(ROOT, "configs", "demo.json")
    try:
        spec = json.load(open(path))
        m, t = spec["model"], spec.get("train", {})
        return {"layers": m["n_layer"], "heads": m["n_head"], "embd": m["n_embd"], "seq": m["seq_len"],
                "vocab": m.get("vocab_size", 256), "batch": t.get("micro_batch_size", 4)}, path
    except (OSError, KeyError, ValueError):
        return dict(FALLBACK_DEMO), "built-in (configs/demo.json not readable)"


def flops_per_token(s, params):
    return 6.0 * params + 6.0 * s["layers"] * s["embd"] * s["seq"]


def torch_one(cfg):
    """One PyTorch measurement in this process: prints one JSON line."""
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tests", "worker"))
    from torch_reference import GPT, make_optimizer, train_step
    s, mode, tf32 = cfg["shape"], cfg["mode"], cfg["precision"] == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = GPT(s["layers"], s["heads"], s["embd"], s["seq"], s["vocab"]).to(dev)
    t = {"lr": 3e-4, "min_lr": 3e-5, "warmup_steps": 10, "steps": 1000, "weight_decay": 0.1,
         "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "grad_clip": 1.0}
    opt = make_optimizer(model, t)
    run = torch.compile(model) if mode == "compile" else model
    gen = torch.Generator(device=dev).manual_seed(1)
    data = torch.randint(0, s["vocab"], (s["batch"], s["seq"] + 1), generator=gen, device=dev)
    tokens, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    t0 = time.perf_counter()
    for i in range(cfg["warmup"]):
        train_step(run, opt, t, i, tokens, targets)
    warm_s = time.perf_counter() - t0
    times = []
    for i in range(cfg["steps"]):
        a = time.perf_counter()
        loss, _ = train_step(run, opt, t, cfg["warmup"] + i, tokens, targets)  # .item(): synchronises
        times.append(time.perf_counter() - a)
    ms = 1000.0 * statistics.median(times)
    params = sum(p.numel() for p in model.parameters()) - (model.Vp - model.V) * s["embd"]
    print(json.dumps({"impl": "torch-" + mode, "precision": cfg["precision"], "torch": torch.__version__,
                      "ms_per_step": ms, "tokens_per_s": s["batch"] * s["seq"] * 1000.0 / ms,
                      "memory_mib": torch.cuda.max_memory_allocated() / 2**20, "params": params,
                      "warmup_s": warm_s, "loss": loss}))


def measure_peaks():
    """TF32 and FP32 matrix-product peaks of this card, TFLOP/s, through PyTorch."""
    import torch
    n = 8192
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    peaks = {}
    for name, tf32 in (("tf32", True), ("fp32", False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        ms = []
        for _ in range(10):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            ms.append(start.elapsed_time(end))
        peaks[name] = 2.0 * n**3 / (statistics.median(ms) * 1e-3) / 1e12
    return peaks, torch.cuda.get_device_name(0), torch.__version__


def xtrain_env():
    """Our binaries' environment: XTRAIN_LD_LIBRARY_PATH (the bundle's libraries and the CUDA and
    NCCL found on this machine, set by scripts/device-check.sh) becomes their LD_LIBRARY_PATH,
    for them alone: PyTorch keeps its own libraries."""
    env = dict(os.environ)
    if env.get("XTRAIN_LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = env["XTRAIN_LD_LIBRARY_PATH"]
    return env


def run_json(cmd, timeout, env=None):
    """Runs cmd; returns (the last JSON line of its stdout, or None, error text)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    for line in reversed(p.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line), ""
    tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
    return None, f"exit {p.returncode}: " + " | ".join(tail)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", help="directory holding xtrain-bench-gpu")
    ap.add_argument("--out", default=os.environ.get("OUT", "device-out"))
    ap.add_argument("--shapes", default="demo,mid,gpt2")
    ap.add_argument("--impls", default="xtrain,eager,compile")
    ap.add_argument("--precisions", default="tf32,fp32")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--deadline-s", type=float, default=1e9, help="stop starting runs after this many seconds")
    ap.add_argument("--torch-one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_one:
        torch_one(json.loads(a.torch_one))
        return
    start = time.monotonic()
    os.makedirs(a.out, exist_ok=True)
    shapes = {}
    demo, demo_source = demo_shape()
    for name in a.shapes.split(","):
        shapes[name] = demo if name == "demo" else SHAPES[name]
    peaks, gpu, torch_version = measure_peaks()
    print(f"# {gpu}, PyTorch {torch_version}; measured peaks: TF32 {peaks['tf32']:.1f}, FP32 {peaks['fp32']:.1f} "
          f"TFLOP/s; demo shape from {demo_source}", flush=True)

    # Priority order: TF32 (the training default) first, strict FP32 next, the slow torch.compile
    # (TF32 only) last.
    order = [("xtrain", "tf32"), ("eager", "tf32"), ("xtrain", "fp32"), ("eager", "fp32"), ("compile", "tf32")]
    plan = [(impl, prec, name) for impl, prec in order for name in shapes
            if impl in a.impls.split(",") and prec in a.precisions.split(",")]
    results = []
    for impl, prec, name in plan:
        s = shapes[name]
        left = a.deadline_s - (time.monotonic() - start)
        need = 150 if impl == "compile" else 40
        row = {"shape": name, **s, "impl": impl, "precision": prec}
        if left < need:
            row["error"] = f"skipped: {left:.0f} s left of the time budget, a run needs ~{need}"
            results.append(row)
            print(f"{name} {impl} {prec}: {row['error']}", flush=True)
            continue
        if impl == "xtrain":
            cmd = [os.path.join(a.bin, "xtrain-bench-gpu"), "--steps", str(a.steps), "--warmup", str(a.warmup)]
            for k in ("layers", "heads", "embd", "seq", "vocab", "batch"):
                cmd += ["--" + k, str(s[k])]
            cmd += ["--precision", prec]
        else:
            cfg = {"shape": s, "mode": impl, "precision": prec, "steps": a.steps, "warmup": a.warmup}
            cmd = [sys.executable, os.path.abspath(__file__), "--torch-one", json.dumps(cfg)]
        got, err = run_json(cmd, timeout=min(left, 600), env=xtrain_env() if impl == "xtrain" else None)
        if got is None:
            row["error"] = err
        else:
            row.update(got)
            row["impl"] = impl
            row["mfu"] = row["tokens_per_s"] * flops_per_token(s, row["params"]) / (peaks[prec] * 1e12)
        results.append(row)
        print(json.dumps(row), flush=True)

    eager = {(r["shape"], r["precision"]): r.get("tokens_per_s") for r in results if r["impl"] == "eager"}
    lines = [f"GPU: {gpu}; PyTorch {torch_version}; peaks measured here: TF32 {peaks['tf32']:.1f} TFLOP/s, "
             f"FP32 {peaks['fp32']:.1f} TFLOP/s; {a.steps} timed steps after {a.warmup} warm-up, median",
             "",
             "| shape | L x C, T | batch | impl | precision | ms/step | tok/s | memory MiB | MFU | vs eager |",
             "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        head = f"| {r['shape']} | {r['layers']}x{r['embd']}, {r['seq']} | {r['batch']} | {r['impl']} | {r['precision']} |"
        if "error" in r:
            lines.append(f"{head} not measured: {r['error']} | | | | |")
            continue
        base = eager.get((r["shape"], r["precision"]))
        ratio = f"{r['tokens_per_s'] / base:.2f}x" if base else "-"
        lines.append(f"{head} {r['ms_per_step']:.1f} | {r['tokens_per_s']:,.0f} | {r['memory_mib']:,.0f} | "
                     f"{100 * r['mfu']:.1f}% | {ratio} |")
    table = "\n".join(lines)
    print("\n" + table)
    with open(os.path.join(a.out, "gpu_bench.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(a.out, "gpu_bench.json"), "w") as f:
        json.dump({"gpu": gpu, "torch": torch_version, "peaks_tflops": peaks, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
