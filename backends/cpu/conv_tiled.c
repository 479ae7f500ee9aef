/* conv_tiled.c — CPU kernels of KILN_OP_CONV2D and its two gradients
 * (layouts in ops/conv_tiled.c), a tile of output pixels at a time.
 *
 * The N*OH*OW output pixels (the GEMM's columns, n, oi, oj row-major) are
 * cut into tiles of pt pixels; a tile's columns [K, pt] are formed in a
 * scratch sized from the L2 (at least 256 pixels, so that deep layers'
 * GEMMs stay wide), then
 *   forward: y[:, tile] = w cols                   (O x pt, K deep)
 *   grad w:  gw += gy[:, tile] cols^T              (O x K, pt deep)
 *   grad x:  cols = w^T gy[:, tile]; col2im(cols) into gx
 * so the scratch is bounded by the tile, not by the batch. Tiles run in
 * order and each GEMM gets the threads; the column forming splits its rows
 * among the threads, col2im its channels (each its own planes of gx, so
 * no two threads add into one pixel). */
#include "conv_simd.h"
#include "gemm.h"
#include "gemm_kernels.h"
#include "internal.h"
#include "pool.h"
#include "scratch.h"

/* One conv node's sizes and the tile being worked on. */
typedef struct conv_job {
    kiln_conv_geom g;
    int64_t n, c, o, k, np, pt; /* np = N*OH*OW pixels, pt per tile */
    int64_t p0, p1;             /* this tile */
    const void *x;              /* x, or gx (written) */
    void *gx;
    void *cols; /* [K, p1 - p0] */
} conv_job;

static conv_job job_of(const kiln_tensor *node, const kiln_tensor *img, const kiln_tensor *out_grid, int64_t o) {
    const int64_t *ip = node->ip;
    conv_job j = {0};
    j.g = (kiln_conv_geom){ip[0], ip[1], ip[2], ip[3], ip[4], ip[5], ip[6], ip[7], ip[8], ip[9],
                           out_grid->shape[2], out_grid->shape[3]};
    j.n = img->shape[0], j.c = img->shape[1], j.o = o;
    j.k = j.c * j.g.kh * j.g.kw;
    j.np = j.n * j.g.oh * j.g.ow;
    return j;
}

/* Pixels per tile: the tile's columns in half the L2, but never under 256
 * pixels (the GEMM's width), and a multiple of 16. */
static int64_t tile_pixels(int64_t k, size_t esize, int64_t np) {
    const kiln__cpu_caches *c = kiln__cpu_caches_get();
    int64_t l2 = c->l2 > 0 ? c->l2 : 1 << 20;
    int64_t pt = l2 / 2 / (k * (int64_t)esize) / 16 * 16;
    if (pt < 256) pt = 256;
    return pt < np ? pt : np;
}

/* The output columns oj in [*lo, *hi) whose tap jj = oj*s - p + off lies
 * inside [0, w): the rest read padding. */
static void in_range(int64_t ow, int64_t s, int64_t p, int64_t off, int64_t w, int64_t *lo, int64_t *hi) {
    int64_t base = off - p;
    int64_t l = base >= 0 ? 0 : (-base + s - 1) / s;
    int64_t h = w - base <= 0 ? 0 : (w - base + s - 1) / s;
    if (h > ow) h = ow;
    if (l > h) l = h;
    *lo = l, *hi = h;
}

/* Walk the tile's pixels of tap row kk (channel c, tap ki, kj) one output
 * row segment [oj, e) at a time: SEG(img_row, col, oj, e, lo, hi) with
 * img_row the image row the taps read (NULL: padding), col the tile's
 * column of oj = 0 on that row, and [lo, hi) the columns inside the image. */
