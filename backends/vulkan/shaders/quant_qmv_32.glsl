// quant_qmv_32.glsl — QMATMUL's few-row products (y [m, n] = x [m, k] .
// W^T, m <= MB) for ggml's blocks of 32 (QT 6 Q4_1, 7 Q5_0, 8 Q5_1, 16
// IQ4_NL; quant_ggml.glsl) as integer dot products against x quantized
// to the weight's partner (quant_qx.comp: Q8_1 for Q4_1 / Q5_1, its s
// included; Q8_0 for Q5_0 / IQ4_NL), equal to the CPU's batch-1 path bit
// for bit (backends/cpu/qmatmul_ggml.h; CUDA's k_qmv_32.cu is the same
// kernel): a block's isum is exact, its term (d dx) isum, plus m s for
// Q8_1, `precise` in that order; while whole groups of 8 blocks last,
// block i's term goes into lane i % 8, the lanes are summed as
// kiln__qmm_ggml_lanes_sum, and the blocks left over are added to that in
// order.
//
// The workgroup is quant_qmv_k.glsl's: 8 rows of W, 16 invocations a row,
// one per block of each step of 16 against every row of x; the terms go
// through shared memory and invocation xr of a row folds them in order.
// Q5_0's q = u - 16 takes off 16 sum(x).
#include "quant_dot4.glsl"
layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer Q { uint qw[]; };
layout(std430, binding = 1) readonly buffer XQ { uint xq[]; };
layout(std430, binding = 2) readonly buffer DX { float dx[]; };
layout(std430, binding = 3) readonly buffer SX { float sx[]; };
layout(std430, binding = 4) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint m, n, k, q0, x0, d0, s0, y0; } p;
#include "quant.glsl"

const uint LANES = 16u, ROWS = 8u, MB = 7u;
shared float terms[ROWS][MB][LANES];

// the fifth bits of codes 4i .. 4i + 3 (bits 4i .. of qh) at bit 4 of each byte
uint fifth(uint qh, uint i) {
    uint h = qh >> (4u * i);
    return ((h & 1u) | (h & 2u) << 7u | (h & 4u) << 14u | (h & 8u) << 21u) << 4u;
}

// four nibbles (the low ones of c's bytes) through ggml's table
uint iq4_word(uint c) {
    uint w = 0u;
    for (uint j = 0u; j < 4u; j++) w |= (uint(kq_iq4((c >> (8u * j)) & 15u)) & 0xffu) << (8u * j);
    return w;
}

float lanes_sum(float l[8]) {
    precise float s0 = l[0] + l[4], s1 = l[1] + l[5], s2 = l[2] + l[6], s3 = l[3] + l[7];
    precise float r = (s0 + s2) + (s1 + s3);
    return r;
}

void main() {
    const uint QS = QT == 6 ? 4u : QT == 7 ? 6u : QT == 8 ? 8u : 2u; // the codes' first byte
    const int OFF = QT == 7 ? 16 : 0;
    uint t = gl_LocalInvocationID.x, rr = t / LANES, ln = t % LANES;
    uint r = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * ROWS + rr;
    uint nb = p.k / 32u, rowb = nb * KQ_BYTES, grouped = nb / 8u * 8u;
    precise float lane[8] = float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0), sum = 0.0; // row ln of x's
    for (uint c0 = 0u; c0 < nb; c0 += LANES) {
        uint blk = c0 + ln;
        if (r < p.n && blk < nb) {
            uint b = p.q0 + r * rowb + blk * KQ_BYTES;
            int isum[MB];
            [[unroll]] for (uint xr = 0u; xr < MB; xr++) isum[xr] = 0;
#if QT == 7 || QT == 8
            uint qh = kq_u32(b + QS - 4u);
#endif
            for (uint i = 0u; i < 4u; i++) { // codes 4i .. (low nibbles) and 16 + 4i .. (high ones)
                uint q = kq_u32(b + QS + 4u * i), lo = q & 0x0f0f0f0fu, hi = (q >> 4u) & 0x0f0f0f0fu;
#if QT == 7 || QT == 8
                lo |= fifth(qh, i), hi |= fifth(qh, i + 4u);
#elif QT == 16
                lo = iq4_word(lo), hi = iq4_word(hi);
#endif
                [[unroll]] for (uint xr = 0u; xr < MB; xr++) {
                    if (xr >= p.m) break;
                    uint xw = p.x0 + xr * (p.k / 4u) + 8u * blk + i, xl = xq[xw], xh = xq[xw + 4u];
                    isum[xr] += dot4(lo, xl) + dot4(hi, xh);
                    if (OFF != 0) isum[xr] -= OFF * (dot4(0x01010101u, xl) + dot4(0x01010101u, xh));
                }
            }
            float d = kq_d(b);
#ifdef KQ_HAS_MIN
            float dm = kq_dm(b);
#endif
            [[unroll]] for (uint xr = 0u; xr < MB; xr++) {
                if (xr >= p.m) break;
                uint xi = xr * nb + blk;
#ifdef KQ_HAS_MIN
                precise float term = d * dx[p.d0 + xi] * float(isum[xr]) + dm * sx[p.s0 + xi];
#else
                precise float term = d * dx[p.d0 + xi] * float(isum[xr]);
#endif
                terms[rr][xr][ln] = term;
            }
        }
        barrier();
        if (r < p.n && ln < p.m)
            for (uint i = 0u; i < LANES && c0 + i < nb; i++) {
                uint bi = c0 + i;
                if (bi == grouped && grouped != 0u) sum = lanes_sum(lane);
                if (bi < grouped) lane[bi % 8u] += terms[rr][ln][i];
                else sum += terms[rr][ln][i];
            }
        barrier(); // the terms are read before the next step's
    }
    if (r < p.n && ln < p.m) y[p.y0 + ln * p.n + r] = grouped != 0u && grouped == nb ? lanes_sum(lane) : sum;
}
