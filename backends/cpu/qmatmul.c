/* qmatmul.c — KILN_OP_QMATMUL on the CPU (see qmatmul.h): the driver,
 * threaded over output rows (vector path) or W panels (panel path), the
 * activation quantizer and the scalar reference dot products. */
#include "qmatmul.h"
#include "qmatmul_gemm.h"
#include "qmatmul_ggml.h"
#include "qmatmul_gq.h"
#include "qmatmul_kgemm.h"

#include "coders.h"
#include "cpu_features.h"
#include "gemm.h"
#include "pool.h"
#include "scratch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void kiln__qmm_quantize_x(const float *x, int8_t *xq, float *dx, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, x += 32, xq += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        dx[b] = kiln__f16_to_f32(kiln__f32_to_f16(d));
        for (int j = 0; j < 32; j++) {
            /* a code that is not finite (x NaN or infinite, or id infinite
             * where amax < 127 / FLT_MAX) is 0, as x86's conversion truncated
             * to a byte gave: the SIMD quantizers' bits, not C's undefined
             * conversion */
            const float q = roundf(x[j] * id);
            xq[j] = q >= -127.0f && q <= 127.0f ? (int8_t)q : 0;
        }
    }
}

void kiln__qmm_lane_sums(const int8_t *xq, int32_t *xs, int64_t nb, int32_t off) {
    for (int64_t l = 0; l < 8 * nb; l++) xs[l] = -off * (xq[4 * l] + xq[4 * l + 1] + xq[4 * l + 2] + xq[4 * l + 3]);
}

/* The lane schemes the integer paths share (qmatmul.h), 16 f32 lanes.
 * Q8_0: block i in lanes 8 (i & 1) .. + 7, lane l of a block summing its
 * elements 4l .. 4l + 3, the lanes summed by halving at the end
 * (kiln__qmm_q8_lanes_sum). */

static void block_acc(const int8_t *w, const int8_t *xq, float d, float acc[8]) {
    for (int l = 0; l < 8; l++) {
        int32_t s = 0;
        for (int j = 4 * l; j < 4 * l + 4; j++) s += (int32_t)w[j] * xq[j];
        acc[l] = fmaf((float)s, d, acc[l]);
    }
}

float kiln__qmm_dot_q8_0_ref(const void *w, const int8_t *xq, const float *dx, int64_t nb) {
    const kiln_block_q8_0 *b = w;
    float acc[16] = {0};
    for (int64_t i = 0; i < nb; i++) block_acc(b[i].qs, xq + 32 * i, kiln__f16_to_f32(b[i].d) * dx[i], acc + 8 * (i & 1));
    return kiln__qmm_q8_lanes_sum(acc);
}

/* Q4_0: block i in lanes 4 (i & 3) .. + 3, lane l of a block summing its
 * elements 4l .. 4l + 3 (low nibbles of qs[4l .. 4l + 3]) and 16 + 4l ..
 * 16 + 4l + 3 (their high nibbles): one integer sum per 4 packed bytes,
 * so a kernel needs one int-to-float conversion and one fused
 * multiply-add per 4 lanes of a block; the lanes summed as a tree
 * (kiln__qmm_q4_lanes_sum). */
float kiln__qmm_dot_q4_0_ref(const void *w, const int8_t *xq, const float *dx, int64_t nb) {
    const kiln_block_q4_0 *b = w;
    float acc[16] = {0};
    for (int64_t i = 0; i < nb; i++) {
        const float d = kiln__f16_to_f32(b[i].d) * dx[i];
        const int8_t *x = xq + 32 * i;
        for (int l = 0; l < 4; l++) {
            int32_t s = 0;
            for (int j = 4 * l; j < 4 * l + 4; j++)
                s += ((b[i].qs[j] & 0x0f) - 8) * x[j] + ((b[i].qs[j] >> 4) - 8) * x[j + 16];
            acc[4 * (i & 3) + l] = fmaf((float)s, d, acc[4 * (i & 3) + l]);
        }
    }
    return kiln__qmm_q4_lanes_sum(acc);
}

