// quant_qmv.glsl — QMATMUL's few-row products (y [m, n] = x [m, k] . W^T,
// m <= MB) for Q8_0 (QT 1) and Q4_0 (QT 2) as integer dot products on x's
// int8 codes (quant_qx.comp), equal to the CPU's batch-1 path bit for bit
// (backends/cpu/qmatmul.h; CUDA's k_qmv.cu is the same kernel): each row
// of W keeps the CPU's 16 f32 lanes, one invocation each (lane 8c + l of
// Q8_0: bytes 4l..4l+3 of the blocks i with i % 2 == c; lane 4c + l of
// Q4_0: packed bytes 4l..4l+3, both nibbles, of the blocks with i % 4 ==
// c), per block one exact integer sum and one fma with d_w d_x, block
// after block, then the lanes added as the CPU's tree.
//
// A workgroup of 128 takes 8 rows of W and every row of x (the device's
// guaranteed minimum invocations and under its 16 KiB of shared memory).
// W's 34- and 18-byte blocks sit at 2-byte alignment, so the 8 rows are
// staged chunk by chunk into shared memory by 16-byte loads (uvec4) of
// the granules holding them, each byte read once; the lanes read their 4
// bytes there. The sums are quant_dot4.glsl's.
#if SFMA
#include "ew_math.glsl"
#endif
#include "quant_dot4.glsl"
layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer Q { uint qw[]; };
layout(std430, binding = 0) readonly buffer Q4 { uvec4 qv[]; };
layout(std430, binding = 1) readonly buffer XQ { uint xq[]; };
layout(std430, binding = 2) readonly buffer DX { float dx[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint m, n, k, q0, x0, d0, y0; } p;
#include "quant.glsl"

const uint ROWS = 8u, MB = 7u, CHUNK = 576u; // a row's bytes staged per step: 16 Q8_0 blocks (544) or 32 Q4_0
const uint GRAN = (CHUNK + 14u + 15u) / 16u, RW = GRAN * 4u; // granules (a chunk starts at an even byte), words a row
const uint BS = KQ_BYTES, CB = CHUNK / BS, STEP = QT == 1 ? 2u : 4u;
shared uint sw[ROWS * RW];
shared float lanes[ROWS][MB][16];

// Bytes [a, e) of W (byte offsets in the binding) to row s of sw from the
// granule holding a on: granules inside W's bytes [w0, w1) as one uvec4,
// the others (at W's ends) word by word, only words holding a byte of W.
void stage(uint s, uint a, uint e, uint w0, uint w1, uint gi) {
    uint g = (a & ~15u) + 16u * gi, o = s * RW + 4u * gi;
    if (g >= e) return;
    if (g >= w0 && g + 16u <= w1) {
        uvec4 v = qv[g >> 4u];
        sw[o] = v.x, sw[o + 1u] = v.y, sw[o + 2u] = v.z, sw[o + 3u] = v.w;
        return;
    }
    for (uint j = 0u; j < 4u; j++)
        if (g + 4u * j + 4u > a && g + 4u * j < e) sw[o + j] = qw[(g >> 2u) + j];
}

// The 2 or 4 bytes at even byte o of row s.
uint s16(uint s, uint o) { return (sw[s * RW + (o >> 2u)] >> ((o & 2u) * 8u)) & 0xffffu; }
uint s32(uint s, uint o) {
    uint i = s * RW + (o >> 2u);
    return (o & 2u) == 0u ? sw[i] : (sw[i] >> 16u) | (sw[i + 1u] << 16u);
}

// fma(a, b, c) rounded once. With SFMA (a device whose fma() is a multiply
// and an add, as Vulkan allows: lavapipe) from exact pieces: a b = uh + ul
// (Dekker's product), c + uh = th + tl (TwoSum), tl + ul rounded to odd,
// then th + that rounded to nearest (Boldo and Melquiond, "Emulation of
// FMA and correctly rounded sums: proved algorithms using rounding to
// odd", 2008); exact short of underflow.
#if SFMA
void two_sum(float a, float b, out float s, out float e) {
    precise float ss = a + b, bb = ss - a, ee = (a - (ss - bb)) + (b - bb);
    s = ss, e = ee;
}
float fma1(float a, float b, float c) {
    float uh, ul, th, tl, v, ve;
    ew_two_prod(a, b, uh, ul);
    two_sum(c, uh, th, tl);
    two_sum(tl, ul, v, ve);
    uint vb = floatBitsToUint(v);
    if (ve != 0.0 && (vb & 1u) == 0u) v = uintBitsToFloat((ve > 0.0) == (v > 0.0) ? vb + 1u : vb - 1u); // to odd
    precise float r = th + v;
    return r;
}
#else
float fma1(float a, float b, float c) { return fma(a, b, c); }
#endif

void main() {
    uint t = gl_LocalInvocationID.x, rr = t / 16u, ln = t % 16u;
    uint cls = QT == 1 ? ln >> 3u : ln >> 2u, l = QT == 1 ? ln & 7u : ln & 3u; // the CPU's lane ln
    uint r0 = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * ROWS, r = r0 + rr;
    uint nb = p.k / 32u, rowb = nb * BS, w1 = p.q0 + p.n * rowb;
    float acc[MB];
    [[unroll]] for (uint i = 0u; i < MB; i++) acc[i] = 0.0;
    for (uint c0 = 0u; c0 < nb; c0 += CB) {
        uint cb = min(CB, nb - c0);
        barrier(); // the last chunk's reads are done
        for (uint e = t; e < ROWS * GRAN; e += 128u) {
            uint q = e / GRAN, a = p.q0 + (r0 + q) * rowb + c0 * BS;
            if (r0 + q < p.n) stage(q, a, a + cb * BS, p.q0, w1, e % GRAN);
        }
        barrier();
        uint base = (p.q0 + r * rowb + c0 * BS) & 15u;
        for (uint i = cls; i < cb && r < p.n; i += STEP) {
            uint o = base + i * BS, blk = c0 + i, wq = s32(rr, o + 2u + 4u * l);
            float wd = kq_f16(s16(rr, o));
            [[unroll]] for (uint xr = 0u; xr < MB; xr++) {
                if (xr >= p.m) break;
                uint xw = p.x0 + xr * (p.k / 4u) + 8u * blk + l;
#if QT == 1
                int s = dot4(wq, xq[xw]);
#else // (nibble - 8) x: the nibbles' products less 8 sum(x)
                uint xl = xq[xw], xh = xq[xw + 4u];
                int s = dot4(wq & 0x0f0f0f0fu, xl) + dot4((wq >> 4u) & 0x0f0f0f0fu, xh) -
                        8 * (dot4(0x01010101u, xl) + dot4(0x01010101u, xh));
#endif
                precise float d = wd * dx[p.d0 + xr * nb + blk];
                acc[xr] = fma1(float(s), d, acc[xr]);
            }
        }
    }
    [[unroll]] for (uint xr = 0u; xr < MB; xr++)
        if (xr < p.m && r < p.n) lanes[rr][xr][ln] = acc[xr];
    barrier();
    if (r >= p.n || ln >= p.m) return;
    precise float a[16] = lanes[rr][ln];
#if QT == 1 // kiln__qmm_q8_lanes_sum
    precise float h[8], q[4];
    for (uint j = 0u; j < 8u; j++) h[j] = a[j] + a[j + 8u];
    for (uint j = 0u; j < 4u; j++) q[j] = h[j] + h[j + 4u];
    y[p.y0 + ln * p.n + r] = (q[0] + q[2]) + (q[1] + q[3]);
#else // kiln__qmm_q4_lanes_sum
    precise float bs[4];
    for (uint j = 0u; j < 4u; j++) bs[j] = (a[4u * j] + a[4u * j + 2u]) + (a[4u * j + 1u] + a[4u * j + 3u]);
    y[p.y0 + ln * p.n + r] = (bs[0] + bs[2]) + (bs[1] + bs[3]);
#endif
}
