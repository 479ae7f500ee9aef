#!/usr/bin/python3
"""make_lora_fixtures.py — reference values for kiln's LoRA adapters (models/lora.h).

Regenerate (only when a case changes):

    scripts/deps.sh fixtures               # Debian's python3-torch and python3-numpy
    /usr/bin/python3 scripts/make_lora_fixtures.py

Writes, committed, read by tests/test_lora.c (which never needs Python):

  - tests/fixtures/lora.txt: a LoRA linear layer in plain PyTorch (no peft),
    y = x W^T + (alpha / r) (x A^T) B^T, in float64, with an upstream gradient
    gy and gx, ga, gb = d sum(y * gy) / d x, A, B (tests/fixture.h's format).
    Inputs are multiples of 1/64, exact in f32.
  - tests/fixtures/peft/: an adapter directory written by hand from PEFT's
    documented layout, as PeftModel.save_pretrained writes it for a
    LlamaForCausalLM with LoraConfig(r=2, lora_alpha=16, lora_dropout=0.05,
    target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"):
    adapter_config.json is json.dumps(config, indent=2, sort_keys=True) (as
    PEFT's PeftConfig.save_pretrained), adapter_model.safetensors holds
    base_model.model.model.layers.{i}.self_attn.{q,v}_proj.lora_{A,B}.weight
    (F32, lora_A [r, in], lora_B [out, r]) with metadata {"format": "pt"}, in
    the safetensors layout (u64 header size, JSON header, data), written
    with struct so that no safetensors or peft package is needed. Each value
    is (tensor index + 1) / 8 + element index / 64, so a test can rebuild it.
    tests/fixtures/peft_regex/: the same with target_modules=r".*\.(q|v)_proj",
    PEFT's other form (one string, re.fullmatch on each module's name).
  - tests/fixtures/lora_llama.safetensors: a whole tiny llama (models/llama.h:
    Meta's interleaved rope, grouped-query attention, SwiGLU, RMSNorm) with
    adapters on all seven linears of both layers, in plain PyTorch float64:
    its weights and adapters (F32, kiln's parameter names, multiples of
    1/64), tokens and labels (I32 [2, 8]), and in F64 the logits and the
    gradient of the mean cross-entropy for every lora_A and lora_B
    ("grad.<name>").
"""
import json
import math
import os
import struct

import torch

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")


def fmt(v):
    return "%.17g" % v


def grid(gen, *shape):
    return torch.randint(-64, 65, shape, generator=gen, dtype=torch.int64).double() / 64


def lora_linear_cases(out):
    gen = torch.Generator().manual_seed(26)
    for name, bshape, din, dout, r, alpha in (("lora_linear", (2, 3), 5, 4, 2, 16.0),
                                               ("lora_linear_r1", (7,), 8, 3, 1, 3.0)):
        x = grid(gen, *bshape, din).requires_grad_()
        w = grid(gen, dout, din)
        a = grid(gen, r, din).requires_grad_()
        b = grid(gen, dout, r).requires_grad_()
        y = x @ w.T + (alpha / r) * ((x @ a.T) @ b.T)
        gy = grid(gen, *y.shape)
        (y * gy).sum().backward()
        # two cases each: a case holds at most 8 tensors (tests/fixture.h)
        for suffix, ts in (("", (("x", x), ("w", w), ("a", a), ("b", b), ("y", y), ("gy", gy))),
                           ("_grads", (("gx", x.grad), ("ga", a.grad), ("gb", b.grad)))):
            out.append("case %s%s\nparam r %d\nparam alpha %s\n" % (name, suffix, r, fmt(alpha)))
            for tn, t in ts:
                t = t.detach()
                out.append("tensor %s %d %s\n%s\n" % (tn, t.dim(), " ".join(str(s) for s in t.shape),
                                                     " ".join(fmt(v) for v in t.flatten().tolist())))
            out.append("end\n")


# the tiny llama of test_lora.c: 2 layers, dim 16, 4 heads, kv_heads 2 (k/v 8 rows)
LAYERS, DIM, KV, R = 2, 16, 8, 2


