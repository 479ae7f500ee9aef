/* conv.c — CPU kernels of the two convolution primitives, IM2COL and
 * COL2IM (layout and ip[] in ops/conv.c). Sources are contiguous (the
 * constructors make them so). Each (n, c) image plane is independent, so
 * the threads split N*C and col2im's overlapping sums need no atomics.
 * Both also carry the fused max-pool and its backward (ip[10] = 1). */
#include "conv_simd.h"
#include "cpu_features.h"
#include "internal.h"
#include "pool.h"

#include <math.h>

/* Whether the AVX-512 planes (conv_avx512.c) may run; CONV_X86 also as a
 * constant, so that a test of a flag still folds away (and references no
 * x86 symbol) elsewhere. */
#if defined(__x86_64__)
#define CONV_X86 1
#else
#define CONV_X86 0
#endif
static bool pool_avx512(void) { return CONV_X86 && kiln__cpu_avx512(kiln__cpu_caps()); }

/* The geometry both kernels share: kernel, stride, padding, dilation, the
 * image size H x W and the cols grid OH x OW. */
typedef kiln_conv_geom geom;

static geom geom_of(const kiln_tensor *node, const kiln_tensor *cols) {
    const int64_t *ip = node->ip;
    return (geom){ip[0], ip[1], ip[2], ip[3], ip[4], ip[5], ip[6], ip[7], ip[8], ip[9], cols->shape[4], cols->shape[5]};
}

/* Where the taps of image plane p (= n*C + c) start in cols, and the
 * distance between its consecutive (ki, kj) blocks of OH x OW taps:
 * [N, C, kh, kw, OH, OW] (layout 0) or [C, kh, kw, N, OH, OW] (layout 1). */
typedef struct cols_map {
    int64_t c, n, kk, l;
    bool cn;
} cols_map;

static cols_map cols_map_of(const kiln_tensor *node, int64_t n, int64_t c, const geom *g) {
    return (cols_map){c, n, g->kh * g->kw, g->oh * g->ow, node->ip[11] == 1};
}

/* Plane q of the loop: layout 1 walks n fastest, so that consecutive
 * planes touch consecutive OH x OW blocks of cols (kh*kw sequential streams
 * instead of jumps of kh*kw*N*OH*OW). */
static inline int64_t plane_of(const cols_map *m, int64_t q) { return m->cn ? (q % m->n) * m->c + q / m->n : q; }

static inline int64_t cols_base(const cols_map *m, int64_t q) {
    return m->cn ? (q / m->n * m->kk * m->n + q % m->n) * m->l : q * m->kk * m->l;
}

static inline int64_t cols_tap_stride(const cols_map *m) { return m->cn ? m->n * m->l : m->l; }

/* x [N, C, H, W] -> cols (either layout); out-of-image taps get pad.
 * Each (plane, ki, kj, oi) row of OW taps is a strided (or, at stride 1, a
 * contiguous) copy of one image row between two runs of padding. */
