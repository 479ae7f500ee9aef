#!/usr/bin/python3
"""make_gptq_fixtures.py — tiny Hugging Face GPTQ checkpoints for
tests/test_hf_gptq.c, in the layout AutoGPTQ and GPTQModel write.

Regenerate (only when a variant is added or changed; plain Python 3, no
numpy or torch):

    python3 scripts/make_gptq_fixtures.py

Each variant is a directory tests/fixtures/gptq/<name>/ holding a one-layer
llama (hidden 64, 4 heads, 2 kv heads, intermediate 64, vocab 48):
config.json, quantize_config.json (or config.json's quantization_config)
and model.safetensors with, for each of the layer's seven linears,
<linear>.qweight (int32 [in * bits / 32, out]: the codes of each output
column packed along the input dim, 32 / bits per word, the first in the
low bits; 3 bits run on across words), <linear>.qzeros (int32
[groups, out * bits / 32], packed along the output dim the same way;
checkpoint_format "gptq" stores zero - 1, "gptq_v2" the zero itself),
<linear>.scales (f16 [groups, out]) and <linear>.g_idx (int32 [in], the
group of each input column; with act order the groups are shuffled sets
of columns). Embedding, norms and head are f16.

The codes are round-to-nearest with GPTQ's reference Quantizer, computed
in f32 exactly as kiln_rtn_quantize does (kiln__gptq_fit), so the test can
check them against kiln's own: ref/model.safetensors beside each variant
holds, per linear, orig.<linear> (the f16-exact weights before
quantization), perm.<linear> (int32: the columns in quantization order)
and <linear>.weight, the dequantized weights f16(scale) * (q - zero) in f32
(exact), as a plain float checkpoint that llama_from_hf reads
(ref/config.json).
"""
import json
import os
import random
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "gptq")

DIM, HIDDEN, HEADS, KV_HEADS, VOCAB = 64, 64, 4, 2, 48
HD = DIM // HEADS

VARIANTS = [
    # name, bits, group_size, sym, desc_act, format, config in config.json
    ("v1_4bit_g32_sym", 4, 32, True, False, "gptq", False),
    ("v2_4bit_g32_asym_act", 4, 32, False, True, "gptq_v2", False),
    ("v1_8bit_g32_sym_act", 8, 32, True, True, "gptq", True),
    ("v2_3bit_channel_asym", 3, -1, False, False, "gptq_v2", False),
]

LINEARS = [  # name, rows (out), cols (in)
    ("self_attn.q_proj", DIM, DIM),
    ("self_attn.k_proj", KV_HEADS * HD, DIM),
    ("self_attn.v_proj", KV_HEADS * HD, DIM),
    ("self_attn.o_proj", DIM, DIM),
    ("mlp.gate_proj", HIDDEN, DIM),
    ("mlp.up_proj", HIDDEN, DIM),
    ("mlp.down_proj", DIM, HIDDEN),
]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f16(x):
    return struct.unpack("<e", struct.pack("<e", x))[0]


def fit(xs, bits, sym):
    """Scale and zero of one group: kiln__gptq_fit (GPTQ's Quantizer), f32."""
    maxq = (1 << bits) - 1
    xmin, xmax = min(min(xs), 0.0), max(max(xs), 0.0)
    if sym:
        xmax = max(abs(xmin), xmax)
        if xmin < 0:
            xmin = -xmax
    if xmin == 0 and xmax == 0:
        xmin, xmax = -1.0, 1.0
    scale = f32(f32(xmax - xmin) / maxq)
    zero = (maxq + 1) // 2 if sym else int(round(f32(-xmin / scale)))
    return scale, zero


def code(x, scale, zero, bits):
    q = round(f32(x / scale)) + zero  # round(): ties to even, as nearbyintf
    return min(max(q, 0), (1 << bits) - 1)


def pack_stream(values, bits, n_words):
    """values packed as one little-endian bit stream of n_words u32 words."""
    acc = 0
    for i, v in enumerate(values):
        acc |= v << (bits * i)
    return [(acc >> (32 * w)) & 0xFFFFFFFF for w in range(n_words)]


