#!/usr/bin/env python3
"""xtrain on one GPU against PyTorch (eager and torch.compile) on the same GPU, shapes and run.

For each shape and precision (bf16, tf32): tokens/s, ms/step (median of timed steps after
warm-up), peak device memory and MFU, for xtrain-worker's step (xtrain-bench-gpu: the worker's
exact per-step work, with its CUDA graph on and off where the binary has --cuda-graph, and at the
target shape with dQ summed by atomics, train.deterministic false, where it has --deterministic) and for
our PyTorch reference model (tests/worker/torch_reference.py: same architecture, AdamW groups
and clipping) in eager mode and under torch.compile.

The peer gets its best settings: bf16 = torch.autocast(bfloat16) around the forward (fp32
weights and AdamW, as ours); tf32 = fp32 with TF32 products allowed; attention through
F.scaled_dot_product_attention(is_causal=True) with the fastest SDPA backend at that shape
(flash, cuDNN, memory-efficient or math, timed forward + backward in the same process, the
choice printed in the table); fused AdamW; torch.compile in its default mode (max-autotune
takes minutes per shape, more than the device check has; reduce-overhead, CUDA graphs, is
--compile-mode's, for the small shapes that launches bound).

MFU = tokens/s * (6N + 6LCT) / peak, N the model's parameters (tied embedding counted once,
padding excluded), L layers, C width, T sequence: 6N for the matrix products of forward and
backward, 6LCT for causal attention (PaLM's 12LCT halved, the masked half being no work). The
peak is MEASURED on this card in this run (an 8192^3 product through PyTorch, median of 10),
for each precision, and each run is divided by the peak of its own precision.

Memory: xtrain, the device memory its process took beyond its CUDA context (cudaMemGetInfo,
after the timed steps: it allocates everything before the first step); PyTorch, the peak its
caching allocator reserved (the allocated peak is in the JSON). "plan" is what xlaunch --dry-run
predicts per rank (worker/model/memory_plan.hpp) where this xlaunch prints a plan.

Usage: gpu_bench.py --bin DIR [--out DIR] [--shapes gpt2,gpt2-b64,mid,demo] [--impls xtrain,eager,compile]
                    [--precisions bf16,tf32] [--steps N] [--warmup N] [--deadline-s S]
                    [--compile-mode default|reduce-overhead|max-autotune] [--device cuda|cpu]
Runs go in order of value (the GPT-2 bf16 target rows first, torch.compile of the other shapes
last); a run starts only when the time it needs is left before --deadline-s, and none can outlive
it (each is killed, with its process group, at the deadline). The tables are rewritten after every
run, so whatever stops this script leaves them. --device cpu runs the PyTorch side on the CPU (a
smoke test of this script where there is no GPU; tests/worker/gpu_bench_test.py).
The PyTorch side runs in children of its own (gpu_bench_torch.py: one measurement, or the
card's peaks), so a crash, a hang or an out-of-memory costs that row only.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH_SIDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_bench_torch.py")

# batch = sequences per step on one GPU
FALLBACK_DEMO = {"layers": 4, "heads": 4, "embd": 128, "seq": 128, "vocab": 256, "batch": 8}
SHAPES = {
    "mid": {"layers": 6, "heads": 8, "embd": 512, "seq": 512, "vocab": 50257, "batch": 16},
    # configs/gpt2-124m.json: 12 x 768, T 1024, 16 sequences per GPU (its micro_batch_size)
    "gpt2": {"layers": 12, "heads": 12, "embd": 768, "seq": 1024, "vocab": 50257, "batch": 16},
    # the same model at 64 sequences per step: where launches and small kernels weigh less
    "gpt2-b64": {"layers": 12, "heads": 12, "embd": 768, "seq": 1024, "vocab": 50257, "batch": 64},
    # for --device cpu smoke runs only
    "tiny": {"layers": 2, "heads": 2, "embd": 32, "seq": 16, "vocab": 64, "batch": 2},
}
SHAPE_ORDER = ["gpt2", "gpt2-b64", "mid", "demo", "tiny"]
IMPL_ORDER = ["xtrain", "eager", "compile"]
# Seconds a run must have left before it starts (import, start, compile, steps), and the most it
# may take; torch.compile of GPT-2 (forward and backward) takes about a minute on 16 cores.
NEED_S = {"xtrain": 20, "eager": 30, "compile": 120}
CAP_S = {"xtrain": 90, "eager": 90, "compile": 300}
SETTINGS = ("PyTorch: bf16 = autocast(bfloat16), fp32 weights; tf32 = TF32 products; SDPA causal attention "
            "with the fastest backend at the shape (named per row); fused AdamW; torch.compile mode {mode}")


def demo_shape():
    """The model of configs/demo.json (the README's first command), at its micro-batch."""
    path = os.path.join(ROOT, "configs", "demo.json")
    try:
        with open(path) as f:
            spec = json.load(f)
        m, t = spec["model"], spec.get("train", {})
        return {"layers": m["n_layer"], "heads": m["n_head"], "embd": m["n_embd"], "seq": m["seq_len"],
                "vocab": m.get("vocab_size", 256), "batch": t.get("micro_batch_size", 4)}, path
    except (OSError, KeyError, ValueError):
        return dict(FALLBACK_DEMO), "built-in (configs/demo.json not readable)"


def flops_per_token(s, params):
    return 6.0 * params + 6.0 * s["layers"] * s["embd"] * s["seq"]


def mfu(s, params, tokens_per_s, peak_tflops):
    return tokens_per_s * flops_per_token(s, params) / (peak_tflops * 1e12)


# ---------------------------------------------------------------------------------------------
# Our side, and the running of children.

def xtrain_env():
    """Our binaries' environment: XTRAIN_LD_LIBRARY_PATH (the bundle's libraries and the CUDA and
    NCCL found on this machine, set by scripts/device-check.sh) becomes their LD_LIBRARY_PATH,
    for them alone: PyTorch keeps its own libraries."""
    env = dict(os.environ)
    if env.get("XTRAIN_LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = env["XTRAIN_LD_LIBRARY_PATH"]
    return env


def binary_has_flag(path, flag):
    """Whether the program's file holds the flag's name (its option parser compares against the
    literal): known before any run, without a GPU."""
    try:
        with open(path, "rb") as f:
            return flag.encode() in f.read()
    except OSError:
        return False


def last_json_line(text):
    """The JSON object that is all of text, else the last line of text that is one, or None."""
    try:
        value = json.loads(text)
        if isinstance(value, dict):
            return value
    except ValueError:
        pass
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


class Children:
    """The one child running now, so that a signal to this script ends it and its group too."""
    current = None

    @classmethod
    def kill(cls):
        p = cls.current
        if p is not None and p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass


def run_json(cmd, timeout, env=None):
    """Runs cmd in a process group of its own; returns (its last JSON line or None, error text,
    stderr). At the timeout the whole group is killed (torch.compile's compile workers too)."""
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             start_new_session=True)
    except OSError as e:
        return None, f"cannot start {cmd[0]}: {e.strerror}", ""
    Children.current = p
    try:
        out, err = p.communicate(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        Children.kill()
        out, err = p.communicate()
        return None, f"timed out after {timeout:.0f} s (killed)", err
    finally:
        Children.kill()  # anything the child left in its group
        if p.poll() is None:
            p.wait()
        Children.current = None
    got = last_json_line(out)
    if got is not None and "error" not in got and p.returncode == 0:
        return got, "", err
    if got is not None and "error" in got:
        return None, str(got["error"]), err
    tail = [x for x in (err or out).strip().splitlines() if x.strip()][-3:]
    return None, f"exit {p.returncode}: " + " | ".join(tail), err


def xtrain_command(bin_dir, s, prec, graph, steps, warmup, atomic_dq=False, profile=None):
    cmd = [os.path.join(bin_dir, "xtrain-bench-gpu"), "--steps", str(steps), "--warmup", str(warmup)]
    for k in ("layers", "heads", "embd", "seq", "vocab", "batch"):
        cmd += ["--" + k, str(s[k])]
    cmd += ["--precision", prec]
    if graph is not None:
        cmd += ["--cuda-graph", graph]
    if atomic_dq:
        cmd += ["--deterministic", "off"]
    if profile:
        cmd += ["--profile", profile]
    return cmd


def plan_memory_mib(bin_dir, s, prec, work, atomic_dq=False):
    """What xlaunch --dry-run predicts one rank holds at this shape (MiB), or None where this
    xlaunch prints no memory plan. A second or less: no GPU work."""
    xlaunch = os.path.join(bin_dir or "", "xlaunch")
    if not bin_dir or not os.path.exists(xlaunch):
        return None
    data = os.path.join(work, "plan-data.txt")
    with open(data, "w") as f:
        f.write("x" * 100_000)  # enough tokens for T 1024 and a validation split
    spec = {"name": "bench-plan", "device": "cuda", "nproc_per_node": 1, "worker": {},
            "model": {"n_layer": s["layers"], "n_head": s["heads"], "n_embd": s["embd"], "seq_len": s["seq"],
                      "vocab_size": s["vocab"]},
            "data": {"train": data}, "train": {"micro_batch_size": s["batch"], "batch_size": s["batch"],
                                              "precision": prec}}
    if atomic_dq:
        spec["train"]["deterministic"] = False
    path = os.path.join(work, "plan-job.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    got, _, _ = run_json([xlaunch, path, "--dry-run", "--run-dir", os.path.join(work, "plan-run")], 30, xtrain_env())
    mem = (got or {}).get("memory_per_rank") or {}
    if not isinstance(mem.get("total_bytes"), (int, float)):
        return None
    return mem["total_bytes"] / 2**20


# ---------------------------------------------------------------------------------------------
# The plan of runs, in order of value.

def plan_runs(shapes, impls, precisions, graph_modes, atomic_dq=False, profile=False):
    """Every (shape, impl, precision, graph, atomic_dq) to measure, most valuable first: the
    issue's target (GPT-2, first precision: ours, eager, torch.compile, ours without its graph,
    ours with dQ summed by atomics when bf16 and atomic_dq), then ours and eager at the other
    shapes and precisions, then torch.compile's other rows (a minute each). graph_modes: xtrain's
    --cuda-graph values ([None] where the binary has no such flag); atomic_dq: the binary has
    --deterministic (the atomic row shows what determinism costs; other shapes skip it); profile:
    it has --profile, and the target's run without a graph also writes the per-operation table
    ("profile": True)."""
    runs = []
    for name in shapes:
        for prec in precisions:
            for impl in impls:
                for graph in (graph_modes if impl == "xtrain" else [None]):
                    runs.append({"shape": name, "impl": impl, "precision": prec, "graph": graph, "atomic_dq": False,
                                 "profile": profile and impl == "xtrain" and name == shapes[0] and
                                 prec == precisions[0] and graph != "on"})
    if atomic_dq and "xtrain" in impls and precisions[0] == "bf16":
        runs.append({"shape": shapes[0], "impl": "xtrain", "precision": "bf16", "graph": graph_modes[0],
                     "atomic_dq": True, "profile": False})

    def value(r):
        p = precisions.index(r["precision"])
        shape = SHAPE_ORDER.index(r["shape"]) if r["shape"] in SHAPE_ORDER else len(SHAPE_ORDER)
        impl = IMPL_ORDER.index(r["impl"])
        graph_off = r["graph"] == "off"
        if r["shape"] == shapes[0] and p == 0:
            # the target: ours with its graph, eager, compile, ours without graph, ours with atomic dQ
            return (0, 2 * r["atomic_dq"] + graph_off, impl)
        if r["impl"] == "compile":
            return (2, p, shape)
        return (1, p, shape, impl, graph_off)

    return sorted(runs, key=value)


def row_order(shapes, precisions):
    """Table order: by shape, precision, then ours (graph on, dQ by atomics, graph off), eager, compile."""
    def key(r):
        return (shapes.index(r["shape"]), precisions.index(r["precision"]), IMPL_ORDER.index(r["impl"]),
                r.get("graph") == "off", r.get("atomic_dq", False))
    return key


# ---------------------------------------------------------------------------------------------
# The table.

def fmt(value, spec, missing="-"):
    return missing if value is None else format(value, spec)


def render(results, header, shapes, precisions):
    base = {}
    for r in results:
        if "tokens_per_s" in r and r["impl"] in ("eager", "compile"):
            base[(r["shape"], r["precision"], r["impl"])] = r["tokens_per_s"]
    lines = [header, "",
             "| shape | L x C, T | batch | impl | precision | CUDA graph | attention | ms/step | tok/s | "
             "memory MiB | plan MiB | MFU | vs eager | vs compile |",
             "| --- | --- | ---: | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted(results, key=row_order(shapes, precisions)):
        head = (f"| {r['shape']} | {r['layers']}x{r['embd']}, {r['seq']} | {r['batch']} | {r['impl']} | "
                f"{r['precision']} | {r.get('graph_note', '-')} | {r.get('attention', '-')} |")
        if "tokens_per_s" not in r:
            lines.append(f"{head} not measured: {r.get('error', '?')} | | | | | | | |")
            continue
        ratios = []
        for peer in ("eager", "compile"):
            b = base.get((r["shape"], r["precision"], peer))
            ratios.append(f"{r['tokens_per_s'] / b:.2f}x" if b and r["impl"] != peer else "-")
        mfu_text = fmt(r.get("mfu") and 100 * r["mfu"], ".1f")
        lines.append(f"{head} {r['ms_per_step']:.2f} | {r['tokens_per_s']:,.0f} | {fmt(r.get('memory_mib'), ',.0f')} | "
                     f"{fmt(r.get('plan_mib'), ',.0f')} | {mfu_text}{'%' if mfu_text != '-' else ''} | "
                     f"{ratios[0]} | {ratios[1]} |")
    return "\n".join(lines)


def write_atomic(path, text):
    tmp = path + ".part"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------

class Stopped(Exception):
    def __init__(self, signum):
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum


def on_signal(signum, _frame):
    Children.kill()
    raise Stopped(signum)


def measure(a, r, s, left):
    """One run of row r (shape s) within `left` seconds: (its JSON or None, error, stderr)."""
    impl = r["impl"]
    if impl == "xtrain":
        cmd = xtrain_command(a.bin or "", s, r["precision"], r["graph"], a.steps, a.warmup, r["atomic_dq"],
                             os.path.join(a.out, "gpu_profile.md") if r["profile"] else None)
        env = xtrain_env()
    else:
        cfg = {"shape": s, "mode": impl, "precision": r["precision"], "steps": a.steps, "warmup": a.warmup,
               "device": a.device, "compile_mode": a.compile_mode}
        cmd = [sys.executable, TORCH_SIDE, "--one", json.dumps(cfg)]
        env = None
    return run_json(cmd, min(left, CAP_S[impl]), env)


def graph_text(reported):
    """The binary's "cuda_graph" field, for the table."""
    if isinstance(reported, bool):
        return "on" if reported else "off"
    return str(reported)


def bench(a):
    start = time.monotonic()
    shapes = a.shapes.split(",")
    impls = [i for i in a.impls.split(",") if i]
    precisions = a.precisions.split(",")
    for name in shapes:
        if name not in SHAPES and name != "demo":
            raise SystemExit(f"gpu_bench: unknown shape '{name}' (demo, {', '.join(SHAPES)})")
    for i in impls:
        if i not in IMPL_ORDER:
            raise SystemExit(f"gpu_bench: unknown impl '{i}' ({', '.join(IMPL_ORDER)})")
    for p in precisions:
        if p not in ("bf16", "tf32", "fp32"):
            raise SystemExit(f"gpu_bench: unknown precision '{p}' (bf16, tf32, fp32)")
    os.makedirs(a.out, exist_ok=True)
    demo, demo_source = demo_shape()
    shape_of = {n: (demo if n == "demo" else SHAPES[n]) for n in shapes}

    binary = os.path.join(a.bin or "", "xtrain-bench-gpu")
    graph_modes, graph_note = [None], "n/a: this xtrain-bench-gpu has no --cuda-graph"
    if "xtrain" in impls:
        if not a.bin or not os.path.exists(binary):
            graph_note = "n/a"
        elif binary_has_flag(binary, "--cuda-graph"):
            graph_modes, graph_note = ["on", "off"], None

    settings = SETTINGS.format(mode=a.compile_mode)
    card = {"gpu": "unknown", "torch": "unknown", "peaks_tflops": {}, "peaks_error": ""}
    atomic_dq = "xtrain" in impls and binary_has_flag(binary, "--deterministic")
    runs = plan_runs(shapes, impls, precisions, graph_modes, atomic_dq,
                     "xtrain" in impls and binary_has_flag(binary, "--profile"))
    results = []

    def header():
        peak_text = (", ".join(f"{p} {v:.4g}" for p, v in card["peaks_tflops"].items())
                     or f"not measured ({card['peaks_error']})")
        return (f"GPU: {card['gpu']}; PyTorch {card['torch']}; matrix-product peaks measured here (TFLOP/s): "
                f"{peak_text}; {a.steps} timed steps after {a.warmup} warm-up, median; demo shape from "
                f"{demo_source}. {settings}.")

    def save():
        write_atomic(os.path.join(a.out, "gpu_bench.md"), render(results, header(), shapes, precisions) + "\n")
        write_atomic(os.path.join(a.out, "gpu_bench.json"),
                     json.dumps({**card, "settings": settings, "cuda_graph_flag": graph_note is None,
                                 "results": results}, indent=1) + "\n")

    plans, status = {}, 0
    work = tempfile.mkdtemp(prefix="xtrain-gpu-bench-")
    try:
        got, err, _ = run_json([sys.executable, TORCH_SIDE, "--peaks", ",".join(precisions), "--device", a.device],
                               min(60.0, max(1.0, a.deadline_s)))
        if got:
            card.update(gpu=got["gpu"], torch=got["torch"], peaks_tflops=got["peaks_tflops"], peaks_error="")
        else:
            card["peaks_error"] = err
        peaks = card["peaks_tflops"]
        print("# " + header(), flush=True)
        for run in runs:
            s = shape_of[run["shape"]]
            r = {**run, **s}
            results.append(r)
            if run["impl"] == "xtrain":
                if graph_note is not None and run["graph"] is not None:  # rejected by an earlier run
                    if run["graph"] == "off":
                        r["error"] = "skipped: the binary rejected --cuda-graph"
                        continue
                    r["graph"] = None
                r["graph_note"] = r["graph"] or graph_note
                r["attention"] = "ours (flash), dQ by atomics" if run["atomic_dq"] else "ours (flash)"
            left = a.deadline_s - (time.monotonic() - start)
            need = NEED_S[run["impl"]]
            if left < need:
                r["error"] = f"skipped: {left:.0f} s left of the time budget, a run needs ~{need} s"
                print(f"{run['shape']} {run['impl']} {run['precision']}: {r['error']}", flush=True)
                save()
                continue
            try:
                got, err, stderr = measure(a, r, s, left)
                if got is None and r["graph"] is not None and "'--cuda-graph'" in stderr:
                    graph_note = "n/a: this xtrain-bench-gpu rejected --cuda-graph"
                    r["graph"], r["graph_note"] = None, graph_note
                    got, err, _ = measure(a, r, s, a.deadline_s - (time.monotonic() - start))
                if got is None:
                    r["error"] = err
                else:
                    r.update({k: v for k, v in got.items() if k not in ("impl", "precision")})
                    if run["impl"] == "xtrain":
                        if got.get("cuda_graph") is not None:
                            r["graph_note"] = graph_text(got["cuda_graph"])
                        key = (run["shape"], run["precision"], run["atomic_dq"])
                        if key not in plans:
                            plans[key] = plan_memory_mib(a.bin, s, run["precision"], work, run["atomic_dq"])
                        r["plan_mib"] = plans[key]
                    else:
                        r["attention"] = f"SDPA {got['sdpa']}" if got.get("sdpa_probe_ms") else got.get("sdpa")
                    if r["precision"] in peaks:
                        r["mfu"] = mfu(s, r["params"], r["tokens_per_s"], peaks[r["precision"]])
            except Stopped:
                raise
            except Exception as e:  # one row's failure, never the table's
                r["error"] = f"internal error in gpu_bench.py: {type(e).__name__}: {e}"
            print(json.dumps(r), flush=True)
            save()
    except Stopped as e:
        status = 128 + e.signum
        if not card["peaks_tflops"]:
            card["peaks_error"] = card["peaks_error"] or str(e)
        for r in results:
            if "tokens_per_s" not in r and "error" not in r:
                r["error"] = str(e)
        results += [{**run, **shape_of[run["shape"]], "error": str(e)} for run in runs[len(results):]]
    finally:
        save()
        shutil.rmtree(work, ignore_errors=True)
    print("\n" + render(results, header(), shapes, precisions), flush=True)
    if status == 0 and not any("tokens_per_s" in r for r in results):
        print("gpu_bench: nothing was measured", file=sys.stderr)
        status = 1
    return status


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", help="directory holding xtrain-bench-gpu (and xlaunch, for the memory plan)")
    ap.add_argument("--out", default=os.environ.get("OUT", "device-out"))
    ap.add_argument("--shapes", default="gpt2,gpt2-b64,mid,demo",
                    help="gpt2 (GPT-2 124M, 16 sequences), gpt2-b64 (64 sequences), mid, demo, tiny (CPU smoke runs)")
    ap.add_argument("--impls", default="xtrain,eager,compile")
    ap.add_argument("--precisions", default="bf16,tf32")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--deadline-s", type=float, default=1e9, help="start no run that would end after this many seconds")
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile's mode: default, reduce-overhead (CUDA graphs), max-autotune (minutes)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a smoke run of the PyTorch side")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    sys.exit(bench(a))


if __name__ == "__main__":
    main()
