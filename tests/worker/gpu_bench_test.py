#!/usr/bin/python3
"""scripts/bench/gpu_bench.py without a GPU: its arithmetic, its order of runs, its SDPA backend
choice, its deadline and its handling of children and signals, and a smoke run of its PyTorch side
(gpu_bench_torch.py) on the CPU.

xtrain-bench-gpu is played by a stand-in written here (it prints the JSON line the real one
prints, and takes --cuda-graph or rejects it as the real option parser does), so what is checked
is how the script drives, reads and tabulates it; the real program runs on a GPU machine
(scripts/device-check.sh). Run with /usr/bin/python3 (PyTorch, CPU).
"""
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "bench", "gpu_bench.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import gpu_bench  # noqa: E402
import gpu_bench_torch  # noqa: E402

# The stand-in. FAKE_GRAPH: "accept" (knows --cuda-graph, and --deterministic and --profile,
# whose table it writes), "absent" (its file never names these flags), "reject" (names
# --cuda-graph, as a newer binary's text would, but refuses it). FAKE_SLEEP: seconds to hang,
# after starting a grandchild that records its pid in FAKE_LOG.grandchild.
FAKE = r'''#!/usr/bin/python3
import json, os, subprocess, sys, time
mode = os.environ["FAKE_GRAPH"]
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps(args) + "\n")
if "GRAPH_FLAG" in args and mode != "accept":
    sys.stderr.write("xtrain-bench-gpu: unknown or incomplete argument 'GRAPH_FLAG'\n")
    sys.exit(2)
if float(os.environ.get("FAKE_SLEEP", "0")) > 0:
    child = subprocess.Popen(["sleep", "300"])
    open(os.environ["FAKE_LOG"] + ".grandchild", "w").write(str(child.pid))
    time.sleep(float(os.environ["FAKE_SLEEP"]))
v = dict(zip(args[::2], args[1::2]))
L, C, T, V, B = (int(v["--" + k]) for k in ("layers", "embd", "seq", "vocab", "batch"))
params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
print("warming up")
out = {"impl": "xtrain", "precision": v["--precision"], "params": params, "ms_per_step": 4.0,
       "tokens_per_s": B * T * 250.0, "memory_mib": 12.5, "loss": 4.1}
if "GRAPH_FLAG" in v:
    out["cuda_graph"] = v["GRAPH_FLAG"] == "on"
if "DETERMINISTIC_FLAG" in v:
    out["deterministic"] = v["DETERMINISTIC_FLAG"]
if "PROFILE_FLAG" in v:
    open(v["PROFILE_FLAG"], "w").write("Per-operation GPU time\n\n| attention_backward | 1 | 0.5 |\n")
print(json.dumps(out))
'''


# xlaunch --dry-run's plan, as the real one prints it (indented JSON over many lines).
FAKE_XLAUNCH = r'''#!/usr/bin/python3
import json, sys
spec = json.load(open(sys.argv[1]))
assert sys.argv[2] == "--dry-run" and spec["device"] == "cuda", sys.argv
B = spec["train"]["micro_batch_size"]
print(json.dumps({"memory_per_rank": {"total_bytes": (B + 1) * 2**20}}, indent=2))
'''


def write_fake(directory, mode):
    text = FAKE.replace("GRAPH_FLAG", "--cuda-graph" if mode != "absent" else "--no-such-flag")
    text = text.replace("DETERMINISTIC_FLAG", "--deterministic" if mode == "accept" else "--no-such-flag-d")
    text = text.replace("PROFILE_FLAG", "--profile" if mode == "accept" else "--no-such-flag-p")
    for name, content in (("xtrain-bench-gpu", text), ("xlaunch", FAKE_XLAUNCH)):
        with open(os.path.join(directory, name), "w") as f:
            f.write(content)
        os.chmod(os.path.join(directory, name), 0o755)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        # a zombie is dead: its parent (the stand-in) is gone, init reaps it
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except (ProcessLookupError, FileNotFoundError):  # gone, or reaped between the two looks
        return False


