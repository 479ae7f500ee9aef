/* qmatmul_ggml.c — the batch-1 products of ggml's block types beyond
 * Q8_0 / Q4_0 (qmatmul_ggml.h): the scalar reference dot product, the
 * dispatch, and the driver, threaded over rows of W. */
#include "qmatmul_ggml.h"

#include "../../quant/quant.h"
#include "cpu_features.h"
#include "pool.h"
#include "qmatmul.h"
#include "qmatmul_kq.h"

#include <stdlib.h>

/* sum over sub-blocks of sc[s] times the integer dot product of the
 * block's codes with xq over s */
static int32_t isum(const kiln_qints *b, const int8_t *xq) {
    int32_t tot = 0;
    for (int s = 0; s < b->n / b->sub; s++) {
        int32_t v = 0;
        for (int e = s * b->sub; e < (s + 1) * b->sub; e++) v += (int32_t)b->q[e] * xq[e];
        tot += b->sc[s] * v;
    }
    return tot;
}

bool kiln__qmm_ggml_lanes(kiln_dtype t) {
    return t == KILN_Q4_1 || t == KILN_Q5_0 || t == KILN_Q5_1 || t == KILN_IQ4_NL;
}

float kiln__qmm_ggml_lanes_sum(const float l[8]) {
    const float s0 = l[0] + l[4], s1 = l[1] + l[5], s2 = l[2] + l[6], s3 = l[3] + l[7];
    return (s0 + s2) + (s1 + s3);
}

float kiln__qmm_dot_ggml_ref(kiln_dtype t, const void *w, const void *xa, int64_t nb) {
    const kiln_dtype p = kiln__types[t].dot_type;
    const int64_t grouped = kiln__qmm_ggml_lanes(t) ? nb / 8 * 8 : 0;
    float sum = 0.0f, lane[8] = {0};
    kiln_qints b;
    for (int64_t i = 0; i < nb && kiln__qints_unpack(t, w, i, &b); i++) {
        float term;
        if (i == grouped && grouped) sum = kiln__qmm_ggml_lanes_sum(lane);
        if (p == KILN_Q8_0) {
            const kiln_block_q8_0 *a = (const kiln_block_q8_0 *)xa + i;
            term = b.d * kiln__f16_to_f32(a->d) * (float)isum(&b, a->qs);
        } else if (p == KILN_Q8_1) {
            const kiln_block_q8_1 *a = (const kiln_block_q8_1 *)xa + i;
            term = b.d * kiln__f16_to_f32(a->d) * (float)isum(&b, a->qs) + b.dm * kiln__f16_to_f32(a->s);
        }
        if (p == KILN_Q8_0 || p == KILN_Q8_1) {
            if (i < grouped) lane[i % 8] += term;
            else sum += term;
        } else { /* Q8_K */
            const kiln_block_q8_K *a = (const kiln_block_q8_K *)xa + i;
            int32_t summs = 0;
            for (int s = 0; b.has_min && s < b.n / b.sub; s++)
                for (int j = s * b.sub / 16; j < (s + 1) * b.sub / 16; j++) summs += b.mn[s] * a->bsums[j];
            sum += a->d * b.d * (float)isum(&b, a->qs) + (b.has_min ? a->d * b.dm * (float)summs : 0.0f);
        }
    }
    return grouped && grouped == nb ? kiln__qmm_ggml_lanes_sum(lane) : sum;
}

/* The reference as a kernel per dtype, for the dispatch's table. */
#define GGML_DTYPES(X)                                                                                          \
    X(KILN_Q4_1, q4_1) X(KILN_Q5_0, q5_0) X(KILN_Q5_1, q5_1) X(KILN_Q8_1, q8_1) X(KILN_Q2_K, q2_K) X(KILN_Q3_K, q3_K) \
    X(KILN_Q4_K, q4_K) X(KILN_Q5_K, q5_K) X(KILN_Q6_K, q6_K) X(KILN_Q8_K, q8_K) X(KILN_IQ4_NL, iq4_nl)               \
    X(KILN_IQ4_XS, iq4_xs)
#define REF_KERNEL(T, t) \
    static float dot_##t##_ref(const void *w, const void *xa, int64_t nb) { return kiln__qmm_dot_ggml_ref(T, w, xa, nb); }
GGML_DTYPES(REF_KERNEL)

/* The per-ISA kernels, chosen by kiln__cpu_caps() as qmatmul.c's kernels()
 * does (the highest level that has one for t), else the reference: the K
 * types' and IQ4_XS's on x86 (qmatmul_kq.h), the blocks of 32 on x86 and
 * every type on ARM (qmatmul_q32_*.c, qmatmul_ggml_neon*.c). */
