// quant_gq_mv.glsl — QMATMUL for the GQ dtypes (QT 5, GQ_BITS, GQ_G):
// y [m, n] = x [m, k] . W^T, W [n, k] contiguous, x and y f32 contiguous.
// The work is laid out as in quant_mv.glsl (QMV_ROWS rows of W, QMV_MB rows
// of x per workgroup, 32 lanes, their sums added by a tree in shared
// memory), but a lane takes one chunk of 32 codes at a time (quant/quant.h)
// rather than a whole scale group, so that group 128 keeps the lanes as busy
// as group 32: it loads the chunk's 4 * GQ_BITS bytes as GQ_BITS words at
// once (a block starts at any byte: one word more and a funnel shift),
// decodes them in registers to q - zero (exact in f32) for all MB rows of
// x, and adds scale * sum((q - zero) * x) per chunk. f32 throughout.
layout(local_size_x = 32, local_size_y = QMV_ROWS) in;
layout(std430, binding = 0) readonly buffer Q { uint qw[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint m, n, k, q0, x0, y0; } p;
#include "quant.glsl"

const uint MB = QMV_MB, LANES = 32u, NW = uint(GQ_BITS), CPB = KQ_BLCK / 32u; // chunk words, chunks per block
shared float red[QMV_ROWS][MB][LANES];

// The NW words of the chunk at byte c, whatever its alignment; the word
// past them is read only when the chunk reaches into it.
void gq_words(uint c, out uint w[NW]) {
    uint a = c >> 2u, sh = (c & 3u) * 8u;
    if (sh == 0u) {
        [[unroll]] for (uint i = 0u; i < NW; i++) w[i] = qw[a + i];
    } else {
        uint lo = qw[a];
        [[unroll]] for (uint i = 0u; i < NW; i++) {
            uint hi = qw[a + i + 1u];
            w[i] = (lo >> sh) | (hi << (32u - sh));
            lo = hi;
        }
    }
}

// Codes 4e .. 4e+3 of the chunk, one per byte.
uint gq_codes4(uint w[NW], uint e) {
#if GQ_BITS == 4
    return (w[e & 3u] >> (e & 4u)) & 0x0f0f0f0fu; // 0-15 low nibbles, 16-31 high
#else
    uint q = (w[e & 1u] >> (2u * (e >> 1u))) & 0x03030303u; // bits 0-1: byte j % 8, pair j / 8
#if GQ_BITS == 3
    uint h = (w[2] >> (4u * e)) & 15u; // bit 2 of code j: bit j of the third word
    q |= ((h & 1u) | (h & 2u) << 7u | (h & 4u) << 14u | (h & 8u) << 21u) << 2u;
#endif
    return q;
#endif
}

void main() {
    uint lane = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
    uint r = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * QMV_ROWS + ly;
    uint m0 = gl_WorkGroupID.z * MB, mb = min(MB, p.m - m0);
    float acc[MB];
    [[unroll]] for (uint i = 0u; i < MB; i++) acc[i] = 0.0;
    if (r < p.n) {
        uint nch = p.k / 32u, row = p.q0 + r * (p.k / KQ_BLCK) * KQ_BYTES;
        for (uint t = lane; t < nch; t += LANES) {
            uint b = row + (t / CPB) * KQ_BYTES, head = kq_u32(b); // f16 scale, zero, first code byte
            float sc = kq_f16(head & 0xffffu), z = float((head >> 16u) & 0xffu);
            uint w[NW];
            gq_words(b + 3u + (t % CPB) * (4u * NW), w);
            uint xk = p.x0 + m0 * p.k + t * 32u;
            float s[MB];
            [[unroll]] for (uint i = 0u; i < MB; i++) s[i] = 0.0;
            [[unroll]] for (uint e = 0u; e < 8u; e++) {
                uint q = gq_codes4(w, e);
                vec4 c = vec4(uvec4(q, q >> 8u, q >> 16u, q >> 24u) & 0xffu) - z;
                [[unroll]] for (uint i = 0u; i < MB; i++) {
                    if (i < mb) {
                        uint o = xk + i * p.k + 4u * e;
                        s[i] += dot(c, vec4(x[o], x[o + 1u], x[o + 2u], x[o + 3u]));
                    }
                }
            }
            [[unroll]] for (uint i = 0u; i < MB; i++) acc[i] += s[i] * sc;
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