def gone_within(pid, seconds=10.0):
    """True once `pid` is dead, polling for up to `seconds`: a killed process takes a moment to go,
    longer on a loaded machine (the whole suite runs two tests at once)."""
    deadline = time.monotonic() + seconds
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class Arithmetic(unittest.TestCase):
    def test_gpt2_flops_per_token_and_mfu(self):
        s = gpu_bench.SHAPES["gpt2"]
        # GPT-2 124M counted as the bench counts it: tied embedding once, no vocabulary padding:
        # V*C + T*C + L*(12 C^2 + 13 C) + 2C.
        params = 50257 * 768 + 1024 * 768 + 12 * (12 * 768 * 768 + 13 * 768) + 2 * 768
        self.assertEqual(params, 124_439_808)
        self.assertEqual(gpu_bench.flops_per_token(s, params), 6 * 124_439_808 + 6 * 12 * 768 * 1024)
        # 400k tokens/s at 0.803 GFLOP per token against a 790 TFLOP/s peak: 40.7%
        self.assertAlmostEqual(gpu_bench.mfu(s, params, 400_000, 790.0), 0.406715, places=5)

    def test_the_gpt2_shape_is_the_configs_micro_batch(self):
        with open(os.path.join(ROOT, "configs", "gpt2-124m.json")) as f:
            spec = json.load(f)
        s, m = gpu_bench.SHAPES["gpt2"], spec["model"]
        self.assertEqual((s["layers"], s["heads"], s["embd"], s["seq"], s["vocab"], s["batch"]),
                         (m["n_layer"], m["n_head"], m["n_embd"], m["seq_len"], m["vocab_size"],
                          spec["train"]["micro_batch_size"]))

    def test_gpt2_b64_is_gpt2_at_64_sequences_and_a_default_shape(self):
        self.assertEqual(gpu_bench.SHAPES["gpt2-b64"], {**gpu_bench.SHAPES["gpt2"], "batch": 64})
        self.assertEqual(gpu_bench.SHAPE_ORDER[:2], ["gpt2", "gpt2-b64"])

    def test_bench_parameters_match_the_reference_model(self):
        sys.path.insert(0, os.path.join(ROOT, "tests", "worker"))
        from torch_reference import GPT
        L, NH, C, T, V = 2, 2, 32, 16, 100  # V not a multiple of 128: padding to exclude
        model = GPT(L, NH, C, T, V)
        counted = sum(p.numel() for p in model.parameters()) - (model.Vp - model.V) * C
        self.assertEqual(counted, V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C)


class FakeCudaTorch:
    """PyTorch as gpu_bench_torch.pick_sdpa_backend sees it on a GPU: the SDPA backend switches, CUDA
    events whose elapsed time is the enabled backend's cost, and an SDPA that refuses the backends
    in `refuse` and otherwise computes causal attention on the CPU (real autograd, so the probe's
    views and backward are exercised)."""

    def __init__(self, cost_ms, refuse):
        import torch
        self.real, self.enabled, self.calls = torch, {}, []
        backends = {"flash": "enable_flash_sdp", "cudnn": "enable_cudnn_sdp",
                    "efficient": "enable_mem_efficient_sdp", "math": "enable_math_sdp"}
        fake = self

        class Switches:
            pass

        switches = Switches()
        for name, function in backends.items():
            setattr(switches, function, lambda on, name=name: fake.enabled.__setitem__(name, on))

        class Event:
            def __init__(self, enable_timing):
                self.calls = None

            def record(self):
                self.calls = len(fake.calls)

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                assert end.calls == self.calls + 1  # one SDPA call between the two records
                return cost_ms[fake.calls[-1]]

        def sdpa(q, k, v, is_causal):
            on = [n for n, e in fake.enabled.items() if e]
            assert len(on) == 1 and is_causal, on
            fake.calls.append(on[0])
            if on[0] in refuse:
                raise RuntimeError(f"No available kernel ({on[0]})")
            T = q.shape[-2]
            att = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
            mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
            return att.masked_fill(~mask, float("-inf")).softmax(-1) @ v

        self.backends = type("B", (), {"cuda": switches})
        self.cuda = type("C", (), {"Event": Event})
        self.nn = type("N", (), {"functional": type("F", (), {"scaled_dot_product_attention": staticmethod(sdpa)})})
        self.float32 = torch.float32

    def randn(self, *shape, device=None, dtype=None, requires_grad=False):
        return self.real.randn(*shape, requires_grad=requires_grad)


