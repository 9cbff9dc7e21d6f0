#!/usr/bin/env python3
"""Our GPT-2 tokenizer (xtrain-data) against the real tiktoken `gpt2` encoding, token for token,
and against Hugging Face's tokenizers library on the tokenizer.json our exports write.

A few MB of varied text is generated deterministically here (--seed): prose in many scripts,
combining marks and emoji sequences, contractions (ASCII and curly, any case), runs of every
kind of white space (Unicode's White_Space, U+0085 and U+00A0 among them, and look-alikes that
are not), numbers of every shape and digit system, code, the literal text "<|endoftext|>", and
random code points from all planes (surrogates excepted: text is UTF-8; and code points our
tokenizer's Unicode version leaves unassigned, a version difference and no rule's). Each piece is one
document; xtrain-data encodes them (JSON Lines, one shard), tiktoken's encode_ordinary each
document, and every document's tokens must be equal. A mismatch is reported with its document,
the first token that differs, both sides' next tokens (as bytes) and the text around it.

tiktoken reads the gpt2 ranks from its cache without a network: --vocab names a directory with
OpenAI's encoder.json + vocab.bpe (the bundle's gpt2/), copied into a fresh TIKTOKEN_CACHE_DIR
under the names tiktoken looks for; tiktoken checks their SHA-256 itself.

Where the `tokenizers` library imports (transformers brings it), the same tokens of ours are also
compared with it on our tokenizer.json: `xtrain-worker export` of a stub llm.c model file with
--tokenizer VOCAB writes one, and Tokenizer.from_file loads it, with encode_special_tokens on so
that "<|endoftext|>" in text is text, as tiktoken's encode_ordinary reads it.

Usage: tokenizer_check.py --bin DIR --vocab DIR [--mb 3] [--seed 1] [--timeout-s S] [--json PATH]
Exit 0 token-exact; 1 a mismatch or a failed step (named); 2 tiktoken cannot be imported or the
vocabulary is missing (nothing to compare with). The comparison is importable with any
reference: compare(docs, ours, reference), the reference having encode_all(docs) -> token lists
and token_bytes(token) -> bytes; check(..., others=[(name, reference)]) compares more of them.
"""
import argparse
import bisect
import glob
import hashlib
import json
import os
import random
import re
import shutil
import struct
import sys
import tempfile
import time

from check_util import StepFailed, run

EOT = 50256
# Where tiktoken's gpt2 encoding fetches its files: the cache names them by the SHA-1 of these.
TIKTOKEN_URLS = {"vocab.bpe": "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
                 "encoder.json": "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json"}
UNICODE_TABLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                             "common", "tokenizer", "unicode_class_table.inc")
UNASSIGNED_CLASS = 4  # common/tokenizer/unicode_classes.hpp's UnicodeClass
CONTEXT_BYTES = 40
SHOWN_MISMATCHES = 10

PROSE = ["The quick brown fox jumps over the lazy dog.", "Ça coûte 3,50 € — déjà payé ?", "Straße, Größe, Maß.",
         "Η γρήγορη καφέ αλεπού.", "Съешь же ещё этих мягких французских булок.", "我能吞下玻璃而不伤身体。",
         "日本語のテキスト、カタカナとひらがな。", "한국어 문장입니다.", "مرحبا بالعالم", "שלום עולם",
         "हिन्दी में लिखा पाठ।", "ภาษาไทยไม่มีช่องว่าง", "e\u0301 vs é, n\u0303, a\u0308\u0304",
         "👩‍👩‍👧‍👦 👍🏽 🇫🇷🇯🇵 ❤️ 🏳️‍🌈", "ｆｕｌｌｗｉｄｔｈ ＡＢＣ", "Ⅻ ⅓ ½ ² ³ µ Ω Å ﬁ"]
CONTRACTIONS = ["don't", "I'm", "we've", "they'll", "she'd", "it's", "DON'T", "I'M", "WE'VE", "They'Ll", "it’s",
                "don’t", "'s", "'t", "''", "'", "rock'n'roll", "o'clock", "ma'am", "y'all'd've", " 's", "x's's"]
# White space to tiktoken's \s (Rust regex: Unicode White_Space), and characters that look like it
# but are not (U+200B, U+2060, U+FEFF, U+180E).
SPACES = [" ", "\t", "\n", "\r\n", "\r", "\x0b", "\x0c", "\x85", "\xa0", "\u1680", "\u2000", "\u2003", "\u2009",
          "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"]
