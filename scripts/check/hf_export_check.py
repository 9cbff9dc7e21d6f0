#!/usr/bin/env python3
"""Our Hugging Face export, loaded by the real transformers, against our own logits and tokens.

A small model is trained for a few steps (xlaunch, on --device; on the CPU if that run fails,
and the report says why), exported with `xtrain-worker export RUN --format hf`, and loaded with
`transformers.GPT2LMHeadModel.from_pretrained`. Its logits on fixed tokens (several whole
windows of the context, every position) are compared with ours from the same run directory
(xtrain-check-logits: the worker's forward, CPU backend, fp32). The model is byte-level, and
the export's tokenizer (tokenizer.json of the 256 bytes) is loaded with
`transformers.AutoTokenizer.from_pretrained`: it must encode a text of many scripts to its UTF-8
bytes and decode them back to the text.

Tolerance: relative RMS difference <= 1e-5 over all logits, and the same argmax at >= 99.9% of
positions. Both sides compute in fp32 from the same fp32 weights; they differ only in the order
of their sums (our blocked products and attention against PyTorch's), a few ulps per operation
over a handful of layers: ~1e-7 relative (the C++ export test holds PyTorch's logits to the same
bound). The final layer norm's bias off by 1e-3 alone gives 1e-4; a wrong layout far more. The
argmax bound leaves room for near-ties only.

Usage: hf_export_check.py --bin DIR [--work DIR] [--device cuda|cpu] [--steps N] [--timeout-s S]
Prints a Markdown report; --json PATH writes the numbers. Exit 0 within tolerance, 1 not (or a
step failed: named in the report), 2 transformers cannot be imported (nothing to compare with).
The comparison is importable with any loader (check(..., load=..., tokenizer=...)): a loader
takes the export's directory and returns a function from (B, T) int64 tokens to (B, T, V) float
logits; a tokenizer loader takes it and returns (encode: str -> ids, decode: ids -> str).
"""
import argparse
import json
import os
import struct
import sys
import tempfile
import time

from check_util import StepFailed, run

REL_RMS_TOL = 1e-5
ARGMAX_AGREEMENT = 0.999
# The model: small enough to train in seconds on a CPU, with every part of GPT-2 (2 layers, 2
# heads, the tied embedding, learned positions); byte tokens, so no vocabulary is needed.
MODEL = {"n_layer": 2, "n_head": 2, "n_embd": 64, "seq_len": 64, "vocab_size": 256, "init_seed": 7}
WINDOWS = 4  # batch of the comparison: (4, 64) tokens
# The tokenizer's text: one, two, three and four-byte UTF-8, spaces and punctuation decoding must keep.
TOKENIZER_TEXT = "The model learns naïve données — 42 , x = f(y) ;\n\tÇa coûte 3,50 € ? 日本語 👍🏽 'll 's .\r\n"


def training_text(size=200_000):
    """Deterministic text with structure to learn (words, numbers, punctuation, newlines)."""
    words = ["the", "model", "learns", "tokens", "of", "a", "GPU", "check", "runs", "once", "and", "then",
             "says", "what", "it", "saw", "—", "données", "naïve", "42", "3.14", "x = f(y);", "\n"]
    state, out, n = 12345, [], 0
    while n < size:
        state = (state * 1103515245 + 12345) % 2**31
        w = words[state % len(words)]
        out.append(w)
        n += len(w.encode()) + 1
    return " ".join(out).encode()[:size]


def comparison_tokens(B, T, V):
    """(B, T) tokens as a flat list: a fixed pseudo-random sequence over the whole vocabulary."""
    state, tokens = 2024, []
    for _ in range(B * T):
        state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
        tokens.append((state >> 33) % V)
    return tokens


