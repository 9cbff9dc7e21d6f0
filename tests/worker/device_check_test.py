#!/usr/bin/python3
"""scripts/device-check.sh without a GPU: what it says and returns with no GPU (the steps that need
one, or a library this machine lacks, say why they did not run), that a hanging step is killed
within the budget and the others still run, that the benchmark's table and compute-sanitizer's
verdicts reach summary.md, that --only and --cases run what they name and nothing else, and that a
bad option runs nothing.

The GPU is played by a stand-in nvidia-smi first on PATH, the programs by stand-ins in a bin/
given as XTRAIN_CHECK_BIN_DIR: Catch2-like test binaries that record their arguments and pass or
hang, tests/worker/gpu_bench_test.py's xtrain-bench-gpu, and a compute-sanitizer that runs what it
is given. With BIN_DIR (a build's bin/) the no-GPU run also uses the real xlaunch, xtrain-worker,
xtrain-check-logits and xtrain-data. Run with /usr/bin/python3 (PyTorch, CPU: gpu_bench.py's peak
measurement fails on it, which the table says).
Usage: device_check_test.py [BIN_DIR]
"""
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_bench_test import ROOT, gone_within, write_fake  # noqa: E402

SCRIPT = os.path.join(ROOT, "scripts", "device-check.sh")
BIN = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else None

NVIDIA_SMI = {
    "gpu": '#!/bin/sh\ncase "$1" in\n  -L) echo "GPU 0: Stand-in GPU (UUID: GPU-0)";;\n'
           '  --query-gpu=*) echo "index, name"; echo "0, Stand-in GPU";;\n  *) echo "stand-in";;\nesac\n',
    "none": "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver'\nexit 9\n",
}

# A test binary: records its arguments (a listing's spec apart); STUB_TESTS=pass prints Catch2's summary, hang sleeps (in a
# child, whose pid it records, so that the test sees the whole group killed).
TEST_BINARY = r'''#!/bin/sh
if [ "$1" = --list-test-names-only ]; then
  echo "$2" >> "$STUB_LOG.lists"
  echo "a kernel case"
  exit 0
fi
echo "$(basename "$0") $*" >> "$STUB_LOG"
if [ "$STUB_TESTS" = hang ]; then
  sleep 1000 &
  echo $! > "$STUB_LOG.sleeper"
  wait
fi
echo "0.012 s: a case"
echo "All tests passed (3 assertions in 2 test cases)"
'''

# compute-sanitizer: runs the program it is given (`--tool T --error-exitcode 9 PROGRAM ARGS`).
SANITIZER = '#!/bin/sh\nshift 4\nexec "$@"\n'


def read(path):
    with open(path) as f:
        return f.read()