#define FOR_SEGMENTS(T, IMG, ...)                                                                    \
    do {                                                                                             \
        int64_t c = kk / (g->kh * g->kw), ki = kk / g->kw % g->kh, kj = kk % g->kw, lo, hi;          \
        in_range(g->ow, g->sw, g->pw, kj * g->dw, g->w, &lo, &hi);                                    \
        int64_t plane = g->oh * g->ow;                                                               \
        for (int64_t p = j->p0; p < j->p1;) {                                                        \
            int64_t n = p / plane, oi = p % plane / g->ow, oj = p % g->ow;                           \
            int64_t e = oj + (j->p1 - p < g->ow - oj ? j->p1 - p : g->ow - oj);                      \
            int64_t ii = oi * g->sh - g->ph + ki * g->dh;                                            \
            T *row = ii < 0 || ii >= g->h ? NULL : (IMG) + ((n * j->c + c) * g->h + ii) * g->w + kj * g->dw - g->pw; \
            int64_t col = p - j->p0 - oj;                                                            \
            __VA_ARGS__                                                                                  \
            p += e - oj;                                                                             \
        }                                                                                            \
    } while (0)

/* cols[kk, :] for kk in [r0, r1): the tile's taps, 0 outside the image. */
#define IM2COL_ROWS(name, T)                                                                         \
    static void name(void *arg, int64_t r0, int64_t r1, int tid) {                                   \
        const conv_job *j = arg;                                                                     \
        const kiln_conv_geom *g = &j->g;                                                             \
        int64_t len = j->p1 - j->p0;                                                                 \
        (void)tid;                                                                                   \
        for (int64_t kk = r0; kk < r1; kk++) {                                                       \
            T *out = (T *)j->cols + kk * len;                                                        \
            FOR_SEGMENTS(const T, (const T *)j->x, {                                                 \
                T *o = out + col;                                                                    \
                int64_t a = lo > oj ? lo : oj, b = hi < e ? hi : e;                                  \
                if (!row || a >= b) {                                                                \
                    for (int64_t q = oj; q < e; q++) o[q] = 0;                                       \
                } else {                                                                             \
                    for (int64_t q = oj; q < a; q++) o[q] = 0;                                       \
                    if (g->sw == 1) {                                                                \
                        _Pragma("omp simd")                                                          \
                        for (int64_t q = a; q < b; q++) o[q] = row[q];                               \
                    } else                                                                           \
                        for (int64_t q = a; q < b; q++) o[q] = row[q * g->sw];                       \
                    for (int64_t q = b; q < e; q++) o[q] = 0;                                        \
                }                                                                                    \
            });                                                                                      \
        }                                                                                            \
    }
IM2COL_ROWS(im2col_rows_f32, float)
IM2COL_ROWS(im2col_rows_f64, double)

/* gx += the tile's cols for channels [c0, c1): every tap added into the
 * pixel it was read from, taps in kk order. */
#define COL2IM_CHANNELS(name, T)                                                                     \
    static void name(void *arg, int64_t c0, int64_t c1, int tid) {                                   \
        const conv_job *j = arg;                                                                     \
        const kiln_conv_geom *g = &j->g;                                                             \
        int64_t len = j->p1 - j->p0, taps = g->kh * g->kw;                                           \
        (void)tid;                                                                                   \
        for (int64_t kk = c0 * taps; kk < c1 * taps; kk++) {                                         \
            const T *in = (const T *)j->cols + kk * len;                                             \
            FOR_SEGMENTS(T, (T *)j->gx, {                                                            \
                const T *s = in + col;                                                               \
                int64_t a = lo > oj ? lo : oj, b = hi < e ? hi : e;                                  \
                if (row && g->sw == 1) {                                                             \
                    _Pragma("omp simd")                                                              \
                    for (int64_t q = a; q < b; q++) row[q] += s[q];                                  \
                } else if (row)                                                                      \
                    for (int64_t q = a; q < b; q++) row[q * g->sw] += s[q];                          \
            });                                                                                      \
        }                                                                                            \
    }
COL2IM_CHANNELS(col2im_channels_f32, float)
COL2IM_CHANNELS(col2im_channels_f64, double)

/* C[m, n] = op(A) op(B) + beta C in the node's dtype. */
static void gemm(bool f64, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                 const void *b, int64_t ldb, double beta, void *c, int64_t ldc, int nt) {
    if (f64) kiln__dgemm(ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc, nt);
    else kiln__sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, (float)beta, c, ldc, nt);
}

/* Threads for a loop of rows rows of len elements each. */
static int threads_for(const kiln_exec *ex, int64_t rows, int64_t len) {
    return rows * len > 32768 ? ex->n_threads : 1;
}

