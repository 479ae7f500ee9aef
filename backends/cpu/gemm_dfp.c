/* gemm_dfp.c — the DFP GEMM (gemm_dfp.h): chunk bound, the packers the
 * SIMD kernel reads (A's here; B's, a gather or an interleave, in
 * gemm_dfp_avx512vnni.c), the run-time choice of path and the scalar reference. */
#include "gemm_dfp.h"

#include "cpu_features.h"
#include "pool.h"
#include "scratch.h"

#include "../../quant/dfp.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

int64_t kiln__gemm_dfp_chunk_pairs(int amax, int bmax) {
    int64_t ab = (int64_t)(amax < 0 ? -amax : amax) * (int64_t)(bmax < 0 ? -bmax : bmax);
    if (ab == 0) return (int64_t)1 << 40; /* all zero: any length */
    int64_t cp = ((int64_t)INT32_MAX) / (2 * ab);
    return cp < 1 ? 1 : cp;
}

/* One product's operands as the scalar reference and A's packer read them. */
typedef struct dfp_job {
    bool a_km, b_kn, acc;
    int64_t m, n, k, lda, ldb, ldc, cp, kp;
    const int16_t *a, *b;
    int16_t *dst;
    float sa, sb, *c;
} dfp_job;

/* The reference, rows [i0, i1): per chunk an exact integer sum (int64
 * here: the chunk bound keeps it within int32 as on the SIMD path),
 * converted to f32 and added in chunk order. */
static void scalar_rows(void *arg, int64_t i0, int64_t i1, int tid) {
    const dfp_job *J = arg;
    const int16_t *a = J->a, *b = J->b;
    const int64_t n = J->n, k = J->k, cp = J->cp, ldc = J->ldc;
    const float sa = J->sa, sb = J->sb;
    float *c = J->c;
    /* element p of row i of A and of column j of B, whatever the layout */
    const int64_t ai_step = J->a_km ? 1 : J->lda, ap_step = J->a_km ? J->lda : 1;
    const int64_t bj_step = J->b_kn ? 1 : J->ldb, bp_step = J->b_kn ? J->ldb : 1;
    (void)tid;
    for (int64_t i = i0; i < i1; i++) {
        const int16_t *ai = a + i * ai_step;
        for (int64_t j = 0; j < n; j++) {
            const int16_t *bj = b + j * bj_step;
            float f = 0.0f;
            for (int64_t p0 = 0; p0 < k; p0 += 2 * cp) {
                int64_t p1 = p0 + 2 * cp < k ? p0 + 2 * cp : k;
                int32_t s = 0;
                for (int64_t p = p0; p < p1; p++) /* wraps (as the SIMD path) only past the stated bounds */
                    s = (int32_t)((uint32_t)s + (uint32_t)((int32_t)ai[p * ap_step] * (int32_t)bj[p * bp_step]));
                f += (float)s;
            }
            if (J->acc) c[i * ldc + j] += f * sa * sb;
            else c[i * ldc + j] = f * sa * sb;
        }
    }
}

