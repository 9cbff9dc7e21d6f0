#!/usr/bin/env python3
"""Generation on one GPU, next to transformers: GPT-2 124M's shape with random weights (seeded,
GPT2Config's defaults), greedy from <|endoftext|>, NEW tokens, on the same weights both sides.

- ours: `xtrain-worker generate DIR --device cuda --precision P --temperature 0` (the prompt in one
  forward, then one position per token with GPT's qkv activations as the KV cache, each step one
  CUDA graph: worker/model/gpt_decoder.hpp), its own tokens/s line (new tokens only: the prompt's
  pass, the start and the load left out), in bf16 and fp32; and in the first precision with
  `--num-samples 16`, the samples side by side (one step for all), per token of all of them;
- transformers: `GPT2LMHeadModel.generate` with its KV cache, eager, greedy, in bf16 weights and in
  fp32, `min_new_tokens` so that it never stops early; per token (t(NEW) - t(1)) / (NEW - 1) after
  a warm-up, so its prompt and set-up are left out too. torch.compile with a static cache (its
  fastest form) takes minutes to compile a shape: not run.

Both greedy fp32 texts are compared: how many of the first tokens agree (random weights give
near-uniform logits, so a near-tie ends the agreement sooner than it would on a trained model).

Usage: generate_gpu.py --bin DIR --vocab DIR [--new N] [--timeout-s S] [--json PATH]
Prints a Markdown table; exit 0 when every row ran, 1 when one failed (named), 2 when PyTorch's
CUDA or transformers is missing (not run, said on stdout). The comparison is importable with any
model maker and peer (measure(..., make_model=..., peer=...)): the tests run it on the CPU with a
small byte-level model and a reference of their own.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "check"))
from check_util import StepFailed, gpt2_token_bytes, programs_env  # noqa: E402

GENERATED = re.compile(r"generated (\d+) tokens in [0-9.]+ s: ([0-9.]+) tokens/s")


def gpt2_model(directory, seed=1234):
    """GPT-2 124M's shape (transformers' GPT2Config defaults) with random weights, saved for
    from_pretrained and for us (config.json, model.safetensors). Its first token: <|endoftext|>."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    GPT2LMHeadModel(GPT2Config()).save_pretrained(directory, safe_serialization=True)
    return {"name": "GPT-2 124M shape, random weights", "first_token": 50256}


def transformers_peer(directory, first_token, new_tokens, device, precision):
    """Greedy tokens and seconds per new token of transformers' generate (KV cache, eager)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import GPT2LMHeadModel
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = GPT2LMHeadModel.from_pretrained(directory, torch_dtype=dtype).to(device).eval()
    prompt = torch.tensor([[first_token]], device=device)

    def generate(n):
        with torch.inference_mode():
            out = model.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                 pad_token_id=first_token)
        if device == "cuda":
            torch.cuda.synchronize()
        return out[0, 1:].tolist()

    generate(8)  # warm-up: kernels, the allocator
    start = time.perf_counter()
    generate(1)
    one = time.perf_counter() - start
    start = time.perf_counter()
    tokens = generate(new_tokens)
    whole = time.perf_counter() - start
    return tokens, (whole - one) / (new_tokens - 1)


def token_text(vocab):
    """Token id -> its bytes, from GPT-2's encoder.json; None: a byte-level model, each id its byte."""
    if vocab is None:
        return None
    with open(os.path.join(vocab, "encoder.json"), encoding="utf-8") as f:
        return gpt2_token_bytes(json.load(f))


def ours(bin_dir, directory, vocab, new_tokens, precision, device, timeout, samples=1):
    """Our generate: its stdout (the text's bytes), new tokens (of all samples) and seconds per new
    token (from its tokens/s, which has more digits than its seconds)."""
    cmd = [os.path.join(bin_dir, "xtrain-worker"), "generate", directory, "--temperature", "0",
           "--max-new-tokens", str(new_tokens), "--device", device, "--precision", precision,
           "--num-samples", str(samples)]
    if vocab is not None:
        cmd += ["--tokenizer", vocab]
    what = f"xtrain-worker generate --device {device} --precision {precision} --num-samples {samples}"
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=max(1.0, timeout), env=programs_env())
    except subprocess.TimeoutExpired:
        raise StepFailed(f"{what}: timed out after {timeout:.0f} s")
    except OSError as e:
        raise StepFailed(f"{what}: cannot start {cmd[0]}: {e.strerror}")
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0:
        raise StepFailed(f"{what}: exit {p.returncode}: " + " | ".join(err.strip().splitlines()[-3:]))
    m = GENERATED.search(err)
    if m is None or float(m.group(2)) <= 0:
        raise StepFailed(f"{what}: no 'generated N tokens in S s: R tokens/s' line with a rate on stderr")
    return p.stdout, int(m.group(1)), 1.0 / float(m.group(2))