kiln_qmm_dot_ggml *kiln__qmm_ggml_kernel(kiln_dtype t) {
    const kiln_cpu_caps *c = kiln__cpu_caps();
    kiln_qmm_dot_ggml *k = kiln__qmm_kq_kernel(t);
    if (!k && kiln__cpu_avx512vnni(c)) k = kiln__qmm_ggml_avx512vnni(t);
    if (!k && kiln__cpu_avxvnni(c)) k = kiln__qmm_ggml_avxvnni(t);
    if (!k && kiln__cpu_avx2(c)) k = kiln__qmm_ggml_avx2(t);
    if (!k && kiln__cpu_neondot(c)) k = kiln__qmm_ggml_neondot(t);
    if (!k && kiln__cpu_neon(c)) k = kiln__qmm_ggml_neon(t);
    if (k) return k;
    switch (t) {
#define REF_CASE(T, t) \
    case T: return dot_##t##_ref;
        GGML_DTYPES(REF_CASE)
#undef REF_CASE
    default: return NULL;
    }
}

kiln_qmm_dot_ggml_rows *kiln__qmm_ggml_rows_kernel(kiln_dtype t) {
    const kiln_cpu_caps *c = kiln__cpu_caps();
    if (kiln__qmm_kq_kernel(t)) return kiln__qmm_kq_rows_kernel(t);
    if (kiln__cpu_avx512vnni(c)) return kiln__qmm_ggml_rows_avx512vnni(t);
    if (kiln__cpu_avxvnni(c)) return kiln__qmm_ggml_rows_avxvnni(t);
    if (kiln__cpu_avx2(c)) return kiln__qmm_ggml_rows_avx2(t);
    if (kiln__cpu_neondot(c)) return kiln__qmm_ggml_rows_neondot(t);
    return kiln__cpu_neon(c) ? kiln__qmm_ggml_rows_neon(t) : NULL;
}

bool kiln__qmm_ggml_handles(kiln_dtype t) { return kiln__qmm_ggml_kernel(t) != NULL; }

typedef struct ggml_job {
    int64_t m, n, nb;
    const char *w, *xa;
    size_t wrow, xrow;
    float *y;
    kiln_qmm_dot_ggml *dot;
    kiln_qmm_dot_ggml_rows *many; /* NULL: x row by row */
} ggml_job;

/* rows [r0, r1) of W against every row of x: with a rows kernel, x's rows
 * in groups as even as KILN_QMM_ROWS_MAX allows (7: 3 + 4), each group
 * reading the row of W once */
static void rows(void *arg, int64_t r0, int64_t r1, int tid) {
    const ggml_job *j = arg;
    const int64_t groups = (j->m + KILN_QMM_ROWS_MAX - 1) / KILN_QMM_ROWS_MAX;
    (void)tid;
    for (int64_t r = r0; r < r1; r++) {
        const char *w = j->w + (size_t)r * j->wrow;
        if (!j->many || j->m == 1) {
            for (int64_t i = 0; i < j->m; i++) j->y[i * j->n + r] = j->dot(w, j->xa + (size_t)i * j->xrow, j->nb);
            continue;
        }
        for (int64_t g = 0, i = 0; g < groups; g++) {
            const int nr = (int)((j->m - i) / (groups - g));
            float out[KILN_QMM_ROWS_MAX];
            j->many(w, j->xa + (size_t)i * j->xrow, j->xrow, nr, j->nb, out);
            for (int q = 0; q < nr; q++, i++) j->y[i * j->n + r] = out[q];
        }
    }
}

kiln_status kiln__qmatmul_ggml_cpu(kiln_dtype t, int64_t m, int64_t n, int64_t k, const float *x, const void *w,
                                   float *y, int n_threads) {
    const kiln_dtype p = kiln__types[t].dot_type;
    const size_t xrow = kiln__elems_bytes(p, k);
    char *xa = kiln__malloc((size_t)m * xrow);
    if (!xa) return kiln__errs(KILN_ERR_OOM, "qmatmul: out of memory quantizing the activations");
    for (int64_t i = 0; i < m; i++) kiln__types[p].from_f32(x + i * k, xa + (size_t)i * xrow, k);
    ggml_job j = {.m = m, .n = n, .nb = k / kiln__types[t].blck, .w = w, .xa = xa,
                  .wrow = kiln__elems_bytes(t, k), .xrow = xrow, .y = y, .dot = kiln__qmm_ggml_kernel(t),
                  .many = kiln__qmm_ggml_rows_kernel(t)};
    kiln__pool_for(n, 32, n * k >= (1 << 16) ? n_threads : 1, rows, &j);
    free(xa);
    return KILN_OK;
}
