// quant_qmv_k.glsl — QMATMUL's few-row products (y [m, n] = x [m, k] . W^T,
// m <= MB) for ggml's K types and IQ4_XS (QT 10 Q2_K, 11 Q3_K, 12 Q4_K,
// 13 Q5_K, 14 Q6_K, 17 IQ4_XS; quant_ggml.glsl) as integer dot products
// against x quantized to Q8_K (quant_qxk.comp), equal to the CPU's
// batch-1 path bit for bit (backends/cpu/qmatmul_ggml.h; CUDA's
// k_qmv_k.cu is the same kernel): a block's isum (sc times the codes' dot
// with x per sub-block) and summs (mn times x's sum per sub-block) are
// exact integers; its term is (dx d) isum + (dx dm) summs, `precise`, in
// that order; the terms are added to one f32 sum per row, block after
// block.
//
// A workgroup of 128 takes 8 rows of W, 16 invocations a row: invocation
// l of a row decodes blocks c0 + l of each step of 16 (each byte read
// once, as words) against every row of x, the terms go through shared
// memory, and invocation xr of the row adds them in order into row xr of
// y. Codes are four to a word as signed bytes; Q6_K's and Q3_K's q = u -
// off take off sc off sum(x) from the unsigned u's product.
#include "quant_dot4.glsl"
layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer Q { uint qw[]; };
layout(std430, binding = 1) readonly buffer XQ { uint xq[]; };
layout(std430, binding = 2) readonly buffer DX { float dx[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint m, n, k, q0, x0, d0, y0; } p;
#include "quant.glsl"

const uint LANES = 16u, ROWS = 8u, MB = 7u;
shared float terms[ROWS][MB][LANES];
int isum[MB], summs[MB];
uint xbase; // the block's first code word in x's row 0

// Four codes u (a word) at element e, scaled by sc; q = u - off; mn the
// sub-block's min (0: none).
void put(uint u, uint e, int sc, int mn, int off) {
    [[unroll]] for (uint xr = 0u; xr < MB; xr++) {
        if (xr >= p.m) break;
        uint xw = xq[xbase + xr * (p.k / 4u) + e / 4u];
        int sx = mn != 0 || off != 0 ? dot4(0x01010101u, xw) : 0;
        isum[xr] += sc * (dot4(u, xw) - off * sx);
        summs[xr] += mn * sx;
    }
}

#if QT == 17
// four nibbles (the low ones of c's bytes) through ggml's table
uint iq4_word(uint c) {
    uint w = 0u;
    for (uint j = 0u; j < 4u; j++) w |= (uint(kq_iq4((c >> (8u * j)) & 15u)) & 0xffu) << (8u * j);
    return w;
}
#endif

// The integer sums of the block at byte b.
void block_ints(uint b) {
#if QT == 12 || QT == 13 // four runs of 64: the low nibbles of 32 bytes, then their high ones
    uint qs = b + (QT == 13 ? 48u : 16u);
    for (uint j = 0u; j < 4u; j++) {
        int sc0 = kq_isc(b, 2u * j), mn0 = kq_imn(b, 2u * j), sc1 = kq_isc(b, 2u * j + 1u), mn1 = kq_imn(b, 2u * j + 1u);
        for (uint i = 0u; i < 8u; i++) {
            uint q = kq_u32(qs + 32u * j + 4u * i), lo = q & 0x0f0f0f0fu, hi = (q >> 4u) & 0x0f0f0f0fu;
#if QT == 13 // the fifth bit of element e: bit e / 32 of qh[e % 32]
            uint h = kq_u32(b + 16u + 4u * i);
            lo |= ((h >> (2u * j)) & 0x01010101u) << 4u;
            hi |= ((h >> (2u * j + 1u)) & 0x01010101u) << 4u;
#endif
            put(lo, 64u * j + 4u * i, sc0, mn0, 0);
            put(hi, 64u * j + 32u + 4u * i, sc1, mn1, 0);
        }
    }
#elif QT == 17 // sub-block s: the low nibbles of 16 bytes, then their high ones
    for (uint s = 0u; s < 8u; s++) {
        int sc = kq_isc(b, s);
        for (uint i = 0u; i < 4u; i++) {
            uint q = kq_u32(b + 8u + 16u * s + 4u * i);
            put(iq4_word(q), 32u * s + 4u * i, sc, 0, 0);
            put(iq4_word(q >> 4u), 32u * s + 16u + 4u * i, sc, 0, 0);
        }
    }
#else // Q2_K, Q3_K, Q6_K: halves of 128 whose code bytes l hold elements l + 32 r; sub-blocks of 16
    for (uint h = 0u; h < 2u; h++)
        for (uint i = 0u; i < 8u; i++) {
#if QT == 14 // ql's nibble r / 2 of byte l + 32 (r & 1), qh's bits 2r, 2r + 1 of byte l to bits 4-5
            uint l0 = kq_u32(b + 64u * h + 4u * i), l1 = kq_u32(b + 64u * h + 32u + 4u * i),
                 hb = kq_u32(b + 128u + 32u * h + 4u * i);
            uint u[4] = uint[4]((l0 & 0x0f0f0f0fu) | ((hb << 4u) & 0x30303030u),
                                (l1 & 0x0f0f0f0fu) | ((hb << 2u) & 0x30303030u),
                                ((l0 >> 4u) & 0x0f0f0f0fu) | (hb & 0x30303030u),
                                ((l1 >> 4u) & 0x0f0f0f0fu) | ((hb >> 2u) & 0x30303030u));
#else
            uint q = kq_u32(b + (QT == 10 ? 16u : 32u) + 32u * h + 4u * i);
#if QT == 11
            uint hm = kq_u32(b + 4u * i); // set: no -4 (u = the two bits + 4, q = u - 4)
#endif
#endif
            for (uint r = 0u; r < 4u; r++) {
                uint e = 128u * h + 32u * r + 4u * i, s = e / 16u;
#if QT == 14
                put(u[r], e, kq_isc(b, s), 0, 32);
#elif QT == 11
                put(((q >> (2u * r)) & 0x03030303u) | ((hm >> (4u * h + r)) & 0x01010101u) << 2u, e, kq_isc(b, s), 0, 4);
#else
                put((q >> (2u * r)) & 0x03030303u, e, kq_isc(b, s), kq_imn(b, s), 0);
#endif
            }
        }
#endif
}

void main() {
    uint t = gl_LocalInvocationID.x, rr = t / LANES, ln = t % LANES;
    uint r = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * ROWS + rr;
    uint nb = p.k / 256u, rowb = nb * KQ_BYTES;
    precise float sum = 0.0; // row ln of x's, in invocation ln of the row
    for (uint c0 = 0u; c0 < nb; c0 += LANES) {
        uint blk = c0 + ln;
        if (r < p.n && blk < nb) {
            [[unroll]] for (uint xr = 0u; xr < MB; xr++) isum[xr] = summs[xr] = 0;
            uint b = p.q0 + r * rowb + blk * KQ_BYTES;
            xbase = p.x0 + 64u * blk;
            block_ints(b);
            float d = kq_d(b);
#ifdef KQ_HAS_MIN
            float dm = kq_dm(b);
#endif
            [[unroll]] for (uint xr = 0u; xr < MB; xr++) {
                if (xr >= p.m) break;
                float a = dx[p.d0 + xr * nb + blk];
#ifdef KQ_HAS_MIN
                precise float term = a * d * float(isum[xr]) + a * dm * float(summs[xr]);
#else
                precise float term = a * d * float(isum[xr]) + 0.0;
#endif
                terms[rr][xr][ln] = term;
            }
        }
        barrier();
        if (r < p.n && ln < p.m)
            for (uint i = 0u; i < LANES && c0 + i < nb; i++) sum += terms[rr][ln][i];
        barrier(); // the terms are read before the next step's
    }
    if (r < p.n && ln < p.m) y[p.y0 + ln * p.n + r] = sum;
}