float kiln__qmm_dot_nf4_ref(const uint8_t *codes, int64_t code_stride, const float *absmax, int64_t absmax_stride,
                            int64_t nb, const float *x) {
    float tot = 0.0f;
    for (int64_t i = 0; i < nb; i++, codes += code_stride, absmax += absmax_stride, x += 64) {
        float s = 0.0f;
        for (int j = 0; j < 32; j++)
            s += x[2 * j] * kiln__nf4_table[codes[j] >> 4] + x[2 * j + 1] * kiln__nf4_table[codes[j] & 0x0f];
        tot += s * absmax[0];
    }
    return tot;
}

static const kiln_qmm_kernels *kernels(void) {
    static const kiln_qmm_kernels ref = {kiln__qmm_dot_q8_0_ref, kiln__qmm_dot_q4_0_ref, kiln__qmm_dot_nf4_ref, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    const kiln_cpu_caps *c = kiln__cpu_caps();
    const kiln_qmm_kernels *k = NULL;
    if (kiln__cpu_vbmi(c)) k = kiln__qmm_kernels_vbmi();
    if (!k && kiln__cpu_avx512vnni(c)) k = kiln__qmm_kernels_avx512vnni();
    if (!k && kiln__cpu_avxvnni(c)) k = kiln__qmm_kernels_avxvnni();
    if (!k && kiln__cpu_avx512(c)) k = kiln__qmm_kernels_avx512();
    if (!k && kiln__cpu_avx2(c)) k = kiln__qmm_kernels_avx2();
    if (!k && kiln__cpu_neondot(c)) k = kiln__qmm_kernels_neondot();
    return k ? k : &ref;
}

static void quantize_row(const kiln_qmm_kernels *kk, const float *x, int8_t *xq, float *dx, int32_t *xs, int64_t n,
                         int32_t off) {
    if (kk->quantize_x) {
        kk->quantize_x(x, xq, dx, xs, n, off);
        return;
    }
    kiln__qmm_quantize_x(x, xq, dx, n);
    if (xs) kiln__qmm_lane_sums(xq, xs, n / 32, off);
}

void kiln__qmm_quantize_x_simd(const float *x, int8_t *xq, float *dx, int32_t *xs, int64_t n, int32_t off) {
    quantize_row(kernels(), x, xq, dx, xs, n, off);
}

/* One row of W (row r) against row xr of x; NF4_DQ rows may start inside
 * a super-block, so they go block by block through their absmax values. */
static float row_dot(const kiln_qmm_kernels *kk, kiln_dtype t, const char *w, int64_t r, int64_t k,
                     const float *x, const int8_t *xq, const int32_t *xs, const float *dx) {
    const int64_t e0 = r * k;
    switch (t) {
    case KILN_Q8_0:
        return xs ? kk->q8_0s(w + kiln__elems_bytes(t, e0), xq, xs, dx, k / 32)
                  : kk->q8_0(w + kiln__elems_bytes(t, e0), xq, dx, k / 32);
    case KILN_Q4_0:
        return xs ? kk->q4_0s(w + kiln__elems_bytes(t, e0), xq, xs, dx, k / 32)
                  : kk->q4_0(w + kiln__elems_bytes(t, e0), xq, dx, k / 32);
    case KILN_NF4: {
        const kiln_block_nf4 *b = (const kiln_block_nf4 *)(w + kiln__elems_bytes(t, e0));
        return kk->nf4(b->codes, sizeof *b, &b->absmax, sizeof *b / sizeof(float), k / 64, x);
    }
    default: { /* KILN_NF4_DQ: runs of blocks within one super-block */
        float tot = 0.0f, am[KILN_NF4_DQ_GROUP];
        for (int64_t blk = e0 / 64, end = (e0 + k) / 64; blk < end;) {
            const kiln_block_nf4_dq *s = (const kiln_block_nf4_dq *)w + blk / KILN_NF4_DQ_GROUP;
            const int64_t k0 = blk % KILN_NF4_DQ_GROUP,
                          k1 = end - blk + k0 < KILN_NF4_DQ_GROUP ? end - blk + k0 : KILN_NF4_DQ_GROUP;
            for (int64_t j = k0; j < k1; j++) am[j] = kiln__nf4_dq_block_absmax(s, (int)j);
            tot += kk->nf4(s->codes + 32 * k0, 32, am + k0, 1, k1 - k0, x + (blk * 64 - e0));
            blk += k1 - k0;
        }
        return tot;
    }
    }
}

/* Elements [e0, e0 + len) of W as f32 (e0 and len whole rows). */
static void dequant_rows(kiln_dtype t, const char *w, int64_t e0, int64_t len, float *out) {
    if (t != KILN_NF4_DQ) {
        kiln__dequantize_row(t, w + kiln__elems_bytes(t, e0), out, len);
        return;
    }
    for (int64_t blk = e0 / 64; blk < (e0 + len) / 64; blk++, out += 64) {
        const kiln_block_nf4_dq *s = (const kiln_block_nf4_dq *)w + blk / KILN_NF4_DQ_GROUP;
        const int kb = (int)(blk % KILN_NF4_DQ_GROUP);
        const float a = kiln__nf4_dq_block_absmax(s, kb);
        const uint8_t *c = s->codes + 32 * kb;
        for (int j = 0; j < 32; j++) {
            out[2 * j] = kiln__nf4_table[c[j] >> 4] * a;
            out[2 * j + 1] = kiln__nf4_table[c[j] & 0x0f] * a;
        }
    }
}

/* One product y = x W^T and what its range functions read. */
typedef struct qmm_job {
    kiln_dtype t;
    int64_t m, n, k, nbp;
    const float *x, *dx;
    const char *w;
    const int8_t *xq;
    const int32_t *xs;
    float *y;
    const kiln_qmm_kernels *kk;
    kiln_qmm_dot2_i8s *two;
    kiln_qmm_dotr_i8s *many;
    int fail;
} qmm_job;

/* Panels [p0, p1) of nbp rows of W, each dequantized into the thread's
 * scratch and multiplied by the f32 GEMM on that thread. */
static void panels(void *arg, int64_t p0, int64_t p1, int tid) {
    qmm_job *j = arg;
    const int64_t n = j->n, k = j->k, nbp = j->nbp;
    (void)tid;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t n0 = p * nbp, nr = n - n0 < nbp ? n - n0 : nbp;
        bool owned;
        float *buf = kiln__scratch_get((size_t)(nr * k * 4 + 63) & ~(size_t)63, &owned);
        if (!buf) {
            __atomic_store_n(&j->fail, 1, __ATOMIC_RELAXED);
            continue;
        }
        dequant_rows(j->t, j->w, n0 * k, nr * k, buf);
        kiln__sgemm_own(false, true, j->m, nr, k, 1.0f, j->x, k, buf, k, 0.0f, j->y + n0, n, 1);
        if (owned) free(buf);
    }
}

