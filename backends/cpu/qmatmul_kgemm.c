/* qmatmul_kgemm.c — the integer GEMM for prompts of the K types, IQ4_XS
 * and the blocks of 32 (qmatmul_kgemm.h, qmatmul_q32gemm.h): the
 * activations to the weight's partner and the driver, threaded over panels
 * of W's rows, each decoded by its thread. */
#include "qmatmul_kgemm.h"
#include "qmatmul_q32gemm.h"

#include "../../quant/quant.h"
#include "cpu_features.h"
#include "pool.h"
#include "scratch.h"

#include <stdlib.h>
#include <string.h>

#define NC KILN_KGEMM_NC
#define MR KILN_KGEMM_MR

const kiln_kgemm_kernels *kiln__qmm_kgemm_kernels(kiln_dtype t) {
    const kiln_cpu_caps *c = kiln__cpu_caps();
    const bool q32 = kiln__q32gemm_type(t);
    if (kiln__cpu_avx512vnni(c)) return q32 ? kiln__q32gemm_kernels_avx512vnni() : kiln__kgemm_kernels_avx512vnni();
    if (kiln__cpu_avxvnni(c)) return q32 ? kiln__q32gemm_kernels_avxvnni() : kiln__kgemm_kernels_avxvnni();
    if (kiln__cpu_avx512(c) && (q32 || t != KILN_IQ4_XS)) /* IQ4_XS: AVX2's tile of its own */
        return q32 ? kiln__q32gemm_kernels_avx512() : kiln__kgemm_kernels_avx512();
    if (kiln__cpu_avx2(c))
        return q32 ? kiln__q32gemm_kernels_avx2()
                   : t == KILN_IQ4_XS ? kiln__kgemm_kernels_avx2_iq4xs() : kiln__kgemm_kernels_avx2();
    if (kiln__cpu_neondot(c)) return q32 ? kiln__q32gemm_kernels_neondot() : kiln__kgemm_kernels_neondot();
    if (kiln__cpu_neon(c)) return q32 ? kiln__q32gemm_kernels_neon() : kiln__kgemm_kernels_neon();
    return NULL;
}

bool kiln__qmm_kgemm_handles(kiln_dtype t) {
    switch (t) {
    case KILN_Q2_K: case KILN_Q3_K: case KILN_Q4_K: case KILN_Q5_K: case KILN_Q6_K: case KILN_IQ4_XS: break;
    case KILN_Q4_1: case KILN_Q5_0: case KILN_Q5_1: case KILN_IQ4_NL: break;
    default: return false;
    }
    const kiln_kgemm_kernels *kk = kiln__qmm_kgemm_kernels(t);
    return kk && (kk->wide_codes || (t != KILN_IQ4_XS && t != KILN_IQ4_NL));
}

typedef struct kgemm_job {
    kiln_dtype t;
    int64_t m, n, k, nb;
    const float *x;
    const char *w;
    char *xa;
    size_t wrow, xrow;
    float *y;
    const kiln_kgemm_kernels *kk;
    int fail;
} kgemm_job;

static void quantize_rows(void *arg, int64_t i0, int64_t i1, int tid) {
    const kgemm_job *j = arg;
    (void)tid;
    for (int64_t i = i0; i < i1; i++)
        if (kiln__q32gemm_type(j->t))
            kiln__q32gemm_quantize(j->t, j->x + i * j->k, (kiln_q32x *)(j->xa + (size_t)i * j->xrow), j->k);
        else kiln__types[KILN_Q8_K].from_f32(j->x + i * j->k, j->xa + (size_t)i * j->xrow, j->k);
}

/* panels [u0, u1) of NC rows of W, each decoded once into the thread's
 * scratch and run against every row of x */
static void panels(void *arg, int64_t u0, int64_t u1, int tid) {
    kgemm_job *j = arg;
    const bool has_min = j->t == KILN_Q2_K || j->t == KILN_Q4_K || j->t == KILN_Q5_K || j->t == KILN_Q4_1 ||
                         j->t == KILN_Q5_1; /* the Q8_1 partners' m s too */
    bool owned;
    char *panel = kiln__scratch_get((size_t)j->nb * j->kk->block, &owned);
    (void)tid;
    if (!panel) {
        __atomic_store_n(&j->fail, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t u = u0; u < u1; u++) {
        const int64_t j0 = u * NC;
        const int cols = j->n - j0 < NC ? (int)(j->n - j0) : NC;
        j->kk->pack(j->t, j->w + (size_t)j0 * j->wrow, j->wrow, cols, j->nb, panel);
        for (int64_t i = 0; i < j->m; i += MR)
            j->kk->tile(j->m - i < MR ? (int)(j->m - i) : MR, j->xa + (size_t)i * j->xrow, j->xrow, panel, j->nb,
                        has_min, j->y + i * j->n + j0, j->n, cols);
    }
    if (owned) free(panel);
}

kiln_status kiln__qmm_kgemm(kiln_dtype t, int64_t m, int64_t n, int64_t k, const float *x, const void *w, float *y,
                            int n_threads) {
    const int64_t nb = k / kiln__types[t].blck;
    const size_t xrow = kiln__q32gemm_type(t) ? (size_t)nb * sizeof(kiln_q32x) : kiln__elems_bytes(KILN_Q8_K, k);
    kgemm_job j = {.t = t, .m = m, .n = n, .k = k, .nb = nb, .x = x, .w = w, .wrow = kiln__elems_bytes(t, k),
                   .xrow = xrow, .y = y, .kk = kiln__qmm_kgemm_kernels(t)};
    if (!(j.xa = kiln__malloc((size_t)m * xrow)))
        return kiln__errs(KILN_ERR_OOM, "qmatmul: out of memory quantizing the activations");
    const int64_t units = (n + NC - 1) / NC;
    const int nt = units > 1 ? n_threads : 1;
    kiln__pool_for(m, 8, nt, quantize_rows, &j);
    kiln__pool_for(units, 1, nt, panels, &j);
    free(j.xa);
    return j.fail ? kiln__errs(KILN_ERR_OOM, "qmatmul: out of memory for a W panel") : KILN_OK;
}