class SdpaChoice(unittest.TestCase):
    def test_the_fastest_backend_that_runs_is_left_alone_enabled(self):
        fake = FakeCudaTorch({"flash": 3.0, "cudnn": 1.0, "efficient": 2.0, "math": 9.0}, refuse={"cudnn"})
        best, times = gpu_bench_torch.pick_sdpa_backend(fake, gpu_bench.SHAPES["tiny"], fake.float32, "cuda")
        self.assertEqual(best, "efficient")  # cuDNN would be faster but refuses this layout
        self.assertEqual(times, {"flash": 3.0, "cudnn": None, "efficient": 2.0, "math": 9.0})
        self.assertEqual(fake.enabled, {"flash": False, "cudnn": False, "efficient": True, "math": False})
        self.assertEqual(fake.calls.count("flash"), 5)  # 2 warm-up, 3 timed


class Order(unittest.TestCase):
    def test_target_rows_first_compile_of_other_shapes_last(self):
        runs = gpu_bench.plan_runs(["gpt2", "mid", "demo"], ["xtrain", "eager", "compile"], ["bf16", "tf32"],
                                   ["on", "off"])
        keys = [(r["shape"], r["impl"], r["precision"], r["graph"]) for r in runs]
        self.assertEqual(len(keys), len(set(keys)))
        self.assertEqual(len(keys), 3 * 2 * 4)  # xtrain twice (graph on, off), eager, compile
        self.assertEqual(keys[:4], [("gpt2", "xtrain", "bf16", "on"), ("gpt2", "eager", "bf16", None),
                                    ("gpt2", "compile", "bf16", None), ("gpt2", "xtrain", "bf16", "off")])
        target = ("gpt2", "compile", "bf16")
        first_other_compile = min(i for i, k in enumerate(keys) if k[1] == "compile" and k[:3] != target)
        self.assertTrue(all(k[1] == "compile" for k in keys[first_other_compile:]))
        self.assertEqual(keys[first_other_compile], ("mid", "compile", "bf16", None))
        # bf16 before tf32 among ours and eager
        middle = keys[4:first_other_compile]
        self.assertEqual([k[2] for k in middle], sorted([k[2] for k in middle], key=["bf16", "tf32"].index))

    def test_bf16_gpt2_at_64_sequences_right_after_the_target_then_the_small_shapes(self):
        runs = gpu_bench.plan_runs(["gpt2", "gpt2-b64", "mid", "demo"], ["xtrain", "eager", "compile"], ["bf16"],
                                   ["on", "off"])
        keys = [(r["shape"], r["impl"], r["graph"]) for r in runs]
        self.assertEqual(keys[4:7], [("gpt2-b64", "xtrain", "on"), ("gpt2-b64", "xtrain", "off"),
                                     ("gpt2-b64", "eager", None)])
        self.assertEqual([k[0] for k in keys if k[1] == "compile"], ["gpt2", "gpt2-b64", "mid", "demo"])

    def test_dq_by_atomics_only_at_the_target_after_its_peers(self):
        runs = gpu_bench.plan_runs(["gpt2", "mid"], ["xtrain", "eager", "compile"], ["bf16", "tf32"], ["on", "off"],
                                   atomic_dq=True)
        keys = [(r["shape"], r["impl"], r["precision"], r["graph"], r["atomic_dq"]) for r in runs]
        self.assertEqual(keys[3:5], [("gpt2", "xtrain", "bf16", "off", False), ("gpt2", "xtrain", "bf16", "on", True)])
        self.assertEqual([k for k in keys if k[4]], [("gpt2", "xtrain", "bf16", "on", True)])
        rows = sorted(runs, key=gpu_bench.row_order(["gpt2", "mid"], ["bf16", "tf32"]))
        self.assertEqual([(r["graph"], r["atomic_dq"]) for r in rows[:3]], [("on", False), ("on", True), ("off", False)])
        self.assertEqual(gpu_bench.xtrain_command("b", gpu_bench.SHAPES["gpt2"], "bf16", "on", 5, 2, True)[-2:],
                         ["--deterministic", "off"])
        # tf32 first: no bf16 target, no atomic row (tf32 has no atomic path)
        runs = gpu_bench.plan_runs(["gpt2"], ["xtrain"], ["tf32"], ["on", "off"], atomic_dq=True)
        self.assertFalse(any(r["atomic_dq"] for r in runs))

    def test_the_targets_run_without_a_graph_writes_the_profile(self):
        runs = gpu_bench.plan_runs(["gpt2", "mid"], ["xtrain", "eager"], ["bf16"], ["on", "off"], profile=True)
        self.assertEqual([(r["shape"], r["graph"]) for r in runs if r["profile"]], [("gpt2", "off")])
        runs = gpu_bench.plan_runs(["demo"], ["xtrain"], ["tf32"], [None], profile=True)
        self.assertEqual([r["profile"] for r in runs], [True])
        self.assertFalse(any(r["profile"] for r in gpu_bench.plan_runs(["gpt2"], ["xtrain"], ["bf16"], ["on", "off"])))
        self.assertEqual(gpu_bench.xtrain_command("b", gpu_bench.SHAPES["gpt2"], "bf16", "off", 5, 2, False, "o/p.md")[-2:],
                         ["--profile", "o/p.md"])

    def test_no_graph_flag_one_xtrain_run_per_row(self):
        runs = gpu_bench.plan_runs(["demo"], ["xtrain", "eager"], ["tf32"], [None])
        self.assertEqual([(r["impl"], r["graph"]) for r in runs], [("xtrain", None), ("eager", None)])