#define IM2COL_BODY(T)                                                                                   \
    do {                                                                                                 \
        const T *x = node->src[0]->data;                                                                 \
        T *cols = node->data;                                                                            \
        const T pad = (T)node->fp[0];                                                                    \
        cols_map m = cols_map_of(node, node->src[0]->shape[0], node->src[0]->shape[1], &g);              \
        int64_t tap_stride = cols_tap_stride(&m);                                                        \
        for (int64_t q = q0; q < q1; q++) {                                                              \
            const T *img = x + plane_of(&m, q) * g.h * g.w;                                              \
            T *base = cols + cols_base(&m, q);                                                           \
            for (int64_t ki = 0; ki < g.kh; ki++)                                                        \
                for (int64_t kj = 0; kj < g.kw; kj++) {                                                  \
                    int64_t lo, hi;                                                                      \
                    T *out = base + (ki * g.kw + kj) * tap_stride;                                       \
                    kiln__conv_in_range(g.ow, g.sw, g.pw, kj * g.dw, g.w, &lo, &hi);                     \
                    for (int64_t oi = 0; oi < g.oh; oi++, out += g.ow) {                                 \
                        int64_t ii = oi * g.sh - g.ph + ki * g.dh;                                       \
                        if (ii < 0 || ii >= g.h) {                                                       \
                            for (int64_t oj = 0; oj < g.ow; oj++) out[oj] = pad;                         \
                            continue;                                                                    \
                        }                                                                                \
                        const T *src = img + ii * g.w + kj * g.dw - g.pw;                                \
                        for (int64_t oj = 0; oj < lo; oj++) out[oj] = pad;                               \
                        if (g.sw == 1) { /* short rows: an inline copy beats a memcpy call */            \
                            _Pragma("omp simd")                                                          \
                            for (int64_t oj = lo; oj < hi; oj++) out[oj] = src[oj];                      \
                        } else                                                                           \
                            for (int64_t oj = lo; oj < hi; oj++) out[oj] = src[oj * g.sw];               \
                        for (int64_t oj = hi; oj < g.ow; oj++) out[oj] = pad;                            \
                    }                                                                                    \
                }                                                                                        \
        }                                                                                                \
    } while (0)

/* cols (either layout) -> img [N, C, H, W], summing overlapping taps and
 * dropping the ones that fall outside the image. */
#define COL2IM_BODY(T)                                                                                   \
    do {                                                                                                 \
        const T *cols = node->src[0]->data;                                                              \
        T *y = node->data;                                                                               \
        cols_map m = cols_map_of(node, node->shape[0], node->shape[1], &g);                              \
        int64_t tap_stride = cols_tap_stride(&m);                                                        \
        bool simd = sizeof(T) == 4 && g.sh == 1 && g.sw == 1 && pool_avx512();                            \
        for (int64_t q = q0; q < q1; q++) {                                                              \
            T *img = y + plane_of(&m, q) * g.h * g.w;                                                    \
            const T *base = cols + cols_base(&m, q);                                                     \
            if (CONV_X86 && simd) {                                                                      \
                kiln__col2im_plane_s1_f32_avx512((const float *)base, tap_stride, (float *)img, &g);     \
                continue;                                                                                \
            }                                                                                            \
            memset(img, 0, (size_t)(g.h * g.w) * sizeof *img);                                           \
            for (int64_t ki = 0; ki < g.kh; ki++)                                                        \
                for (int64_t kj = 0; kj < g.kw; kj++) {                                                  \
                    int64_t lo, hi;                                                                      \
                    const T *in = base + (ki * g.kw + kj) * tap_stride;                                  \
                    kiln__conv_in_range(g.ow, g.sw, g.pw, kj * g.dw, g.w, &lo, &hi);                     \
                    for (int64_t oi = 0; oi < g.oh; oi++, in += g.ow) {                                  \
                        int64_t ii = oi * g.sh - g.ph + ki * g.dh;                                       \
                        if (ii < 0 || ii >= g.h) continue;                                               \
                        T *dst = img + ii * g.w + kj * g.dw - g.pw;                                      \
                        if (g.sw == 1) {                                                                 \
                            _Pragma("omp simd") /* cols and img never overlap */                         \
                            for (int64_t oj = lo; oj < hi; oj++) dst[oj] += in[oj];                      \
                        } else                                                                           \
                            for (int64_t oj = lo; oj < hi; oj++) dst[oj * g.sw] += in[oj];               \
                    }                                                                                    \
                }                                                                                        \
        }                                                                                                \
    } while (0)

/* The pooled planes p = n*C + c (y, gy: [N, C, OH, OW]) and where each
 * one's image lies in x (and gx): plane p as well, or, when x is a view of
 * [C, N, H, W] storage (ip[11] = 1: a convolution's output read without
 * its permuting copy, see ops/conv.c), plane c*N + n. */
typedef struct plane_map {
    int64_t n, c;
    bool cn;
} plane_map;

