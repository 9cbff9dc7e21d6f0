#!/usr/bin/python3
"""Checks an xtrain checkpoint's model.safetensors the way Hugging Face GPT-2 would load it.

usage: check_safetensors.py CHECKPOINT_DIR LLMC_MODEL_BIN

Independent of the C++ code: parses safetensors and llm.c's model file here (numpy), builds a
torch module with GPT2Model's parameter names and shapes (Conv1D weights are (in, out)),
load_state_dict(strict=True) into it, and compares every tensor with the llm.c export of the
same weights, where Linear-style weights are (out, in): Conv1D weights must be their transposes.
Finally runs one block both ways (x @ W + b with the HF tensors, F.linear with the llm.c ones).
Exit status 0 when everything matches.
"""
import json
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    assert (8 + n) % 8 == 0, "header not padded to 8 bytes"
    header = json.loads(blob[8 : 8 + n])
    metadata = header.pop("__metadata__", {})
    data = blob[8 + n :]
    tensors = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", (name, info["dtype"])
        begin, end = info["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(info["shape"])
    return tensors, metadata


def read_llmc(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        params = np.frombuffer(f.read(), dtype="<f4")
    assert header[0] == 20240326 and header[1] == 3, header[:2]
    maxT, V, L, NH, C, Vp = (int(x) for x in header[2:8])
    shapes = [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
              ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)), ("attprojb", (L, C)),
              ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)),
              ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,))]
    out, at = {}, 0
    for name, shape in shapes:
        count = int(np.prod(shape))
        out[name] = params[at : at + count].reshape(shape)
        at += count
    assert at == params.size, "llm.c file has trailing data"
    return out, dict(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp)


class Conv1D(torch.nn.Module):  # Hugging Face's: weight (nx, nf), y = x @ W + b
    def __init__(self, nf, nx):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(nx, nf))
        self.bias = torch.nn.Parameter(torch.empty(nf))

    def forward(self, x):
        return x @ self.weight + self.bias


class Block(torch.nn.Module):
    def __init__(self, C):
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(C)
        self.attn = torch.nn.Module()
        self.attn.c_attn = Conv1D(3 * C, C)
        self.attn.c_proj = Conv1D(C, C)
        self.ln_2 = torch.nn.LayerNorm(C)
        self.mlp = torch.nn.Module()
        self.mlp.c_fc = Conv1D(4 * C, C)
        self.mlp.c_proj = Conv1D(C, 4 * C)


class GPT2Shaped(torch.nn.Module):  # GPT2Model's parameter names and shapes
    def __init__(self, V, T, C, L):
        super().__init__()
        self.wte = torch.nn.Embedding(V, C)
        self.wpe = torch.nn.Embedding(T, C)
        self.h = torch.nn.ModuleList(Block(C) for _ in range(L))
        self.ln_f = torch.nn.LayerNorm(C)


def causal_attention(qkv, NH):  # (B, T, 3C) -> (B, T, C)
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = (u.view(B, T, NH, C // NH).transpose(1, 2) for u in qkv.split(C, dim=2))
    att = (q @ k.transpose(-2, -1)) / (C // NH) ** 0.5
    att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf")).softmax(-1)
    return (att @ v).transpose(1, 2).reshape(B, T, C)


def block_hf(block, x, NH):
    x = x + block.attn.c_proj(causal_attention(block.attn.c_attn(block.ln_1(x)), NH))
    return x + block.mlp.c_proj(F.gelu(block.mlp.c_fc(block.ln_2(x)), approximate="tanh"))


def block_llmc(p, l, x, NH):
    C = x.shape[-1]
    t = lambda name: torch.from_numpy(p[name][l].copy())
    qkv = F.linear(F.layer_norm(x, (C,), t("ln1w"), t("ln1b")), t("qkvw"), t("qkvb"))
    x = x + F.linear(causal_attention(qkv, NH), t("attprojw"), t("attprojb"))
    h = F.gelu(F.linear(F.layer_norm(x, (C,), t("ln2w"), t("ln2b")), t("fcw"), t("fcb")), approximate="tanh")
    return x + F.linear(h, t("fcprojw"), t("fcprojb"))


def main(checkpoint_dir, llmc_path):
    tensors, metadata = read_safetensors(f"{checkpoint_dir}/model.safetensors")
    assert metadata.get("format") == "pt", "transformers needs __metadata__.format == 'pt'"
    with open(f"{checkpoint_dir}/config.json") as f:
        config = json.load(f)
    assert config["model_type"] == "gpt2"
    p, dims = read_llmc(llmc_path)
    V, T, C, L, NH = config["vocab_size"], config["n_positions"], config["n_embd"], config["n_layer"], config["n_head"]
    assert (V, T, C, L, NH) == (dims["V"], dims["maxT"], dims["C"], dims["L"], dims["NH"]), (config, dims)

    model = GPT2Shaped(V, T, C, L)
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in tensors.items()}, strict=True)

    def same(a, b, what):
        assert a.shape == b.shape and np.array_equal(a, b), f"{what} differs"

    same(tensors["wte.weight"], p["wte"][:V], "wte")
    same(tensors["wpe.weight"], p["wpe"], "wpe")
    same(tensors["ln_f.weight"], p["lnfw"], "ln_f.weight")
    same(tensors["ln_f.bias"], p["lnfb"], "ln_f.bias")
    for l in range(L):
        h = f"h.{l}."
        for hf, ll in [("ln_1.weight", "ln1w"), ("ln_1.bias", "ln1b"), ("attn.c_attn.bias", "qkvb"),
                       ("attn.c_proj.bias", "attprojb"), ("ln_2.weight", "ln2w"), ("ln_2.bias", "ln2b"),
                       ("mlp.c_fc.bias", "fcb"), ("mlp.c_proj.bias", "fcprojb")]:
            same(tensors[h + hf], p[ll][l], h + hf)
        for hf, ll in [("attn.c_attn.weight", "qkvw"), ("attn.c_proj.weight", "attprojw"),
                       ("mlp.c_fc.weight", "fcw"), ("mlp.c_proj.weight", "fcprojw")]:
            same(tensors[h + hf], p[ll][l].T, h + hf + " (Conv1D, the transpose of llm.c's)")

    torch.manual_seed(0)
    x = torch.randn(2, T, C)
    with torch.no_grad():
        for l in range(L):
            hf, ll = block_hf(model.h[l], x, NH), block_llmc(p, l, x, NH)
            err = (hf - ll).abs().max().item()
            assert err < 1e-4, f"block {l}: HF-layout and llm.c-layout outputs differ by {err}"
    print(f"ok: {len(tensors)} tensors load into GPT-2's names and shapes and match the llm.c export")


if __name__ == "__main__":
    try:
        main(*sys.argv[1:])
    except (AssertionError, KeyError, RuntimeError) as e:
        print(f"check_safetensors: FAILED: {e!r}", file=sys.stderr)
        sys.exit(1)