static kiln_status panel_path(kiln_dtype t, int64_t m, int64_t n, int64_t k, const float *x, const char *w,
                              float *y, int n_threads) {
    /* panels of rows sized to stay in L2 (~1 MiB of f32), a multiple of 16 */
    int64_t nbp = ((1 << 18) / k) & ~(int64_t)15;
    if (nbp < 16) nbp = 16;
    qmm_job j = {.t = t, .m = m, .n = n, .k = k, .nbp = nbp, .x = x, .w = w, .y = y};
    kiln__pool_for((n + nbp - 1) / nbp, 1, n_threads, panels, &j);
    return j.fail ? kiln__errs(KILN_ERR_OOM, "qmatmul: out of memory for a W panel") : KILN_OK;
}

/* Pairs of rows of W [p0, p1) (the last one of an odd n alone) against
 * every row of x, through the two-row kernel. */
static void row_pairs(void *arg, int64_t p0, int64_t p1, int tid) {
    const qmm_job *j = arg;
    const int64_t m = j->m, n = j->n, k = j->k;
    const size_t rb = kiln__elems_bytes(j->t, k);
    (void)tid;
    for (int64_t p = p0; p < p1; p++)
        for (int64_t i = 0; i < m; i++) {
            const int64_t r = 2 * p;
            float o[2];
            if (r + 1 < n) {
                j->two(j->w + (size_t)r * rb, j->w + (size_t)(r + 1) * rb, j->xq + i * k, j->xs + i * (k / 4),
                       j->dx + i * (k / 32), k / 32, o);
                j->y[i * n + r] = o[0], j->y[i * n + r + 1] = o[1];
            } else
                j->y[i * n + r] = row_dot(j->kk, j->t, j->w, r, k, j->x + i * k, j->xq + i * k, j->xs + i * (k / 4),
                                          j->dx + i * (k / 32));
        }
}