static plane_map plane_map_of(const kiln_tensor *node, const kiln_tensor *pooled) {
    return (plane_map){pooled->shape[0], pooled->shape[1], node->ip[11] == 1};
}

static inline int64_t image_plane(const plane_map *m, int64_t p) { return m->cn ? p % m->c * m->n + p / m->c : p; }

/* Whether the 2x2 stride-2 windows cover every pixel (even H and W), so
 * the max-pool's backward assigns each pixel once and needs no zeroing. */
static inline bool tiles_2x2(const geom *g) {
    return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->dh == 1 && g->dw == 1 && g->h == 2 * g->oh &&
           g->w == 2 * g->ow;
}

/* Whether the window at image row i0, column j0 lies wholly in the image. */
static inline bool inside(const geom *g, int64_t i0, int64_t j0) {
    return i0 >= 0 && j0 >= 0 && i0 + (g->kh - 1) * g->dh < g->h && j0 + (g->kw - 1) * g->dw < g->w;
}

/* Fused max-pool (ip[10] = 1): x [N, C, H, W] -> y [N, C, OH, OW], the max
 * of each window's taps (out-of-image taps read pad); a NaN wins, as in
 * kiln_max. */
#define POOL_MAX_BODY(T)                                                                                 \
    do {                                                                                                 \
        const T *x = node->src[0]->data;                                                                 \
        T *y = node->data;                                                                               \
        const T pad = (T)node->fp[0];                                                                    \
        int64_t n_out = g.oh * g.ow;                                                                     \
        bool interior = g.ph == 0 && g.pw == 0;                                                          \
        plane_map pm = plane_map_of(node, node);                                                         \
        for (int64_t p = q0; p < q1; p++) {                                                              \
            const T *img = x + image_plane(&pm, p) * g.h * g.w;                                          \
            T *out = y + p * n_out;                                                                      \
            if (interior) {                                                                              \
                if (sizeof(T) == 4) pool_plane_interior_f32((const float *)img, (float *)out, &g);      \
                else pool_plane_interior_f64((const double *)img, (double *)out, &g);                   \
                continue;                                                                                \
            }                                                                                            \
            for (int64_t oi = 0; oi < g.oh; oi++)                                                        \
                for (int64_t oj = 0; oj < g.ow; oj++) {                                                  \
                    int64_t i0 = oi * g.sh - g.ph, j0 = oj * g.sw - g.pw;                                 \
                    T best;                                                                              \
                    if (inside(&g, i0, j0)) { /* no padding to read: the common case */                  \
                        const T *wp = img + i0 * g.w + j0;                                               \
                        best = wp[0];                                                                    \
                        for (int64_t ki = 0; ki < g.kh; ki++, wp += g.dh * g.w)                          \
                            for (int64_t kj = 0; kj < g.kw; kj++) {                                      \
                                T v = wp[kj * g.dw];                                                     \
                                if (v > best || v != v) best = v;                                        \
                            }                                                                            \
                        if (best != best) best = (T)NAN;                                                 \
                        out[oi * g.ow + oj] = best;                                                      \
                        continue;                                                                        \
                    }                                                                                    \
                    best = (T)-INFINITY;                                                                 \
                    bool first = true;                                                                   \
                    for (int64_t ki = 0; ki < g.kh; ki++) {                                              \
                        int64_t ii = i0 + ki * g.dh;                                                     \
                        for (int64_t kj = 0; kj < g.kw; kj++) {                                          \
                            int64_t jj = j0 + kj * g.dw;                                                 \
                            T v = ii >= 0 && ii < g.h && jj >= 0 && jj < g.w ? img[ii * g.w + jj] : pad; \
                            if (first || v > best || v != v) best = v, first = false;                    \
                            if (best != best) break;                                                     \
                        }                                                                                \
                    }                                                                                    \
                    out[oi * g.ow + oj] = best;                                                          \
                }                                                                                        \
        }                                                                                                \
    } while (0)