NOT_SPACES = ["\u200b", "\u2060", "\ufeff", "\u180e"]
DIGITS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "０１２３４５６７８９", "𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗"]
CODE = ["def f(x, *args, **kw):\n    return [i ** 2 for i in range(x) if i % 3 != 0]\n",
        "int main(void) {\n\tprintf(\"%d\\n\", a[i++] << 2 | b);\n\treturn 0;\n}\n",
        "for (let i = 0; i < n; i++) { s += `${i}:${arr[i]}`; }  // comment\n",
        "    if x:\n        y = {'a': 1, \"b\": [2, 3]}\n\n\n    else:\n\t\tpass  \n",
        "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son';\n",
        "<div class=\"a\">&nbsp;&lt;tag&gt;</div>\n", "$ ls -la | grep '^d' && echo \"done\" >> log.txt\n",
        "x=1;y=2;;z===3!==4=>5->6::7...8\n", "#include <vector>\nstd::vector<int> v{1,2,3};\n"]


def unassigned_runs(path=UNICODE_TABLE):
    """(starts, unassigned) of our tokenizer's Unicode table (common/tokenizer/unicode_class_table.inc,
    runs of code points by class): run i starts at starts[i], unassigned[i] says whether it is
    unassigned in that Unicode version."""
    with open(path) as f:
        text = f.read()
    body = text[text.index("kUnicodeClassRuns[] = {") :]
    entries = [int(x, 16) for x in re.findall(r"0x[0-9a-fA-F]+", body[: body.index("};")])]
    return [e >> 3 for e in entries], [e & 7 == UNASSIGNED_CLASS for e in entries]


def random_scalar(rng, runs):
    """A Unicode scalar value from any plane (surrogates cannot be UTF-8), weighted to the BMP,
    assigned in our tokenizer's Unicode version: a code point assigned only in a newer one is a
    difference of versions between the two tokenizers, not of their rules."""
    starts, unassigned = runs
    while True:
        top = rng.choice([0x80, 0x800, 0x3000, 0x10000, 0x20000, 0x30000, 0x110000])
        c = rng.randrange(0, top)
        if not 0xD800 <= c <= 0xDFFF and not unassigned[bisect.bisect_right(starts, c) - 1]:
            return chr(c)


def number(rng):
    digits = rng.choice(DIGITS)
    n = "".join(rng.choice(digits) for _ in range(rng.randint(1, 14)))
    shape = rng.randrange(7)
    if shape == 0:
        return n
    if shape == 1:
        return f"{n}.{rng.randint(0, 99999)}"
    if shape == 2:
        return f"{rng.randint(1, 999)},{rng.randint(0, 999):03d},{rng.randint(0, 999):03d}"
    if shape == 3:
        return f"-{n}e-{rng.randint(1, 30)}"
    if shape == 4:
        return hex(rng.getrandbits(48))
    if shape == 5:
        return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}, {rng.randint(1, 31)}/{rng.randint(1, 12)}/2026"
    return f"v{rng.randint(0, 9)}.{rng.randint(0, 99)}.{rng.randint(0, 999)}-rc{rng.randint(1, 9)}"


def space_run(rng):
    kind = rng.random()
    if kind < 0.5:
        return rng.choice(SPACES) * rng.randint(1, 24)
    if kind < 0.8:
        return "".join(rng.choice(SPACES) for _ in range(rng.randint(1, 12)))
    return "".join(rng.choice(SPACES + NOT_SPACES) for _ in range(rng.randint(1, 6)))


def piece(rng, runs):
    kind = rng.randrange(8)
    if kind == 0:
        return rng.choice(PROSE)
    if kind == 1:
        return rng.choice(CONTRACTIONS)
    if kind == 2:
        return space_run(rng)
    if kind == 3:
        return number(rng)
    if kind == 4:
        return rng.choice(CODE)
    if kind == 5:
        return "".join(random_scalar(rng, runs) for _ in range(rng.randint(1, 16)))
    if kind == 6:
        return rng.choice(["<|endoftext|>", "<|endoftext", "|>", "<|", "<|im_start|>"])
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCXYZ") for _ in range(rng.randint(1, 30)))


def corpus(seed, target_bytes):
    """Documents of 1..~2000 pieces each (none empty), about target_bytes of UTF-8 in all: the
    same list for the same seed and size (Python's Mersenne Twister)."""
    rng, runs = random.Random(seed), unassigned_runs()
    docs, total = [], 0
    while total < target_bytes:
        parts = [piece(rng, runs) for _ in range(rng.choice([1, 2, 5, 50, 400, 2000]))]
        sep = rng.choice(["", " ", "\n", ""])
        doc = sep.join(parts)
        if doc:
            docs.append(doc)
            total += len(doc.encode())
    return docs


def read_shard_tokens(path):
    with open(path, "rb") as f:
        blob = f.read()
    header = struct.unpack("<256i", blob[:1024])
    count = header[2]
    if len(blob) != 1024 + 2 * count:
        raise StepFailed(f"{path}: {len(blob)} bytes for {count} tokens")
    return list(struct.unpack(f"<{count}H", blob[1024:]))