/* A's groups [g0, g1) of KILN_DFP_MR rows */
static void pack_a_groups(void *arg, int64_t g0, int64_t g1, int tid) {
    const dfp_job *J = arg;
    const bool km = J->a_km;
    const int64_t m = J->m, k = J->k, lda = J->lda, kp = J->kp;
    const int16_t *a = J->a;
    int16_t *dst = J->dst;
    int64_t pairs = kp / 2, full = k / 2;
    (void)tid;
    for (int64_t i0 = g0 * KILN_DFP_MR; i0 < g1 * KILN_DFP_MR; i0 += KILN_DFP_MR) {
        int16_t *d = dst + i0 * kp;
        if (km) { /* A stored [k, m]: rows 2p and 2p + 1 give the pair of each of the MR rows */
            int live = m - i0 < KILN_DFP_MR ? (int)(m - i0) : KILN_DFP_MR;
            for (int64_t p = 0; p < pairs; p++, d += KILN_DFP_MR * 2) {
                const int16_t *s0 = a + 2 * p * lda + i0, *s1 = s0 + lda;
                bool odd = 2 * p + 1 >= k;
                for (int t = 0; t < KILN_DFP_MR; t++) {
                    d[2 * t] = t < live ? s0[t] : 0;
                    d[2 * t + 1] = t < live && !odd ? s1[t] : 0;
                }
            }
            continue;
        }
        /* pair by pair across the MR rows, so the tile is written once in
         * order (a pass per row rewrote every line of a tile larger than L2) */
        const int16_t *src[KILN_DFP_MR];
        int live = m - i0 < KILN_DFP_MR ? (int)(m - i0) : KILN_DFP_MR;
        for (int t = 0; t < KILN_DFP_MR; t++) src[t] = a + (i0 + (t < live ? t : 0)) * lda;
#if defined(__x86_64__) /* pack_a runs on the VNNI path only */
        kiln__gemm_dfp_pack_a_rows_avx512(src, live, full, d);
        d += full * KILN_DFP_MR * 2;
#else
        for (int64_t p = 0; p < full; p++, d += KILN_DFP_MR * 2)
            for (int t = 0; t < KILN_DFP_MR; t++) {
                if (t < live) memcpy(d + 2 * t, src[t] + 2 * p, 4);
                else memset(d + 2 * t, 0, 4); /* padding rows */
            }
#endif
        if (full < pairs) /* odd k: the last pair's second half is 0 */
            for (int t = 0; t < KILN_DFP_MR; t++) {
                d[2 * t] = t < live ? src[t][2 * full] : 0;
                d[2 * t + 1] = 0;
            }
    }
}

static void pack_a(bool km, int64_t m, int64_t k, const int16_t *a, int64_t lda, int16_t *dst, int64_t mp,
                   int64_t kp, int nt) {
    dfp_job J = {.a_km = km, .m = m, .k = k, .lda = lda, .kp = kp, .a = a, .dst = dst};
    kiln__pool_for(mp / KILN_DFP_MR, 1, nt, pack_a_groups, &J);
}

static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

#define SMALL_A (64 * 1024) /* int16 of packed A that the calling thread packs alone */

static kiln_status check(const char *who, bool a_km, bool b_kn, int64_t m, int64_t n, int64_t k, const int16_t *a,
                         int64_t lda, const int16_t *b, int64_t ldb, float *c, int64_t ldc) {
    if (m < 0 || n < 0 || k < 0)
        return kiln__errs(KILN_ERR_ARG, "%s: negative size m %lld n %lld k %lld", who, (long long)m, (long long)n,
                          (long long)k);
    if ((m && n) && (!c || (k > 0 && (!a || !b))))
        return kiln__errs(KILN_ERR_ARG, "%s: NULL operand", who);
    if ((k > 0 && (lda < (a_km ? m : k) || ldb < (b_kn ? n : k))) || ldc < n)
        return kiln__errs(KILN_ERR_ARG, "%s: strides lda %lld ldb %lld ldc %lld too small for m %lld n %lld k %lld",
                          who, (long long)lda, (long long)ldb, (long long)ldc, (long long)m, (long long)n,
                          (long long)k);
    return KILN_OK;
}

static kiln_status ref_t(bool a_km, bool b_kn, int64_t m, int64_t n, int64_t k, const int16_t *a, int64_t lda,
                         int amax, int ea, const int16_t *b, int64_t ldb, int bmax, int eb, float *c, int64_t ldc,
                         int n_threads, bool acc) {
    kiln_status s = check("gemm_dfp", a_km, b_kn, m, n, k, a, lda, b, ldb, c, ldc);
    if (s != KILN_OK || !m || !n) return s;
    dfp_job J = {a_km, b_kn, acc, m, n, k, lda, ldb, ldc, kiln__gemm_dfp_chunk_pairs(amax, bmax), 0, a, b, NULL,
                 kiln__dfp_pow2(ea), kiln__dfp_pow2(eb), c};
    kiln__pool_for(m, 1, (double)m * (double)n * (double)k > (double)(1 << 22) ? n_threads : 1, scalar_rows, &J);
    return KILN_OK;
}