/* Its backward (COL2IM, ip[10] = 1): src x, y, gy -> gx [N, C, H, W]; each
 * window's gy shared evenly among its taps equal to y (pad taps count but
 * are dropped), summed where windows overlap. Threads split the planes. */
#define POOL_MAX_GRAD_BODY(T)                                                                            \
    do {                                                                                                 \
        const T *x = node->src[0]->data, *y = node->src[1]->data, *gy = node->src[2]->data;              \
        T *gx = node->data;                                                                              \
        const T pad = (T)-INFINITY;                                                                      \
        int64_t n_out = g.oh * g.ow;                                                                     \
        bool interior = g.ph == 0 && g.pw == 0;                                                          \
        plane_map pm = plane_map_of(node, node->src[1]);                                                 \
        for (int64_t p = q0; p < q1; p++) {                                                              \
            int64_t xp = image_plane(&pm, p);                                                            \
            const T *img = x + xp * g.h * g.w, *yp = y + p * n_out, *gp = gy + p * n_out;                \
            T *gimg = gx + xp * g.h * g.w;                                                               \
            if (!(interior && tiles_2x2(&g))) memset(gimg, 0, (size_t)(g.h * g.w) * sizeof *gimg);       \
            if (interior && sizeof(T) == 4) {                                                            \
                pool_grad_plane_interior_f32((const float *)img, (const float *)yp, (const float *)gp,   \
                                             (float *)gimg, &g);                                         \
                continue;                                                                                \
            }                                                                                            \
            if (interior && sizeof(T) == 8) {                                                            \
                pool_grad_plane_interior_f64((const double *)img, (const double *)yp, (const double *)gp, \
                                             (double *)gimg, &g);                                        \
                continue;                                                                                \
            }                                                                                            \
            for (int64_t oi = 0; oi < g.oh; oi++)                                                        \
                for (int64_t oj = 0; oj < g.ow; oj++) {                                                  \
                    T m = yp[oi * g.ow + oj];                                                            \
                    int64_t i0 = oi * g.sh - g.ph, j0 = oj * g.sw - g.pw, count = 0;                      \
                    if (inside(&g, i0, j0)) {                                                            \
                        const T *wp = img + i0 * g.w + j0;                                               \
                        for (int64_t ki = 0; ki < g.kh; ki++)                                            \
                            for (int64_t kj = 0; kj < g.kw; kj++) count += wp[ki * g.dh * g.w + kj * g.dw] == m; \
                        if (!count) continue;                                                            \
                        T share = gp[oi * g.ow + oj] / (T)count, *gw = gimg + i0 * g.w + j0;             \
                        for (int64_t ki = 0; ki < g.kh; ki++)                                            \
                            for (int64_t kj = 0; kj < g.kw; kj++) {                                      \
                                int64_t o = ki * g.dh * g.w + kj * g.dw;                                 \
                                gw[o] += wp[o] == m ? share : (T)0; /* branch-free, see above */         \
                            }                                                                            \
                        continue;                                                                        \
                    }                                                                                    \
                    for (int64_t ki = 0; ki < g.kh; ki++)                                                \
                        for (int64_t kj = 0; kj < g.kw; kj++) {                                          \
                            int64_t ii = i0 + ki * g.dh, jj = j0 + kj * g.dw;                            \
                            bool in = ii >= 0 && ii < g.h && jj >= 0 && jj < g.w;                        \
                            count += (in ? img[ii * g.w + jj] : pad) == m;                               \
                        }                                                                                \
                    if (!count) continue;                                                                \
                    T share = gp[oi * g.ow + oj] / (T)count;                                             \
                    for (int64_t ki = 0; ki < g.kh; ki++)                                                \
                        for (int64_t kj = 0; kj < g.kw; kj++) {                                          \
                            int64_t ii = i0 + ki * g.dh, jj = j0 + kj * g.dw;                            \
                            if (ii >= 0 && ii < g.h && jj >= 0 && jj < g.w && img[ii * g.w + jj] == m)   \
                                gimg[ii * g.w + jj] += share;                                            \
                        }                                                                                \
                }                                                                                        \
        }                                                                                                \
    } while (0)