class Children(unittest.TestCase):
    def test_last_json_line_skips_noise(self):
        self.assertEqual(gpu_bench.last_json_line('{"a": 1}\nlog {x}\n{broken\n'), {"a": 1})
        self.assertEqual(gpu_bench.last_json_line('{\n  "a": {\n    "b": 2\n  }\n}\n'), {"a": {"b": 2}})
        self.assertIsNone(gpu_bench.last_json_line("no json\n[1, 2]\n"))

    def test_timeout_kills_the_whole_group(self):
        with tempfile.TemporaryDirectory() as d:
            pidfile = os.path.join(d, "pid")
            t0 = time.monotonic()
            got, err, _ = gpu_bench.run_json(["sh", "-c", f"sleep 300 & echo $! > {pidfile}; wait"], 1.0)
            self.assertLess(time.monotonic() - t0, 10)
            self.assertIsNone(got)
            self.assertIn("timed out after 1 s", err)
            with open(pidfile) as f:
                grandchild = int(f.read())
            self.assertTrue(gone_within(grandchild))

    def test_error_line_and_exit_code(self):
        reported = 'print(\'{"error": "no GPU"}\'); raise SystemExit(1)'
        got, err, _ = gpu_bench.run_json([sys.executable, "-c", reported], 30)
        self.assertEqual((got, err), (None, "no GPU"))
        crashed = "import sys; sys.stderr.write('bad\\n'); sys.exit(3)"
        got, err, _ = gpu_bench.run_json([sys.executable, "-c", crashed], 30)
        self.assertEqual((got, err), (None, "exit 3: bad"))
        got, err, _ = gpu_bench.run_json(["/nonexistent/xtrain-bench-gpu"], 30)
        self.assertIsNone(got)
        self.assertIn("cannot start", err)