def agreeing_prefix(text, tokens, table):
    """How many of `tokens` (the peer's ids), decoded, begin `text` (our bytes) in order."""
    at = 0
    for n, t in enumerate(tokens):
        piece = table[t] if table is not None else bytes([t])
        if text[at:at + len(piece)] != piece:
            return n
        at += len(piece)
    return len(tokens)


def measure(bin_dir, work, vocab, new_tokens=256, timeout_s=120.0, device="cuda", make_model=gpt2_model,
            peer=transformers_peer, precisions=("bf16", "fp32"), samples=16):
    """Every row; a row that fails has "error" (the others still run). The last row is ours with
    `samples` samples side by side, in the first precision."""
    start = time.monotonic()

    def left():
        return timeout_s - (time.monotonic() - start)

    directory = os.path.join(work, "model")
    model = make_model(directory)
    table = token_text(vocab)
    rows, texts, peer_tokens = [], {}, {}
    for precision in precisions:
        row = {"impl": "xtrain (KV cache)", "precision": precision}
        try:
            texts[precision], row["tokens"], seconds = ours(bin_dir, directory, vocab, new_tokens, precision, device,
                                                            left() / 2)
            row["ms_per_token"] = 1000.0 * seconds
        except StepFailed as e:
            row["error"] = str(e)
        rows.append(row)
    for precision in precisions:
        row = {"impl": "transformers generate (KV cache, eager)", "precision": precision}
        try:
            peer_tokens[precision], seconds = peer(directory, model["first_token"], new_tokens, device, precision)
            row["tokens"] = len(peer_tokens[precision])
            row["ms_per_token"] = 1000.0 * seconds
        except Exception as e:  # noqa: BLE001  (the peer's failure is a row's, not the script's)
            row["error"] = f"{type(e).__name__}: {e}"
        rows.append(row)
    row = {"impl": f"xtrain (KV cache), {samples} samples side by side", "precision": precisions[0]}
    try:
        _, row["tokens"], seconds = ours(bin_dir, directory, vocab, new_tokens, precisions[0], device, left(), samples)
        row["ms_per_token"] = 1000.0 * seconds
    except StepFailed as e:
        row["error"] = str(e)
    rows.append(row)
    result = {"model": model["name"], "device": device, "new_tokens": new_tokens, "rows": rows}
    if "fp32" in texts and "fp32" in peer_tokens:
        result["fp32_agreeing_tokens"] = agreeing_prefix(texts["fp32"], peer_tokens["fp32"], table)
    result["seconds"] = time.monotonic() - start
    return result


def report(r):
    lines = [f"{r['model']}, greedy from one token, {r['new_tokens']} new tokens a sample, on {r['device']} "
             "(side by side: ms per token of all samples)", "",
             "| impl | precision | ms/token | tokens/s | tokens |", "| --- | --- | ---: | ---: | ---: |"]
    for row in r["rows"]:
        if "error" in row:
            lines.append(f"| {row['impl']} | {row['precision']} | FAILED: {row['error']} | | |")
        else:
            ms = row["ms_per_token"]
            lines.append(f"| {row['impl']} | {row['precision']} | {ms:.3f} | {1000.0 / ms:.1f} | {row['tokens']} |")
    if "fp32_agreeing_tokens" in r:
        lines += ["", f"greedy fp32: the first {r['fp32_agreeing_tokens']} of {r['new_tokens']} tokens agree"]
    lines.append(f"({r['seconds']:.1f} s)")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="directory with xtrain-worker")
    ap.add_argument("--vocab", required=True, help="GPT-2's vocabulary (encoder.json + vocab.bpe)")
    ap.add_argument("--new", type=int, default=256, help="new tokens per run (>= 2)")
    ap.add_argument("--timeout-s", type=float, default=120.0)
    ap.add_argument("--json", help="write the numbers here")
    a = ap.parse_args()
    if a.new < 2:
        ap.error("--new: expected at least 2")
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"not run: {e}")
        sys.exit(2)
    if not torch.cuda.is_available():
        print("not run: PyTorch sees no CUDA device")
        sys.exit(2)
    with tempfile.TemporaryDirectory(prefix="xtrain-generate-gpu-") as work:
        r = measure(a.bin, work, a.vocab, a.new, a.timeout_s)
    print(report(r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    sys.exit(1 if any("error" in row for row in r["rows"]) else 0)


if __name__ == "__main__":
    main()
