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
"""
import json
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


def peft_fixture(d):
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
        "target_modules": ["q_proj", "v_proj"],
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


def main():
    out = ["# LoRA linear layers in plain PyTorch: scripts/make_lora_fixtures.py\n"]
    lora_linear_cases(out)
    with open(os.path.join(HERE, "lora.txt"), "w") as f:
        f.write("".join(out))
    peft_fixture(os.path.join(HERE, "peft"))


if __name__ == "__main__":
    main()
