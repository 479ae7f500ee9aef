#!/usr/bin/env python3
"""Tiny models of the architectures the gguf-ref set lacks, and their logits
computed independently here in float64 plain Python (no numpy), for
tests/test_llama_arch.c:

  gemma2-tiny   Gemma 2: embedding * sqrt(dim), GELU(tanh) gated MLP, post-attention
                and post-MLP norms, attention soft-cap 3 and final soft-cap 5 (small,
                so that they bend these logits), layers 0 and 2 of 3 attend over a
                sliding window of 4, head_dim 16 != dim / heads, NEOX rope, tied
                output. The norms' weights are stored whole in GGUF, as llama.cpp's
                converter writes them (Hugging Face stores them less 1).
  llama-rope-tiny  Llama 3.1: rope_freqs.weight from a "llama3" rope_scaling
                (factor 8, low 1, high 4, original context 8, so that the factors
                matter at 12 positions), tied output (no output.weight).

Each model is written twice: a GGUF file (F32 tensors, llama.cpp's names and keys)
and a Hugging Face directory (config.json, model.safetensors in HF's names: Llama's
q/k rows permuted for the rotate-half rope, Gemma's norms less 1, rope_scaling in
config.json instead of rope_freqs). Both must give the same logits. The logits of
TOKENS at every position go to NAME.logits.bin, raw little-endian float32 [12][vocab].

The formulas follow llama.cpp's graphs (build_gemma2, build_llama, ggml_rope_ext with
frequency factors): a sliding layer's query at position p sees keys at j with
p - j < window; Gemma 2's queries are scaled by 1/sqrt(head_dim).

usage: scripts/make_arch_fixtures.py [OUTDIR]   (default tests/fixtures/arch)
"""
import json
import math
import os
import struct
import sys

TOKENS = [1, 7, 30, 2, 45, 11, 11, 19, 40, 3, 28, 5]


class Rng:
    """splitmix64 and Box-Muller: the same weights on every Python."""

    def __init__(self, seed):
        self.s = seed & (2**64 - 1)

    def u64(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & (2**64 - 1)
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
        return z ^ (z >> 31)

    def uniform(self):
        return ((self.u64() >> 11) + 0.5) / 2.0**53

    def normal(self, sd):
        u, v = self.uniform(), self.uniform()
        return sd * math.sqrt(-2 * math.log(u)) * math.cos(2 * math.pi * v)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


# ---- the models -------------------------------------------------------------

def draw(c, seed, sd, extra=None):
    """the tensors of config c: matrices N(0, sd^2), norms 1 + N(0, 0.1^2), drawn in this order"""
    r = Rng(seed)
    W = lambda rows, cols: [[f32(r.normal(sd)) for _ in range(cols)] for _ in range(rows)]
    N = lambda n: [f32(1 + r.normal(0.1)) for _ in range(n)]
    q, kv, D, F = c["heads"] * c["head_dim"], c["kv_heads"] * c["head_dim"], c["dim"], c["hidden"]
    gemma = c["arch"] == "gemma2"
    t = {"token_embd.weight": W(c["vocab"], D)}
    t.update(extra or {})
    for l in range(c["layers"]):
        p = "blk.%d." % l
        t[p + "attn_norm.weight"] = N(D)
        t[p + "attn_q.weight"] = W(q, D)
        t[p + "attn_k.weight"] = W(kv, D)
        t[p + "attn_v.weight"] = W(kv, D)
        t[p + "attn_output.weight"] = W(D, q)
        if gemma:
            t[p + "post_attention_norm.weight"] = N(D)
        t[p + "ffn_norm.weight"] = N(D)
        t[p + "ffn_gate.weight"] = W(F, D)
        t[p + "ffn_up.weight"] = W(F, D)
        t[p + "ffn_down.weight"] = W(D, F)
        if gemma:
            t[p + "post_ffw_norm.weight"] = N(D)
    t["output_norm.weight"] = N(D)
    return t


def gemma2_model():
    c = dict(arch="gemma2", vocab=48, dim=32, heads=4, kv_heads=2, head_dim=16, hidden=48, layers=3,
             context=32, eps=1e-6, theta=10000.0, attn_cap=3.0, final_cap=5.0, window=4, neox=True)
    return c, draw(c, 2024, 0.3)


LLAMA3 = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8)


