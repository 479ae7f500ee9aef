// mm_common.glsl — what the matmul kernels (mm_tile.glsl, mm_splitk.glsl;
// vk_matmul.c) share: the operands as bindings 0..2, the push constants
// that say how to read them, and the per-batch-matrix bases.
//
// Operands are read through strides: op(A)(m, k) is a[abase + m*sam +
// k*sak], op(B)(k, n) is b[bbase + k*sbk + n*sbn], so transposed and
// strided views need no copy. Up to three (coalesced) batch dims come
// from the batch index z; a stride 0 broadcasts an operand across them.
// C is contiguous. The including file defines MM_F16 or MM_BF16_STORAGE
// for 16-bit storage (mm_elem.glsl), and MM_PARTIAL when binding 2 is not
// C but f32 partial tiles of a K-slice each (split K across workgroups;
// mm_sum.glsl adds them up).

#include "mm_elem.glsl"

layout(std430, binding = 0) readonly buffer BufA { ELEM a[]; };
layout(std430, binding = 1) readonly buffer BufB { ELEM b[]; };
#ifdef MM_PARTIAL
layout(std430, binding = 2) writeonly buffer BufC { float c[]; };
#else
layout(std430, binding = 2) buffer BufC { ELEM c[]; };
#endif

// Matches struct mm_push in vk_matmul.c.
layout(push_constant) uniform P {
    uint m, n, k;
    uint a0, b0, c0;
    uint sam, sak, sbk, sbn; // op(A) strides along m, k; op(B) along k, n
    uint bd1, bd2;           // sizes of the inner two batch dims
    uint as0, as1, as2;      // a's strides along the three batch dims
    uint bs0, bs1, bs2;      // b's
    uint flags;              // MM_ACCUMULATE | MM_BF16 | MM_A_KFAST | MM_B_KFAST
    uint z0;                 // the batch of gl_WorkGroupID.z = 0 (batches over more dispatches)
    uint ksplit, nsplit;     // MM_PARTIAL: K per split (a multiple of BK), splits per batch matrix
} p;

#define MM_ACCUMULATE 1u // C += the product (a matmul adding into a gradient)
#define MM_BF16 2u       // round f32 operands to bf16 first (KILN_MATMUL_BF16)
#define MM_A_KFAST 4u    // a's k is its unit-stride dim: stage A along k
#define MM_B_KFAST 8u    // b's k is: stage B along k

// f32 -> bf16 -> f32, rounding to nearest even; NaN stays a quiet NaN
// (kiln__f32_to_bf16).
float round_bf16(float v) {
    uint x = floatBitsToUint(v);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uintBitsToFloat((x | 0x00400000u) & 0xffff0000u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return uintBitsToFloat(x & 0xffff0000u);
}

// This workgroup's batch matrix z and its range [kbeg, kend) of K: all of
// it, or with MM_PARTIAL one slice of it.
void mm_slice(out uint z, out uint kbeg, out uint kend) {
#ifdef MM_PARTIAL
    z = gl_WorkGroupID.z / p.nsplit;
    kbeg = (gl_WorkGroupID.z % p.nsplit) * p.ksplit;
    kend = min(p.k, kbeg + p.ksplit);
#else
    z = p.z0 + gl_WorkGroupID.z;
    kbeg = 0u;
    kend = p.k;
#endif
}

// Where batch matrix z of a and b starts.
uint a_base(uint z) {
    uint i2 = z % p.bd2, i1 = (z / p.bd2) % p.bd1, i0 = z / (p.bd2 * p.bd1);
    return p.a0 + i0 * p.as0 + i1 * p.as1 + i2 * p.as2;
}
uint b_base(uint z) {
    uint i2 = z % p.bd2, i1 = (z / p.bd2) % p.bd1, i0 = z / (p.bd2 * p.bd1);
    return p.b0 + i0 * p.bs0 + i1 * p.bs1 + i2 * p.bs2;
}

#ifndef MM_PARTIAL
// Element o of C becomes v (or gets v added: MM_ACCUMULATE, the product
// rounded to C's dtype first, as the CPU's scratch).
void store_c(uint o, float v) {
    c[o] = (p.flags & MM_ACCUMULATE) != 0u ? STORE(LOAD(c[o]) + LOAD(STORE(v))) : STORE(v);
}
#endif