class Runs(unittest.TestCase):
    """The whole script, with the stand-in for xtrain-bench-gpu and PyTorch on the CPU."""

    def run_bench(self, mode, extra, env_extra=None, timeout=120):
        d = tempfile.mkdtemp(prefix="gpu-bench-test-")
        self.addCleanup(subprocess.run, ["rm", "-rf", d])
        bindir, out = os.path.join(d, "bin"), os.path.join(d, "out")
        os.makedirs(bindir)
        write_fake(bindir, mode)
        env = dict(os.environ, FAKE_GRAPH=mode, FAKE_LOG=os.path.join(d, "calls.log"), **(env_extra or {}))
        cmd = [sys.executable, SCRIPT, "--device", "cpu", "--bin", bindir, "--out", out, "--steps", "2",
               "--warmup", "1"] + extra
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        calls = []
        if os.path.exists(env["FAKE_LOG"]):
            with open(env["FAKE_LOG"]) as f:
                calls = [json.loads(line) for line in f]
        return p, out, calls

    def load(self, out):
        with open(os.path.join(out, "gpu_bench.json")) as f:
            data = json.load(f)
        with open(os.path.join(out, "gpu_bench.md")) as f:
            return data, f.read()

    def test_smoke_on_cpu_graph_on_and_off_eager_and_compile(self):
        p, out, calls = self.run_bench("accept", ["--shapes", "tiny", "--precisions", "bf16"])
        self.assertEqual(p.returncode, 0, p.stderr)
        data, table = self.load(out)
        self.assertTrue(data["cuda_graph_flag"])
        self.assertIn("bf16", data["peaks_tflops"])
        peak = data["peaks_tflops"]["bf16"]
        self.assertGreater(peak, 0)
        rows = {(r["impl"], r.get("graph")): r for r in data["results"] if not r.get("atomic_dq")}
        self.assertEqual(set(rows), {("xtrain", "on"), ("xtrain", "off"), ("eager", None), ("compile", None)})
        # ours with its graph, without (writing the profile), then with dQ summed by atomics
        self.assertEqual([c[c.index("--cuda-graph") + 1] for c in calls], ["on", "off", "on"])
        self.assertEqual([c[c.index("--profile") + 1] if "--profile" in c else None for c in calls],
                         [None, os.path.join(out, "gpu_profile.md"), None])
        with open(os.path.join(out, "gpu_profile.md")) as f:
            self.assertIn("| attention_backward |", f.read())
        self.assertEqual(["--deterministic" in c for c in calls], [False, False, True])
        atomic = [r for r in data["results"] if r.get("atomic_dq")]
        self.assertEqual([(r["deterministic"], r["attention"]) for r in atomic], [("off", "ours (flash), dQ by atomics")])
        s = gpu_bench.SHAPES["tiny"]
        for key in (("xtrain", "on"), ("xtrain", "off"), ("eager", None)):
            r = rows[key]
            self.assertNotIn("error", r)
            self.assertGreater(r["tokens_per_s"], 0)
            expect = r["tokens_per_s"] * (6 * r["params"] + 6 * s["layers"] * s["embd"] * s["seq"]) / (peak * 1e12)
            self.assertAlmostEqual(r["mfu"], expect, delta=1e-12)
        self.assertEqual(rows[("xtrain", "on")]["graph_note"], "on")
        self.assertEqual(rows[("xtrain", "off")]["graph_note"], "off")
        eager = rows[("eager", None)]
        self.assertTrue(math.isfinite(eager["loss"]) and 3.0 < eager["loss"] < 5.5, eager["loss"])  # ~ln(64)
        self.assertEqual(eager["params"], rows[("xtrain", "on")]["params"])
        import torch
        if hasattr(torch, "compile"):
            self.assertNotIn("error", rows[("compile", None)])
        else:
            self.assertIn("torch.compile needs PyTorch 2", rows[("compile", None)]["error"])
        # one table row per run, ours against eager: 250 * 32 tokens/s over eager's rate
        self.assertEqual(len([x for x in table.splitlines() if x.startswith("| tiny ")]), 5)
        ratio = f"{s['batch'] * s['seq'] * 250.0 / eager['tokens_per_s']:.2f}x"
        # memory 12.5 MiB measured; the plan: B + 1 MiB (the stand-in xlaunch's formula)
        self.assertEqual(rows[("xtrain", "on")]["plan_mib"], s["batch"] + 1)
        self.assertIn(f"| on | ours (flash) | 4.00 | {s['batch'] * s['seq'] * 250:,.0f} | 12 | 3 |", table)
        self.assertIn(ratio, table)

    def test_binary_without_the_flag_one_run_said_so(self):
        p, out, calls = self.run_bench("absent", ["--shapes", "tiny", "--impls", "xtrain", "--precisions", "tf32"])
        self.assertEqual(p.returncode, 0, p.stderr)
        data, table = self.load(out)
        self.assertFalse(data["cuda_graph_flag"])
        self.assertEqual(len(calls), 1)
        self.assertNotIn("--cuda-graph", calls[0])
        self.assertIn("n/a: this xtrain-bench-gpu has no --cuda-graph", table)

    def test_binary_that_rejects_the_flag_is_run_without_it(self):
        p, out, calls = self.run_bench("reject", ["--shapes", "tiny", "--impls", "xtrain", "--precisions", "bf16,tf32"])
        self.assertEqual(p.returncode, 0, p.stderr)
        data, table = self.load(out)
        # bf16: "on" refused, rerun without the flag, "off" skipped; tf32: run without the flag
        self.assertEqual([("--cuda-graph" in c) for c in calls], [True, False, False])
        ok = [r for r in data["results"] if "tokens_per_s" in r]
        self.assertEqual(sorted(r["precision"] for r in ok), ["bf16", "tf32"])
        self.assertIn("rejected --cuda-graph", table)

    def test_deadline_starts_nothing_it_cannot_finish(self):
        p, out, calls = self.run_bench("accept", ["--shapes", "tiny", "--impls", "xtrain,eager", "--deadline-s", "5"])
        self.assertEqual(p.returncode, 1, p.stderr)  # nothing measured
        self.assertIn("nothing was measured", p.stderr)
        data, table = self.load(out)
        self.assertEqual(calls, [])
        # 2 precisions x (ours on, off, eager), and ours with dQ by atomics at the first (bf16)
        self.assertEqual(len(data["results"]), 2 * 3 + 1)
        for r in data["results"]:
            self.assertRegex(r["error"], r"skipped: -?\d+ s left of the time budget, a run needs ~\d+ s")
        self.assertIn("not measured: skipped", table)

    def test_sigterm_kills_the_run_and_leaves_the_table(self):
        d = tempfile.mkdtemp(prefix="gpu-bench-test-")
        self.addCleanup(subprocess.run, ["rm", "-rf", d])
        bindir, out, log = os.path.join(d, "bin"), os.path.join(d, "out"), os.path.join(d, "calls.log")
        os.makedirs(bindir)
        write_fake(bindir, "accept")
        env = dict(os.environ, FAKE_GRAPH="accept", FAKE_LOG=log, FAKE_SLEEP="300")
        p = subprocess.Popen([sys.executable, SCRIPT, "--device", "cpu", "--bin", bindir, "--out", out,
                              "--shapes", "tiny", "--impls", "xtrain", "--precisions", "bf16"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 60
        while not os.path.exists(log + ".grandchild") and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.2)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 128 + signal.SIGTERM, err)
        with open(log + ".grandchild") as f:
            grandchild = int(f.read())
        self.assertTrue(gone_within(grandchild))
        data, table = self.load(out)
        # ours with the graph, without it, with dQ by atomics
        self.assertEqual([r["error"] for r in data["results"]], ["stopped by signal 15"] * 3)
        self.assertIn("not measured: stopped by signal 15", table)

    def test_sigterm_while_measuring_the_peaks_leaves_every_row_said(self):
        d = tempfile.mkdtemp(prefix="gpu-bench-test-")
        self.addCleanup(subprocess.run, ["rm", "-rf", d])
        out = os.path.join(d, "out")
        p = subprocess.Popen([sys.executable, SCRIPT, "--device", "cpu", "--out", out, "--shapes", "tiny",
                              "--impls", "eager,compile", "--precisions", "bf16"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        children, deadline = "", time.monotonic() + 30
        while not children and time.monotonic() < deadline:  # the peaks' child: the handler is set
            with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
                children = f.read().split()
            time.sleep(0.02)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 128 + signal.SIGTERM, err)
        self.assertTrue(gone_within(int(children[0])))
        data, table = self.load(out)
        self.assertEqual(data["peaks_tflops"], {})
        self.assertEqual([(r["impl"], r["error"]) for r in data["results"]],
                         [("eager", "stopped by signal 15"), ("compile", "stopped by signal 15")])
        self.assertIn("peaks measured here (TFLOP/s): not measured (stopped by signal 15)", table)


if __name__ == "__main__":
    unittest.main(verbosity=2)
