// quant_mv.glsl — QMATMUL: y [m, n] = x [m, k] . W^T, W quantized [n, k]
// contiguous, x and y f32 contiguous. A workgroup takes QMV_ROWS rows of W
// (one per row of invocations) and MB = QMV_MB rows of x (workgroup z): its 32
// lanes share a W row's scale groups (KQ_SUB elements under one scale),
// each decoding its groups in registers once for all MB rows of x and
// accumulating sum(code * x) in f32 per group, then scale * that (plus
// min * sum(x) for the types with a min); the
// lanes' partial sums are added by a tree in shared memory. Batch 1
// (generation) is the same kernel with one row of x; for a batch each W
// element is decoded once per MB rows (MB = 1 for the fewest rows: its
// loops have no masked iterations). f32 throughout: no rounding of x.
layout(local_size_x = 32, local_size_y = QMV_ROWS) in;
layout(std430, binding = 0) readonly buffer Q { uint qw[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint m, n, k, q0, x0, y0; } p;
#define KQ_MAP_BINDING 3
#define KQ_NF4_SHARED
#include "quant.glsl"

const uint MB = QMV_MB, LANES = 32u;
shared float red[QMV_ROWS][MB][LANES];

// Codes j .. j+3 (j a multiple of 4) of the block at b.
vec4 kq_code4(uint b, uint j) {
#if QT == 1
    int w = int(kq_u32(b + 2u + j));
    return vec4(bitfieldExtract(w, 0, 8), bitfieldExtract(w, 8, 8), bitfieldExtract(w, 16, 8), bitfieldExtract(w, 24, 8));
#elif QT == 2
    uint w = kq_u32(b + 2u + (j & 15u)) >> (j < 16u ? 0u : 4u);
    return vec4(uvec4(w, w >> 8u, w >> 16u, w >> 24u) & 15u) - 8.0;
#elif QT >= 6 // ggml's types (quant_ggml.glsl)
    return kq_q4(b, j);
#else
    uint w = kq_u16(b + (QT == 3 ? 4u : 264u) + j / 2u); // even: blocks start 4-aligned
    return vec4(kq_nf4((w >> 4u) & 15u), kq_nf4(w & 15u), kq_nf4(w >> 12u), kq_nf4((w >> 8u) & 15u));
#endif
}

void main() {
    uint lane = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
    uint r = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * QMV_ROWS + ly;
    uint m0 = gl_WorkGroupID.z * MB, mb = min(MB, p.m - m0);
    float acc[MB];
    [[unroll]] for (uint i = 0u; i < MB; i++) acc[i] = 0.0;
#if QT == 3 || QT == 4
    kq_nf4_load();
#endif
    if (r < p.n) {
        uint nsub = p.k / KQ_SUB, g0 = r * (p.k / KQ_SUB); // the row's first scale group
        for (uint t = lane; t < nsub; t += LANES) {
            uint g = g0 + t, b = p.q0 + (g / (KQ_BLCK / KQ_SUB)) * KQ_BYTES, j0 = (g % (KQ_BLCK / KQ_SUB)) * KQ_SUB;
            uint xk = p.x0 + m0 * p.k + t * KQ_SUB;
            float s[MB], sx[MB]; // sum(code * x), and sum(x) for the min
            [[unroll]] for (uint i = 0u; i < MB; i++) s[i] = sx[i] = 0.0;
            for (uint c = 0u; c < KQ_SUB; c += 4u) {
                vec4 w = kq_code4(b, j0 + c);
                [[unroll]] for (uint i = 0u; i < MB; i++) {
                    if (i < mb) {
                        uint o = xk + i * p.k + c;
                        vec4 xv = vec4(x[o], x[o + 1u], x[o + 2u], x[o + 3u]);
                        s[i] += dot(w, xv);
#ifdef KQ_HAS_MIN
                        sx[i] += xv.x + xv.y + xv.z + xv.w;
#endif
                    }
                }
            }
            float sc = kq_scale(b, j0);
#ifdef KQ_HAS_MIN
            float mn = kq_min(b, j0);
            [[unroll]] for (uint i = 0u; i < MB; i++) acc[i] += s[i] * sc + sx[i] * mn;
#else
            [[unroll]] for (uint i = 0u; i < MB; i++) acc[i] += s[i] * sc;
#endif
        }
    }
    [[unroll]] for (uint i = 0u; i < MB; i++) red[ly][i][lane] = acc[i];
    [[unroll]] for (uint h = LANES / 2u; h > 0u; h >>= 1u) {
        barrier();
        if (lane < h) {
            [[unroll]] for (uint i = 0u; i < MB; i++) red[ly][i][lane] += red[ly][i][lane + h];
        }
    }
    if (lane == 0u && r < p.n) {
        for (uint i = 0u; i < mb; i++) y[p.y0 + (m0 + i) * p.n + r] = red[ly][i][0];
    }
}