kiln_status kiln__gemm_dfp_ref_t(bool a_km, bool b_kn, int64_t m, int64_t n, int64_t k, const int16_t *a,
                                 int64_t lda, int amax, int ea, const int16_t *b, int64_t ldb, int bmax, int eb,
                                 float *c, int64_t ldc, int n_threads) {
    return ref_t(a_km, b_kn, m, n, k, a, lda, amax, ea, b, ldb, bmax, eb, c, ldc, n_threads, false);
}

/* The VNNI kernel's CPU (gemm_dfp_avx512vnni.c). */
static bool has_vnni(void) {
#if defined(__x86_64__)
    return kiln__cpu_avx512vnni(kiln__cpu_caps());
#else
    return false;
#endif
}

/* The packed product's shape and scales; a small product runs on one
 * thread (*nt = 1). */
static kiln_dfp_packed packed_shape(int64_t m, int64_t n, int64_t k, int amax, int ea, int bmax, int eb, int *nt) {
    kiln_dfp_packed p = {.m = m, .n = n, .k = k, .mp = round_up(m, KILN_DFP_MR), .np = round_up(n, 16),
                         .kp = round_up(k, 2), .cp = kiln__gemm_dfp_chunk_pairs(amax, bmax),
                         .sa = kiln__dfp_pow2(ea), .sb = kiln__dfp_pow2(eb)};
    if ((double)p.mp * (double)p.np * (double)p.kp < (double)(1 << 22)) *nt = 1;
    return p;
}

/* A's panels (returned) and room for B's, nb int16 (*bp), in one scratch
 * buffer, also in p->a, p->b; free it when *owned. NULL when out of
 * memory. */
static int16_t *packed_buffers(kiln_dfp_packed *p, int64_t nb, int16_t **bp, bool *owned) {
    size_t abytes = (size_t)(p->mp * p->kp) * 2, bbytes = (size_t)nb * 2;
    int16_t *ap = kiln__scratch_get((size_t)round_up((int64_t)(abytes + bbytes), 64), owned);
    if (ap) *bp = ap + abytes / 2, p->a = ap, p->b = *bp;
    return ap;
}

static kiln_status gemm_t(bool a_km, bool b_kn, int64_t m, int64_t n, int64_t k, const int16_t *a, int64_t lda,
                          int amax, int ea, const int16_t *b, int64_t ldb, int bmax, int eb, float *c, int64_t ldc,
                          int n_threads, bool acc) {
    const bool vnni = has_vnni();
    if (!vnni || k == 0)
        return ref_t(a_km, b_kn, m, n, k, a, lda, amax, ea, b, ldb, bmax, eb, c, ldc, n_threads, acc);
    kiln_status st = check("gemm_dfp", a_km, b_kn, m, n, k, a, lda, b, ldb, c, ldc);
    if (st != KILN_OK || !m || !n) return st;
    int nt = n_threads < 1 ? 1 : n_threads;
    kiln_dfp_packed p = packed_shape(m, n, k, amax, ea, bmax, eb, &nt);
    p.acc = acc;
    bool owned;
    int16_t *bp, *ap = packed_buffers(&p, p.np * p.kp, &bp, &owned);
    if (!ap)
        return kiln__errs(KILN_ERR_OOM, "gemm_dfp: no memory to pack a [%lld, %lld] x [%lld, %lld]^T product",
                          (long long)m, (long long)k, (long long)n, (long long)k);
    pack_a(a_km, m, k, a, lda, ap, p.mp, p.kp, nt);
#if defined(__x86_64__)
    kiln__gemm_dfp_pack_b_avx512(b_kn, n, k, b, ldb, bp, p.np, p.kp, nt);
    kiln__gemm_dfp_kernel_avx512vnni(&p, c, ldc, nt);
#endif
    if (owned) free(ap);
    return KILN_OK;
}

kiln_status kiln__gemm_dfp_t(bool a_km, bool b_kn, int64_t m, int64_t n, int64_t k, const int16_t *a, int64_t lda,
                             int amax, int ea, const int16_t *b, int64_t ldb, int bmax, int eb, float *c, int64_t ldc,
                             int n_threads) {
    return gemm_t(a_km, b_kn, m, n, k, a, lda, amax, ea, b, ldb, bmax, eb, c, ldc, n_threads, false);
}