def ours(bin_dir, vocab, docs, work, timeout):
    """Every document's tokens from xtrain-data: its shards hold EOT doc EOT doc ... EOT."""
    inputs = os.path.join(work, "docs.jsonl")
    with open(inputs, "w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps({"text": doc}, ensure_ascii=False) + "\n")
    out = os.path.join(work, "shards")
    run([os.path.join(bin_dir, "xtrain-data"), "--vocab", vocab, "--out", out, "--jsonl-field", "text",
         "--val-tokens", "0", "--quiet", inputs], timeout, "xtrain-data")
    tokens = []
    for shard in sorted(glob.glob(os.path.join(out, "*.bin"))):
        tokens += read_shard_tokens(shard)
    if not tokens or tokens[0] != EOT or tokens[-1] != EOT:
        raise StepFailed("xtrain-data's shards do not start and end with <|endoftext|>")
    split, current = [], []
    for t in tokens[1:]:
        if t == EOT:
            split.append(current)
            current = []
        else:
            current.append(t)
    if len(split) != len(docs):
        raise StepFailed(f"xtrain-data wrote {len(split)} documents for {len(docs)}")
    return split


class Tiktoken:
    """tiktoken's gpt2 encoding, its files from vocab_dir through a fresh cache directory."""

    def __init__(self, vocab_dir, cache_dir):
        for name, url in TIKTOKEN_URLS.items():
            src = os.path.join(vocab_dir, name)
            if not os.path.isfile(src):
                raise FileNotFoundError(f"{src}: missing (tiktoken's gpt2 encoding needs it, and no network)")
            shutil.copyfile(src, os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest()))
        os.environ["TIKTOKEN_CACHE_DIR"] = cache_dir
        import tiktoken
        self.version = getattr(tiktoken, "__version__", "?")
        self.encoding = tiktoken.get_encoding("gpt2")

    def encode_all(self, docs):
        return self.encoding.encode_ordinary_batch(docs)

    def token_bytes(self, token):
        return self.encoding.decode_single_token_bytes(token)


def stub_llmc_model(path, C=8, T=8, V=50257, Vp=50304):
    """An llm.c model file (version 3, fp32) of one layer with GPT-2's vocabulary, all zeros: what
    `xtrain-worker export` takes to write a tokenizer.json for --tokenizer."""
    floats = Vp * C + T * C + (12 * C * C + 13 * C) + 2 * C
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240326, 3, T, V, 1, 1, C, Vp, *([0] * 248)))
        f.write(bytes(4 * floats))


class HfTokenizers:
    """Hugging Face's tokenizers library on the tokenizer.json `xtrain-worker export` writes for
    the vocabulary; token_bytes from `bytes_of` (another reference's)."""

    def __init__(self, bin_dir, vocab_dir, work, bytes_of, timeout_s=60.0):
        model, out = os.path.join(work, "stub.bin"), os.path.join(work, "hf")
        stub_llmc_model(model)
        run([os.path.join(bin_dir, "xtrain-worker"), "export", model, "--format", "hf", out, "--tokenizer", vocab_dir,
             "--force"], timeout_s, "xtrain-worker export (the tokenizer.json)")
        import tokenizers
        self.version = getattr(tokenizers, "__version__", "?")
        self.path = os.path.join(out, "tokenizer.json")
        self.tokenizer = tokenizers.Tokenizer.from_file(self.path)
        try:
            self.tokenizer.encode_special_tokens = True  # "<|endoftext|>" in text is text
        except AttributeError as e:
            raise ImportError(f"tokenizers {self.version} cannot encode special tokens as text "
                              "(0.15 or newer can)") from e
        self.token_bytes = bytes_of

    def encode_all(self, docs):
        return [e.ids for e in self.tokenizer.encode_batch(docs, add_special_tokens=False)]


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare(docs, mine, reference):
    """Token-exact comparison; returns (documents that differ, [mismatch reports])."""
    theirs = reference.encode_all(docs)
    bad = [d for d in range(len(docs)) if mine[d] != theirs[d]]
    shown = []
    for d in bad[:SHOWN_MISMATCHES]:
        i = first_difference(mine[d], theirs[d])
        text = docs[d].encode()
        offset = sum(len(reference.token_bytes(t)) for t in theirs[d][:i])

        def tokens(ts):
            return [(t, reference.token_bytes(t)) for t in ts[i:i + 4]]

        shown.append({"document": d, "token_index": i, "byte_offset": offset, "ours": tokens(mine[d]),
                      "theirs": tokens(theirs[d]), "ours_count": len(mine[d]), "theirs_count": len(theirs[d]),
                      "before": text[max(0, offset - CONTEXT_BYTES):offset], "after": text[offset:offset + CONTEXT_BYTES]})
    return bad, shown