/* One plane of the max-pool when no window reaches padding (ph = pw = 0):
 * geometry in locals, row pointers and a branch-free max (on random data a
 * compare-and-branch mispredicts half the time, which cost more than
 * everything else here). */
#define POOL_PLANE_INTERIOR(T, SUF)                                                                      \
    static void pool_plane_interior_##SUF(const T *img, T *out, const geom *gp) {                        \
        const int64_t kh = gp->kh, kw = gp->kw, sh = gp->sh, sw = gp->sw, dh = gp->dh, dw = gp->dw;      \
        const int64_t w = gp->w, oh = gp->oh, ow = gp->ow;                                               \
        if (kh == 2 && kw == 2 && sh == 2 && sw == 2 && dh == 1 && dw == 1) { /* the usual 2x2: one pass */ \
            if (sizeof(T) == 4 && pool_avx512()) {                                                       \
                kiln__pool2x2_f32_avx512((const float *)img, (float *)out, oh, ow, w);                   \
                return;                                                                                  \
            }                                                                                            \
            for (int64_t oi = 0; oi < oh; oi++, out += ow) {                                             \
                const T *r0 = img + 2 * oi * w, *r1 = r0 + w;                                            \
                _Pragma("omp simd")                                                                      \
                for (int64_t oj = 0; oj < ow; oj++) {                                                    \
                    T a = r0[2 * oj], b = r0[2 * oj + 1], c = r1[2 * oj], d = r1[2 * oj + 1];            \
                    T m = ((b > a) | (b != b)) ? b : a;                                                  \
                    m = ((c > m) | (c != c)) ? c : m;                                                    \
                    out[oj] = ((d > m) | (d != d)) ? d : m; /* a NaN wins */                             \
                }                                                                                        \
            }                                                                                            \
            return;                                                                                      \
        }                                                                                                \
        for (int64_t oi = 0; oi < oh; oi++, out += ow) {                                                 \
            const T *row0 = img + oi * sh * w;                                                           \
            for (int64_t oj = 0; oj < ow; oj++) out[oj] = row0[oj * sw];                                 \
            for (int64_t ki = 0; ki < kh; ki++) {                                                        \
                const T *row = row0 + ki * dh * w;                                                       \
                for (int64_t kj = ki ? 0 : 1; kj < kw; kj++) {                                           \
                    const T *r = row + kj * dw;                                                          \
                    _Pragma("omp simd")                                                                  \
                    for (int64_t oj = 0; oj < ow; oj++) {                                                \
                        T v = r[oj * sw], b = out[oj];                                                   \
                        out[oj] = ((v > b) | (v != v)) ? v : b; /* a NaN wins */                         \
                    }                                                                                    \
                }                                                                                        \
            }                                                                                            \
        }                                                                                                \
    }
POOL_PLANE_INTERIOR(float, f32)
POOL_PLANE_INTERIOR(double, f64)

/* The backward of one such plane: when the windows tile the image each
 * pixel is assigned its window's share or 0; otherwise a block of up to 256
 * outputs of a row at a time counts each window's maxima, then adds its
 * share to each of them, both branch-free. gimg starts zeroed. A window
 * whose max is NaN has no tap equal to it: its share is gy/0, and its taps
 * get NaN (tiled, as the unfused mask * share gave) or 0. */