kiln_status kiln__gemm_dfp_add_t(bool a_km, bool b_kn, int64_t m, int64_t n, int64_t k, const int16_t *a,
                                 int64_t lda, int amax, int ea, const int16_t *b, int64_t ldb, int bmax, int eb,
                                 float *c, int64_t ldc, int n_threads) {
    return gemm_t(a_km, b_kn, m, n, k, a, lda, amax, ea, b, ldb, bmax, eb, c, ldc, n_threads, true);
}

/* The tables of kiln_dfp_taps for img, padded to nrp rows and ncp
 * columns with entries no test passes. */
static void taps_fill(const kiln_dfp_image *img, int64_t nr, int64_t nrp, int64_t nc, int64_t ncp, int32_t *tab,
                      kiln_dfp_taps *t) {
    const int64_t *g = img->g, hw = img->h * img->w, cs = img->cs ? img->cs : hw, ns = img->ns ? img->ns : img->c * hw;
    const int64_t sg = img->flip ? -1 : 1, pad = img->flip ? -1 : 1; /* a transposed convolution's taps run back */
    const int32_t out = INT32_MIN / 2; /* plus any in-range offset: still negative */
    int32_t *rofs = tab, *ri = tab + nrp, *rj = tab + 2 * nrp, *cofs = tab + 3 * nrp, *ci = cofs + ncp,
            *cj = cofs + 2 * ncp;
    /* counters, not divisions: a table per product, of n oh ow entries */
    for (int64_t r = 0, c = 0, ki = 0, kj = 0; r < nrp; r++) {
        bool live = r < nr;
        rofs[r] = live ? (int32_t)(c * cs + sg * (ki * g[6] * img->w + kj * g[7])) : 0;
        ri[r] = live ? (int32_t)(sg * ki * g[6]) : out;
        rj[r] = live ? (int32_t)(sg * kj * g[7]) : out;
        if (++kj == g[1] && (kj = 0, ++ki == g[0])) ki = 0, c++;
    }
    for (int64_t j = 0, b = 0, oi = 0, oj = 0; j < ncp; j++) {
        bool live = j < nc;
        int64_t i0 = oi * g[2] - pad * g[4], j0 = oj * g[3] - pad * g[5];
        cofs[j] = live ? (int32_t)(b * ns + i0 * img->w + j0) : 0;
        ci[j] = live ? (int32_t)i0 : out;
        cj[j] = live ? (int32_t)j0 : out;
        if (++oj == img->ow && (oj = 0, ++oi == img->oh)) oi = 0, b++;
    }
    *t = (kiln_dfp_taps){rofs, ri, rj, cofs, ci, cj, (int32_t)img->h, (int32_t)img->w, (int32_t)(g[0] * g[1])};
}

/* The tables of the latest geometries, per thread: a training step runs
 * each convolution's forward and weight-gradient products with the same
 * geometry every step, and building conv1's (50176 columns) took a sixth
 * of its forward product. Slots are reused least recently used first; a
 * pthread key frees them when the thread exits. */
#define TAPS_SLOTS 8
#define TAPS_KEY 19
typedef struct taps_slot {
    int64_t key[TAPS_KEY];
    int32_t *tab;
    kiln_dfp_taps t;
    uint64_t used;
} taps_slot;
typedef struct taps_cache {
    taps_slot s[TAPS_SLOTS];
    uint64_t clock;
} taps_cache;

static _Thread_local taps_cache *tcache;
static pthread_key_t tcache_key;
static pthread_once_t tcache_once = PTHREAD_ONCE_INIT;
static bool tcache_key_ok;

static void tcache_free(void *p) {
    taps_cache *c = p;
    for (int i = 0; i < TAPS_SLOTS; i++) free(c->s[i].tab);
    free(c);
}

static void tcache_key_make(void) { tcache_key_ok = pthread_key_create(&tcache_key, tcache_free) == 0; }

