/* qmatmul_gq.c — KILN_OP_QMATMUL for the GQ dtypes with few rows of x
 * (qmatmul_gq.h): the driver, threaded over output rows, the kernel choice
 * and the scalar reference dot product. */
#include "qmatmul_gq.h"

#include "../../quant/quant.h"
#include "cpu_features.h"
#include "pool.h"
#include "qmatmul.h"

#include <math.h>
#include <stdlib.h>

float kiln__gq_dot_ref(const uint8_t *w, int bits, int group, const int8_t *xq, const float *dx, int64_t nc) {
    const int cpb = group / KILN_GQ_CHUNK;
    const size_t bsz = (size_t)KILN_GQ_BLOCK_BYTES(bits, group);
    float acc[16] = {0};
    for (int64_t i = 0; i < nc; i++) {
        const uint8_t *b = w + (size_t)(i / cpb) * bsz, *c = b + KILN_GQ_HEAD + (i % cpb) * KILN_GQ_CHUNK_BYTES(bits);
        const float d = kiln__gq_scale(b) * dx[i];
        const int8_t *x8 = xq + 32 * i;
        for (int l = 0; l < 8; l++) {
            int32_t s = 0;
            for (int j = 4 * l; j < 4 * l + 4; j++) s += (kiln__gq_chunk_code(c, bits, j) - (int32_t)b[2]) * x8[j];
            acc[8 * (i & 1) + l] = fmaf((float)s, d, acc[8 * (i & 1) + l]);
        }
    }
    float s = 0.0f;
    for (int l = 0; l < 16; l++) s += acc[l];
    return s;
}

kiln_gq_dot *kiln__gq_dot_best(void) {
    const kiln_cpu_caps *c = kiln__cpu_caps();
    kiln_gq_dot *f = NULL;
    if (kiln__cpu_avx512vnni(c)) f = kiln__gq_dot_avx512vnni();
    if (!f && kiln__cpu_avxvnni(c)) f = kiln__gq_dot_avxvnni();
    if (!f && kiln__cpu_avx2(c)) f = kiln__gq_dot_avx2();
    if (!f && kiln__cpu_neondot(c)) f = kiln__gq_dot_neondot();
    return f ? f : kiln__gq_dot_ref;
}

typedef struct gq_job {
    kiln_gq_dot *dot;
    int bits, group;
    int64_t m, n, k, nc;
    size_t row_bytes;
    const void *w;
    const int8_t *xq;
    const float *dx;
    float *y;
} gq_job;

/* Rows of W [r0, r1) against every row of x. */
static void gq_rows(void *arg, int64_t r0, int64_t r1, int tid) {
    const gq_job *j = arg;
    (void)tid;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t i = 0; i < j->m; i++)
            j->y[i * j->n + r] = j->dot((const uint8_t *)j->w + (size_t)r * j->row_bytes, j->bits, j->group,
                                        j->xq + i * j->k, j->dx + i * j->nc, j->nc);
}

kiln_status kiln__qmatmul_gq_cpu(kiln_dtype t, int64_t m, int64_t n, int64_t k, const float *x, const void *w,
                                 float *y, int n_threads) {
    kiln_gq_dot *dot = kiln__gq_dot_best();
    const int bits = kiln__gq_bits(t), group = kiln__gq_group(t);
    const int64_t nc = k / KILN_GQ_CHUNK;
    const size_t row_bytes = kiln__elems_bytes(t, k);
    int8_t *xq = kiln__malloc((size_t)(m * k));
    float *dx = kiln__malloc((size_t)(m * nc) * sizeof(float));
    if (!xq || !dx) {
        free(xq), free(dx);
        return kiln__errs(KILN_ERR_OOM, "qmatmul: out of memory quantizing the activations");
    }
    for (int64_t i = 0; i < m; i++) kiln__qmm_quantize_x(x + i * k, xq + i * k, dx + i * nc, k);
    /* ranges of rows per thread, as qmatmul.c */
    gq_job j = {dot, bits, group, m, n, k, nc, row_bytes, w, xq, dx, y};
    kiln__pool_for(n, 32, n * k >= (1 << 16) ? n_threads : 1, gq_rows, &j);
    free(xq), free(dx);
    return KILN_OK;
}