def quantize(rng, rows, cols, bits, gs, sym, perm, v1):
    w = [[f16(rng.gauss(0.0, 0.05)) for _ in range(cols)] for _ in range(rows)]
    g = cols if gs < 0 else gs
    n_groups = (cols + g - 1) // g
    g_idx = [0] * cols
    for k, c in enumerate(perm):
        g_idx[c] = k // g
    members = [[c for c in perm if g_idx[c] == j] for j in range(n_groups)]
    q = [[0] * cols for _ in range(rows)]
    scales = [[0.0] * rows for _ in range(n_groups)]
    zeros = [[0] * rows for _ in range(n_groups)]
    deq = [[0.0] * cols for _ in range(rows)]
    for r in range(rows):
        for j, cs in enumerate(members):
            s, z = fit([w[r][c] for c in cs], bits, sym)
            assert not v1 or z >= 1, "a v1 file cannot store zero 0"
            scales[j][r], zeros[j][r] = f16(s), z
            for c in cs:
                q[r][c] = code(w[r][c], s, z, bits)
                deq[r][c] = f16(s) * (q[r][c] - z)  # exact in f32
    qweight_cols = [pack_stream(q[r], bits, cols * bits // 32) for r in range(rows)]
    qweight = [[qweight_cols[r][i] for r in range(rows)] for i in range(cols * bits // 32)]
    qzeros = [pack_stream([z - 1 if v1 else z for z in zeros[j]], bits, rows * bits // 32) for j in range(n_groups)]
    return w, perm, g_idx, qweight, qzeros, scales, deq


def tensor(dtype, shape, flat):
    fmt = {"F16": "e", "F32": "f", "I32": "i", "U32": "I"}[dtype]
    return {"dtype": "I32" if dtype == "U32" else dtype, "shape": shape,
            "data": struct.pack("<%d%s" % (len(flat), fmt), *flat)}


def flat(m):
    return [v for row in m for v in row]


def save_safetensors(path, tensors):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        header[name] = {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [off, off + len(t["data"])]}
        blobs.append(t["data"])
        off += len(t["data"])
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def config(qcfg=None):
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": DIM,
         "intermediate_size": HIDDEN, "num_hidden_layers": 1, "num_attention_heads": HEADS,
         "num_key_value_heads": KV_HEADS, "vocab_size": VOCAB, "max_position_embeddings": 64,
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
         "torch_dtype": "float16"}
    if qcfg:
        c["quantization_config"] = qcfg
    return c


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def make(seed, name, bits, gs, sym, act, fmt, in_config):
    rng = random.Random(seed)
    d = os.path.join(OUT, name)
    os.makedirs(os.path.join(d, "ref"), exist_ok=True)
    qcfg = {"bits": bits, "group_size": gs, "desc_act": act, "sym": sym, "static_groups": False,
            "true_sequential": True, "damp_percent": 0.01, "quant_method": "gptq", "checkpoint_format": fmt}
    plain = {
        "model.embed_tokens.weight": [[f16(rng.gauss(0.0, 0.5)) for _ in range(DIM)] for _ in range(VOCAB)],
        "model.layers.0.input_layernorm.weight": [[f16(1.0 + rng.gauss(0.0, 0.1)) for _ in range(DIM)]],
        "model.layers.0.post_attention_layernorm.weight": [[f16(1.0 + rng.gauss(0.0, 0.1)) for _ in range(DIM)]],
        "model.norm.weight": [[f16(1.0 + rng.gauss(0.0, 0.1)) for _ in range(DIM)]],
        "lm_head.weight": [[f16(rng.gauss(0.0, 0.1)) for _ in range(DIM)] for _ in range(VOCAB)],
    }
    model, ref = {}, {}
    for k, v in plain.items():
        shape = [len(v[0])] if len(v) == 1 else [len(v), len(v[0])]
        model[k] = ref[k] = tensor("F16", shape, flat(v))
    perms = {}
    for lin, rows, cols in LINEARS:
        base = "model.layers.0." + lin
        # act order: q, k and v read one input, so one Hessian gives them one order; the others differ
        key = "qkv" if lin in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj") else lin
        if key not in perms:
            perms[key] = list(range(cols))
            if act:
                rng.shuffle(perms[key])
        perm = perms[key]
        w, perm, g_idx, qweight, qzeros, scales, deq = quantize(rng, rows, cols, bits, gs, sym, perm, fmt == "gptq")
        model[base + ".qweight"] = tensor("U32", [len(qweight), rows], flat(qweight))
        model[base + ".qzeros"] = tensor("U32", [len(qzeros), len(qzeros[0])], flat(qzeros))
        model[base + ".scales"] = tensor("F16", [len(scales), rows], flat(scales))
        model[base + ".g_idx"] = tensor("I32", [cols], g_idx)
        ref[base + ".weight"] = tensor("F32", [rows, cols], flat(deq))
        ref["orig." + base] = tensor("F16", [rows, cols], flat(w))
        ref["perm." + base] = tensor("I32", [cols], perm)
    save_safetensors(os.path.join(d, "model.safetensors"), model)
    save_safetensors(os.path.join(d, "ref", "model.safetensors"), ref)
    write_json(os.path.join(d, "config.json"), config(qcfg if in_config else None))
    if not in_config:
        write_json(os.path.join(d, "quantize_config.json"), qcfg)
    write_json(os.path.join(d, "ref", "config.json"), config())


if __name__ == "__main__":
    for i, v in enumerate(VARIANTS):
        make(1000 + i, *v)