static taps_cache *tcache_get(void) {
    if (tcache) return tcache;
    pthread_once(&tcache_once, tcache_key_make);
    taps_cache *c = tcache_key_ok ? kiln__calloc(1, sizeof *c) : NULL;
    if (!c) return NULL;
    if (pthread_setspecific(tcache_key, c) != 0) {
        free(c);
        return NULL;
    }
    return tcache = c;
}

/* The tables of kiln_dfp_taps for img (rows padded to nrp, columns to
 * ncp), from this thread's cache or built into it; valid until this
 * thread's next call. *owned: a buffer of their own (no cache), which the
 * caller frees. false without memory. */
static bool taps_tables(const kiln_dfp_image *img, int64_t nr, int64_t nrp, int64_t nc, int64_t ncp, kiln_dfp_taps *t,
                        int32_t **owned) {
    const int64_t key[TAPS_KEY] = {img->n,    img->c,    img->h,    img->w,    img->oh,   img->ow,   img->g[0],
                                   img->g[1], img->g[2], img->g[3], img->g[4], img->g[5], img->g[6], img->g[7],
                                   nrp,       ncp,       img->cs,   img->ns,   img->flip};
    (void)nr, (void)nc; /* functions of the key */
    const size_t bytes = (size_t)(3 * (nrp + ncp)) * 4;
    taps_cache *c = tcache_get();
    *owned = NULL;
    if (!c) {
        if (!(*owned = kiln__malloc(bytes))) return false;
        taps_fill(img, nr, nrp, nc, ncp, *owned, t);
        return true;
    }
    taps_slot *old = &c->s[0];
    for (int i = 0; i < TAPS_SLOTS; i++) {
        taps_slot *s = &c->s[i];
        if (s->tab && !memcmp(s->key, key, sizeof key)) {
            s->used = ++c->clock, *t = s->t;
            return true;
        }
        if (s->used < old->used) old = s;
    }
    int32_t *tab = kiln__malloc(bytes);
    if (!tab) return false;
    free(old->tab);
    taps_fill(img, nr, nrp, nc, ncp, tab, &old->t);
    memcpy(old->key, key, sizeof key);
    old->tab = tab, old->used = ++c->clock, *t = old->t;
    return true;
}

