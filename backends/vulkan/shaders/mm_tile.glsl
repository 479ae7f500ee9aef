// mm_tile.glsl — the matmul kernel (vk_matmul.c): per batch matrix,
// C[M, N] = op(A)[M, K] op(B)[K, N], accumulated in f32 (operands and
// push constants: mm_common.glsl).
//
// One workgroup computes a BM x BN tile of C; each of its (BM/TM)*(BN/TN)
// invocations holds a TM x TN block of it in registers. The K loop stages
// BK-deep slabs of A and B in shared memory (converted to f32, elements
// outside the matrices read as 0, so edge tiles need no other care) and
// each invocation reads its TM + TN operands per k as vec4s: on lavapipe
// every shared read is a gather, and vec4 reads halved the time of a 512^3
// matmul; on a GPU they are the usual 128-bit shared loads. The batch
// matrix is z0 + gl_WorkGroupID.z. The including file sets the tile (BM,
// BN, BK, TM, TN; TM and TN multiples of 4).
//
// With MM_PARTIAL (split K across workgroups, for outputs of too few tiles
// to fill the device), gl_WorkGroupID.z is batch * nsplit + split: the
// workgroup walks K-slice `split` only and writes its f32 tile to slot z
// of the partial tiles, [batch][nsplit][M][N]; mm_sum.glsl adds them up.

#define TX (BN / TN)
#define TY (BM / TM)
#define NT (TX * TY)

layout(local_size_x = NT) in;

#include "mm_common.glsl"

// +1 vec4: a slab stored across its fast dim does not hit one bank
shared vec4 sa[BK][BM / 4 + 1];
shared vec4 sb[BK][BN / 4 + 1];

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint tx = tid % TX, ty = tid / TX;
    const uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;
    uint z, kbeg, kend;
    mm_slice(z, kbeg, kend);
    const uint abase = a_base(z), bbase = b_base(z);
    const bool a_kfast = (p.flags & MM_A_KFAST) != 0u, b_kfast = (p.flags & MM_B_KFAST) != 0u;
    const bool bf16 = (p.flags & MM_BF16) != 0u;

    float acc[TM][TN];
    [[unroll]] for (uint i = 0; i < TM; i++)
        [[unroll]] for (uint j = 0; j < TN; j++) acc[i][j] = 0.0;

    for (uint k0 = kbeg; k0 < kend; k0 += BK) {
        // stage A[row0 .. +BM, k0 .. +BK] and B[k0 .. +BK, col0 .. +BN]
        [[unroll]] for (uint r = 0; r < BM * BK / NT; r++) {
            uint l = tid + r * NT;
            uint mm = a_kfast ? l / BK : l % BM, kk = a_kfast ? l % BK : l / BM;
            uint gm = row0 + mm, gk = k0 + kk;
            float v = 0.0;
            if (gm < p.m && gk < kend) v = LOAD(a[abase + gm * p.sam + gk * p.sak]);
            sa[kk][mm / 4][mm % 4] = bf16 ? round_bf16(v) : v;
        }
        [[unroll]] for (uint r = 0; r < BN * BK / NT; r++) {
            uint l = tid + r * NT;
            uint nn = b_kfast ? l / BK : l % BN, kk = b_kfast ? l % BK : l / BN;
            uint gn = col0 + nn, gk = k0 + kk;
            float v = 0.0;
            if (gn < p.n && gk < kend) v = LOAD(b[bbase + gk * p.sbk + gn * p.sbn]);
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

#ifdef MM_PARTIAL
    const uint cbase = p.c0 + gl_WorkGroupID.z * p.m * p.n;
#else
    const uint cbase = p.c0 + z * p.m * p.n;
#endif
    [[unroll]] for (uint i = 0; i < TM; i++) {
        uint gm = row0 + ty * TM + i;
        if (gm >= p.m) continue;
        [[unroll]] for (uint j = 0; j < TN; j++) {
            uint gn = col0 + tx * TN + j;
#ifdef MM_PARTIAL
            if (gn < p.n) c[cbase + gm * p.n + gn] = acc[i][j];
#else
            if (gn < p.n) store_c(cbase + gm * p.n + gn, acc[i][j]);
#endif
        }
    }
}
