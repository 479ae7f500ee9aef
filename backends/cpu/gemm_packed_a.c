/* gemm_packed_a.c — kiln's own f32 GEMM with A packed once beforehand
 * (gemm.h), for an A that multiplies many B: Winograd's transformed
 * kernels, each multiplied by every block of tiles of a layer, were
 * packed again for each block (about 5% of a ResNet-18 b32 step's CPU
 * time). A is packed as gemm.c's blocked driver packs it (the same kc
 * blocks and MR-row panels), and its sums run in the driver's order; B is
 * packed a kc x nc block at a time and the tiles run by the driver's own
 * pieces (kiln__sgemm_pack_b, kiln__sgemm_run_tile). */
#include "gemm.h"
#include "gemm_kernels.h"
#include "scratch.h"

#include <string.h>

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

kiln__sgemm_packed_layout kiln__sgemm_packed_a_layout(int64_t m, int64_t k) {
    const kiln__sgemm_kernel *K = kiln__sgemm_kernel_pick();
    const kiln__sgemm_blocks bl = kiln__sgemm_blocks_for(K);
    /* gemm.c's driver's kc: even blocks of at most bl.kc */
    int64_t kcb = k > 0 ? ceil_div(k, ceil_div(k, bl.kc)) : 1;
    return (kiln__sgemm_packed_layout){K->mr, kcb, ceil_div(m, K->mr) * K->mr};
}

size_t kiln__sgemm_packed_a_floats(int64_t m, int64_t k) {
    return (size_t)(kiln__sgemm_packed_a_layout(m, k).mp * k);
}

void kiln__sgemm_pack_a(int64_t m, int64_t k, const float *a, int64_t lda, float *pa) {
    const kiln__sgemm_kernel *K = kiln__sgemm_kernel_pick();
    const kiln__sgemm_packed_layout L = kiln__sgemm_packed_a_layout(m, k);
    for (int64_t pc = 0; pc < k; pc += L.kcb) {
        int64_t kc = min64(L.kcb, k - pc);
        for (int64_t ir = 0; ir < m; ir += L.mr)
            K->pack_t(a + ir * lda + pc, lda, (int)min64(L.mr, m - ir), kc, (int)L.mr, pa + pc * L.mp + ir * kc);
    }
}

void kiln__sgemm_packed_a(int64_t m, int64_t n, int64_t k, const float *pa, const float *b, int64_t ldb, float *c,
                          int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        for (int64_t i = 0; i < m; i++) memset(c + i * ldc, 0, (size_t)n * sizeof *c);
        return;
    }
    const kiln__sgemm_kernel *K = kiln__sgemm_kernel_pick();
    const kiln__sgemm_blocks bl = kiln__sgemm_blocks_for(K);
    const int MR = K->mr, NR = K->nr;
    const kiln__sgemm_packed_layout L = kiln__sgemm_packed_a_layout(m, k);
    int64_t kcb = L.kcb, mp = L.mp, ncb = min64(ceil_div(n, NR) * NR, bl.nc);
    float *pb = kiln__scratch_slot(KILN_SCRATCH_GEMM_B, (size_t)(kcb * ncb) * sizeof *pb);
    if (!pb) { /* out of memory for packing B: plain loops over the packed A */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                float s = 0;
                for (int64_t p = 0; p < k; p++) {
                    int64_t pc = p / kcb * kcb, kc = min64(kcb, k - pc);
                    s += pa[pc * mp + i / MR * MR * kc + (p - pc) * MR + i % MR] * b[p * ldb + j];
                }
                c[i * ldc + j] = s;
            }
        return;
    }
    for (int64_t jc = 0; jc < n; jc += ncb) {
        int64_t nc = min64(ncb, n - jc);
        for (int64_t pc = 0; pc < k; pc += kcb) {
            int64_t kc = min64(kcb, k - pc);
            kiln__sgemm_pack_b(K, false, b, ldb, pc, kc, jc, nc, pb);
            kiln__sgemm_packed_a_block(m, nc, pc, kc, pa, pb, kc, c + jc, ldc);
        }
    }
}

void kiln__sgemm_packed_a_block(int64_t m, int64_t n, int64_t pc, int64_t kc, const float *pa, const float *pb,
                                int64_t pbs, float *c, int64_t ldc) {
    const kiln__sgemm_kernel *K = kiln__sgemm_kernel_pick();
    const int64_t mc = kiln__sgemm_blocks_for(K).mc, mp = ceil_div(m, K->mr) * K->mr;
    for (int64_t ic = 0; ic < m; ic += mc)
        for (int64_t jr = 0; jr < n; jr += K->nr)
            for (int64_t ir = ic; ir < min64(ic + mc, m); ir += K->mr)
                kiln__sgemm_run_tile(K, kc, pa + pc * mp + ir * kc, K->mr, pb + jr * pbs, K->nr, c + ir * ldc + jr,
                                     ldc, (int)min64(K->mr, m - ir), (int)min64(K->nr, n - jr), 1.0f,
                                     pc == 0 ? 0.0f : 1.0f);
}
