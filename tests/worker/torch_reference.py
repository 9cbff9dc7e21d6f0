#!/usr/bin/python3
"""Our PyTorch GPT-2: the reference that xtrain-worker's model is checked and benchmarked against.

Same architecture and parameter names as worker/model/param_layout.hpp (nn.Linear stores weights (out, in),
exactly our layout), the padded vocabulary (logits over Vp columns, the loss over the first V), the
same AdamW parameter groups (decay on 2-D tensors only), global-norm clipping and learning-rate
schedule (worker/train/lr_schedule.hpp).

Modes (run with /usr/bin/python3, Debian's python3-torch):
  check DIR   read DIR/config.json, params.bin (float32, our flat layout), tokens.bin and
              targets.bin (int32, (steps, B, T)); write DIR/logits.bin ((B,T,Vp) of the first batch),
              DIR/grads.bin (flat layout, gradients of the first batch's mean loss) and
              DIR/result.json {"loss", "losses": per-step training losses, "norms": grad norms}.
  hf-logits DIR
              load DIR/model.safetensors (a Hugging Face GPT-2 export: Conv1D weights (in, out), wte
              with V rows) and DIR/config.json into this model, run DIR/tokens.bin (int32 (B, T))
              and write DIR/logits.bin ((B,T,Vp)).
  hf-bf16 F32_DIR BF16_DIR
              every tensor of F32_DIR/model.safetensors rounded by PyTorch (tensor.to(torch.bfloat16))
              against BF16_DIR/model.safetensors's, bit for bit (the same names, shapes and order);
              prints the number of tensors; exit 1 naming the first that differs.
  hf-greedy DIR --prompt IDS --new N
              greedy decoding of a Hugging Face export, a full forward per token (no cache), with
              xtrain-worker generate's window rule; prints the N tokens as a JSON list.
  hf-loss DIR TEXT --window N [--max-tokens N]
              xtrain-worker eval's loss and bits per byte of a byte-level text file, in windows of N.
  hf-choice DIR FILE
              llm.c's multiple-choice accuracy (lowest mean completion loss) on FILE; one JSON line.
  bench-generate DIR [--threads N]
              one token at a time with a KV cache, eager, on the weights and prompt that
              scripts/bench/generate_cpu_bench.cpp --out DIR wrote, on N intra-op threads (1);
              one JSON line.
  bench       time full training steps (forward, backward, clip, AdamW) of a freshly initialised
              model in eager mode; prints one JSON line with the median step and its tokens/s.
"""
import argparse
import json
import math
import os
import statistics
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    """fused: PyTorch's scaled_dot_product_attention (PyTorch 2; flash or cuDNN kernels on a GPU)
    instead of the explicit (T, T) product, softmax and product; the same function."""

    def __init__(self, C, NH, T, fused=False):
        super().__init__()
        self.NH = NH
        self.fused = fused
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.NH, hs).transpose(1, 2)  # (B,NH,T,hs)
        k = k.view(B, T, self.NH, hs).transpose(1, 2)
        v = v.view(B, T, self.NH, hs).transpose(1, 2)
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, NH, T, fused_attention=False):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.attn = Attention(C, NH, T, fused_attention)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, L, NH, C, T, V, fused_attention=False):
        super().__init__()
        self.V = V
        self.Vp = (V + 127) // 128 * 128
        self.wte = nn.Embedding(self.Vp, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList([Block(C, NH, T, fused_attention) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.init_gpt2(L)

    def init_gpt2(self, L):
        """GPT-2's scheme, as GPT::init_weights (the RNG differs; tests load our weights)."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") else 0.02
                    p.normal_(0.0, std)
                elif name.endswith(".weight"):
                    p.fill_(1.0)
                else:
                    p.zero_()
            self.wte.weight[self.V:].zero_()

    def forward(self, tokens, targets=None):
        B, T = tokens.shape
        x = self.wte(tokens) + self.wpe(torch.arange(T, device=tokens.device))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # (B,T,Vp), tied to wte
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits[..., :self.V].reshape(-1, self.V), targets.reshape(-1))
        return logits, loss


def learning_rate(t, step):
    """worker/train/lr_schedule.hpp: linear warmup, then cosine decay to min_lr at t['steps']."""
    W, S = t["warmup_steps"], t["steps"]
    if step < W:
        return t["lr"] * (step + 1) / W
    p = min(1.0, (step - W) / max(1, S - W))
    return t["min_lr"] + (t["lr"] - t["min_lr"]) * 0.5 * (1.0 + math.cos(math.pi * p))


def make_optimizer(model, t, fused=False):
    """fused: PyTorch's one-kernel AdamW (PyTorch 2 on a GPU), the same arithmetic."""
    decay = [p for p in model.parameters() if p.dim() == 2]
    rest = [p for p in model.parameters() if p.dim() != 2]
    groups = [{"params": decay, "weight_decay": t["weight_decay"]}, {"params": rest, "weight_decay": 0.0}]
    extra = {"fused": True} if fused else {}
    return torch.optim.AdamW(groups, lr=t["lr"], betas=(t["beta1"], t["beta2"]), eps=t["eps"], **extra)


def train_step(model, opt, t, step, tokens, targets, autocast=None):
    """One optimizer step; returns (loss, grad norm before clipping). autocast: a dtype
    (torch.bfloat16) for the forward's products, the weights and the optimizer staying fp32."""
    for g in opt.param_groups:
        g["lr"] = learning_rate(t, step)
    opt.zero_grad(set_to_none=True)
    with torch.autocast(tokens.device.type, dtype=autocast or torch.bfloat16, enabled=autocast is not None):
        _, loss = model(tokens, targets)
    loss.backward()
    clip = t["grad_clip"]
    params = [p for p in model.parameters()]
    if clip > 0:
        norm = torch.nn.utils.clip_grad_norm_(params, clip)
    else:
        norm = torch.norm(torch.stack([p.grad.norm() for p in params]))
    opt.step()
    return loss.item(), norm.item()


def read_array(path, dtype, shape):
    data = torch.frombuffer(bytearray(open(path, "rb").read()), dtype=dtype)
    return data.view(*shape).clone()


def load_flat(directory, cfg):
    """The model of config.json ({"model", "layout"}) with DIR/params.bin (our flat layout) loaded."""
    m = cfg["model"]
    model = GPT(m["n_layer"], m["n_head"], m["n_embd"], m["seq_len"], m["vocab_size"])
    flat = read_array(os.path.join(directory, "params.bin"), torch.float32, (-1,))
    params = dict(model.named_parameters())
    if sorted(params) != sorted(x["name"] for x in cfg["layout"]):
        sys.exit("torch_reference: parameter names differ from the layout in config.json")
    with torch.no_grad():
        for x in cfg["layout"]:
            n = math.prod(x["shape"])
            params[x["name"]].copy_(flat[x["offset"]:x["offset"] + n].view(*x["shape"]))
    return model, flat


def check(directory):
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    m, t = cfg["model"], cfg["train"]
    L, NH, C, T, V = m["n_layer"], m["n_head"], m["n_embd"], m["seq_len"], m["vocab_size"]
    S, B = cfg["steps"], cfg["batch"]
    torch.set_num_threads(1)
    model, flat = load_flat(directory, cfg)
    params = dict(model.named_parameters())
    tokens = read_array(os.path.join(directory, "tokens.bin"), torch.int32, (S, B, T)).long()
    targets = read_array(os.path.join(directory, "targets.bin"), torch.int32, (S, B, T)).long()

    logits, loss = model(tokens[0], targets[0])
    loss.backward()
    grads = torch.zeros_like(flat)
    for x in cfg["layout"]:
        n = math.prod(x["shape"])
        grads[x["offset"]:x["offset"] + n] = params[x["name"]].grad.reshape(-1)
    open(os.path.join(directory, "logits.bin"), "wb").write(logits.detach().numpy().tobytes())
    open(os.path.join(directory, "grads.bin"), "wb").write(grads.numpy().tobytes())

    opt = make_optimizer(model, t)
    losses, norms = [], []
    for s in range(S):
        l, n = train_step(model, opt, t, s, tokens[s], targets[s])
        losses.append(l)
        norms.append(n)
    json.dump({"loss": loss.item(), "losses": losses, "norms": norms},
              open(os.path.join(directory, "result.json"), "w"))


def load_hf(directory):
    """The model of a Hugging Face GPT-2 export: DIR/config.json and DIR/model.safetensors (Conv1D
    weights (in, out), wte with V rows)."""
    from check_safetensors import read_safetensors  # our independent safetensors reader

    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    L, NH, C, T, V = cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["n_positions"], cfg["vocab_size"]
    tensors, _ = read_safetensors(os.path.join(directory, "model.safetensors"))
    model = GPT(L, NH, C, T, V)
    params = dict(model.named_parameters())
    if sorted(params) != sorted(tensors):
        sys.exit("torch_reference: model.safetensors has other tensors than GPT-2's")
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    with torch.no_grad():
        for name, value in tensors.items():
            t = torch.from_numpy(value.copy())
            if name.endswith(conv1d):
                t = t.t()  # Conv1D (in, out) -> Linear (out, in)
            if name == "wte.weight":
                params[name].zero_()
                params[name][:V].copy_(t)  # the padding rows stay zero
            else:
                params[name].copy_(t)
    return model, T


def hf_bf16(f32_dir, bf16_dir):
    def tensors(directory):
        with open(os.path.join(directory, "model.safetensors"), "rb") as f:
            blob = f.read()
        (n,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8:8 + n])
        header.pop("__metadata__", None)
        data = blob[8 + n:]
        return [(name, info["dtype"], info["shape"], data[info["data_offsets"][0]:info["data_offsets"][1]])
                for name, info in header.items()]

    f32, bf16 = tensors(f32_dir), tensors(bf16_dir)
    if [(n, s) for n, _, s, _ in f32] != [(n, s) for n, _, s, _ in bf16]:
        sys.exit("the two files hold other tensors")
    for (name, dtype, _, data), (_, dtype16, _, data16) in zip(f32, bf16):
        rounded = torch.frombuffer(bytearray(data), dtype=torch.float32).to(torch.bfloat16)
        if (dtype, dtype16) != ("F32", "BF16") or rounded.view(torch.int16).numpy().tobytes() != data16:
            sys.exit(f"{name}: {dtype16} is not PyTorch's rounding of the {dtype} tensor")
    print(len(f32))


def hf_logits(directory):
    torch.set_num_threads(1)
    model, T = load_hf(directory)
    with torch.no_grad():
        tokens = torch.frombuffer(bytearray(open(os.path.join(directory, "tokens.bin"), "rb").read()), dtype=torch.int32)
        logits, _ = model(tokens.view(-1, T).long())
    open(os.path.join(directory, "logits.bin"), "wb").write(logits.numpy().tobytes())


def hf_greedy(directory, prompt, new_tokens):
    """Greedy decoding with a full forward over the window for every token (no cache), and the
    window rule of xtrain-worker generate: a full window keeps its newest half before the next
    token. Prints the generated tokens as a JSON list."""
    torch.set_num_threads(1)
    model, T = load_hf(directory)
    window, out = list(prompt), []
    with torch.inference_mode():
        for _ in range(new_tokens):
            logits, _ = model(torch.tensor([window]))
            token = int(torch.argmax(logits[0, -1, :model.V]))
            out.append(token)
            if len(window) == T:
                window = window[T - T // 2:]
            window.append(token)
    print(json.dumps(out))


def linear(x, layer):
    """layer(x); for one position (1, 1, C) as addmv, PyTorch's fastest form of it here (sgemv:
    about 20 GB/s of weights on one core, against 6-9 for F.linear's and addmm's paths)."""
    if x.shape[1] == 1:
        return torch.addmv(layer.bias, layer.weight, x.view(-1)).view(1, 1, -1)
    return layer(x)


def hf_loss(directory, text_file, window, max_tokens):
    """xtrain-worker eval's scores of a byte-level text file: windows of `window` tokens (each
    predicted from the ones before it in its window), whole windows only, at most max_tokens
    targets (0: all). Prints {"tokens", "loss", "bits_per_byte"}."""
    torch.set_num_threads(1)
    model, _ = load_hf(directory)
    data = list(open(text_file, "rb").read())
    targets = len(data) - 1 if max_tokens == 0 else min(max_tokens, len(data) - 1)
    losses = []
    with torch.inference_mode():
        for w in range(targets // window):
            x = torch.tensor([data[w * window:(w + 1) * window]])
            y = torch.tensor([data[w * window + 1:(w + 1) * window + 1]])
            logits, _ = model(x)
            losses.append(F.cross_entropy(logits[0, :, :model.V].double(), y[0], reduction="sum").item())
    tokens = (targets // window) * window
    loss = sum(losses) / tokens
    print(json.dumps({"tokens": tokens, "loss": loss, "bits_per_byte": sum(losses) / math.log(2) / tokens}))


def hf_choice(directory, eval_file):
    """llm.c's multiple-choice accuracy, from the file's description (data_common.py's
    write_evalfile): for each example, the completion with the lowest mean loss over its own
    tokens. Prints {"examples", "correct", "accuracy", "predictions"}."""
    import struct
    torch.set_num_threads(1)
    model, _ = load_hf(directory)
    raw = open(eval_file, "rb").read()
    magic, version, count = struct.unpack("<3i", raw[:12])
    assert magic == 20240522 and version == 1
    words = struct.unpack(f"<{(len(raw) - 1024) // 2}H", raw[1024:])
    at, correct, predictions = 0, 0, []
    with torch.inference_mode():
        for _ in range(count):
            assert words[at] == 65535
            label, n = words[at + 3], words[at + 4]
            at += 5
            ctx = list(words[at + 1:at + 1 + words[at]])
            at += 1 + len(ctx)
            means = []
            for _ in range(n):
                end = list(words[at + 1:at + 1 + words[at]])
                at += 1 + len(end)
                row = torch.tensor([ctx + end])
                logits, _ = model(row[:, :-1])
                losses = F.cross_entropy(logits[0, :, :model.V], row[0, 1:], reduction="none")
                means.append(losses[len(ctx) - 1:].mean().item())
            best = min(range(n), key=lambda i: means[i])
            predictions.append(best)
            correct += int(best == label)
    print(json.dumps({"examples": count, "correct": correct, "accuracy": correct / count, "predictions": predictions}))


def decode_step(model, tokens, pos, keys, values):
    """GPT-2 with a KV cache: `tokens` (1, n) at positions [pos, pos + n), keys/values per layer
    (1, NH, T, hs) filled there; returns the last position's logits (Vp)."""
    n = tokens.shape[1]
    x = model.wte(tokens) + model.wpe(torch.arange(pos, pos + n))
    for l, block in enumerate(model.h):
        attn = block.attn
        C = x.shape[-1]
        hs = C // attn.NH
        q, k, v = linear(block.ln_1(x), attn.c_attn).split(C, dim=2)
        q, k, v = (t.view(1, n, attn.NH, hs).transpose(1, 2) for t in (q, k, v))
        keys[l][:, :, pos:pos + n] = k
        values[l][:, :, pos:pos + n] = v
        att = (q @ keys[l][:, :, :pos + n].transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        if n > 1:
            causal = torch.ones(n, pos + n, dtype=torch.bool).tril(diagonal=pos)
            att = att.masked_fill(~causal, float("-inf"))
        y = (att.softmax(dim=-1) @ values[l][:, :, :pos + n]).transpose(1, 2).reshape(1, n, C)
        x = x + linear(y, attn.c_proj)
        x = x + linear(F.gelu(linear(block.ln_2(x), block.mlp.c_fc), approximate="tanh"), block.mlp.c_proj)
    return torch.mv(model.wte.weight, model.ln_f(x[0, -1]))


def bench_generate(directory, runs, threads):
    """PyTorch eager at its best for one token at a time: `threads` intra-op threads,
    inference_mode, a preallocated KV cache; the prompt and weights of
    scripts/bench/generate_cpu_bench.cpp's --out DIR, greedy. Prints one JSON line with the median
    per-token time (wall and this thread's CPU time) and the tokens."""
    torch.set_num_threads(threads)
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    model, _ = load_flat(directory, cfg)
    model.eval()
    m = cfg["model"]
    L, NH, C, T, V = m["n_layer"], m["n_head"], m["n_embd"], m["seq_len"], m["vocab_size"]
    prompt, new_tokens = torch.tensor([cfg["prompt"]]), cfg["new_tokens"]
    per_token, cpu_per_token, prompt_ms = [], [], []
    with torch.inference_mode():
        for _ in range(runs):
            keys = [torch.zeros(1, NH, T, C // NH) for _ in range(L)]
            values = [torch.zeros(1, NH, T, C // NH) for _ in range(L)]
            start = time.perf_counter()
            logits = decode_step(model, prompt, 0, keys, values)
            prompt_ms.append(1000.0 * (time.perf_counter() - start))
            pos, tokens = prompt.shape[1], []
            start, cpu_start = time.perf_counter(), time.thread_time()
            for _ in range(new_tokens):
                token = int(torch.argmax(logits[:V]))
                tokens.append(token)
                logits = decode_step(model, torch.tensor([[token]]), pos, keys, values)
                pos += 1
            per_token.append(1000.0 * (time.perf_counter() - start) / new_tokens)
            cpu_per_token.append(1000.0 * (time.thread_time() - cpu_start) / new_tokens)
    print(json.dumps({"impl": "pytorch-eager-kv-cache", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "ms_per_token": statistics.median(per_token), "cpu_ms_per_token": statistics.median(cpu_per_token),
                      "cpu_ms_per_token_runs": cpu_per_token,
                      "prompt_ms": statistics.median(prompt_ms), "tokens": tokens}))


def bench(a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = GPT(a.layers, a.heads, a.embd, a.seq, a.vocab)
    t = {"lr": 3e-4, "min_lr": 3e-5, "warmup_steps": 10, "steps": a.warmup + a.steps, "weight_decay": 0.1,
         "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "grad_clip": 1.0}
    opt = make_optimizer(model, t)
    gen = torch.Generator().manual_seed(1)
    data = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=gen)
    tokens, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    for s in range(a.warmup):
        train_step(model, opt, t, s, tokens, targets)
    # Per step, wall and process CPU time (all threads; not inflated by waiting for a core); the
    # medians are robust to the odd step slowed by another process.
    ms, cpu_ms = [], []
    with torch.autograd.profiler.profile(enabled=a.profile) as prof:
        for s in range(a.steps):
            start, cpu_start = time.perf_counter(), time.process_time()
            loss, _ = train_step(model, opt, t, a.warmup + s, tokens, targets)
            cpu_ms.append(1000.0 * (time.process_time() - cpu_start))
            ms.append(1000.0 * (time.perf_counter() - start))
    if a.profile:
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30), file=sys.stderr)
    median = statistics.median(ms)
    print(json.dumps({"impl": "pytorch-eager", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "steps": a.steps, "ms_per_step": median,
                      "cpu_ms_per_step": statistics.median(cpu_ms), "tokens_per_s": a.batch * a.seq * 1000.0 / median,
                      "loss": loss}))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("check")
    c.add_argument("dir")
    h = sub.add_parser("hf-logits")
    h.add_argument("dir")
    hb = sub.add_parser("hf-bf16")
    hb.add_argument("f32_dir")
    hb.add_argument("bf16_dir")
    g = sub.add_parser("hf-greedy")
    g.add_argument("dir")
    g.add_argument("--prompt", required=True, help="token ids, comma-separated")
    g.add_argument("--new", type=int, required=True)
    hl = sub.add_parser("hf-loss")
    hl.add_argument("dir")
    hl.add_argument("text")
    hl.add_argument("--window", type=int, required=True)
    hl.add_argument("--max-tokens", type=int, default=0)
    hc = sub.add_parser("hf-choice")
    hc.add_argument("dir")
    hc.add_argument("file")
    bg = sub.add_parser("bench-generate")
    bg.add_argument("dir")
    bg.add_argument("--runs", type=int, default=3)
    bg.add_argument("--threads", type=int, default=1)
    b = sub.add_parser("bench")
    for name, default in [("layers", 4), ("heads", 4), ("embd", 128), ("seq", 64), ("vocab", 256), ("batch", 4),
                          ("steps", 10), ("warmup", 2), ("threads", 2)]:
        b.add_argument("--" + name, type=int, default=default)
    b.add_argument("--profile", action="store_true", help="the autograd profiler's table of the timed steps, on stderr")
    a = parser.parse_args()
    if a.mode == "check":
        check(a.dir)
    elif a.mode == "hf-logits":
        hf_logits(a.dir)
    elif a.mode == "hf-bf16":
        hf_bf16(a.f32_dir, a.bf16_dir)
    elif a.mode == "hf-greedy":
        hf_greedy(a.dir, [int(x) for x in a.prompt.split(",")], a.new)
    elif a.mode == "hf-loss":
        hf_loss(a.dir, a.text, a.window, a.max_tokens)
    elif a.mode == "hf-choice":
        hf_choice(a.dir, a.file)
    elif a.mode == "bench-generate":
        bench_generate(a.dir, a.runs, a.threads)
    else:
        bench(a)


if __name__ == "__main__":
    main()
