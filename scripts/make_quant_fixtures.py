#!/usr/bin/python3
"""make_quant_fixtures.py — blocks of ggml's quantized types and their values,
for kiln's dtype tests (tests/test_ggml_types.c).

    python3 scripts/make_quant_fixtures.py [/work/shared/gguf-ref]

Plain Python (struct, no numpy, no gguf-py). For the types llama.cpp's
reference files hold (../shared/gguf-ref: Q8_0, Q4_0, Q4_K, Q5_K, Q6_K,
IQ4_NL) the blocks are the first of one of their tensors, with the F32
file's values of the same elements: what llama-quantize made those blocks
from. For the others the blocks are pseudo-random (a fixed seed: scales
finite f16 values, codes random bytes). Each block is dequantized by this
script's own decoders, written from ggml's block layouts (ggml-common.h)
independently of kiln's C, in f32 arithmetic: every product and sum is
rounded to f32 as it happens (a Python float holds each exact product of
two f32 values, so rounding once is f32's result).

Output, tests/fixtures/quant/<type>.bin, little-endian:

    'KQF1', u32 nblocks, u32 block bytes, u32 block elements, u32 has_source
    the blocks (nblocks * block bytes)
    their values (f32, nblocks * block elements)
    if has_source: the f32 values llama-quantize quantized into these blocks
"""
import os
import random
import struct
import sys

REF = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/gguf-ref"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "quant")

# ggml type: (id, block elements, block bytes)
TYPES = {
    "q4_0": (2, 32, 18), "q4_1": (3, 32, 20), "q5_0": (6, 32, 22), "q5_1": (7, 32, 24),
    "q8_0": (8, 32, 34), "q8_1": (9, 32, 36), "q2_K": (10, 256, 84), "q3_K": (11, 256, 110),
    "q4_K": (12, 256, 144), "q5_K": (13, 256, 176), "q6_K": (14, 256, 210), "q8_K": (15, 256, 292),
    "iq4_nl": (20, 32, 18), "iq4_xs": (23, 256, 136),
}
SIZES = {0: (1, 4), 1: (1, 2), 30: (1, 2)}
SIZES.update({v[0]: (v[1], v[2]) for v in TYPES.values()})
IQ4NL = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def half(b, o):
    return struct.unpack_from("<e", b, o)[0]


# ---- GGUF, enough to find tensors ----