#define POOL_GRAD_PLANE_INTERIOR(T, SUF)                                                                 \
    static void pool_grad_plane_interior_##SUF(const T *img, const T *y, const T *gy, T *gimg, const geom *gp) { \
        const int64_t kh = gp->kh, kw = gp->kw, sh = gp->sh, sw = gp->sw, dh = gp->dh, dw = gp->dw;      \
        const int64_t w = gp->w, oh = gp->oh, ow = gp->ow;                                               \
        T share[256];                                                                                    \
        if (kh == 2 && kw == 2 && sh == 2 && sw == 2 && dh == 1 && dw == 1) { /* the usual 2x2 pool */     \
            if (sizeof(T) == 4 && pool_avx512()) {                                                       \
                kiln__pool2x2_grad_f32_avx512((const float *)img, (const float *)y, (const float *)gy,   \
                                              (float *)gimg, oh, ow, w);                                 \
                return;                                                                                  \
            }                                                                                            \
            for (int64_t oi = 0; oi < oh; oi++) {                                                        \
                const T *r0 = img + 2 * oi * w, *r1 = r0 + w, *yr = y + oi * ow, *gr = gy + oi * ow;     \
                T *g0 = gimg + 2 * oi * w, *g1 = g0 + w;                                                 \
                for (int64_t oj = 0; oj < ow; oj++) {                                                    \
                    T m = yr[oj], ea = (T)(r0[2 * oj] == m), eb = (T)(r0[2 * oj + 1] == m);              \
                    T ec = (T)(r1[2 * oj] == m), ed = (T)(r1[2 * oj + 1] == m);                          \
                    T sv = gr[oj] / (ea + eb + ec + ed);                                                 \
                    g0[2 * oj] = sv * ea, g0[2 * oj + 1] = sv * eb, g1[2 * oj] = sv * ec, g1[2 * oj + 1] = sv * ed; \
                }                                                                                        \
            }                                                                                            \
            return;                                                                                      \
        }                                                                                                \
        if (sh == kh && sw == kw && dh == 1 && dw == 1) { /* windows tile the image: assign, no sums */  \
            for (int64_t oi = 0; oi < oh; oi++)                                                          \
                for (int64_t oj = 0; oj < ow; oj++) {                                                    \
                    const T *r = img + oi * kh * w + oj * kw;                                            \
                    T *gw = gimg + oi * kh * w + oj * kw, m = y[oi * ow + oj], cnt = 0;                  \
                    for (int64_t ki = 0; ki < kh; ki++)                                                  \
                        for (int64_t kj = 0; kj < kw; kj++) cnt += (T)(r[ki * w + kj] == m);             \
                    T sv = gy[oi * ow + oj] / cnt;                                                       \
                    for (int64_t ki = 0; ki < kh; ki++)                                                  \
                        for (int64_t kj = 0; kj < kw; kj++) gw[ki * w + kj] = sv * (T)(r[ki * w + kj] == m); \
                }                                                                                        \
            return;                                                                                      \
        }                                                                                                \
        for (int64_t oi = 0; oi < oh; oi++)                                                              \
            for (int64_t o0 = 0; o0 < ow; o0 += 256) {                                                   \
                int64_t nb = ow - o0 < 256 ? ow - o0 : 256;                                              \
                const T *yr = y + oi * ow + o0, *gr = gy + oi * ow + o0;                                 \
                int64_t base = oi * sh * w + o0 * sw;                                                    \
                for (int64_t j = 0; j < nb; j++) share[j] = 0;                                           \
                for (int64_t ki = 0; ki < kh; ki++)                                                      \
                    for (int64_t kj = 0; kj < kw; kj++) {                                                \
                        const T *r = img + base + ki * dh * w + kj * dw;                                 \
                        for (int64_t j = 0; j < nb; j++) share[j] += (T)(r[j * sw] == yr[j]);            \
                    }                                                                                    \
                for (int64_t j = 0; j < nb; j++) share[j] = gr[j] / share[j];                            \
                for (int64_t ki = 0; ki < kh; ki++)                                                      \
                    for (int64_t kj = 0; kj < kw; kj++) {                                                \
                        int64_t o = base + ki * dh * w + kj * dw;                                        \
                        const T *r = img + o;                                                            \
                        T *gw = gimg + o;                                                                \
                        for (int64_t j = 0; j < nb; j++) gw[j * sw] += r[j * sw] == yr[j] ? share[j] : (T)0; \
                    }                                                                                    \
            }                                                                                            \
    }
