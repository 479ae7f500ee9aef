/* qmatmul_gemm.c — the block-scaled integer GEMM of KILN_OP_QMATMUL's
 * batched path (qmatmul_gemm.h): the scalar reference, the packing of x
 * (once per call, shared by the threads) and the driver, threaded over
 * panels of W's rows (columns of y), each packed by its thread into its
 * scratch and reused by every row of x. */
#include "qmatmul_gemm.h"

#include "../../quant/quant.h"
#include "cpu_features.h"
#include "pool.h"
#include "qmatmul.h"
#include "scratch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NC KILN_QMM_GEMM_NC
/* Columns of W per unit of work: big enough that packing and the thread
 * hand-out are amortized, small enough that the panel (96 k bytes, twice
 * that with q8_split) stays in L2 and 2048-wide layers still give 2 threads
 * 20 units. */
#define NU KILN_QMM_GEMM_NU
#define KB 16 /* blocks of K per chunk */

/* W row j's int8 values and scales (the reference's view of a block). */
static void w_block(kiln_dtype t, const void *w, int64_t blk, int8_t q[32], float *d) {
    if (t == KILN_Q8_0) {
        const kiln_block_q8_0 *b = (const kiln_block_q8_0 *)w + blk;
        memcpy(q, b->qs, 32);
        *d = kiln__f16_to_f32(b->d);
        return;
    }
    const kiln_block_q4_0 *b = (const kiln_block_q4_0 *)w + blk;
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((b->qs[j] & 0x0f) - 8);
        q[j + 16] = (int8_t)((b->qs[j] >> 4) - 8);
    }
    *d = kiln__f16_to_f32(b->d);
}

kiln_status kiln__qmm_gemm_ref(kiln_dtype t, int64_t m, int64_t n, int64_t k, const float *x, const void *w,
                               float *y) {
    const int64_t nb = k / 32;
    int8_t *xq = kiln__malloc((size_t)(m * k));
    float *dx = kiln__malloc((size_t)(m * nb) * sizeof(float));
    if (!xq || !dx) {
        free(xq), free(dx);
        return kiln__errs(KILN_ERR_OOM, "qmatmul: out of memory quantizing the activations");
    }
    for (int64_t i = 0; i < m; i++) kiln__qmm_quantize_x(x + i * k, xq + i * k, dx + i * nb, k);
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < m; i++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                int8_t q[32];
                float d;
                w_block(t, w, j * nb + b, q, &d);
                int32_t s = 0;
                for (int e = 0; e < 32; e++) s += (int32_t)q[e] * xq[i * k + 32 * b + e];
                acc = fmaf((float)s, dx[i * nb + b] * d, acc);
            }
            y[i * n + j] = acc;
        }
    free(xq), free(dx);
    return KILN_OK;
}

void kiln__qmm_gemm_pack_x(const float *x, int64_t nb, int32_t off, int8_t *xp, float *da, int32_t *xs) {
    for (int64_t b = 0; b < nb; b++, x += 32, xp += 512, da += 16, xs += 16) {
        int8_t q[32];
        kiln__qmm_quantize_x(x, q, da, 32);
        int32_t sum = 0;
        for (int e = 0; e < 32; e++) sum += q[e];
        for (int qd = 0; qd < 8; qd++) memcpy(xp + 64 * qd, q + 4 * qd, 4);
        xs[0] = -off * sum;
    }
}

void kiln__qmm_gemm_pack_w(kiln_dtype t, const void *w, int64_t cols, int64_t nc, int64_t nb, uint8_t *wp,
                           float *dw) {
    for (int64_t c = 0; c < cols; c++) {
        uint8_t *o = wp + c * nb * 32;
        for (int64_t i = 0; i < nb; i++) {
            int8_t q[32];
            w_block(t, w, c * nb + i, q, &dw[c * nb + i]);
            for (int e = 0; e < 32; e++) o[32 * i + e] = (uint8_t)(t == KILN_Q8_0 ? q[e] : q[e] + 8);
        }
    }
    for (int64_t c = cols; c < nc; c++) {
        memset(wp + c * nb * 32, 0, (size_t)(nb * 32));
        memset(dw + c * nb, 0, (size_t)nb * sizeof(float));
    }
}