kiln_status kiln__gemm_dfp_conv_t(bool a_km, bool b_t, int64_t m, int64_t n, int64_t k, const int16_t *a,
                                  int64_t lda, int amax, int ea, const kiln_dfp_image *img, int bmax, int eb, float *c,
                                  int64_t ldc, int n_threads) {
    const int64_t kc = img->c * img->g[0] * img->g[1], nc = img->n * img->oh * img->ow;
    if ((b_t ? n != kc || k != nc : k != kc || n != nc) || !img->x)
        return kiln__errs(KILN_ERR_ARG, "gemm_dfp_conv: the columns [%lld, %lld] do not fit m %lld n %lld k %lld",
                          (long long)kc, (long long)nc, (long long)m, (long long)n, (long long)k);
    const bool vnni = has_vnni();
    /* int32 gather offsets: the image and the tables' reach within 2^30 */
    bool fits = img->n * img->c * img->h * img->w < ((int64_t)1 << 30) && kc < ((int64_t)1 << 30) &&
                nc < ((int64_t)1 << 30);
    int nt = n_threads < 1 ? 1 : n_threads;
    if (!vnni || !fits || k == 0 || !m || !n) { /* explicit columns, then the plain GEMM */
        int16_t *cols = kiln__malloc((size_t)(kc * nc > 0 ? kc * nc : 1) * 2);
        if (!cols) return kiln__errs(KILN_ERR_OOM, "gemm_dfp_conv: no memory for [%lld, %lld] columns",
                                     (long long)kc, (long long)nc);
        if (img->cs || img->ns || img->flip) { /* another layout: the columns from the tap tables */
            kiln_dfp_taps t;
            int32_t *own;
            if (!fits) {
                free(cols);
                return kiln__errs(KILN_ERR_UNSUPPORTED, "gemm_dfp_conv: an image of 2^30 codes or more in this layout");
            }
            if (!taps_tables(img, kc, kc, nc, nc, &t, &own)) {
                free(cols);
                return kiln__errs(KILN_ERR_OOM, "gemm_dfp_conv: no memory for the tap tables");
            }
            for (int64_t r = 0; r < kc; r++)
                for (int64_t j = 0; j < nc; j++) {
                    uint32_t i = (uint32_t)(t.ci[j] + t.ri[r]), jj = (uint32_t)(t.cj[j] + t.rj[r]);
                    cols[r * nc + j] = i < (uint32_t)t.h && jj < (uint32_t)t.w ? img->x[t.cofs[j] + t.rofs[r]] : 0;
                }
            free(own);
        } else
            kiln__dfp_im2col_cn(img->x, img->n, img->c, img->h, img->w, img->g, img->oh, img->ow, cols, nt);
        kiln_status s = kiln__gemm_dfp_t(a_km, !b_t, m, n, k, a, lda, amax, ea, cols, b_t ? k : n, bmax, eb, c, ldc,
                                         nt);
        free(cols);
        return s;
    }
    kiln_status st = check("gemm_dfp_conv", a_km, false, m, n, k, a, lda, a, k, c, ldc);
    if (st != KILN_OK) return st;
    kiln_dfp_packed p = packed_shape(m, n, k, amax, ea, bmax, eb, &nt);
    kiln_dfp_taps taps;
    int32_t *tab;
    if (!(b_t ? taps_tables(img, kc, p.np, nc, p.kp, &taps, &tab) : taps_tables(img, kc, p.kp, nc, p.np, &taps, &tab)))
        return kiln__errs(KILN_ERR_OOM, "gemm_dfp_conv: no memory for the tap tables");
    bool owned;
    /* each thread's block of B's panels (packed inside the kernel), or, for
     * a weight gradient with fewer 64-column blocks than two a thread (conv1's
     * 16 columns: one unit, one thread), all of B packed first by every
     * thread, the kernel's units then a few row tiles each */
    const bool first = nt > 1 && b_t && (p.np + 63) / 64 < 2 * nt;
    const int64_t stride = (p.np < 64 ? p.np : 64) * p.kp;
    int16_t *bp, *ap = packed_buffers(&p, first ? p.np * p.kp : nt * stride, &bp, &owned);
    if (!ap) {
        free(tab);
        return kiln__errs(KILN_ERR_OOM, "gemm_dfp_conv: no memory to pack a [%lld, %lld] x [%lld, %lld]^T product",
                          (long long)m, (long long)k, (long long)n, (long long)k);
    }
    /* a small A (a forward's weights) packed on the calling thread alone */
    pack_a(a_km, m, k, a, lda, ap, p.mp, p.kp, !first && p.mp * p.kp <= SMALL_A ? 1 : nt);
#if defined(__x86_64__)
    if (first) {
        kiln__gemm_dfp_pack_b_im2col_avx512(b_t, n, k, img->x, &taps, bp, p.np, p.kp, nt);
        kiln__gemm_dfp_kernel_avx512vnni(&p, c, ldc, nt);
    } else
        kiln__gemm_dfp_kernel_im2col_avx512vnni(&p, c, ldc, b_t, img->x, &taps, bp, stride, nt);
#endif
    if (owned) free(ap);
    free(tab);
    return KILN_OK;
}

kiln_status kiln__gemm_dfp_ref(int64_t m, int64_t n, int64_t k, const int16_t *a, int64_t lda, int amax, int ea,
                               const int16_t *b, int64_t ldb, int bmax, int eb, float *c, int64_t ldc,
                               int n_threads) {
    return kiln__gemm_dfp_ref_t(false, false, m, n, k, a, lda, amax, ea, b, ldb, bmax, eb, c, ldc, n_threads);
}

kiln_status kiln__gemm_dfp(int64_t m, int64_t n, int64_t k, const int16_t *a, int64_t lda, int amax, int ea,
                           const int16_t *b, int64_t ldb, int bmax, int eb, float *c, int64_t ldc, int n_threads) {
    return kiln__gemm_dfp_t(false, false, m, n, k, a, lda, amax, ea, b, ldb, bmax, eb, c, ldc, n_threads);
}