POOL_GRAD_PLANE_INTERIOR(float, f32)
POOL_GRAD_PLANE_INTERIOR(double, f64)

static geom pool_geom(const kiln_tensor *node, const kiln_tensor *pooled) {
    const int64_t *ip = node->ip;
    return (geom){ip[0], ip[1], ip[2], ip[3], ip[4], ip[5], ip[6], ip[7], ip[8], ip[9], pooled->shape[2], pooled->shape[3]};
}

/* The four kernels' plane loops, planes [q0, q1) of node (arg); the
 * geometry read again from the node. */
#define PLANES_FN(name, T, GEOM, BODY)                                  \
    static void name(void *arg, int64_t q0, int64_t q1, int tid) {      \
        const kiln_tensor *node = arg;                                  \
        geom g = GEOM;                                                  \
        (void)tid;                                                      \
        BODY(T);                                                        \
    }
PLANES_FN(pool_max_f32, float, pool_geom(node, node), POOL_MAX_BODY)
PLANES_FN(pool_max_f64, double, pool_geom(node, node), POOL_MAX_BODY)
PLANES_FN(im2col_f32, float, geom_of(node, node), IM2COL_BODY)
PLANES_FN(im2col_f64, double, geom_of(node, node), IM2COL_BODY)
PLANES_FN(pool_max_grad_f32, float, pool_geom(node, node->src[1]), POOL_MAX_GRAD_BODY)
PLANES_FN(pool_max_grad_f64, double, pool_geom(node, node->src[1]), POOL_MAX_GRAD_BODY)
PLANES_FN(col2im_f32, float, geom_of(node, node->src[0]), COL2IM_BODY)
PLANES_FN(col2im_f64, double, geom_of(node, node->src[0]), COL2IM_BODY)
#undef PLANES_FN

/* planes threaded when the work (per plane) is worth it */
static void run_planes(kiln_tensor *node, const kiln_exec *ex, int64_t planes, int64_t per_plane, kiln_pool_fn *fn) {
    kiln__pool_for(planes, 1, planes * per_plane > 32768 ? ex->n_threads : 1, fn, node);
}

static kiln_status im2col(kiln_tensor *node, const kiln_exec *ex) {
    bool f32 = node->dtype == KILN_F32;
    if (!f32 && node->dtype != KILN_F64)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: no %s kernel", node->ip[10] == 1 ? "max_pool2d" : "im2col",
                          kiln_dtype_name(node->dtype));
    if (node->ip[10] == 1) {
        geom g = pool_geom(node, node);
        run_planes(node, ex, node->shape[0] * node->shape[1], g.h * g.w, f32 ? pool_max_f32 : pool_max_f64);
        return KILN_OK;
    }
    geom g = geom_of(node, node);
    run_planes(node, ex, node->src[0]->shape[0] * node->src[0]->shape[1], g.kh * g.kw * g.oh * g.ow,
           f32 ? im2col_f32 : im2col_f64);
    return KILN_OK;
}

static kiln_status col2im(kiln_tensor *node, const kiln_exec *ex) {
    bool f32 = node->dtype == KILN_F32;
    if (!f32 && node->dtype != KILN_F64)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: no %s kernel",
                          node->ip[10] == 1 ? "max_pool2d backward" : "col2im", kiln_dtype_name(node->dtype));
    if (node->ip[10] == 1) {
        geom g = pool_geom(node, node->src[1]);
        run_planes(node, ex, node->shape[0] * node->shape[1], g.h * g.w, f32 ? pool_max_grad_f32 : pool_max_grad_f64);
        return KILN_OK;
    }
    geom g = geom_of(node, node->src[0]);
    run_planes(node, ex, node->shape[0] * node->shape[1], g.kh * g.kw * g.oh * g.ow, f32 ? col2im_f32 : col2im_f64);
    return KILN_OK;
}

void kiln__cpu_register_conv(kiln_cpu_kernel *tab) {
    tab[KILN_OP_IM2COL] = im2col;
    tab[KILN_OP_COL2IM] = col2im;
}