def llama3_factors(theta, hd, s):
    """convert_hf_to_gguf's rope_freqs for rope_type llama3 (its frequencies in float32)"""
    lo, hi = s["original_max_position_embeddings"] / s["low_freq_factor"], \
        s["original_max_position_embeddings"] / s["high_freq_factor"]
    out = []
    for i in range(hd // 2):
        wave = 2 * math.pi / f32(1.0 / theta ** (2 * i / hd))
        if wave < hi:
            out.append(1.0)
        elif wave > lo:
            out.append(s["factor"])
        else:
            sm = (s["original_max_position_embeddings"] / wave - s["low_freq_factor"]) / \
                (s["high_freq_factor"] - s["low_freq_factor"])
            out.append(1 / ((1 - sm) / s["factor"] + sm))
    return [f32(x) for x in out]


def llama_rope_model():
    c = dict(arch="llama", vocab=48, dim=32, heads=4, kv_heads=2, head_dim=8, hidden=64, layers=2,
             context=32, eps=1e-5, theta=10000.0, attn_cap=0.0, final_cap=0.0, window=0, neox=False)
    return c, draw(c, 31, 0.2, {"rope_freqs.weight": llama3_factors(c["theta"], c["head_dim"], LLAMA3)})


# ---- the forward pass, float64 --------------------------------------------

def mv(W, x):
    return [sum(w * v for w, v in zip(row, x)) for row in W]


def rms(x, w, eps):
    s = 1 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    return [v * s * g for v, g in zip(x, w)]


def rope(x, pos, theta, ff, neox):
    d = len(x)
    y = list(x)
    for i in range(d // 2):
        a = pos * theta ** (-2 * i / d) / (ff[i] if ff else 1.0)
        c, s = math.cos(a), math.sin(a)
        j, k = (i, i + d // 2) if neox else (2 * i, 2 * i + 1)
        y[j], y[k] = x[j] * c - x[k] * s, x[j] * s + x[k] * c
    return y


def gelu_tanh(x):
    return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    return x / (1 + math.exp(-x))


def forward(c, t):
    D, H, G, hd, T = c["dim"], c["heads"], c["kv_heads"], c["head_dim"], len(TOKENS)
    gemma = c["arch"] == "gemma2"
    ff = t.get("rope_freqs.weight")
    xs = [list(t["token_embd.weight"][tok]) for tok in TOKENS]
    if gemma:
        xs = [[v * math.sqrt(D) for v in x] for x in xs]
    for l in range(c["layers"]):
        p = "blk.%d." % l
        window = c["window"] if gemma and l % 2 == 0 else 0
        hs = [rms(x, t[p + "attn_norm.weight"], c["eps"]) for x in xs]
        qs = [mv(t[p + "attn_q.weight"], h) for h in hs]
        ks = [mv(t[p + "attn_k.weight"], h) for h in hs]
        vs = [mv(t[p + "attn_v.weight"], h) for h in hs]
        qs = [sum((rope(q[h * hd:(h + 1) * hd], i, c["theta"], ff, c["neox"]) for h in range(H)), [])
              for i, q in enumerate(qs)]
        ks = [sum((rope(k[g * hd:(g + 1) * hd], i, c["theta"], ff, c["neox"]) for g in range(G)), [])
              for i, k in enumerate(ks)]
        outs = []
        for i in range(T):
            o = []
            for h in range(H):
                g = h // (H // G)
                q = qs[i][h * hd:(h + 1) * hd]
                sc = {}
                for j in range(i + 1):
                    if window and i - j >= window:
                        continue
                    s = sum(a * b for a, b in zip(q, ks[j][g * hd:(g + 1) * hd])) / math.sqrt(hd)
                    if c["attn_cap"]:
                        s = c["attn_cap"] * math.tanh(s / c["attn_cap"])
                    sc[j] = s
                m = max(sc.values())
                e = {j: math.exp(s - m) for j, s in sc.items()}
                z = sum(e.values())
                o += [sum(e[j] / z * vs[j][g * hd + d] for j in e) for d in range(hd)]
            outs.append(o)
        a = [mv(t[p + "attn_output.weight"], o) for o in outs]
        if gemma:
            a = [rms(v, t[p + "post_attention_norm.weight"], c["eps"]) for v in a]
        xs = [[u + v for u, v in zip(x, y)] for x, y in zip(xs, a)]
        hs = [rms(x, t[p + "ffn_norm.weight"], c["eps"]) for x in xs]
        act = gelu_tanh if gemma else silu
        f = [mv(t[p + "ffn_down.weight"], [act(u) * v for u, v in zip(mv(t[p + "ffn_gate.weight"], h),
                                                                       mv(t[p + "ffn_up.weight"], h))]) for h in hs]
        if gemma:
            f = [rms(v, t[p + "post_ffw_norm.weight"], c["eps"]) for v in f]
        xs = [[u + v for u, v in zip(x, y)] for x, y in zip(xs, f)]
    head = t.get("output.weight", t["token_embd.weight"])
    logits = [mv(head, rms(x, t["output_norm.weight"], c["eps"])) for x in xs]
    if c["final_cap"]:
        logits = [[c["final_cap"] * math.tanh(v / c["final_cap"]) for v in z] for z in logits]
    return logits


# ---- the files --------------------------------------------------------------

def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, c, t):
    a = c["arch"]
    kv = [("general.architecture", 8, a), ("general.name", 8, "kiln tiny %s" % a),
          (a + ".context_length", 4, c["context"]), (a + ".embedding_length", 4, c["dim"]),
          (a + ".feed_forward_length", 4, c["hidden"]), (a + ".block_count", 4, c["layers"]),
          (a + ".attention.head_count", 4, c["heads"]), (a + ".attention.head_count_kv", 4, c["kv_heads"]),
          (a + ".attention.layer_norm_rms_epsilon", 6, c["eps"]), (a + ".rope.freq_base", 6, c["theta"]),
          (a + ".attention.key_length", 4, c["head_dim"]), (a + ".attention.value_length", 4, c["head_dim"]),
          (a + ".rope.dimension_count", 4, c["head_dim"])]
    if a == "gemma2":
        kv += [(a + ".attn_logit_softcapping", 6, c["attn_cap"]), (a + ".final_logit_softcapping", 6, c["final_cap"]),
               (a + ".attention.sliding_window", 4, c["window"])]
    out = b"GGUF" + struct.pack("<IQQ", 3, len(t), len(kv))
    for key, typ, v in kv:
        out += gguf_str(key) + struct.pack("<I", typ)
        out += gguf_str(v) if typ == 8 else struct.pack("<I" if typ == 4 else "<f", v)
    data, off = b"", 0
    for name, v in t.items():
        ne = [len(v)] if not isinstance(v[0], list) else [len(v[0]), len(v)]
        flat = v if len(ne) == 1 else [x for row in v for x in row]
        out += gguf_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", 0, off)
        blob = struct.pack("<%df" % len(flat), *flat)
        blob += b"\0" * (-len(blob) % 32)
        data += blob
        off += len(blob)
    out += b"\0" * (-len(out) % 32)
    with open(path, "wb") as f:
        f.write(out + data)


def hf_tensors(c, t):
    """GGUF's tensors in Hugging Face's names and layouts"""
    hd, gemma = c["head_dim"], c["arch"] == "gemma2"
    minus = (lambda w: [f32(x - 1) for x in w]) if gemma else (lambda w: w)

    def unpermute(W, heads):  # Meta's (interleaved) rows -> HF's rotate-half rows
        out = [None] * len(W)
        for h in range(heads):
            for p in range(2):
                for i in range(hd // 2):
                    out[h * hd + p * hd // 2 + i] = W[h * hd + 2 * i + p]
        return out

    qk = (lambda W, n: W) if c["neox"] else unpermute
    h = {"model.embed_tokens.weight": t["token_embd.weight"], "model.norm.weight": minus(t["output_norm.weight"])}
    for l in range(c["layers"]):
        p, q = "blk.%d." % l, "model.layers.%d." % l
        h[q + "input_layernorm.weight"] = minus(t[p + "attn_norm.weight"])
        h[q + "self_attn.q_proj.weight"] = qk(t[p + "attn_q.weight"], c["heads"])
        h[q + "self_attn.k_proj.weight"] = qk(t[p + "attn_k.weight"], c["kv_heads"])
        h[q + "self_attn.v_proj.weight"] = t[p + "attn_v.weight"]
        h[q + "self_attn.o_proj.weight"] = t[p + "attn_output.weight"]
        h[q + "mlp.gate_proj.weight"] = t[p + "ffn_gate.weight"]
        h[q + "mlp.up_proj.weight"] = t[p + "ffn_up.weight"]
        h[q + "mlp.down_proj.weight"] = t[p + "ffn_down.weight"]
        if gemma:
            h[q + "post_attention_layernorm.weight"] = minus(t[p + "post_attention_norm.weight"])
            h[q + "pre_feedforward_layernorm.weight"] = minus(t[p + "ffn_norm.weight"])
            h[q + "post_feedforward_layernorm.weight"] = minus(t[p + "post_ffw_norm.weight"])
        else:
            h[q + "post_attention_layernorm.weight"] = t[p + "ffn_norm.weight"]
    return h


def write_hf(d, c, t):
    os.makedirs(d, exist_ok=True)
    cfg = {"model_type": c["arch"], "hidden_size": c["dim"], "intermediate_size": c["hidden"],
           "num_hidden_layers": c["layers"], "num_attention_heads": c["heads"], "num_key_value_heads": c["kv_heads"],
           "head_dim": c["head_dim"], "vocab_size": c["vocab"], "max_position_embeddings": c["context"],
           "rms_norm_eps": c["eps"], "rope_theta": c["theta"], "tie_word_embeddings": True}
    if c["arch"] == "gemma2":
        cfg.update(hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=c["head_dim"],
                   attn_logit_softcapping=c["attn_cap"], final_logit_softcapping=c["final_cap"],
                   sliding_window=c["window"])
    else:
        cfg.update(hidden_act="silu", rope_scaling=dict(LLAMA3, rope_type="llama3"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    header, data = {}, b""
    for name, v in hf_tensors(c, t).items():
        shape = [len(v)] if not isinstance(v[0], list) else [len(v), len(v[0])]
        flat = v if len(shape) == 1 else [x for row in v for x in row]
        blob = struct.pack("<%df" % len(flat), *flat)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + data)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/arch"
    os.makedirs(out, exist_ok=True)
    for name, make in (("gemma2-tiny", gemma2_model), ("llama-rope-tiny", llama_rope_model)):
        c, t = make()
        write_gguf(os.path.join(out, name + ".gguf"), c, t)
        write_hf(os.path.join(out, name + "-hf"), c, t)
        z = forward(c, t)
        with open(os.path.join(out, name + ".logits.bin"), "wb") as f:
            f.write(b"".join(struct.pack("<%df" % len(row), *row) for row in z))
        flat = [v for row in z for v in row]
        print("%s: %d x %d logits, max |z| %.3f" % (name, len(z), len(z[0]), max(abs(v) for v in flat)))


if __name__ == "__main__":
    main()
