#!/usr/bin/env python3
"""PyTorch's side of gpu_bench.py, one measurement per process (a crash, a hang or an
out-of-memory costs that row only, and each has its own peak memory). Prints one JSON line:

  gpu_bench_torch.py --one JSON            our PyTorch reference model (tests/worker/torch_reference.py)
                                           at JSON's shape, mode (eager, compile) and precision
  gpu_bench_torch.py --peaks LIST [--device cuda|cpu]   the card's matrix-product peak per precision

or {"error": ...} with exit 1, which gpu_bench.py reports as the row's error.
"""
import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEAK_N = {"cuda": 8192, "cpu": 256}


def pick_sdpa_backend(torch, s, dtype, dev):
    """Times SDPA forward + backward at the shape's (B, NH, T, hs), on q, k, v laid out as the
    model's (views of one (B, T, 3C) tensor), with each backend alone, and leaves the fastest
    enabled. Returns (name, {name: ms or None})."""
    cuda = torch.backends.cuda
    names = [(n, getattr(cuda, f)) for n, f in (("flash", "enable_flash_sdp"), ("cudnn", "enable_cudnn_sdp"),
                                                ("efficient", "enable_mem_efficient_sdp"),
                                                ("math", "enable_math_sdp")) if hasattr(cuda, f)]

    def only(name):
        for n, enable in names:
            enable(n == name)

    B, NH, T, C = s["batch"], s["heads"], s["seq"], s["embd"]
    qkv = torch.randn(B, T, 3 * C, device=dev, dtype=dtype, requires_grad=True)
    grad = torch.randn(B, NH, T, C // NH, device=dev, dtype=dtype)

    def forward_backward():
        q, k, v = (x.view(B, T, NH, C // NH).transpose(1, 2) for x in qkv.split(C, dim=2))
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)

    times = {}
    for name, _ in names:
        only(name)
        try:
            ms = []
            for i in range(5):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                forward_backward()
                end.record()
                end.synchronize()
                if i >= 2:
                    ms.append(start.elapsed_time(end))
            times[name] = statistics.median(ms)
        except RuntimeError:  # this backend cannot take this shape or dtype
            times[name] = None
    usable = {n: t for n, t in times.items() if t is not None}
    best = min(usable, key=usable.get)
    only(best)
    return best, times


def torch_one(cfg):
    """One PyTorch measurement in this process: prints one JSON line."""
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tests", "worker"))
    from torch_reference import GPT, make_optimizer, train_step
    s, mode, prec = cfg["shape"], cfg["mode"], cfg["precision"]
    dev = torch.device(cfg.get("device", "cuda"))
    on_gpu = dev.type == "cuda"
    if mode == "compile" and not hasattr(torch, "compile"):
        raise RuntimeError(f"torch.compile needs PyTorch 2; this is {torch.__version__}")
    torch.backends.cuda.matmul.allow_tf32 = prec != "fp32"
    torch.backends.cudnn.allow_tf32 = prec != "fp32"
    autocast = torch.bfloat16 if prec == "bf16" else None
    fused = hasattr(torch.nn.functional, "scaled_dot_product_attention")
    sdpa, sdpa_ms = "none (explicit T x T attention: no SDPA in this PyTorch)", {}
    if fused and on_gpu:
        sdpa, sdpa_ms = pick_sdpa_backend(torch, s, autocast or torch.float32, dev)
        torch.cuda.empty_cache()  # the probe's tensors, out of the run's memory
    elif fused:
        sdpa = "default"
    torch.manual_seed(0)
    model = GPT(s["layers"], s["heads"], s["embd"], s["seq"], s["vocab"], fused_attention=fused).to(dev)
    t = {"lr": 3e-4, "min_lr": 3e-5, "warmup_steps": 10, "steps": 1000, "weight_decay": 0.1,
         "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "grad_clip": 1.0}
    opt = make_optimizer(model, t, fused=on_gpu)
    run = torch.compile(model, mode=cfg.get("compile_mode", "default")) if mode == "compile" else model
    gen = torch.Generator(device=dev).manual_seed(1)
    data = torch.randint(0, s["vocab"], (s["batch"], s["seq"] + 1), generator=gen, device=dev)
    tokens, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for i in range(cfg["warmup"]):
        train_step(run, opt, t, i, tokens, targets, autocast)
    warm_s = time.perf_counter() - t0
    times = []
    for i in range(cfg["steps"]):
        a = time.perf_counter()
        loss, _ = train_step(run, opt, t, cfg["warmup"] + i, tokens, targets, autocast)  # .item(): synchronises
        times.append(time.perf_counter() - a)
    ms = 1000.0 * statistics.median(times)
    params = sum(p.numel() for p in model.parameters()) - (model.Vp - model.V) * s["embd"]
    print(json.dumps({"impl": mode, "precision": prec, "torch": torch.__version__, "sdpa": sdpa,
                      "sdpa_probe_ms": sdpa_ms, "ms_per_step": ms,
                      "tokens_per_s": s["batch"] * s["seq"] * 1000.0 / ms,
                      "memory_mib": torch.cuda.max_memory_reserved() / 2**20 if on_gpu else None,
                      "allocated_mib": torch.cuda.max_memory_allocated() / 2**20 if on_gpu else None,
                      "params": params, "warmup_s": warm_s, "loss": loss}))


def measure_peaks(precisions, device):
    """Matrix-product peak of this card for each precision, TFLOP/s, through PyTorch: an n^3
    product on random data (zeros run faster), median of 10 after 5 warm-ups."""
    import torch
    n = PEAK_N[device]
    on_gpu = device == "cuda"
    peaks = {}
    for prec in precisions:
        dtype = torch.bfloat16 if prec == "bf16" else torch.float32
        torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        ms = []
        for i in range(15):
            t0 = time.perf_counter()
            if on_gpu:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            a @ b
            if on_gpu:
                end.record()
                end.synchronize()
            if i >= 5:
                ms.append(start.elapsed_time(end) if on_gpu else 1000.0 * (time.perf_counter() - t0))
        peaks[prec] = 2.0 * n**3 / (statistics.median(ms) * 1e-3) / 1e12
        del a, b
    name = torch.cuda.get_device_name(0) if on_gpu else "CPU (smoke run)"
    print(json.dumps({"peaks_tflops": peaks, "gpu": name, "torch": torch.__version__}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--one", help="one measurement's settings (JSON)")
    ap.add_argument("--peaks", help="comma-separated precisions")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    a = ap.parse_args()
    if bool(a.one) == bool(a.peaks):
        ap.error("give exactly one of --one and --peaks")
    try:
        if a.one:
            torch_one(json.loads(a.one))
        else:
            measure_peaks(a.peaks.split(","), a.device)
    except Exception as e:  # reported as the row's error by the parent
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
