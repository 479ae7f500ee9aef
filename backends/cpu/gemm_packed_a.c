/* gemm_packed_a.c — kiln's own f32 GEMM with A packed once beforehand
 * (gemm.h), for an A that multiplies many B: Winograd's 36 transformed
 * kernels, each multiplied by every block of tiles of a layer, were
 * packed again for each block (about 7% of a ResNet-18 step's CPU time).
 * A is packed as gemm.c's blocked driver packs it (the same kc blocks and
 * MR-row panels, sums in the same order), so the product's bits are the
 * driver's; B is packed here a kc x nc block at a time, as there. */
#include "gemm.h"
#include "gemm_kernels.h"
#include "scratch.h"

#include <string.h>

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The kc of gemm.c's driver for depth k: even blocks of at most bl.kc. */
static int64_t depth_block(int64_t k, const kiln__sgemm_blocks *bl) { return ceil_div(k, ceil_div(k, bl->kc)); }

size_t kiln__sgemm_packed_a_floats(int64_t m, int64_t k) {
    const kiln__sgemm_kernel *K = kiln__sgemm_kernel_pick();
    return (size_t)(ceil_div(m, K->mr) * K->mr * k);
}

int kiln__sgemm_packed_a_mr(void) { return kiln__sgemm_kernel_pick()->mr; }

/* The block of depth pc at pa + pc * mp (mp: m rounded up to MR), its
 * panel of rows ir.. at + ir * kc, element (i, p) at + p * MR + i % MR. */
void kiln__sgemm_pack_a_rows(int64_t m, int64_t k, int64_t r0, int64_t r1, const float *a, int64_t lda, float *pa) {
    const kiln__sgemm_kernel *K = kiln__sgemm_kernel_pick();
    const kiln__sgemm_blocks bl = kiln__sgemm_blocks_for(K);
    int64_t kcb = depth_block(k, &bl), mp = ceil_div(m, K->mr) * K->mr;
    for (int64_t pc = 0; pc < k; pc += kcb) {
        int64_t kc = min64(kcb, k - pc);
        for (int64_t ir = r0; ir < r1; ir += K->mr)
            K->pack_t(a + (ir - r0) * lda + pc, lda, (int)min64(K->mr, r1 - ir), kc, K->mr, pa + pc * mp + ir * kc);
    }
}

void kiln__sgemm_pack_a(int64_t m, int64_t k, const float *a, int64_t lda, float *pa) {
    kiln__sgemm_pack_a_rows(m, k, 0, m, a, lda, pa);
}

/* B[p0 .. p0+kc, 0 .. nc] (row-major) into NR-wide panels, zero-padded. */
static void pack_b_rows(int nr, const float *b, int64_t ldb, int64_t kc, int64_t nc, float *pb) {
    for (int64_t p = 0; p < kc; p++) {
        const float *s = b + p * ldb;
        float *d = pb + p * nr;
        for (int64_t jr = 0; jr < nc; jr += nr) {
            int64_t w = min64(nr, nc - jr);
#pragma omp simd
            for (int64_t j = 0; j < w; j++) d[jr * kc + j] = s[jr + j];
            for (int64_t j = w; j < nr; j++) d[jr * kc + j] = 0;
        }
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
    int64_t kcb = depth_block(k, &bl), mp = ceil_div(m, MR) * MR, ncb = min64(ceil_div(n, NR) * NR, bl.nc);
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
    float t[16 * 32]; /* gemm.c's largest MR x NR */
    for (int64_t jc = 0; jc < n; jc += ncb) {
        int64_t nc = min64(ncb, n - jc);
        for (int64_t pc = 0; pc < k; pc += kcb) {
            int64_t kc = min64(kcb, k - pc);
            float beta = pc == 0 ? 0.0f : 1.0f;
            pack_b_rows(NR, b + pc * ldb + jc, ldb, kc, nc, pb);
            for (int64_t ic = 0; ic < m; ic += bl.mc)
                for (int64_t jr = 0; jr < nc; jr += NR) {
                    int nr = (int)min64(NR, nc - jr);
                    for (int64_t ir = ic; ir < min64(ic + bl.mc, m); ir += MR) {
                        int mr = (int)min64(MR, m - ir);
                        const float *ap = pa + pc * mp + ir * kc, *bp = pb + jr * kc;
                        float *cij = c + ir * ldc + jc + jr;
                        if (nr == NR && mr == MR) K->ukr(kc, ap, MR, bp, NR, cij, ldc, 1.0f, beta);
                        else if (nr == NR && K->ukr_rows) K->ukr_rows(mr, kc, ap, MR, bp, NR, cij, ldc, 1.0f, beta);
                        else { /* an edge tile through t */
                            K->ukr(kc, ap, MR, bp, NR, t, NR, 1.0f, 0.0f);
                            for (int i = 0; i < mr; i++)
                                for (int j = 0; j < nr; j++)
                                    cij[i * ldc + j] = pc == 0 ? t[i * NR + j] : t[i * NR + j] + cij[i * ldc + j];
                        }
                    }
                }
        }
    }
}
