#!/usr/bin/python3
"""The device check's steps without a GPU (scripts/check/): the Hugging Face export against a
loaded model, the tokenizer against a reference, the runtime's kind, and compute-sanitizer's
driving.

transformers and tiktoken are not needed: the export is loaded by tests/worker/torch_reference.py's
independent reader (its own safetensors parser and GPT-2 module), and the tokenizer is held to
js-tiktoken (scripts/gpt2-reference.cjs, where scripts/fetch-gpt2-reference.sh's cache and node
are present; skipped otherwise, saying so) and to a reference written here that differs on
purpose. compute-sanitizer and test_cuda are stand-ins that record what they were asked.
Usage: device_check_steps_test.py BIN_DIR (with xlaunch, xtrain-worker, xtrain-check-logits,
xtrain-data built); run with /usr/bin/python3 (PyTorch, CPU).
"""
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import types
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK = os.path.join(ROOT, "scripts", "check")
sys.path.insert(0, CHECK)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_util  # noqa: E402
import hf_export_check  # noqa: E402
import tokenizer_check  # noqa: E402
import torch  # noqa: E402
import torch_reference  # noqa: E402

BIN = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else os.path.join(ROOT, "build", "bin")
REFERENCE_CACHE = os.environ.get("XTRAIN_GPT2_REFERENCE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "xtrain", "gpt2-reference")
VOCAB = os.path.join(REFERENCE_CACHE, "gpt2")


def scratch(test):
    d = tempfile.mkdtemp(prefix="device-check-steps-")
    test.addCleanup(shutil.rmtree, d, True)
    return d


def reference_loader(offset=0.0):
    """The export as torch_reference reads it; `offset` added to the final layer norm's bias
    (a wrong weight the comparison must catch)."""
    def load(directory):
        model, _ = torch_reference.load_hf(directory)
        with torch.no_grad():
            model.ln_f.bias += offset
        return lambda tokens: model(tokens)[0][..., :model.V]
    return load


def reference_tokenizer(shift=0):
    """The export's tokenizer.json read here: its vocabulary maps GPT-2's byte characters to ids;
    `shift` is added to every id (a wrong tokenizer the check must catch)."""
    def load(directory):
        with open(os.path.join(directory, "tokenizer.json")) as f:
            vocab = json.load(f)["model"]["vocab"]
        byte_of = check_util.gpt2_byte_characters()
        ids = {byte_of[c]: i + shift for c, i in vocab.items()}  # byte -> id
        byte_of_id = {i: b for b, i in ids.items()}
        return (lambda text: [ids[b] for b in text.encode()],
                lambda tokens: bytes(byte_of_id[t] for t in tokens).decode("utf-8", "replace"))
    return load


class HfExport(unittest.TestCase):
    def test_the_export_matches_the_reference_models_logits_and_tokens(self):
        r = hf_export_check.check(BIN, scratch(self), "cpu", 10, 120, reference_loader(), reference_tokenizer())
        self.assertNotIn("error", r, r)
        self.assertTrue(r["ok"], r)
        self.assertLess(r["rel_rms"], 1e-6)  # fp32 both sides: the order of sums only
        self.assertEqual(r["argmax_agreement"], 1.0)
        self.assertEqual(r["trained_on"], "cpu")
        self.assertTrue(r["tokenizer"]["tokens_ok"] and r["tokenizer"]["decode_ok"], r)
        self.assertIn("PASS: logits of", hf_export_check.report(r))
        self.assertIn("PASS: AutoTokenizer.from_pretrained(export) on", hf_export_check.report(r))

    def test_a_wrong_weight_fails_it(self):
        r = hf_export_check.check(BIN, scratch(self), "cpu", 10, 120, reference_loader(1e-3), reference_tokenizer())
        self.assertFalse(r["ok"], r)
        self.assertGreater(r["rel_rms"], hf_export_check.REL_RMS_TOL)
        self.assertIn("FAILED: logits of", hf_export_check.report(r))

    def test_a_tokenizer_the_library_refuses_fails_it_named(self):
        def refusing(directory):
            raise ValueError(f"cannot load {directory}")
        r = hf_export_check.check(BIN, scratch(self), "cpu", 10, 120, reference_loader(), refusing)
        self.assertFalse(r["ok"], r)
        self.assertRegex(hf_export_check.report(r),
                         r"FAILED: AutoTokenizer.from_pretrained\(export\) on \d+ bytes of text: "
                         r"ValueError: cannot load ")

    def test_a_wrong_tokenizer_fails_it(self):
        r = hf_export_check.check(BIN, scratch(self), "cpu", 10, 120, reference_loader(), reference_tokenizer(1))
        self.assertFalse(r["ok"], r)
        self.assertEqual(r["tokenizer"]["first_token_difference"], 0)
        self.assertIn("PASS: logits of", hf_export_check.report(r))
        self.assertIn("FAILED: AutoTokenizer.from_pretrained(export) on", hf_export_check.report(r))

    @unittest.skipIf(os.environ.get("XTRAIN_CUDA_INTERPRET") == "1" or
                     subprocess.run(["sh", "-c", "nvidia-smi -L 2>/dev/null | grep -q '^GPU '"]).returncode == 0,
                     "a GPU (or interpret mode) is there: training on cuda would not fail")
    def test_training_on_a_missing_gpu_falls_back_to_the_cpu_and_says_so(self):
        r = hf_export_check.check(BIN, scratch(self), "cuda", 10, 120, reference_loader(), reference_tokenizer())
        self.assertEqual(r["trained_on"], "cpu", r)
        self.assertIn("training on cuda (xlaunch): exit 2", r["device_error"])
        self.assertTrue(r["ok"], r)
        self.assertIn("WARNING: training on cuda failed", hf_export_check.report(r))

    def test_a_failed_step_is_named(self):
        r = hf_export_check.check(scratch(self), scratch(self), "cpu", 10, 30, reference_loader(),
                                  reference_tokenizer())
        self.assertFalse(r["ok"])
        self.assertRegex(r["error"], r"^training on cpu \(xlaunch\): cannot start .*xlaunch")

    def test_the_transformers_loaders_are_called_as_the_library_is(self):
        calls = []

        class AutoTokenizer:
            @classmethod
            def from_pretrained(cls, directory):
                calls.append(("tokenizer", directory, os.environ.get("HF_HUB_OFFLINE")))
                t = cls()
                t.encode, t.decode = reference_tokenizer()(directory)
                return t

            def __call__(self, text):
                return {"input_ids": self.encode(text)}

        class GPT2LMHeadModel:
            @classmethod
            def from_pretrained(cls, directory):
                calls.append((directory, os.environ.get("HF_HUB_OFFLINE")))
                m = cls()
                m.model, _ = torch_reference.load_hf(directory)
                return m

            def float(self):
                calls.append("float")
                return self

            def eval(self):
                calls.append("eval")
                return self

            def __call__(self, tokens):
                return types.SimpleNamespace(logits=self.model(tokens)[0][..., :self.model.V])

        fake = types.ModuleType("transformers")
        fake.GPT2LMHeadModel = GPT2LMHeadModel
        fake.AutoTokenizer = AutoTokenizer
        saved = sys.modules.get("transformers")
        sys.modules["transformers"] = fake
        try:
            work = scratch(self)
            r = hf_export_check.check(BIN, work, "cpu", 10, 120)
        finally:
            sys.modules.pop("transformers")
            if saved is not None:
                sys.modules["transformers"] = saved
        self.assertTrue(r["ok"], r)
        self.assertEqual(calls, [(os.path.join(work, "hf"), "1"), "float", "eval",
                                 ("tokenizer", os.path.join(work, "hf"), "1")])

    def test_compare_bounds(self):
        theirs = torch.randn(2, 8, 50, generator=torch.Generator().manual_seed(0))
        self.assertTrue(hf_export_check.compare(theirs.clone(), theirs)["ok"])
        self.assertTrue(hf_export_check.compare(theirs * (1 + 1e-6), theirs)["ok"])
        self.assertFalse(hf_export_check.compare(theirs * (1 + 1e-4), theirs)["ok"])

    @unittest.skipIf(__import__("importlib").util.find_spec("transformers") is not None, "transformers is installed")
    def test_without_transformers_it_does_not_run_and_says_why(self):
        p = subprocess.run([sys.executable, os.path.join(CHECK, "hf_export_check.py"), "--bin", BIN],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertRegex(p.stdout, r"^not run: transformers cannot be imported")


class Gpt2Bytes:
    """Every GPT-2 token's bytes, from encoder.json."""

    def __init__(self):
        with open(os.path.join(VOCAB, "encoder.json")) as f:
            self.vocab = json.load(f)
        self.bytes = check_util.gpt2_token_bytes(self.vocab)

    def token_bytes(self, token):
        return self.bytes[token]


class JsTiktoken(Gpt2Bytes):
    """js-tiktoken's gpt2 (scripts/gpt2-reference.cjs, with tiktoken's White_Space for \\s)."""

    def __init__(self, work):
        super().__init__()
        self.work = work

    def encode_all(self, docs):
        docs_path, out_path = os.path.join(self.work, "ref-docs.bin"), os.path.join(self.work, "ref-tokens.bin")
        with open(docs_path, "wb") as f:
            for d in docs:
                b = d.encode()
                f.write(struct.pack("<I", len(b)) + b)
        subprocess.run(["node", os.path.join(ROOT, "scripts", "gpt2-reference.cjs"), REFERENCE_CACHE, "encode",
                        docs_path, out_path], check=True)
        with open(out_path, "rb") as f:
            blob = f.read()
        out, at = [], 0
        while at < len(blob):
            (n,) = struct.unpack_from("<I", blob, at)
            out.append(list(struct.unpack_from(f"<{n}i", blob, at + 4)))
            at += 4 + 4 * n
        return out


class OneByteEach(Gpt2Bytes):
    """A reference that differs on purpose: every byte its own token (GPT-2's byte tokens)."""

    def __init__(self):
        super().__init__()
        encode = {b: c for c, b in check_util.gpt2_byte_characters().items()}
        self.id = {b: self.vocab[encode[b]] for b in range(256)}

    def encode_all(self, docs):
        return [[self.id[b] for b in d.encode()] for d in docs]


@unittest.skipUnless(os.path.isfile(os.path.join(VOCAB, "encoder.json")),
                     f"no GPT-2 vocabulary in {VOCAB}: run scripts/fetch-gpt2-reference.sh")
class Tokenizer(unittest.TestCase):
    @unittest.skipUnless(shutil.which("node") and os.path.isdir(os.path.join(REFERENCE_CACHE, "node_modules")),
                         "no node or js-tiktoken: run scripts/fetch-gpt2-reference.sh")
    def test_ours_is_token_exact_with_js_tiktoken_on_the_generated_text(self):
        r = tokenizer_check.check(BIN, VOCAB, JsTiktoken(scratch(self)), mb=1.0, seed=3)
        self.assertNotIn("error", r, r)
        self.assertTrue(r["ok"], tokenizer_check.report(r, "js-tiktoken"))
        self.assertGreater(r["tokens"], 100_000)

    def test_a_difference_is_reported_with_its_place_and_context(self):
        r = tokenizer_check.check(BIN, VOCAB, OneByteEach(), mb=0.05, seed=3)
        self.assertFalse(r["ok"])
        self.assertEqual(r["mismatching_documents"], r["documents"])  # BPE merges somewhere in every document
        m = r["mismatches"][0]
        doc = tokenizer_check.corpus(3, 50_000)[m["document"]].encode()
        self.assertEqual(m["theirs"][0][1], doc[m["byte_offset"]:m["byte_offset"] + 1])
        self.assertTrue(doc[m["byte_offset"]:].startswith(m["ours"][0][1]))
        self.assertEqual(m["before"] + m["after"], doc[max(0, m["byte_offset"] - 40):m["byte_offset"] + 40])
        text = tokenizer_check.report(r, "one byte each")
        self.assertIn(f"FAILED against one byte each: {r['documents']} documents differ", text)
        self.assertIn(f"- document {m['document']}, token {m['token_index']} (byte {m['byte_offset']};", text)
        self.assertIn(f"(code points after: {tokenizer_check.code_points(m['after'])})", text)
        self.assertEqual(tokenizer_check.code_points("a€😀".encode()), "U+0061 U+20AC U+1F600")

    @unittest.skipUnless(shutil.which("node") and os.path.isdir(os.path.join(REFERENCE_CACHE, "node_modules")),
                         "no node or js-tiktoken: run scripts/fetch-gpt2-reference.sh")
    def test_our_tokenizer_json_goes_to_the_tokenizers_library_as_it_loads_one(self):
        work, calls = scratch(self), []
        js = JsTiktoken(work)

        class Tokenizer:  # encodes as js-tiktoken does: the plumbing is what is tested here
            @classmethod
            def from_file(cls, path):
                with open(path) as f:
                    model = json.load(f)["model"]
                calls.append((path, len(model["vocab"]), len(model["merges"])))
                return cls()

            def encode_batch(self, docs, add_special_tokens=True):
                calls.append(("encode_batch", self.encode_special_tokens, add_special_tokens))
                return [types.SimpleNamespace(ids=ids) for ids in js.encode_all(docs)]

        fake = types.ModuleType("tokenizers")
        fake.Tokenizer, fake.__version__ = Tokenizer, "stand-in"
        saved = sys.modules.get("tokenizers")
        sys.modules["tokenizers"] = fake
        try:
            hf = tokenizer_check.HfTokenizers(BIN, VOCAB, work, js.token_bytes)
        finally:
            sys.modules.pop("tokenizers")
            if saved is not None:
                sys.modules["tokenizers"] = saved
        r = tokenizer_check.check(BIN, VOCAB, js, mb=0.2, seed=3,
                                  others=[("tokenizer_json", hf), ("bytes", OneByteEach())])
        self.assertEqual(calls, [(os.path.join(work, "hf", "tokenizer.json"), 50257, 50000),
                                 ("encode_batch", True, False)])
        self.assertTrue(r["others"]["tokenizer_json"]["ok"], r)
        self.assertFalse(r["others"]["bytes"]["ok"])
        self.assertFalse(r["ok"])
        text = tokenizer_check.report(r, "js-tiktoken", {"tokenizer_json": "tokenizers on our tokenizer.json"})
        self.assertIn("\nPASS: token-exact against js-tiktoken\nPASS: token-exact against tokenizers on our "
                      "tokenizer.json\nFAILED against bytes: ", text)

    def test_tiktoken_is_given_the_vocabulary_through_its_cache(self):
        seen = {}

        def get_encoding(name):
            cache = os.environ["TIKTOKEN_CACHE_DIR"]
            for file, url in tokenizer_check.TIKTOKEN_URLS.items():
                with open(os.path.join(cache, hashlib.sha1(url.encode()).hexdigest()), "rb") as f:
                    seen[file] = hashlib.sha256(f.read()).hexdigest()
            return name

        fake = types.ModuleType("tiktoken")
        fake.get_encoding, fake.__version__ = get_encoding, "stand-in"
        saved = sys.modules.get("tiktoken")
        sys.modules["tiktoken"] = fake
        try:
            t = tokenizer_check.Tiktoken(VOCAB, scratch(self))
        finally:
            sys.modules.pop("tiktoken")
            if saved is not None:
                sys.modules["tiktoken"] = saved
        self.assertEqual((t.encoding, t.version), ("gpt2", "stand-in"))
        # the digests tiktoken_ext's gpt2 checks
        self.assertEqual(seen, {"vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
                                "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"})

    @unittest.skipIf(__import__("importlib").util.find_spec("tiktoken") is not None, "tiktoken is installed")
    def test_without_tiktoken_it_does_not_run_and_says_why(self):
        p = subprocess.run([sys.executable, os.path.join(CHECK, "tokenizer_check.py"), "--bin", BIN, "--vocab", VOCAB],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertRegex(p.stdout, r"^not run: tiktoken cannot be imported \(No module named 'tiktoken'\)")


class Corpus(unittest.TestCase):
    def test_deterministic_varied_and_assigned(self):
        docs = tokenizer_check.corpus(1, 300_000)
        self.assertEqual(docs, tokenizer_check.corpus(1, 300_000))
        self.assertNotEqual(docs, tokenizer_check.corpus(2, 300_000))
        self.assertTrue(all(docs))
        text = "".join(docs)
        self.assertGreaterEqual(len(text.encode()), 300_000)
        for needle in ("\x85", "\u3000", "\u200b", "’", "'ll", "<|endoftext|>", "٠", "    ", "\t\t", "def ", "👍🏽"):
            self.assertIn(needle, text)
        self.assertTrue(any(ord(c) > 0xFFFF for c in text))
        starts, unassigned = tokenizer_check.unassigned_runs()
        import bisect
        self.assertFalse(any(unassigned[bisect.bisect_right(starts, ord(c)) - 1] for c in set(text)))
        self.assertTrue(unassigned[bisect.bisect_right(starts, 0x0378) - 1])  # unassigned in every version


def run_kind(root):
    return subprocess.run([os.path.join(CHECK, "runtime-kind.sh"), root], capture_output=True, text=True,
                          check=True).stdout.strip()


def fake_root(test, version="Linux version 6.1.0 (gcc) #1 SMP", cmdline="BOOT_IMAGE=/vmlinuz ro", flags="fpu sse2",
              dmesg="", vendor=None):
    root = scratch(test)
    os.makedirs(os.path.join(root, "proc"))
    files = {"proc/version": version, "proc/cmdline": cmdline, "proc/cpuinfo": f"processor\t: 0\nflags\t\t: {flags}\n",
             "dmesg": dmesg}
    if vendor:
        os.makedirs(os.path.join(root, "sys/class/dmi/id"))
        files["sys/class/dmi/id/sys_vendor"] = vendor
    for path, text in files.items():
        with open(os.path.join(root, path), "w") as f:
            f.write(text + "\n")
    return root


class RuntimeKind(unittest.TestCase):
    def test_kinds(self):
        gvisor_version = "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016"
        self.assertTrue(run_kind(fake_root(self, version=gvisor_version)).startswith("gvisor /proc/version"))
        self.assertEqual(run_kind(fake_root(self, dmesg="[    0.000000] Starting gVisor...")),
                         "gvisor the kernel log says: Starting gVisor")
        self.assertTrue(run_kind(fake_root(self, cmdline="console=ttyS0 reboot=k panic=1 -- --firecracker-init",
                                           flags="fpu hypervisor")).startswith("firecracker "))
        self.assertIn("virtio-mmio", run_kind(fake_root(self, cmdline="virtio_mmio.device=4K@0xd0000000:5",
                                                        flags="hypervisor")))
        self.assertEqual(run_kind(fake_root(self, flags="fpu hypervisor sse2", vendor="QEMU",
                                            dmesg="[    0.000000] Hypervisor detected: KVM")),
                         "vm CPU flag hypervisor; Hypervisor detected: KVM; DMI vendor QEMU")
        self.assertEqual(run_kind(fake_root(self)), "none no hypervisor flag in /proc/cpuinfo")


# test_cuda's stand-in: --list-test-names-only prints NAMES (any spec); otherwise the one case
# its spec names (Catch2's escapes undone) runs: "dirty" cases have memory errors, "slow" ones hang.
FAKE_TEST_CUDA = r'''#!/usr/bin/python3
import os, re, sys, time
NAMES = ["cuda flash attention in bf16 matches", "cuda gelu, residual [and] scale", "a dirty kernel", "a slow one"]
if sys.argv[1] == "--list-test-names-only":
    print("\n".join(NAMES))
    sys.exit(0)
name = re.sub(r"\\(.)", r"\1", sys.argv[1])
with open(os.environ["STUB_LOG"], "a") as f:
    f.write(os.environ["STUB_TOOL"] + ": " + name + "\n")
assert name in NAMES, name
if "slow" in name:
    time.sleep(100)
if "dirty" in name and os.environ["STUB_TOOL"] == "memcheck":
    print("========= Invalid __global__ read of size 4 bytes")
    sys.exit(9)
'''
FAKE_SANITIZER = r'''#!/bin/sh
[ "$1" = --tool ] && [ "$3" = --error-exitcode ] && [ "$4" = 9 ] || exit 99
STUB_TOOL=$2 exec "$5" "$6"
'''


class Sanitizer(unittest.TestCase):
    def run_sanitizer(self, limit, root=None, with_tool=True):
        d = scratch(self)
        bindir, tools, logs = (os.path.join(d, x) for x in ("bin", "tools", "logs"))
        for x in (bindir, tools, logs):
            os.makedirs(x)
        programs = [(os.path.join(bindir, "test_cuda"), FAKE_TEST_CUDA)]
        if with_tool:
            programs.append((os.path.join(tools, "compute-sanitizer"), FAKE_SANITIZER))
        for path, text in programs:
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)
        log = os.path.join(d, "calls.log")
        env = dict(os.environ, PATH=tools + ":" + os.environ["PATH"], STUB_LOG=log, CUDA_HOME=tools)
        if root:
            env["XTRAIN_RUNTIME_ROOT"] = root
        p = subprocess.run([os.path.join(CHECK, "sanitizer.sh"), bindir, str(limit), logs, "[gpu][attention]", "[gpu][ops]"],
                           capture_output=True, text=True, env=env, timeout=limit + 60)
        calls = []
        if os.path.exists(log):
            with open(log) as f:
                calls = f.read().splitlines()
        return p, calls

    def test_each_case_once_each_tool_errors_named_and_the_slow_case_cut(self):
        p, calls = self.run_sanitizer(14, fake_root(self))
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        names = ["cuda flash attention in bf16 matches", "cuda gelu, residual [and] scale", "a dirty kernel", "a slow one"]
        self.assertEqual(calls, [f"memcheck: {n}" for n in names] + [f"racecheck: {n}" for n in names])
        out = p.stdout
        self.assertIn("runtime: none (no hypervisor flag in /proc/cpuinfo)", out)
        self.assertIn("4 cases ([gpu][attention] [gpu][ops]), one run each, 14 s in all", out)
        self.assertIn("- memcheck found errors in: a dirty kernel", out)
        self.assertRegex(out, r"- memcheck: not judged, still running after the \d+ s left: a slow one")
        self.assertIn("memcheck: 2 clean, 1 with errors, 0 failed, 1 timed out, 0 not reached of 4 cases", out)
        self.assertIn("racecheck: 3 clean, 0 with errors, 0 failed, 1 timed out, 0 not reached of 4 cases", out)
        self.assertIn("========= Invalid __global__ read of size 4 bytes", out)

    def test_cases_the_time_does_not_reach_are_named(self):
        p, calls = self.run_sanitizer(4, fake_root(self))
        self.assertEqual(calls, [])
        self.assertEqual(p.returncode, 0, p.stdout)
        self.assertIn("memcheck: 0 clean, 0 with errors, 0 failed, 0 timed out, 4 not reached of 4 cases", p.stdout)
        self.assertIn("not reached (time): cuda flash attention in bf16 matches; cuda gelu, residual [and] scale;",
                      p.stdout)

    def test_under_gvisor_nothing_runs(self):
        p, calls = self.run_sanitizer(30, fake_root(self, dmesg="Starting gVisor..."))
        self.assertEqual((p.returncode, calls), (3, []))
        self.assertIn("runtime: gvisor", p.stdout)
        self.assertIn("not run: under gVisor compute-sanitizer cannot attach to the GPU", p.stdout)

    @unittest.skipIf(any(os.path.exists(p) for p in ("/usr/local/cuda/bin/compute-sanitizer",
                                                     "/usr/local/cuda/compute-sanitizer/compute-sanitizer")),
                     "this machine has compute-sanitizer")
    def test_without_compute_sanitizer_nothing_runs(self):
        p, calls = self.run_sanitizer(30, fake_root(self), with_tool=False)
        self.assertEqual((p.returncode, calls), (3, []))
        self.assertIn("not run: no compute-sanitizer", p.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