def train(bin_dir, work, device, steps, timeout):
    """A run directory with a checkpoint of `steps` steps on `device`."""
    data = os.path.join(work, "train.txt")
    with open(data, "wb") as f:
        f.write(training_text())
    spec = {"name": f"hf-export-check-{device}", "nproc_per_node": 1, "device": device,
            "model": MODEL, "data": {"train": data},
            "train": {"steps": steps, "batch_size": 8, "micro_batch_size": 8, "lr": 3e-3, "warmup_steps": 2,
                      "log_every": steps}}
    path = os.path.join(work, f"job-{device}.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    run_dir = os.path.join(work, f"run-{device}")
    run([os.path.join(bin_dir, "xlaunch"), path, "--run-dir", run_dir], timeout, f"training on {device} (xlaunch)")
    return run_dir


def load_transformers(directory):
    """The export through transformers, offline (that machine has no network: a lookup would only
    wait), in fp32 whatever the library's default dtype."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import GPT2LMHeadModel
    model = GPT2LMHeadModel.from_pretrained(directory).float().eval()
    return lambda tokens: model(tokens).logits


def load_tokenizer(directory):
    """The export's tokenizer through transformers, offline: (encode, decode)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(directory)
    return lambda text: list(tokenizer(text)["input_ids"]), lambda ids: tokenizer.decode(ids)


def check_tokenizer(directory, tokenizer):
    """The export's byte-level tokenizer (loaded by `tokenizer`) on TOKENIZER_TEXT: its tokens must
    be the text's UTF-8 bytes, and decoding them the text. A loader that fails is a failure, named."""
    try:
        encode, decode = tokenizer(directory)
        ids = encode(TOKENIZER_TEXT)
        text = decode(ids)
    except Exception as e:  # the library refused the files: what the check is for
        return {"tokens_ok": False, "decode_ok": False, "error": f"{type(e).__name__}: {e}"}
    expected = list(TOKENIZER_TEXT.encode())
    first = next((i for i, (a, b) in enumerate(zip(ids, expected)) if a != b), min(len(ids), len(expected)))
    return {"tokens_ok": ids == expected, "first_token_difference": None if ids == expected else first,
            "decode_ok": text == TOKENIZER_TEXT, "decoded": text if text != TOKENIZER_TEXT else None}


def compare(ours, theirs):
    """Numbers of the comparison of two (B, T, V) float tensors, in float64."""
    diff = (ours.double() - theirs.double())
    rel = (diff.pow(2).sum() / theirs.double().pow(2).sum()).sqrt().item()
    agree = (ours.argmax(-1) == theirs.argmax(-1)).double().mean().item()
    return {"rel_rms": rel, "max_abs": diff.abs().max().item(), "argmax_agreement": agree,
            "ok": rel <= REL_RMS_TOL and agree >= ARGMAX_AGREEMENT}


def check(bin_dir, work, device="cuda", steps=20, timeout_s=120.0, load=load_transformers, tokenizer=load_tokenizer):
    """Trains, exports, and compares; returns the report's fields (never raises for a step: the
    failed step is in "error")."""
    import torch
    start = time.monotonic()

    def left():
        return timeout_s - (time.monotonic() - start)

    result = {"device": device, "steps": steps, "model": MODEL, "tolerance": {"rel_rms": REL_RMS_TOL,
                                                                             "argmax_agreement": ARGMAX_AGREEMENT}}
    try:
        try:
            run_dir = train(bin_dir, work, device, steps, left() / 2)
            result["trained_on"] = device
        except StepFailed as e:
            if device == "cpu":
                raise
            result["device_error"] = str(e)
            run_dir = train(bin_dir, work, "cpu", steps, left() / 2)
            result["trained_on"] = "cpu"
        hf = os.path.join(work, "hf")
        run([os.path.join(bin_dir, "xtrain-worker"), "export", run_dir, "--format", "hf", hf, "--force"], left(),
            "xtrain-worker export")
        T, V = MODEL["seq_len"], MODEL["vocab_size"]
        flat = comparison_tokens(WINDOWS, T, V)
        tokens = torch.tensor(flat, dtype=torch.int64).view(WINDOWS, T)  # (B, T)
        tokens_path, logits_path = os.path.join(work, "tokens.bin"), os.path.join(work, "logits.bin")
        with open(tokens_path, "wb") as f:
            f.write(struct.pack(f"<{len(flat)}i", *flat))
        run([os.path.join(bin_dir, "xtrain-check-logits"), run_dir, tokens_path, logits_path], left(),
            "xtrain-check-logits")
        with open(logits_path, "rb") as f:
            ours = torch.frombuffer(bytearray(f.read()), dtype=torch.float32).view(WINDOWS, T, V)  # (B, T, V)
        with torch.no_grad():
            theirs = load(hf)(tokens).float()  # (B, T, V)
        if tuple(theirs.shape) != (WINDOWS, T, V):
            raise StepFailed(f"the loaded export gives logits of shape {tuple(theirs.shape)}, not {(WINDOWS, T, V)}")
        result.update(compare(ours, theirs))
        result["tokenizer"] = check_tokenizer(hf, tokenizer)
        result["ok"] = result["ok"] and result["tokenizer"]["tokens_ok"] and result["tokenizer"]["decode_ok"]
    except StepFailed as e:
        result.update(ok=False, error=str(e))
    result["seconds"] = time.monotonic() - start
    return result


def report(r, reference="GPT2LMHeadModel.from_pretrained(export)"):
    head = (f"model {r['model']['n_layer']} layers x {r['model']['n_embd']}, T {r['model']['seq_len']}, "
            f"V {r['model']['vocab_size']}, {r['steps']} steps on {r.get('trained_on', r['device'])}")
    lines = [head]
    if "device_error" in r:
        lines.append(f"WARNING: training on {r['device']} failed, the model was trained on the CPU: {r['device_error']}")
    if "error" in r:
        lines.append(f"FAILED: {r['error']}")
    else:
        logits_ok = r["rel_rms"] <= REL_RMS_TOL and r["argmax_agreement"] >= ARGMAX_AGREEMENT
        verdict = "PASS" if logits_ok else "FAILED"
        lines.append(f"{verdict}: logits of {reference} vs ours on {WINDOWS} x "
                     f"{r['model']['seq_len']} tokens: relative RMS {r['rel_rms']:.2e} (bound {REL_RMS_TOL:.0e}), "
                     f"max |diff| {r['max_abs']:.2e}, argmax agrees at {100 * r['argmax_agreement']:.2f}% "
                     f"(bound {100 * ARGMAX_AGREEMENT:.1f}%)")
        t = r["tokenizer"]
        if "error" in t:
            what = t["error"]
        else:
            tokens = ("its bytes as tokens" if t["tokens_ok"]
                      else f"tokens differ from its bytes at {t['first_token_difference']}")
            decoded = "decoded back to the text" if t["decode_ok"] else f"decoded to {t['decoded']!r}"
            what = f"{tokens}, {decoded}"
        verdict = "PASS" if t["tokens_ok"] and t["decode_ok"] else "FAILED"
        lines.append(f"{verdict}: AutoTokenizer.from_pretrained(export) on {len(TOKENIZER_TEXT.encode())} bytes of "
                     f"text: {what}")
    lines.append(f"({r['seconds']:.1f} s)")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="directory with xlaunch, xtrain-worker and xtrain-check-logits")
    ap.add_argument("--work", help="scratch directory (default: a temporary one)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--timeout-s", type=float, default=120.0)
    ap.add_argument("--json", help="write the numbers here")
    a = ap.parse_args()
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"not run: transformers cannot be imported ({e})")
        sys.exit(2)
    with tempfile.TemporaryDirectory(prefix="xtrain-hf-check-") as tmp:
        work = a.work or tmp
        os.makedirs(work, exist_ok=True)
        r = check(a.bin, work, a.device, a.steps, a.timeout_s)
    print(report(r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    sys.exit(0 if r["ok"] else 1)


if __name__ == "__main__":
    main()