/* Rows of W [r0, r1) against x's rows in groups as even as
 * KILN_QMM_ROWS_MAX allows (7: 3 + 4), each reading the row of W once. */
static void rows_many(void *arg, int64_t r0, int64_t r1, int tid) {
    const qmm_job *j = arg;
    const int64_t n = j->n, k = j->k, groups = (j->m + KILN_QMM_ROWS_MAX - 1) / KILN_QMM_ROWS_MAX;
    const size_t rb = kiln__elems_bytes(j->t, k);
    (void)tid;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t g = 0, i = 0; g < groups; g++) {
            const int nr = (int)((j->m - i) / (groups - g));
            float out[KILN_QMM_ROWS_MAX];
            j->many(j->w + (size_t)r * rb, j->xq + i * k, j->xs ? j->xs + i * (k / 4) : NULL, j->dx + i * (k / 32),
                    k / 32, nr, out);
            for (int q = 0; q < nr; q++, i++) j->y[i * n + r] = out[q];
        }
}

/* Rows of W [r0, r1) against every row of x. */
static void rows(void *arg, int64_t r0, int64_t r1, int tid) {
    const qmm_job *j = arg;
    const int64_t m = j->m, n = j->n, k = j->k;
    const bool i8 = j->xq != NULL;
    (void)tid;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t i = 0; i < m; i++)
            j->y[i * n + r] = row_dot(j->kk, j->t, j->w, r, k, j->x + i * k, i8 ? j->xq + i * k : NULL,
                                      j->xs ? j->xs + i * (k / 4) : NULL, i8 ? j->dx + i * (k / 32) : NULL);
}

int64_t kiln__qmm_batched_min(kiln_dtype t) {
    if (t == KILN_Q8_0 || t == KILN_Q4_0) {
        const kiln_qmm_kernels *kk = kernels();
        const bool rows = t == KILN_Q8_0 ? kk->q8_0sr : kk->q4_0sr;
        return rows && !kiln__qmm_gemm_available(t) ? KILN_QMM_ROWS_TILES_MIN : KILN_QMM_PANEL_MIN_M;
    }
    /* the crossovers below were measured on x86; ARM's rows kernels (not
     * timed on ARM hardware) hand over where its tiles took over before */
    if (!kiln__qmm_ggml_rows_kernel(t) || kiln__cpu_neon(kiln__cpu_caps())) return KILN_QMM_PANEL_MIN_M;
    switch (t) {
    case KILN_Q4_1: return KILN_QMM_ROWS_TILES_MIN_Q4_1;
    case KILN_Q5_0: return KILN_QMM_ROWS_TILES_MIN_Q5_0;
    case KILN_Q5_1: return KILN_QMM_ROWS_TILES_MIN_Q5_1;
    default: return KILN_QMM_ROWS_TILES_MIN;
    }
}

