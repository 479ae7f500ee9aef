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
 * so the scratch is bounded by the tile, not by the batch.
 *
 * Threads never meet inside a pass (a meeting per tile made a 2-thread
 * ResNet-18 step 1.27x slower on a loaded machine), and every GEMM runs on one
 * thread: the forward splits the tiles (each thread its own scratch);
 * grad w, from 2048 pixels, splits them in 2 to 4 parts, each summed into
 * gw or its own O x K sums (added in order after), and below that gw's
 * columns, each thread forming and multiplying only its rows of every
 * tile's columns, tiles in order (ResNet-18's first, stride-2 and 1x1
 * layers at batch 32, split by columns, took 1.2 to 5 times 1 thread's
 * CPU time at 2 threads: GEMMs a few columns wide, each packing gy's tile
 * again);
 * grad x splits the input channels, each thread its rows of w^T gy and
 * col2im into its own planes of gx. The parts and the columns come from
 * the shape alone, so 1 and 2 threads sum in one order.
 *
 * f32 3x3 stride-1 layers with enough channels and tiles run their forward
 * and grad x by Winograd instead (winograd.h). Other f32 layers at stride
 * 1 or 2 form their columns (and add grad x's back) with AVX-512 where
 * the CPU has it (conv_tiled_avx512.c), the same values as the loops here. */
#include "conv_simd.h"
#include "cpu_features.h"
#include "gemm.h"
#include "gemm_kernels.h"
#include "internal.h"
#include "pool.h"
#include "scratch.h"
#include "winograd.h"

/* One conv node's pass: sizes, operands and the columns' scratch. */
typedef struct conv_job {
    kiln_conv_geom g;
    int64_t n, c, o, k, np, pt; /* np = N*OH*OW pixels, pt per tile */
    bool f64;
    size_t es;
    const void *x, *w, *gy; /* gy: y in the forward */
    void *out;              /* y, gx or gw */
    void *cols;             /* K x pt per thread (forward, grad w in parts) or one K x pt */
    bool acc;               /* grad w: add into gw (ex->accumulate) */
    int64_t parts;          /* grad w: parts of the pixels (1: its columns split instead) */
    void *sums;             /* grad w: the sums of parts 1.., O x K each */
} conv_job;

/* Tile i: pixels [p0, p1), its columns [K, p1 - p0] at cols. */
typedef struct tile {
    int64_t p0, p1;
    void *cols;
} tile;

static tile tile_at(const conv_job *j, int64_t i, void *cols) {
    int64_t p0 = i * j->pt;
    return (tile){p0, p0 + j->pt < j->np ? p0 + j->pt : j->np, cols};
}

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

/* Walk the tile's pixels of tap row kk (channel c, tap ki, kj) one output
 * row segment [oj, e) at a time, running the body with row the image row
 * the taps read, indexed by oj (NULL: all padding), col the tile's column
 * of oj = 0 on that row, and [lo, hi) the oj whose taps are inside it.
 * The segment's image and row are counted, not divided out of p: three
 * divisions a segment were most of the gather on 4x4 images (a quarter of
 * a 512-channel 4x4 layer's weight gradient, a third of a stride-2 one's). */
#define FOR_SEGMENTS(T, IMG, ...)                                                                    \
    do {                                                                                             \
        int64_t c = kk / (g->kh * g->kw), ki = kk / g->kw % g->kh, kj = kk % g->kw, lo, hi;          \
        kiln__conv_in_range(g->ow, g->sw, g->pw, kj * g->dw, g->w, &lo, &hi);                         \
        int64_t plane = g->oh * g->ow;                                                               \
        int64_t n = t->p0 / plane, oi = t->p0 % plane / g->ow, oj = t->p0 % g->ow;                   \
        for (int64_t p = t->p0; p < t->p1; oj = 0, oi++) {                                           \
            if (oi == g->oh) oi = 0, n++;                                                            \
            int64_t e = oj + (t->p1 - p < g->ow - oj ? t->p1 - p : g->ow - oj);                      \
            int64_t ii = oi * g->sh - g->ph + ki * g->dh;                                            \
            T *row = ii < 0 || ii >= g->h ? NULL : (IMG) + ((n * j->c + c) * g->h + ii) * g->w + kj * g->dw - g->pw; \
            int64_t col = p - t->p0 - oj;                                                            \
            __VA_ARGS__                                                                                  \
            p += e - oj;                                                                             \
        }                                                                                            \
    } while (0)

/* cols[kk, :] for kk in [r0, r1): the tile's taps, 0 outside the image. */
#define IM2COL_ROWS(name, T)                                                                         \
    static void name(const conv_job *j, const tile *t, int64_t r0, int64_t r1) {                     \
        const kiln_conv_geom *g = &j->g;                                                             \
        int64_t len = t->p1 - t->p0;                                                                 \
        for (int64_t kk = r0; kk < r1; kk++) {                                                       \
            T *out = (T *)t->cols + kk * len;                                                        \
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
    static void name(const conv_job *j, const tile *t, int64_t c0, int64_t c1) {                     \
        const kiln_conv_geom *g = &j->g;                                                             \
        int64_t len = t->p1 - t->p0, taps = g->kh * g->kw;                                           \
        for (int64_t kk = c0 * taps; kk < c1 * taps; kk++) {                                         \
            const T *in = (const T *)t->cols + kk * len;                                             \
            FOR_SEGMENTS(T, (T *)j->out, {                                                           \
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

/* C[m, n] = op(A) op(B) (+ C) in the job's dtype, on this thread, with
 * kiln's own GEMM: OpenBLAS, which kiln__sgemm takes on one thread outside
 * a pool loop only, would make 1 thread's bits differ from 2 threads'. */
static void gemm(const conv_job *j, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                 const void *b, int64_t ldb, bool acc, void *c, int64_t ldc) {
    if (j->f64) kiln__dgemm_own(ta, tb, m, n, k, 1.0, a, lda, b, ldb, acc ? 1.0 : 0.0, c, ldc, 1);
    else kiln__sgemm_own(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, acc ? 1.0f : 0.0f, c, ldc, 1);
}

#if defined(__x86_64__)
/* Whether conv_tiled_avx512.c forms (and adds back) the job's columns. */
static bool tile_simd(const conv_job *j) { return !j->f64 && j->g.sw <= 2 && kiln__cpu_avx512(kiln__cpu_caps()); }
#endif

static void form_cols(const conv_job *j, const tile *t, int64_t r0, int64_t r1) {
#if defined(__x86_64__)
    if (tile_simd(j)) {
        kiln__conv_tile_rows_f32_avx512(j->x, j->c, &j->g, t->p0, t->p1, r0, r1, t->cols);
        return;
    }
#endif
    (j->f64 ? im2col_rows_f64 : im2col_rows_f32)(j, t, r0, r1);
}

/* gx += the tile's columns of input channels [c0, c1). */
static void add_cols(const conv_job *j, const tile *t, int64_t c0, int64_t c1) {
#if defined(__x86_64__)
    if (tile_simd(j)) {
        int64_t taps = j->g.kh * j->g.kw;
        kiln__conv_tile_add_f32_avx512(j->out, j->c, &j->g, t->p0, t->p1, c0 * taps, c1 * taps, t->cols);
        return;
    }
#endif
    (j->f64 ? col2im_channels_f64 : col2im_channels_f32)(j, t, c0, c1);
}

/* An element offset into one of the job's arrays. */
static const void *at(const conv_job *j, const void *base, int64_t i) { return (const char *)base + (size_t)i * j->es; }

/* Forward, tiles [i0, i1): y[:, tile] = w cols, in this thread's scratch. */
static void forward_tiles(void *arg, int64_t i0, int64_t i1, int tid) {
    const conv_job *j = arg;
    void *cols = (void *)at(j, j->cols, (int64_t)tid * j->k * j->pt);
    for (int64_t i = i0; i < i1; i++) {
        tile t = tile_at(j, i, cols);
        form_cols(j, &t, 0, j->k);
        gemm(j, false, false, j->o, t.p1 - t.p0, j->k, j->w, j->k, cols, t.p1 - t.p0, false,
             (void *)at(j, j->out, t.p0), j->np);
    }
}

/* Grad w, its columns [k0, k1): gw[:, k0:k1] (+)= sum over tiles of
 * gy[:, tile] cols[k0:k1]^T, tiles in order. Its rows of the columns start
 * at k0 pt whatever the tile's length: threads reach the last, shorter
 * tile at different times, and rows at k0 len would overlap another
 * thread's rows of a full tile. A tile deeper than the f32 GEMM's kc is
 * multiplied kc pixels at a time: kiln__sgemm_own cuts a product that deep
 * into blocks but takes a narrow one (a thread's chunk of columns) in one
 * pass, and 1 and 2 threads' sums would part. */
static void grad_w_rows(void *arg, int64_t k0, int64_t k1, int tid) {
    const conv_job *j = arg;
    int64_t kc = j->f64 ? j->pt : kiln__sgemm_blocks_for(kiln__sgemm_kernel_pick()).kc;
    (void)tid;
    for (int64_t i = 0; i * j->pt < j->np; i++) {
        tile t = tile_at(j, i, j->cols);
        int64_t len = t.p1 - t.p0;
        t.cols = (void *)at(j, j->cols, k0 * (j->pt - len)); /* row kk at k0 pt + (kk - k0) len */
        form_cols(j, &t, k0, k1);
        for (int64_t s = 0; s < len; s += kc)
            gemm(j, false, true, j->o, k1 - k0, len - s < kc ? len - s : kc, at(j, j->gy, t.p0 + s), j->np,
                 at(j, j->cols, k0 * j->pt + s), len, i > 0 || s > 0 || j->acc, (void *)at(j, j->out, k0), j->k);
    }
}

/* Grad w in parts of the pixels, parts [q0, q1): part q's tiles, all of
 * gw's columns, summed into gw (part 0) or its own sums, in this thread's
 * columns. */
static void grad_w_parts(void *arg, int64_t q0, int64_t q1, int tid) {
    const conv_job *j = arg;
    void *cols = (void *)at(j, j->cols, (int64_t)tid * j->k * j->pt);
    for (int64_t q = q0; q < q1; q++) {
        int64_t p0 = q * j->np / j->parts, p1 = (q + 1) * j->np / j->parts;
        void *sum = q ? (void *)at(j, j->sums, (q - 1) * j->o * j->k) : j->out;
        for (tile t = {p0, 0, cols}; t.p0 < p1; t.p0 = t.p1) {
            t.p1 = t.p0 + j->pt < p1 ? t.p0 + j->pt : p1;
            form_cols(j, &t, 0, j->k);
            gemm(j, false, true, j->o, j->k, t.p1 - t.p0, at(j, j->gy, t.p0), j->np, cols, t.p1 - t.p0,
                 t.p0 > p0 || (!q && j->acc), sum, j->k);
        }
    }
}

/* gw's rows [r0, r1) += the sums of parts 1.., in order. */
static void grad_w_gather(void *arg, int64_t r0, int64_t r1, int tid) {
    const conv_job *j = arg;
    int64_t a = r0 * j->k, b = r1 * j->k;
    (void)tid;
    for (int64_t q = 1; q < j->parts; q++) {
        int64_t off = (q - 1) * j->o * j->k;
        if (j->f64) {
            double *gw = j->out;
            const double *s = (const double *)j->sums + off;
#pragma omp simd
            for (int64_t i = a; i < b; i++) gw[i] += s[i];
        } else {
            float *gw = j->out;
            const float *s = (const float *)j->sums + off;
#pragma omp simd
            for (int64_t i = a; i < b; i++) gw[i] += s[i];
        }
    }
}

/* Parts of grad w's pixels: with 1024 or more a part, its sums (O x K)
 * cost little against its products (O x K x 1024 multiply-adds), and each
 * thread's GEMMs stay as wide as gw; fewer, and gw's columns are split
 * instead (ResNet-18's 512-channel layers: 512 pixels). From the shape
 * alone, so that 1 and 2 threads add alike. */
static int64_t pixel_parts(int64_t np) {
    int64_t parts = np / 1024;
    return parts < 1 ? 1 : parts > 4 ? 4 : parts;
}

/* Grad x, input channels [c0, c1): their rows of w^T gy[:, tile], then
 * col2im into their planes of gx, tiles in order. Their rows of the
 * columns start at k0 pt, as grad w's (grad_w_rows). */
static void grad_x_channels(void *arg, int64_t c0, int64_t c1, int tid) {
    const conv_job *j = arg;
    int64_t taps = j->g.kh * j->g.kw, k0 = c0 * taps;
    (void)tid;
    for (int64_t i = 0; i * j->pt < j->np; i++) {
        tile t = tile_at(j, i, j->cols);
        int64_t len = t.p1 - t.p0;
        t.cols = (void *)at(j, j->cols, k0 * (j->pt - len)); /* row kk at k0 pt + (kk - k0) len */
        gemm(j, true, false, (c1 - c0) * taps, len, j->o, at(j, j->w, k0), j->k, at(j, j->gy, t.p0), j->np, false,
             (void *)at(j, j->cols, k0 * j->pt), len);
        add_cols(j, &t, c0, c1);
    }
}

typedef enum { FORWARD, GRAD_X, GRAD_W } conv_pass;

/* The three passes: operands, scratch and the split among the threads. */
static kiln_status run_tiles(kiln_tensor *node, const kiln_exec *ex, conv_pass pass) {
    bool f64 = node->dtype == KILN_F64;
    if (!f64 && node->dtype != KILN_F32)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: no %s kernel", kiln__op_table[node->op].name,
                          kiln_dtype_name(node->dtype));
    const kiln_tensor *img = pass == GRAD_X ? node : node->src[0];
    const kiln_tensor *w = pass == FORWARD ? node->src[1] : pass == GRAD_X ? node->src[0] : node;
    const kiln_tensor *grid = pass == FORWARD ? node : node->src[1]; /* [O, N, OH, OW] */
    conv_job j = job_of(node, img, grid, w->shape[0]);
    j.f64 = f64, j.es = f64 ? 8 : 4;
    j.x = img->data, j.w = w->data, j.gy = grid->data, j.out = node->data;
    /* only the weight gradient adds into its output (core/fuse.c's KILN_FUSE_ACC) */
    j.acc = ex->accumulate;
    if (j.acc && pass != GRAD_W)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: cannot add into its output", kiln__op_table[node->op].name);
    size_t out_bytes = (size_t)kiln_tensor_numel(node) * j.es;
    if ((pass == GRAD_X || j.np == 0 || j.k == 0) && !j.acc) memset(node->data, 0, out_bytes);
    if (j.np == 0 || j.k == 0 || j.o == 0) return KILN_OK;
    if (!f64 && kiln__wino_fits(&j.g, j.n, j.c, j.o)) {
        int wt = j.o * j.k * j.np >= 1 << 20 ? ex->n_threads : 1;
        if (pass == GRAD_W) return kiln__wino_grad_w(&j.g, j.n, j.c, j.o, j.x, j.gy, j.out, j.acc, wt);
        return kiln__wino_conv(pass == GRAD_X, &j.g, j.n, j.c, j.o, pass == FORWARD ? j.x : j.gy, j.w, j.out, wt);
    }
    if (!f64 && kiln__wino2_fits(&j.g, j.n, j.c, j.o)) {
        int wt = j.o * j.k * j.np >= 1 << 20 ? ex->n_threads : 1;
        if (pass == GRAD_W) return kiln__wino2_grad_w(&j.g, j.n, j.c, j.o, j.x, j.gy, j.out, j.acc, wt);
        return kiln__wino2_conv(pass == GRAD_X, &j.g, j.n, j.c, j.o, pass == FORWARD ? j.x : j.gy, j.w, j.out, wt);
    }
    j.pt = tile_pixels(j.k, j.es, j.np);
    j.parts = pass == GRAD_W ? pixel_parts(j.np) : 1;
    bool in_parts = j.parts > 1;
    int64_t tiles = (j.np + j.pt - 1) / j.pt;
    int64_t units = pass == FORWARD ? tiles : pass == GRAD_X ? j.c : in_parts ? j.parts : j.k;
    /* threads when the layer is worth them (a million multiply-adds) */
    int nt = j.o * j.k * j.np >= 1 << 20 ? ex->n_threads : 1;
    if (nt > units) nt = (int)units;
    bool owned;
    size_t cols_bytes = (size_t)(j.k * j.pt) * j.es * (size_t)(pass == FORWARD || in_parts ? nt : 1);
    size_t bytes = (cols_bytes + (size_t)((j.parts - 1) * j.o * j.k) * j.es + 63) & ~(size_t)63;
    j.cols = kiln__scratch_get(bytes, &owned);
    if (!j.cols)
        return kiln__errs(KILN_ERR_OOM, "%s: out of memory for a tile's columns and sums (%zu bytes)",
                          kiln__op_table[node->op].name, bytes);
    j.sums = (char *)j.cols + cols_bytes;
    kiln_pool_fn *fn = pass == FORWARD  ? forward_tiles
                       : pass == GRAD_X ? grad_x_channels
                       : in_parts       ? grad_w_parts
                                        : grad_w_rows;
    /* chunks a few times the threads, so that a thread the OS left without
     * a core holds back only a small part (each grad chunk reads all of gy) */
    int64_t grain = pass == FORWARD || in_parts ? 1 : nt == 1 ? units : (units + 4 * nt - 1) / (4 * nt);
    kiln__pool_for(units, grain, nt, fn, &j);
    if (in_parts) kiln__pool_for(j.o, (j.o + 4 * nt - 1) / (4 * nt), nt, grad_w_gather, &j);
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