def check(bin_dir, vocab, reference, mb=3.0, seed=1, timeout_s=60.0, work=None, others=()):
    start = time.monotonic()
    docs = corpus(seed, int(mb * 1e6))
    result = {"seed": seed, "documents": len(docs), "bytes": sum(len(d.encode()) for d in docs)}
    try:
        with tempfile.TemporaryDirectory(prefix="xtrain-tokenizer-check-") as tmp:
            mine = ours(bin_dir, vocab, docs, work or tmp, timeout_s - (time.monotonic() - start))
        result["tokens"] = sum(len(t) for t in mine)
        bad, shown = compare(docs, mine, reference)
        result.update(mismatching_documents=len(bad), mismatches=shown, ok=not bad)
        for name, other in others:  # the same tokens of ours against each further reference
            other_bad, other_shown = compare(docs, mine, other)
            result.setdefault("others", {})[name] = {"mismatching_documents": len(other_bad),
                                                     "mismatches": other_shown, "ok": not other_bad}
            result["ok"] = result["ok"] and not other_bad
    except StepFailed as e:
        result.update(ok=False, error=str(e))
    result["seconds"] = time.monotonic() - start
    return result


def code_points(text_bytes, n=6):
    """The first n characters of text_bytes as U+XXXX: a difference at a character one side's
    Unicode version does not know shows here."""
    return " ".join(f"U+{ord(c):04X}" for c in text_bytes.decode("utf-8", "replace")[:n])


def verdict(r, name):
    """The lines of one comparison (r: check's result, or one of its "others") against `name`."""
    if r["mismatching_documents"] == 0:
        return [f"PASS: token-exact against {name}"]
    lines = [f"FAILED against {name}: {r['mismatching_documents']} documents differ; the first "
             f"{len(r['mismatches'])}:"]
    for m in r["mismatches"]:
        lines.append(f"- document {m['document']}, token {m['token_index']} (byte {m['byte_offset']}; "
                     f"{m['ours_count']} tokens ours, {m['theirs_count']} theirs): ours "
                     f"{[(t, b) for t, b in m['ours']]} vs theirs {[(t, b) for t, b in m['theirs']]}; "
                     f"text {m['before']!r} | {m['after']!r} (code points after: {code_points(m['after'])})")
    return lines


def report(r, reference_name, other_names=None):
    """`other_names`: each further reference's name in the report, by its name in r["others"]."""
    head = f"{r['documents']} documents, {r['bytes'] / 1e6:.2f} MB (seed {r['seed']}), {r.get('tokens', 0):,} tokens"
    if "error" in r:
        return f"{head}\nFAILED: {r['error']}\n({r['seconds']:.1f} s)"
    lines = [head] + verdict(r, reference_name)
    for name, other in r.get("others", {}).items():
        lines += verdict(other, (other_names or {}).get(name, name))
    lines.append(f"({r['seconds']:.1f} s)")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="directory with xtrain-data (and xtrain-worker)")
    ap.add_argument("--vocab", required=True, help="directory with OpenAI's GPT-2 encoder.json + vocab.bpe")
    ap.add_argument("--mb", type=float, default=3.0, help="megabytes of text")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout-s", type=float, default=60.0)
    ap.add_argument("--json", help="write the result here")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="xtrain-tiktoken-cache-") as cache, \
            tempfile.TemporaryDirectory(prefix="xtrain-tokenizer-json-") as work:
        try:
            reference = Tiktoken(a.vocab, cache)
        except ImportError as e:
            print(f"not run: tiktoken cannot be imported ({e})")
            sys.exit(2)
        except FileNotFoundError as e:
            print(f"not run: {e}")
            sys.exit(2)
        others, names, notes = [], {}, []
        try:
            hf = HfTokenizers(a.bin, a.vocab, work, reference.token_bytes, a.timeout_s / 4)
            others.append(("tokenizer_json", hf))
            names["tokenizer_json"] = f"tokenizers {hf.version} on our tokenizer.json"
        except ImportError as e:
            notes.append(f"not run against our tokenizer.json: tokenizers cannot be imported ({e})")
        except Exception as e:  # our export failed (StepFailed), or the library refused the file
            notes.append(f"FAILED: our tokenizer.json: {e}")
        r = check(a.bin, a.vocab, reference, a.mb, a.seed, a.timeout_s, others=others)
    r["ok"] = r["ok"] and not any(n.startswith("FAILED") for n in notes)
    r["notes"] = notes
    print("\n".join([report(r, f"tiktoken {reference.version} gpt2", names)] + notes))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1, default=lambda b: b.decode("utf-8", "backslashreplace"))
    sys.exit(0 if r["ok"] else 1)


if __name__ == "__main__":
    main()