kiln_status kiln__qmatmul_cpu(kiln_dtype t, int64_t m, int64_t n, int64_t k, const float *x, const void *w, float *y,
                          int n_threads) {
    const int64_t batched = kiln__qmm_batched_min(t);
    if (m >= batched && kiln__qmm_gemm_available(t)) return kiln__qmm_gemm(t, m, n, k, x, w, y, n_threads);
    if (m >= batched && kiln__qmm_kgemm_handles(t)) return kiln__qmm_kgemm(t, m, n, k, x, w, y, n_threads);
    if (m >= batched) return panel_path(t, m, n, k, x, w, y, n_threads);
    if (kiln__is_gq(t)) return kiln__qmatmul_gq_cpu(t, m, n, k, x, w, y, n_threads);
    if (kiln__qmm_ggml_handles(t)) return kiln__qmatmul_ggml_cpu(t, m, n, k, x, w, y, n_threads);
    const kiln_qmm_kernels *kk = kernels();
    const bool i8 = t == KILN_Q8_0 || t == KILN_Q4_0;
    int8_t *xq = NULL;
    float *dx = NULL;
    int32_t *xs = NULL; /* lane sums, for the kernels that take them */
    const bool with_xs = (t == KILN_Q8_0 && kk->q8_0s) || (t == KILN_Q4_0 && kk->q4_0s);
    if (i8) {
        xq = kiln__malloc((size_t)(m * k));
        dx = kiln__malloc((size_t)(m * (k / 32)) * sizeof(float));
        xs = with_xs ? kiln__malloc((size_t)(m * (k / 4)) * sizeof(int32_t)) : NULL;
        if (!xq || !dx || (with_xs && !xs)) {
            free(xq), free(dx), free(xs);
            return kiln__errs(KILN_ERR_OOM, "qmatmul: out of memory quantizing the activations");
        }
        const int32_t off = t == KILN_Q8_0 ? 128 : 8;
        for (int64_t i = 0; i < m; i++)
            quantize_row(kk, x + i * k, xq + i * k, dx + i * (k / 32), xs ? xs + i * (k / 4) : NULL, k, off);
    }
    /* each thread streams its own range of W's rows, taking chunks of the
     * others' when it is done (pool.h); each output is the same whichever
     * thread computes it */
    qmm_job j = {.t = t, .m = m, .n = n, .k = k, .x = x, .dx = dx, .w = w, .xq = xq, .xs = xs, .y = y, .kk = kk,
                 .two = !xs ? NULL : t == KILN_Q8_0 ? kk->q8_0s2 : kk->q4_0s2,
                 .many = !i8 || m == 1 ? NULL : t == KILN_Q8_0 ? kk->q8_0sr : kk->q4_0sr};
    const int nt = n * k >= (1 << 16) ? n_threads : 1;
    if (j.many) kiln__pool_for(n, 32, nt, rows_many, &j); /* x's rows in groups */
    else if (j.two) kiln__pool_for((n + 1) / 2, 16, nt, row_pairs, &j); /* rows in pairs */
    else kiln__pool_for(n, 32, nt, rows, &j);
    free(xq), free(dx), free(xs);
    return KILN_OK;
}

static kiln_status qmatmul_kernel(kiln_tensor *node, const kiln_exec *ex) {
    const kiln_tensor *x = node->src[0], *w = node->src[1];
    if (!w->shape[1]) { /* K = 0: zeros */
        memset(node->data, 0, kiln_tensor_nbytes(node));
        return KILN_OK;
    }
    return kiln__qmatmul_cpu(w->dtype, x->shape[0], w->shape[0], w->shape[1], x->data, w->data, node->data,
                         ex->n_threads);
}

void kiln__cpu_register_qmatmul(kiln_cpu_kernel *tab) { tab[KILN_OP_QMATMUL] = qmatmul_kernel; }