static const kiln_qmm_gemm_kernels *kernels(void) {
    const kiln_cpu_caps *c = kiln__cpu_caps();
    if (kiln__cpu_avx512vnni(c)) return kiln__qmm_gemm_kernels_avx512vnni();
    if (kiln__cpu_avxvnni(c)) return kiln__qmm_gemm_kernels_avxvnni();
    if (kiln__cpu_avx512(c)) return kiln__qmm_gemm_kernels_avx512();
    if (kiln__cpu_avx2(c)) return kiln__qmm_gemm_kernels_avx2();
    if (kiln__cpu_neondot(c)) return kiln__qmm_gemm_kernels_neondot();
    return NULL;
}

bool kiln__qmm_gemm_available(kiln_dtype t) { return (t == KILN_Q8_0 || t == KILN_Q4_0) && kernels(); }

/* Rows [i0, i1) of x quantized into the packed layout (qmatmul_gemm.h);
 * rows past m (padding of the last group) are zeros with scale 0. */
static void pack_x(const kiln_qmm_gemm_kernels *kk, const float *x, int64_t m, int64_t k, int32_t off, int64_t i0,
                   int64_t i1, int8_t *xp, float *da, int32_t *xs) {
    const int64_t nb = k / 32;
    for (int64_t i = i0; i < i1; i++) {
        const int64_t g = i / 16, r = i % 16;
        int8_t *xr = xp + g * nb * 512 + r * 4;
        float *dr = da + g * nb * 16 + r;
        int32_t *sr = xs + g * nb * 16 + r;
        if (i < m) {
            kk->pack_x(x + i * k, nb, off, xr, dr, sr);
            continue;
        }
        for (int64_t b = 0; b < nb; b++) {
            for (int qd = 0; qd < 8; qd++) memset(xr + b * 512 + qd * 64, 0, 4);
            dr[b * 16] = 0.0f;
            sr[b * 16] = 0;
        }
    }
}

/* One product: the operands, x packed (xp, da, xs) and the sizes. */
typedef struct qgemm_job {
    const kiln_qmm_gemm_kernels *kk;
    kiln_dtype t;
    int64_t m, n, k, groups;
    const float *x;
    const void *w;
    float *y;
    int8_t *xp;
    float *da;
    int32_t *xs;
    size_t xbytes, pb64;
    int fail;
} qgemm_job;

static void pack_groups(void *arg, int64_t g0, int64_t g1, int tid) {
    const qgemm_job *j = arg;
    (void)tid;
    pack_x(j->kk, j->x, j->m, j->k, j->t == KILN_Q8_0 ? j->kk->q8_off : 8, g0 * 16, g1 * 16, j->xp, j->da, j->xs);
}

/* Prefetches up to step bytes more of [*p, end) */
static inline void prefetch_some(const char **p, const char *end, size_t step) {
    for (size_t i = 0; i < step && *p < end; i += 64, *p += 64) __builtin_prefetch(*p, 0, 2);
}

/* Panels [u0, u1) of NU columns of W, each packed into the thread's own
 * panel (the caller's follows x in its scratch; a worker's is its own). */