class DeviceCheck(unittest.TestCase):
    def check(self, gpu, tests, budget, bench_args="", programs=(), args=()):
        d = tempfile.mkdtemp(prefix="device-check-test-")
        self.addCleanup(subprocess.run, ["rm", "-rf", d])
        fake_path, bindir, out = os.path.join(d, "path"), os.path.join(d, "bin"), os.path.join(d, "out")
        for directory in (fake_path, bindir):
            os.makedirs(directory)
        for name, text in (("nvidia-smi", NVIDIA_SMI[gpu]), ("compute-sanitizer", SANITIZER)):
            with open(os.path.join(fake_path, name), "w") as f:
                f.write(text)
            os.chmod(os.path.join(fake_path, name), 0o755)
        for name in ("test_cuda", "test_launcher_integration"):
            with open(os.path.join(bindir, name), "w") as f:
                f.write(TEST_BINARY)
            os.chmod(os.path.join(bindir, name), 0o755)
        write_fake(bindir, "accept")
        for name in programs:
            if os.path.exists(os.path.join(bindir, name)):
                os.remove(os.path.join(bindir, name))
            os.symlink(os.path.join(BIN, name), os.path.join(bindir, name))
        log = self.stub_log = os.path.join(d, "calls.log")
        env = dict(os.environ, PATH=fake_path + ":" + os.environ["PATH"], OUT=out, XTRAIN_CHECK_BIN_DIR=bindir,
                   XTRAIN_CHECK_BUDGET_S=str(budget), XTRAIN_PYTHON=sys.executable, XTRAIN_BENCH_ARGS=bench_args,
                   STUB_TESTS=tests, STUB_LOG=log, FAKE_GRAPH="accept", FAKE_LOG=os.path.join(d, "bench.log"))
        t0 = time.monotonic()
        p = subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, env=env, timeout=budget + 60)
        elapsed = time.monotonic() - t0
        summary = read(os.path.join(out, "summary.md"))
        calls = read(log).splitlines() if os.path.exists(log) else []
        sleeper = int(read(log + ".sleeper")) if os.path.exists(log + ".sleeper") else None
        self.assertTrue(os.path.exists(os.path.join(out, "logs.tar.gz")))
        return p, summary, calls, elapsed, sleeper

    def test_no_gpu_runs_the_tests_that_need_none_and_says_so(self):
        p, summary, calls, _, _ = self.check("none", "pass", 120)
        self.assertEqual(p.returncode, 3, summary)
        self.assertIn("no GPU: nvidia-smi found none", summary)
        self.assertIn("no GPU: the [gpu] tests, the benchmark and compute-sanitizer were not run", summary)
        self.assertEqual(calls, ["test_cuda ~[gpu]~[.] -w NoTests --durations yes"])
        self.assertIn("All tests passed (3 assertions in 2 test cases)", summary)
        self.assertNotIn("## Benchmark", summary)
        self.assertNotIn("## Generation", summary)  # it needs a GPU
        self.assertRegex(summary, r"## Hugging Face export.*\nnot run: no xtrain-worker xtrain-check-logits in /")
        self.assertRegex(summary, r"## Tokenizer against tiktoken's gpt2, and our tokenizer.json in tokenizers\n"
                                  r"not run: no xtrain-data in /")
        self.assertRegex(summary, r"## compute-sanitizer\nruntime: (gvisor|firecracker|vm|none) \(.*\)\nnot run: no GPU\n")

    @unittest.skipUnless(BIN, "no BIN_DIR given")
    def test_no_gpu_runs_the_comparisons_where_their_libraries_are(self):
        p, summary, _, _, _ = self.check("none", "pass", 120, programs=(
            "xlaunch", "xtrain-worker", "xtrain-check-logits", "xtrain-data"))
        self.assertEqual(p.returncode, 3, summary)
        hf = summary[summary.index("## Hugging Face export"):summary.index("## Tokenizer")]
        if importlib.util.find_spec("transformers") is None:
            self.assertIn("\nnot run: transformers cannot be imported", hf)
        else:  # trained on the CPU, then compared
            self.assertIn("steps on cpu\nPASS: logits of", hf)
        tokenizer = summary[summary.index("## Tokenizer"):summary.index("## compute-sanitizer")]
        if importlib.util.find_spec("tiktoken") is None:
            self.assertRegex(tokenizer, r"\nnot run: (tiktoken cannot be imported|no GPT-2 vocabulary)")
        else:
            self.assertRegex(tokenizer, r"\n(PASS: token-exact|not run: no GPT-2 vocabulary)")

    def test_a_hanging_step_is_killed_inside_the_budget_and_the_rest_still_runs(self):
        p, summary, calls, elapsed, sleeper = self.check("gpu", "hang", 10)
        self.assertEqual(p.returncode, 1, summary)
        self.assertLess(elapsed, 10 + 20)  # the budget, and the last step's kill grace
        self.assertEqual(calls, ["test_cuda -w NoTests --durations yes",
                                 "test_launcher_integration [gpu]~[.] -w NoTests --durations yes"])
        self.assertRegex(summary, r"test_cuda \(all cases\): exit 124 \(timed out after \d+ s\)")
        self.assertRegex(summary, r"test_launcher_integration \[gpu\]~\[\.\]: exit 124 \(timed out after \d+ s\)")
        self.assertRegex(summary, r"## Benchmark.*\nnot run: -?\d+ s left")
        self.assertRegex(summary, r"## compute-sanitizer\nnot run: -?\d+ s left")
        self.assertIn("## Scaling\nnot run: 1 GPU", summary)
        self.assertRegex(summary, r"total: \d+ s of a 10 s budget")
        self.assertTrue(gone_within(sleeper))

    def test_tests_pass_and_the_benchmark_table_is_in_the_summary(self):
        p, summary, calls, _, _ = self.check("gpu", "pass", 200, "--shapes tiny --impls xtrain --precisions bf16")
        self.assertEqual(calls, ["test_cuda -w NoTests --durations yes",
                                 "test_launcher_integration [gpu]~[.] -w NoTests --durations yes",
                                 "test_cuda a kernel case", "test_cuda a kernel case"])  # memcheck, racecheck
        self.assertIn("memcheck: 1 clean, 0 with errors, 0 failed, 0 timed out, 0 not reached of 1 cases", summary)
        self.assertIn("racecheck: 1 clean, 0 with errors, 0 failed, 0 timed out, 0 not reached of 1 cases", summary)
        self.assertEqual(p.returncode, 0, summary)
        self.assertIn("gpu_bench.py: exit 0", summary)
        self.assertRegex(summary, r"## Generation.*\nnot run: no xtrain-worker in /")
        rows = [line for line in summary.splitlines() if line.startswith("| tiny ")]
        self.assertEqual(len(rows), 3)  # ours, CUDA graph on and off, and with dQ summed by atomics
        self.assertTrue(all(re.search(r"\| ours \(flash\)(, dQ by atomics)? \| 4\.00 \|", row) for row in rows), rows)
        self.assertIn("Per-operation GPU time\n\n| attention_backward |", summary)  # the run without a graph's
        self.assertIn("peaks measured here (TFLOP/s): not measured", summary)  # no CUDA in this PyTorch
        self.assertIn("slowest cases:\n0.012 s: a case", summary)

    def test_only_and_cases_run_the_steps_and_cases_asked_for(self):
        p, summary, calls, _, _ = self.check("gpu", "pass", 200, args=(
            "--only", "tests,sanitizer", "--cases", "[gpu][attention]"))
        self.assertEqual(p.returncode, 0, summary)
        self.assertEqual(calls, ["test_cuda [gpu][attention] -w NoTests --durations yes",
                                 "test_launcher_integration [gpu]~[.] -w NoTests --durations yes",
                                 "test_cuda a kernel case", "test_cuda a kernel case"])  # memcheck, racecheck
        for step in ("Hugging Face export", "Tokenizer", "Generation", "Benchmark", "Scaling"):
            self.assertRegex(summary, rf"## {step}.*\nnot run: not asked for \(--only tests,sanitizer\)\n")
        self.assertIn("memcheck: 1 clean, 0 with errors, 0 failed, 0 timed out, 0 not reached of 1 cases", summary)
        self.assertEqual(set(read(self.stub_log + ".lists").splitlines()), {"[gpu][attention]"})  # the sanitizer's cases

    def test_a_bad_option_runs_nothing_and_exits_2(self):
        for args, error in ((["--only", "tests,bench,speed"], "--only: unknown step 'speed'"),
                            (["--cases"], "--cases needs a value"), (["--fast"], "unknown option '--fast'")):
            out = tempfile.mkdtemp(prefix="device-check-test-")
            self.addCleanup(subprocess.run, ["rm", "-rf", out])
            p = subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, timeout=30,
                               env=dict(os.environ, OUT=out))
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(error, p.stderr)
            self.assertEqual(os.listdir(out), [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