def read_gguf(path):
    data = open(path, "rb").read()
    pos = [0]

    def take(fmt):
        v = struct.unpack_from("<" + fmt, data, pos[0])
        pos[0] += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        n = take("Q")
        s = data[pos[0]:pos[0] + n].decode()
        pos[0] += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(scalar[t])

    assert data[:4] == b"GGUF", path
    pos[0] = 4
    take("I")  # version
    n_t, n_kv = take("Q"), take("Q")
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(take("I"))
    infos = []
    for _ in range(n_t):
        name = string()
        nd = take("I")
        ne = [take("Q") for _ in range(nd)]
        infos.append((name, ne, take("I"), take("Q")))
    align = kv.get("general.alignment", 32)
    base = (pos[0] + align - 1) // align * align
    tensors = {}
    for name, ne, t, off in infos:
        blk, size = SIZES[t]
        n = 1
        for d in ne:
            n *= d
        tensors[name] = (t, ne, data[base + off: base + off + n // blk * size])
    return tensors


# ---- the decoders: one block (bytes) to its values ----

def codes4(qs):
    return [b & 15 for b in qs] + [b >> 4 for b in qs]


def fifth_bits(qh):
    h = struct.unpack("<I", qh)[0]
    return [(h >> j) & 1 for j in range(32)]


def dq_q8_0(b):
    d = half(b, 0)
    return [f32(d * q) for q in struct.unpack_from("<32b", b, 2)]


def dq_q8_1(b):
    d = half(b, 0)
    return [f32(d * q) for q in struct.unpack_from("<32b", b, 4)]


def dq_q4_0(b):
    d = half(b, 0)
    return [f32(d * (q - 8)) for q in codes4(b[2:18])]


def dq_q4_1(b):
    d, m = half(b, 0), half(b, 2)
    return [f32(f32(d * q) + m) for q in codes4(b[4:20])]


def dq_q5_0(b):
    d, hi = half(b, 0), fifth_bits(b[2:6])
    return [f32(d * ((q | hi[j] << 4) - 16)) for j, q in enumerate(codes4(b[6:22]))]


def dq_q5_1(b):
    d, m, hi = half(b, 0), half(b, 2), fifth_bits(b[4:8])
    return [f32(f32(d * (q | hi[j] << 4)) + m) for j, q in enumerate(codes4(b[8:24]))]


def dq_iq4_nl(b):
    d = half(b, 0)
    return [f32(d * IQ4NL[q]) for q in codes4(b[2:18])]


def dq_q8_K(b):
    d = struct.unpack_from("<f", b, 0)[0]
    return [f32(d * q) for q in struct.unpack_from("<256b", b, 4)]


def dq_q2_K(b):
    scales, qs, d, dmin = b[0:16], b[16:80], half(b, 80), half(b, 82)
    y = []
    for n in range(2):  # 128 values from 32 bytes, four 2-bit planes
        for shift in range(4):
            for h in range(2):  # 16 values per scale
                sc = scales[8 * n + 2 * shift + h]
                dl, ml = f32(d * (sc & 15)), f32(dmin * (sc >> 4))
                y += [f32(f32(dl * ((qs[32 * n + 16 * h + l] >> 2 * shift) & 3)) - ml) for l in range(16)]
    return y


def dq_q3_K(b):
    hmask, qs, sb, d = b[0:32], b[32:96], b[96:108], half(b, 108)
    # 16 six-bit scales: low 4 bits in the nibbles of bytes 0-7 (0-7 low,
    # 8-15 high), high 2 bits in bytes 8-11, two bits per scale
    sc = []
    for j in range(16):
        lo = sb[j] & 15 if j < 8 else sb[j - 8] >> 4
        hi = (sb[8 + j % 4] >> (2 * (j // 4))) & 3
        sc.append((lo | hi << 4) - 32)
    y = []
    for n in range(2):
        for shift in range(4):
            bit = 1 << (4 * n + shift)
            for h in range(2):
                dl = f32(d * sc[8 * n + 2 * shift + h])
                for l in range(16):
                    i = 16 * h + l
                    q = ((qs[32 * n + i] >> 2 * shift) & 3) - (0 if hmask[i] & bit else 4)
                    y.append(f32(dl * q))
    return y


def scale_min_k4(j, s):
    if j < 4:
        return s[j] & 63, s[j + 4] & 63
    return (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)


def dq_q4_K(b):
    d, dmin, s, qs = half(b, 0), half(b, 2), b[4:16], b[16:144]
    y = []
    for j in range(4):
        for h in range(2):
            sc, m = scale_min_k4(2 * j + h, s)
            d1, m1 = f32(d * sc), f32(dmin * m)
            y += [f32(f32(d1 * ((qs[32 * j + l] >> 4 * h) & 15)) - m1) for l in range(32)]
    return y


def dq_q5_K(b):
    d, dmin, s, qh, qs = half(b, 0), half(b, 2), b[4:16], b[16:48], b[48:176]
    y = []
    for j in range(4):
        for h in range(2):
            sc, m = scale_min_k4(2 * j + h, s)
            d1, m1 = f32(d * sc), f32(dmin * m)
            bit = 1 << (2 * j + h)
            for l in range(32):
                q = ((qs[32 * j + l] >> 4 * h) & 15) + (16 if qh[l] & bit else 0)
                y.append(f32(f32(d1 * q) - m1))
    return y


def dq_q6_K(b):
    ql, qh, sc, d = b[0:128], b[128:192], struct.unpack_from("<16b", b, 192), half(b, 208)
    y = [0.0] * 256
    for n in range(2):
        for l in range(32):
            is_ = 8 * n + l // 16
            h = qh[32 * n + l]
            q1 = ((ql[64 * n + l] & 15) | ((h >> 0) & 3) << 4) - 32
            q2 = ((ql[64 * n + l + 32] & 15) | ((h >> 2) & 3) << 4) - 32
            q3 = ((ql[64 * n + l] >> 4) | ((h >> 4) & 3) << 4) - 32
            q4 = ((ql[64 * n + l + 32] >> 4) | ((h >> 6) & 3) << 4) - 32
            for r, q in enumerate((q1, q2, q3, q4)):
                y[128 * n + 32 * r + l] = f32(f32(d * sc[is_ + 2 * r]) * q)
    return y


def dq_iq4_xs(b):
    d, sh, sl, qs = half(b, 0), struct.unpack_from("<H", b, 2)[0], b[4:8], b[8:136]
    y = []
    for ib in range(8):
        ls = ((sl[ib // 2] >> 4 * (ib % 2)) & 15) | (((sh >> 2 * ib) & 3) << 4)
        dl = f32(d * (ls - 32))
        y += [f32(dl * IQ4NL[q]) for q in codes4(qs[16 * ib:16 * ib + 16])]
    return y


# ---- pseudo-random blocks ----

def rand_half(rng):
    """A finite f16 of magnitude 2^-9 .. 2^-2, either sign, as 2 bytes."""
    v = (1 + rng.getrandbits(10) / 1024) * 2.0 ** -(2 + rng.getrandbits(3))
    return struct.pack("<e", -v if rng.getrandbits(1) else v)


def rand_block(name, size, rng):
    b = bytearray(rng.getrandbits(8) for _ in range(size))
    heads = {"q4_1": [0, 2], "q5_0": [0], "q5_1": [0, 2], "q8_1": [0, 2], "q2_K": [80, 82],
             "q3_K": [108], "iq4_xs": [0]}
    for o in heads.get(name, []):
        b[o:o + 2] = rand_half(rng)
    if name == "q8_K":
        b[0:4] = struct.pack("<f", struct.unpack("<e", rand_half(rng))[0])
        qs = struct.unpack_from("<256b", b, 4)
        struct.pack_into("<16h", b, 260, *[sum(qs[16 * j:16 * j + 16]) for j in range(16)])
    return bytes(b)


# where the reference files hold each type: (file, tensor)
FROM_FILES = {
    "q8_0": ("llama-s1-Q8_0.gguf", "blk.0.attn_q.weight"),
    "q4_0": ("llama-s1-Q4_0.gguf", "blk.0.attn_q.weight"),
    "q4_K": ("llama-s1-Q4_K_M.gguf", "blk.0.attn_q.weight"),
    "q5_K": ("llama-s1-Q5_K_M.gguf", "blk.0.attn_q.weight"),
    "q6_K": ("llama-s1-Q6_K.gguf", "blk.0.attn_q.weight"),
    "iq4_nl": ("llama-s1-IQ4_NL.gguf", "blk.0.attn_q.weight"),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    f32_model = read_gguf(os.path.join(REF, "llama-s1-F32.gguf"))
    files = {}
    for name, (tid, blk, size) in TYPES.items():
        nblocks = (32 if blk == 256 else 128) if name in FROM_FILES else (8 if blk == 256 else 32)
        source = None
        if name in FROM_FILES:
            fname, tname = FROM_FILES[name]
            if fname not in files:
                files[fname] = read_gguf(os.path.join(REF, fname))
            t, ne, raw = files[fname][tname]
            assert t == tid, (fname, tname, t)
            blocks = raw[:nblocks * size]
            src = f32_model[tname][2][:nblocks * blk * 4]
            source = struct.unpack("<%df" % (nblocks * blk), src)
        else:
            rng = random.Random(0x6b696c6e + tid)  # 'kiln' + the type id
            blocks = b"".join(rand_block(name, size, rng) for _ in range(nblocks))
        dq = globals()["dq_" + name]
        values = []
        for i in range(nblocks):
            values += dq(blocks[i * size:(i + 1) * size])
        assert len(values) == nblocks * blk
        with open(os.path.join(OUT, name + ".bin"), "wb") as f:
            f.write(b"KQF1" + struct.pack("<4I", nblocks, size, blk, source is not None))
            f.write(blocks)
            f.write(struct.pack("<%df" % len(values), *values))
            if source is not None:
                f.write(struct.pack("<%df" % len(source), *source))
        print("%-7s %2d blocks%s" % (name, nblocks, " (from %s)" % FROM_FILES[name][0] if source else ""))


if __name__ == "__main__":
    main()
