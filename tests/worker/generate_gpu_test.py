#!/usr/bin/python3
"""scripts/bench/generate_gpu.py without a GPU: its rows, timing lines, greedy comparison, failures
and table, on the CPU (--device cpu), with a small byte-level model trained and exported by our
own programs (scripts/check/hf_export_check.py's way) instead of transformers' GPT-2, and
tests/worker/torch_reference.py's greedy decoding (a full forward per token, generate's window
rule) as the peer. The same fp32 weights give the same greedy text on both sides, token for token.
Usage: generate_gpu_test.py BIN_DIR (with xlaunch and xtrain-worker built); /usr/bin/python3.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "bench"))
sys.path.insert(0, os.path.join(ROOT, "scripts", "check"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import generate_gpu  # noqa: E402
import hf_export_check  # noqa: E402
import torch  # noqa: E402
import torch_reference  # noqa: E402

BIN = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else os.path.join(ROOT, "build", "bin")
NEW = 24  # new tokens: 1 + 24 positions stay inside the context of 64, where the peer needs no window rule


def exported_model(work):
    """A maker for measure(): a byte-level model of a few training steps, exported to `directory`."""
    def make(directory):
        run_dir = hf_export_check.train(BIN, work, "cpu", 3, 120)
        subprocess.run([os.path.join(BIN, "xtrain-worker"), "export", run_dir, "--format", "hf", directory],
                       check=True, capture_output=True)
        return {"name": "byte-level test model", "first_token": ord("\n")}
    return make


def reference_peer(directory, first_token, new_tokens, device, precision, shift=0):
    """Greedy tokens of torch_reference's model (fp32, CPU), `shift` added to each; its seconds per token."""
    model, _ = torch_reference.load_hf(directory)
    window, out = [first_token], []
    start = time.perf_counter()
    with torch.inference_mode():
        for _ in range(new_tokens):
            logits, _ = model(torch.tensor([window]))
            out.append((int(torch.argmax(logits[0, -1, :model.V])) + shift) % model.V)
            window.append(out[-1])
    return out, (time.perf_counter() - start) / new_tokens


class GenerateGpu(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="generate-gpu-test-")
        self.addCleanup(shutil.rmtree, self.work, True)

    def measure(self, **kw):
        return generate_gpu.measure(BIN, self.work, None, NEW, 120, "cpu", make_model=exported_model(self.work), **kw)

    def test_every_row_runs_and_the_fp32_texts_agree(self):
        r = self.measure(peer=reference_peer, precisions=("fp32",), samples=3)  # the CPU's generate is fp32 only
        self.assertEqual([(row["impl"].split()[0], row["precision"]) for row in r["rows"]],
                         [("xtrain", "fp32"), ("transformers", "fp32"), ("xtrain", "fp32")])
        for row in r["rows"]:
            self.assertNotIn("error", row, row)
            self.assertGreater(row["ms_per_token"], 0.0)
        self.assertEqual([row["tokens"] for row in r["rows"]], [NEW, NEW, 3 * NEW])  # greedy: no early end
        self.assertEqual(r["fp32_agreeing_tokens"], NEW)
        table = generate_gpu.report(r)
        self.assertIn("| xtrain (KV cache) | fp32 | ", table)
        self.assertIn("| xtrain (KV cache), 3 samples side by side | fp32 | ", table)
        self.assertIn(f"greedy fp32: the first {NEW} of {NEW} tokens agree", table)

    def test_a_different_text_and_failures_are_reported_in_their_rows(self):
        def failing_peer(directory, first_token, new_tokens, device, precision):
            if precision == "bf16":
                raise RuntimeError("no bf16 here")
            return reference_peer(directory, first_token, new_tokens, device, precision, shift=1)
        r = self.measure(peer=failing_peer)
        self.assertEqual(r["fp32_agreeing_tokens"], 0)  # every token moved by one
        self.assertIn('--precision: "bf16" needs a GPU', r["rows"][0]["error"])  # our program's own refusal
        self.assertNotIn("error", r["rows"][1])
        self.assertEqual(r["rows"][2]["error"], "RuntimeError: no bf16 here")
        self.assertIn("| transformers generate (KV cache, eager) | bf16 | FAILED: RuntimeError: no bf16 here",
                      generate_gpu.report(r))
        # Our rows fail alone when our program does: a worker that is not there.
        again = os.path.join(self.work, "again")
        os.makedirs(again)
        r = generate_gpu.measure(os.path.join(self.work, "nowhere"), again, None, NEW, 60, "cpu",
                                 make_model=exported_model(again), peer=reference_peer)
        self.assertIn("cannot start", r["rows"][0]["error"])
        self.assertNotIn("error", r["rows"][3])
        self.assertIn("cannot start", r["rows"][4]["error"])

    def test_the_token_table_undoes_gpt2s_byte_characters(self):
        vocab = os.path.join(self.work, "vocab")
        os.makedirs(vocab)
        with open(os.path.join(vocab, "encoder.json"), "w", encoding="utf-8") as f:
            f.write('{"Hello": 0, "\\u0120world": 1, "\\u010a": 2, "\\u00e2\\u0124\\u00ac": 3}')
        table = generate_gpu.token_text(vocab)
        self.assertEqual(table, {0: b"Hello", 1: b" world", 2: b"\n", 3: "\u20ac".encode()})
        self.assertEqual(generate_gpu.agreeing_prefix(b"Hello world\n", [0, 1, 2, 0], table), 3)


if __name__ == "__main__":
    unittest.main()
