// mm_splitk.glsl — the matmul kernel for outputs too small to give the
// tiled kernel (mm_tile.glsl) enough workgroups but deep in K, such as a
// convolution's weight gradient ([O, N*OH*OW] x [N*OH*OW, C*kh*kw]): one
// workgroup per TM x TN block of C (per batch matrix), whose NT
// invocations split K among them (invocation i takes k = i, i + NT, ...,
// so neighbours read neighbouring k) and then sum their partial blocks in
// shared memory, a tree of log2(NT) steps. Operands and push constants:
// mm_common.glsl. The including file sets TM, TN and NT (a power of 2).
//
// With MM_PARTIAL (split K across workgroups as well, so that a tiny
// output still gives the device enough workgroups), gl_WorkGroupID.z is
// batch * nsplit + split: the workgroup takes K-slice `split` only and
// writes its f32 block to slot z of the partial tiles, [batch][nsplit][M][N];
// mm_sum.glsl adds them up.

layout(local_size_x = NT) in;

#include "mm_common.glsl"

shared float part[TM * TN][NT];

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint row0 = gl_WorkGroupID.y * TM, col0 = gl_WorkGroupID.x * TN;
    uint z, kbeg, kend;
    mm_slice(z, kbeg, kend);
    const uint abase = a_base(z), bbase = b_base(z);
    const bool bf16 = (p.flags & MM_BF16) != 0u;
    // rows and columns past the edge read row/column 0 and are not stored
    uint arow[TM], bcol[TN];
    [[unroll]] for (uint i = 0; i < TM; i++) arow[i] = abase + (row0 + i < p.m ? row0 + i : 0u) * p.sam;
    [[unroll]] for (uint j = 0; j < TN; j++) bcol[j] = bbase + (col0 + j < p.n ? col0 + j : 0u) * p.sbn;

    float acc[TM][TN];
    [[unroll]] for (uint i = 0; i < TM; i++)
        [[unroll]] for (uint j = 0; j < TN; j++) acc[i][j] = 0.0;
    for (uint k = kbeg + tid; k < kend; k += NT) {
        float av[TM], bv[TN];
        [[unroll]] for (uint i = 0; i < TM; i++) {
            av[i] = LOAD(a[arow[i] + k * p.sak]);
            if (bf16) av[i] = round_bf16(av[i]);
        }
        [[unroll]] for (uint j = 0; j < TN; j++) {
            bv[j] = LOAD(b[bcol[j] + k * p.sbk]);
            if (bf16) bv[j] = round_bf16(bv[j]);
        }
        [[unroll]] for (uint i = 0; i < TM; i++)
            [[unroll]] for (uint j = 0; j < TN; j++) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
    }

    [[unroll]] for (uint i = 0; i < TM; i++)
        [[unroll]] for (uint j = 0; j < TN; j++) part[i * TN + j][tid] = acc[i][j];
    barrier();
    for (uint s = NT / 2; s > 0u; s >>= 1) {
        if (tid < s)
            [[unroll]] for (uint o = 0; o < TM * TN; o++) part[o][tid] += part[o][tid + s];
        barrier();
    }
    // invocation o < TM*TN stores output o of the block
    if (tid < TM * TN) {
        uint gm = row0 + tid / TN, gn = col0 + tid % TN;
#ifdef MM_PARTIAL
        if (gm < p.m && gn < p.n) c[p.c0 + gl_WorkGroupID.z * p.m * p.n + gm * p.n + gn] = part[tid][0];
#else
        if (gm < p.m && gn < p.n) store_c(p.c0 + z * p.m * p.n + gm * p.n + gn, part[tid][0]);
#endif
    }
}