static void panels(void *arg, int64_t u0, int64_t u1, int tid) {
    qgemm_job *j = arg;
    const kiln_qmm_gemm_kernels *kk = j->kk;
    const int64_t m = j->m, n = j->n, nb = j->k / 32, groups = j->groups;
    const size_t row_bytes = (size_t)kiln__elems_bytes(j->t, j->k);
    const int8_t *xp = j->xp;
    const float *da = j->da;
    const int32_t *xs = j->xs;
    float *y = j->y;
    bool owned = false;
    uint8_t *wp = tid == 0 ? (uint8_t *)xp + j->xbytes : kiln__scratch_get(j->pb64, &owned);
    if (!wp) {
        __atomic_store_n(&j->fail, 1, __ATOMIC_RELAXED);
        return;
    }
    const int64_t wcols = kk->q8_split && j->t == KILN_Q8_0 ? 2 * NU : NU; /* two planes */
    float *dw = (float *)(wp + wcols * nb * 32);
    float *acc = dw + NU * nb; /* the f32 sums of the panel's tiles */
    void (*tile)(const int8_t *, const float *, const int32_t *, int, const uint8_t *, const float *, int64_t,
                 int64_t, int64_t, bool, float(*)[32]) = j->t == KILN_Q8_0 ? kk->tile_q8 : kk->tile_q4;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t j0 = u * NU, cols = n - j0 < NU ? n - j0 : NU, nc = (cols + NC - 1) / NC * NC;
        kk->pack_w(j->t, (const char *)j->w + (size_t)j0 * row_bytes, cols, nc, nb, wp, dw);
        /* the next unit's W (most often this thread's next) fetched a slice
         * per tile, for its pack_w not to wait on memory (pack_w was 9% of
         * an AVX-512 Q4_0 prompt, most of it on its loads of W) */
        const char *pf = (const char *)j->w + (size_t)(j0 + cols) * row_bytes;
        const char *pf_end = (const char *)j->w + (size_t)(n - j0 - cols < NU ? n : j0 + cols + NU) * row_bytes;
        const int64_t tiles = (nb + KB - 1) / KB * ((groups + 1) / 2) * (nc / NC);
        const size_t pf_step = ((size_t)(pf_end - pf) / (size_t)tiles + 64) & ~(size_t)63;
        /* K in chunks of KB blocks: a chunk of two groups of x (16 KiB)
         * stays in L1 while every 6 columns of the panel pass over it;
         * the tiles' f32 sums wait in acc between chunks */
        for (int64_t b0 = 0; b0 < nb; b0 += KB) {
            const int64_t b1 = nb - b0 < KB ? nb : b0 + KB;
            for (int64_t g = 0; g < groups; g += 2) {
                const int rows = m - g * 16 < 32 ? (int)(m - g * 16) : 32;
                for (int64_t c0 = 0; c0 < nc; c0 += NC) {
                    prefetch_some(&pf, pf_end, pf_step);
                    tile(xp + g * nb * 512, da + g * nb * 16, xs + g * nb * 16, rows, wp + c0 * nb * 32,
                         dw + c0 * nb, nb, b0, b1, b0 == 0,
                         (float(*)[32])(acc + (g / 2 * (NU / NC) + c0 / NC) * NC * 32));
                }
            }
        }
        /* into y row by row, each row's cols values in order: a tile's 6
         * columns down its 32 rows wrote 24 bytes of 32 lines at a time,
         * each line fetched for them (7% of an AVX-512 Q4_0 prompt) */
        for (int64_t i = 0; i < m; i++) {
            const float *a = acc + i / 32 * NU * 32 + i % 32; /* column c at a[32 c] */
            float *yr = y + i * n + j0;
            for (int64_t c = 0; c < cols; c++) yr[c] = a[32 * c];
        }
    }
    if (owned) free(wp);
}

kiln_status kiln__qmm_gemm(kiln_dtype t, int64_t m, int64_t n, int64_t k, const float *x, const void *w, float *y,
                           int n_threads) {
    const kiln_qmm_gemm_kernels *kk = kernels();
    const int64_t nb = k / 32, groups = (m + 15) / 16, units = (n + NU - 1) / NU;
    /* x packed: 512 bytes of codes, 16 scales and 16 sums per group of rows per block */
    const size_t xbytes = (size_t)(groups * nb) * (512 + 64 + 64);
    /* a W panel: NU columns of k bytes (two planes with q8_split) and a
     * float per block, and the f32 sums of its tiles */
    const int64_t wbytes = kk->q8_split && t == KILN_Q8_0 ? 64 : 32;
    const size_t pbytes =
        (size_t)(NU * nb) * (size_t)(wbytes + 4) + (size_t)(NU * (groups + 1) / 2 * 32) * sizeof(float);
    /* x and the calling thread's W panel in its scratch (kept between
     * calls: no page faults per call); the other threads take theirs */
    const size_t pb64 = (pbytes + 63) & ~(size_t)63; /* xbytes: a multiple of 64 */
    bool xowned;
    int8_t *xp = kiln__scratch_get(xbytes + pb64, &xowned);
    if (!xp) return kiln__errs(KILN_ERR_OOM, "qmatmul: out of memory packing the activations");
    qgemm_job j = {kk, t, m, n, k, groups, x, w, y, xp, NULL, NULL, xbytes, pb64, 0};
    j.da = (float *)(xp + (size_t)(groups * nb) * 512);
    j.xs = (int32_t *)(j.da + groups * nb * 16);
    const int nt = units > 1 ? n_threads : 1;
    kiln__pool_for(groups, 1, nt, pack_groups, &j);
    kiln__pool_for(units, 1, nt, panels, &j);
    if (xowned) free(xp);
    return j.fail ? kiln__errs(KILN_ERR_OOM, "qmatmul: out of memory for a W panel") : KILN_OK;
}
