// mm_sum.glsl — the second pass of a matmul split across workgroups along
// K (vk_matmul.c, mm_tile.glsl with MM_PARTIAL): element o of C (batch
// matrix z, offset r in it) is the sum of its nsplit f32 partials
// part[(z * nsplit + s) * mn + r], added for s = 0, 1, ... in that order
// (the same result every run), then stored as mm_common.glsl's store_c
// does: rounded to C's dtype, or added into C (MM_ACCUMULATE) after that
// rounding. The including file defines MM_F16 or MM_BF16_STORAGE for 16-bit storage.

#include "mm_elem.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer BufP { float part[]; };
layout(std430, binding = 1) buffer BufC { ELEM c[]; };

// Matches struct mm_sum_push in vk_matmul.c.
layout(push_constant) uniform P {
    uint total;  // elements of C (batch * mn)
    uint mn;     // elements of one batch matrix
    uint nsplit;
    uint p0, c0;
    uint flags;  // MM_ACCUMULATE
} p;

#define MM_ACCUMULATE 1u

void main() {
    const uint o = kiln_gid();
    if (o >= p.total) return;
    const uint z = o / p.mn, r = o % p.mn;
    uint at = p.p0 + z * p.nsplit * p.mn + r;
    float v = 0.0;
    for (uint s = 0; s < p.nsplit; s++, at += p.mn) v += part[at];
    const uint co = p.c0 + o;
    c[co] = (p.flags & MM_ACCUMULATE) != 0u ? STORE(LOAD(c[co]) + LOAD(STORE(v))) : STORE(v);
}
