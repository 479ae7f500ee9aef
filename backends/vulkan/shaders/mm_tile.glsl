// mm_tile.glsl — the matmul kernel (vk_matmul.c): per batch matrix,
// C[M, N] = op(A)[M, K] op(B)[K, N], accumulated in f32.
//
// One workgroup computes a BM x BN tile of C; each of its (BM/TM)*(BN/TN)
// invocations holds a TM x TN block of it in registers. The K loop stages
// BK-deep slabs of A and B in shared memory (converted to f32, elements
// outside the matrices read as 0, so edge tiles need no other care) and
// each invocation reads its TM + TN operands per k as vec4s: on lavapipe
// every shared read is a gather, and vec4 reads halved the time of a 512^3
// matmul; on a GPU they are the usual 128-bit shared loads.
//
// Operands are read through strides (push constants): op(A)(m, k) is
// a[a0 + batch offset + m*sam + k*sak], so transposed and strided views
// need no copy. Up to three (coalesced) batch dims come from
// gl_WorkGroupID.z (plus z0); a stride 0 broadcasts an operand across them. C is
// contiguous. The including file sets the tile (BM, BN, BK, TM, TN; TM and
// TN multiples of 4) and defines MM_F16 for f16 storage.

#ifdef MM_F16
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define ELEM float16_t
#else
#define ELEM float
#endif

#define TX (BN / TN)
#define TY (BM / TM)
#define NT (TX * TY)

layout(local_size_x = NT) in;

layout(std430, binding = 0) readonly buffer BufA { ELEM a[]; };
layout(std430, binding = 1) readonly buffer BufB { ELEM b[]; };
layout(std430, binding = 2) buffer BufC { ELEM c[]; };

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
} p;

#define MM_ACCUMULATE 1u // C += the product (a matmul adding into a gradient)
#define MM_BF16 2u       // round f32 operands to bf16 first (KILN_MATMUL_BF16)
#define MM_A_KFAST 4u    // a's k is its unit-stride dim: stage A along k
#define MM_B_KFAST 8u    // b's k is: stage B along k

// +1 vec4: a slab stored across its fast dim does not hit one bank
shared vec4 sa[BK][BM / 4 + 1];
shared vec4 sb[BK][BN / 4 + 1];

// f32 -> bf16 -> f32, rounding to nearest even; NaN stays a quiet NaN
// (kiln__f32_to_bf16).
float round_bf16(float v) {
    uint x = floatBitsToUint(v);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uintBitsToFloat((x | 0x00400000u) & 0xffff0000u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return uintBitsToFloat(x & 0xffff0000u);
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint tx = tid % TX, ty = tid / TX;
    const uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;
    const uint z = p.z0 + gl_WorkGroupID.z;
    const uint i2 = z % p.bd2, i1 = (z / p.bd2) % p.bd1, i0 = z / (p.bd2 * p.bd1);
    const uint abase = p.a0 + i0 * p.as0 + i1 * p.as1 + i2 * p.as2;
    const uint bbase = p.b0 + i0 * p.bs0 + i1 * p.bs1 + i2 * p.bs2;
    const bool a_kfast = (p.flags & MM_A_KFAST) != 0u, b_kfast = (p.flags & MM_B_KFAST) != 0u;
    const bool bf16 = (p.flags & MM_BF16) != 0u;

    float acc[TM][TN];
    [[unroll]] for (uint i = 0; i < TM; i++)
        [[unroll]] for (uint j = 0; j < TN; j++) acc[i][j] = 0.0;

    for (uint k0 = 0; k0 < p.k; k0 += BK) {
        // stage A[row0 .. +BM, k0 .. +BK] and B[k0 .. +BK, col0 .. +BN]
        [[unroll]] for (uint r = 0; r < BM * BK / NT; r++) {
            uint l = tid + r * NT;
            uint mm = a_kfast ? l / BK : l % BM, kk = a_kfast ? l % BK : l / BM;
            uint gm = row0 + mm, gk = k0 + kk;
            float v = 0.0;
            if (gm < p.m && gk < p.k) v = float(a[abase + gm * p.sam + gk * p.sak]);
            sa[kk][mm / 4][mm % 4] = bf16 ? round_bf16(v) : v;
        }
        [[unroll]] for (uint r = 0; r < BN * BK / NT; r++) {
            uint l = tid + r * NT;
            uint nn = b_kfast ? l / BK : l % BN, kk = b_kfast ? l % BK : l / BN;
            uint gn = col0 + nn, gk = k0 + kk;
            float v = 0.0;
            if (gn < p.n && gk < p.k) v = float(b[bbase + gk * p.sbk + gn * p.sbn]);
            sb[kk][nn / 4][nn % 4] = bf16 ? round_bf16(v) : v;
        }
        barrier();
        [[unroll]] for (uint kk = 0; kk < BK; kk++) {
            vec4 av[TM / 4], bv[TN / 4];
            [[unroll]] for (uint i = 0; i < TM / 4; i++) av[i] = sa[kk][ty * (TM / 4) + i];
            [[unroll]] for (uint j = 0; j < TN / 4; j++) bv[j] = sb[kk][tx * (TN / 4) + j];
            [[unroll]] for (uint i = 0; i < TM; i++)
                [[unroll]] for (uint j = 0; j < TN; j++) acc[i][j] = fma(av[i / 4][i % 4], bv[j / 4][j % 4], acc[i][j]);
        }
        barrier();
    }

    const uint cbase = p.c0 + z * p.m * p.n;
    const bool accumulate = (p.flags & MM_ACCUMULATE) != 0u;
    [[unroll]] for (uint i = 0; i < TM; i++) {
        uint gm = row0 + ty * TM + i;
        if (gm >= p.m) continue;
        [[unroll]] for (uint j = 0; j < TN; j++) {
            uint gn = col0 + tx * TN + j;
            if (gn >= p.n) continue;
            uint o = cbase + gm * p.n + gn;
            // accumulating: the product is rounded to C's dtype first, as the CPU's scratch
            c[o] = accumulate ? ELEM(float(c[o]) + float(ELEM(acc[i][j]))) : ELEM(acc[i][j]);
        }
    }
}