static void form_cols(conv_job *j, bool f64, const kiln_exec *ex) {
    kiln__pool_for(j->k, 1, threads_for(ex, j->k, j->p1 - j->p0), f64 ? im2col_rows_f64 : im2col_rows_f32, j);
}

typedef enum { FORWARD, GRAD_X, GRAD_W } conv_pass;

/* The three passes' one loop over the tiles. */
static kiln_status run_tiles(kiln_tensor *node, const kiln_exec *ex, conv_pass pass) {
    bool f64 = node->dtype == KILN_F64;
    if (!f64 && node->dtype != KILN_F32)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: no %s kernel", kiln__op_table[node->op].name,
                          kiln_dtype_name(node->dtype));
    const kiln_tensor *img = pass == GRAD_X ? node : node->src[0];
    const kiln_tensor *w = pass == FORWARD ? node->src[1] : pass == GRAD_X ? node->src[0] : node;
    const kiln_tensor *grid = pass == FORWARD ? node : node->src[1]; /* [O, N, OH, OW] */
    const char *y = pass == FORWARD ? node->data : node->src[1]->data;
    size_t es = f64 ? 8 : 4;
    conv_job j = job_of(node, img, grid, w->shape[0]);
    if (pass == GRAD_X) {
        j.gx = node->data;
        memset(node->data, 0, (size_t)(j.n * j.c * j.g.h * j.g.w) * es);
    } else j.x = node->src[0]->data;
    if (pass == GRAD_W && j.np == 0) memset(node->data, 0, (size_t)(j.o * j.k) * es);
    if (pass == FORWARD && j.k == 0) memset(node->data, 0, (size_t)(j.o * j.np) * es);
    if (j.np == 0 || j.k == 0 || j.o == 0) return KILN_OK;
    j.pt = tile_pixels(j.k, es, j.np);
    bool owned;
    size_t bytes = ((size_t)(j.k * j.pt) * es + 63) & ~(size_t)63;
    j.cols = kiln__scratch_get(bytes, &owned);
    if (!j.cols)
        return kiln__errs(KILN_ERR_OOM, "%s: out of memory for a tile's columns (%zu bytes)",
                          kiln__op_table[node->op].name, bytes);
    int nt = ex->n_threads;
    for (j.p0 = 0; j.p0 < j.np; j.p0 = j.p1) {
        j.p1 = j.p0 + j.pt < j.np ? j.p0 + j.pt : j.np;
        int64_t len = j.p1 - j.p0;
        const char *y_tile = y + (size_t)j.p0 * es;
        if (pass == FORWARD) {
            form_cols(&j, f64, ex);
            gemm(f64, false, false, j.o, len, j.k, w->data, j.k, j.cols, len, 0.0, (char *)y_tile, j.np, nt);
        } else if (pass == GRAD_W) {
            form_cols(&j, f64, ex);
            gemm(f64, false, true, j.o, j.k, len, y_tile, j.np, j.cols, len, j.p0 ? 1.0 : 0.0, node->data, j.k, nt);
        } else {
            gemm(f64, true, false, j.k, len, j.o, w->data, j.k, y_tile, j.np, 0.0, j.cols, len, nt);
            kiln__pool_for(j.c, 1, threads_for(ex, j.k, len), f64 ? col2im_channels_f64 : col2im_channels_f32, &j);
        }
    }
    if (owned) free(j.cols);
    return KILN_OK;
}

static kiln_status conv2d(kiln_tensor *node, const kiln_exec *ex) { return run_tiles(node, ex, FORWARD); }
static kiln_status conv2d_grad_x(kiln_tensor *node, const kiln_exec *ex) { return run_tiles(node, ex, GRAD_X); }
static kiln_status conv2d_grad_w(kiln_tensor *node, const kiln_exec *ex) { return run_tiles(node, ex, GRAD_W); }

void kiln__cpu_register_conv_tiled(kiln_cpu_kernel *tab) {
    tab[KILN_OP_CONV2D] = conv2d;
    tab[KILN_OP_CONV2D_GRAD_X] = conv2d_grad_x;
    tab[KILN_OP_CONV2D_GRAD_W] = conv2d_grad_w;
}