def peft_fixture(d, targets=("q_proj", "v_proj")):
    os.makedirs(d, exist_ok=True)
    config = {
        "base_model_name_or_path": "tiny-llama",
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "lora_alpha": 16,
        "lora_dropout": 0.05,
        "modules_to_save": None,
        "peft_type": "LORA",
        "r": R,
        "target_modules": targets if isinstance(targets, str) else list(targets),
        "task_type": "CAUSAL_LM",
    }
    with open(os.path.join(d, "adapter_config.json"), "w") as f:
        f.write(json.dumps(config, indent=2, sort_keys=True))
    tensors = []
    for i in range(LAYERS):
        for proj, rows in (("q_proj", DIM), ("v_proj", KV)):
            base = "base_model.model.model.layers.%d.self_attn.%s" % (i, proj)
            tensors.append((base + ".lora_A.weight", (R, DIM)))
            tensors.append((base + ".lora_B.weight", (rows, R)))
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for k, (name, shape) in enumerate(tensors):
        n = shape[0] * shape[1]
        vals = [(k + 1) / 8 + e / 64 for e in range(n)]
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [len(data), len(data) + 4 * n]}
        data += struct.pack("<%df" % n, *vals)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(d, "adapter_model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


# the tiny llama of test_lora_llama.c
LL = dict(vocab=32, dim=16, layers=2, heads=4, kv_heads=2, hidden=32, eps=1e-5, theta=10000.0, r=2, alpha=4.0,
          batch=2, seq=8)
LINEARS = ("attention.wq", "attention.wk", "attention.wv", "attention.wo", "feed_forward.w1", "feed_forward.w2",
           "feed_forward.w3")


def llama_weights(gen):
    c = LL
    D, hd, V, F = c["dim"], c["dim"] // c["heads"], c["vocab"], c["hidden"]
    KV = c["kv_heads"] * hd
    t = {"tok_embeddings.weight": grid(gen, V, D), "norm.weight": 1 + grid(gen, D) / 4,
         "output.weight": grid(gen, V, D)}
    shapes = {"attention.wq": (D, D), "attention.wk": (KV, D), "attention.wv": (KV, D), "attention.wo": (D, D),
              "feed_forward.w1": (F, D), "feed_forward.w2": (D, F), "feed_forward.w3": (F, D)}
    for l in range(c["layers"]):
        p = "layers.%d." % l
        t[p + "attention_norm.weight"] = 1 + grid(gen, D) / 4
        t[p + "ffn_norm.weight"] = 1 + grid(gen, D) / 4
        for name in LINEARS:
            out, inp = shapes[name]
            t[p + name + ".weight"] = grid(gen, out, inp) / 2
            # B nonzero, unlike PEFT's init, so that every gradient is
            t[p + name + ".lora_A"] = grid(gen, c["r"], inp).requires_grad_()
            t[p + name + ".lora_B"] = (grid(gen, out, c["r"]) / 4).requires_grad_()
    return t


def rope(x, theta):  # x [B, T, heads, hd], Meta's pairs (x[2i], x[2i+1])
    T, hd = x.shape[1], x.shape[3]
    freq = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * freq[None, :]  # [T, hd/2]
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def llama_lora_forward(t, tokens):
    c = LL
    B, T, H, G = tokens.shape[0], tokens.shape[1], c["heads"], c["kv_heads"]
    hd, s = c["dim"] // H, c["alpha"] / c["r"]

    def rms(x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + c["eps"]) * w

    def lin(p, x):
        return x @ t[p + ".weight"].T + s * (x @ t[p + ".lora_A"].T) @ t[p + ".lora_B"].T

    h = t["tok_embeddings.weight"][tokens]
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    for l in range(c["layers"]):
        p = "layers.%d." % l
        x = rms(h, t[p + "attention_norm.weight"])
        q = rope(lin(p + "attention.wq", x).view(B, T, H, hd), c["theta"]).transpose(1, 2)
        k = rope(lin(p + "attention.wk", x).view(B, T, G, hd), c["theta"]).transpose(1, 2)
        v = lin(p + "attention.wv", x).view(B, T, G, hd).transpose(1, 2)
        k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)
        sc = (q @ k.transpose(-2, -1) / math.sqrt(hd)).masked_fill(mask, float("-inf"))
        o = (sc.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * hd)
        h = h + lin(p + "attention.wo", o)
        x = rms(h, t[p + "ffn_norm.weight"])
        gate = torch.nn.functional.silu(lin(p + "feed_forward.w1", x)) * lin(p + "feed_forward.w3", x)
        h = h + lin(p + "feed_forward.w2", gate)
    return rms(h, t["norm.weight"]) @ t["output.weight"].T


def safetensors_bytes(tensors):
    """(name, torch tensor) pairs as a safetensors file, written with struct"""
    kinds = {torch.float32: ("F32", "f"), torch.float64: ("F64", "d"), torch.int32: ("I32", "i")}
    header, data = {}, b""
    for name, v in tensors:
        dt, code = kinds[v.dtype]
        flat = v.detach().flatten().tolist()
        b = struct.pack("<%d%s" % (len(flat), code), *flat)
        header[name] = {"dtype": dt, "shape": list(v.shape), "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def llama_fixture(path):
    gen = torch.Generator().manual_seed(2026)
    t = llama_weights(gen)
    c = LL
    tokens = torch.randint(0, c["vocab"], (c["batch"], c["seq"]), generator=gen)
    labels = torch.randint(0, c["vocab"], (c["batch"], c["seq"]), generator=gen)
    logits = llama_lora_forward(t, tokens)
    torch.nn.functional.cross_entropy(logits.view(-1, c["vocab"]), labels.view(-1)).backward()
    out = [(n, v.float()) for n, v in t.items()]
    out += [("tokens", tokens.int()), ("labels", labels.int()), ("logits", logits.detach())]
    out += [("grad." + n, v.grad) for n, v in t.items() if v.grad is not None]
    with open(path, "wb") as f:
        f.write(safetensors_bytes(out))


def main():
    out = ["# LoRA linear layers in plain PyTorch: scripts/make_lora_fixtures.py\n"]
    lora_linear_cases(out)
    with open(os.path.join(HERE, "lora.txt"), "w") as f:
        f.write("".join(out))
    peft_fixture(os.path.join(HERE, "peft"))
    peft_fixture(os.path.join(HERE, "peft_regex"), r".*\.(q|v)_proj")
    llama_fixture(os.path.join(HERE, "lora_llama.safetensors"))


if __name__ == "__main__":
    main()
