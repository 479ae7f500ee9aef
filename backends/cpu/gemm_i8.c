/* gemm_i8.c — int8 x int8 -> int32 GEMM (see gemm_i8.h): the run-time
 * choice of path, the packers every SIMD kernel reads from (into the
 * per-thread scratch of scratch.h), and the portable scalar reference.
 *
 * The SIMD kernels (gemm_i8_amx.c, _avx512vnni.c, _avxvnni.c, _neondot.c,
 * _neon.c) only see
 * packed operands, zero padded to their block sizes, so they have no edge
 * cases in k and only mask their stores of C. */
#include "gemm_i8.h"

#include "cpu_features.h"
#include "scratch.h"

#include <stdlib.h>
#include <string.h>

/* One product: the operands (a, b: original or packed), C, and the sizes
 * the range functions below need. */
typedef struct s8_job {
    const int8_t *a, *b;
    int8_t *dst;
    int32_t *c;
    int64_t m, n, k, lda, ldb, ldc, mp, np, kp;
    int r, g;
    uint8_t flip;
} s8_job;

/* The reference, rows [i0, i1): plain dot products, summed in uint32 so an
 * overflow wraps (as the SIMD paths do) instead of being undefined. */
static void scalar_rows(void *arg, int64_t i0, int64_t i1, int tid) {
    const s8_job *j = arg;
    (void)tid;
    for (int64_t i = i0; i < i1; i++) {
        const int8_t *ai = j->a + i * j->lda;
        for (int64_t e = 0; e < j->n; e++) {
            const int8_t *be = j->b + e * j->ldb;
            int32_t s = 0; /* int32 products of int8 never overflow; the sum wraps */
            for (int64_t p = 0; p < j->k; p++) s = (int32_t)((uint32_t)s + (uint32_t)(ai[p] * be[p]));
            j->c[i * j->ldc + e] = s;
        }
    }
}

static void scalar(int64_t m, int64_t n, int64_t k, const int8_t *a, int64_t lda, const int8_t *b, int64_t ldb,
                   int32_t *c, int64_t ldc, int nt) {
    s8_job j = {.a = a, .b = b, .c = c, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc};
    kiln__pool_for(m, 1, (double)m * (double)n * (double)k > (double)(1 << 22) ? nt : 1, scalar_rows, &j);
}

/* A rows into R x G blocks (layout in gemm_i8.h), xor-ing every byte with
 * flip (0x80: the +128 of the VNNI paths, padding included, which the
 * column sums then cancel as for real values; B's padding is zero). Group
 * by group, chunk by chunk, so the blocks are written in order. */
static void copy_flip(int8_t *d, const int8_t *s, int g, uint8_t flip) {
    if (g == 4) { /* the VNNI and NEON layouts: one 32-bit word */
        uint32_t w;
        memcpy(&w, s, 4);
        w ^= flip * 0x01010101u;
        memcpy(d, &w, 4);
    } else if (g == 64 && !flip) /* AMX */
        memcpy(d, s, 64);
    else
        for (int t = 0; t < g; t++) d[t] = (int8_t)((uint8_t)s[t] ^ flip);
}

/* groups [x0, x1) of r rows */
static void pack_a(void *arg, int64_t x0, int64_t x1, int tid) {
    const s8_job *j = arg;
    const int8_t *a = j->a;
    int8_t *dst = j->dst;
    const int64_t m = j->m, k = j->k, lda = j->lda, kp = j->kp;
    const int r = j->r, g = j->g;
    const uint8_t flip = j->flip;
    int64_t chunks = kp / g, full = k / g;
    (void)tid;
    for (int64_t i0 = x0 * r; i0 < x1 * r; i0 += r) {
        int8_t *d = dst + i0 * kp;
        int live = m - i0 < r ? (int)(m - i0) : r;
        for (int64_t c = 0; c < chunks; c++, d += (int64_t)r * g) {
            int64_t p0 = c * g;
            for (int t = 0; t < r; t++) {
                const int8_t *s = a + (i0 + t) * lda + p0;
                if (t < live && c < full) copy_flip(d + t * g, s, g, flip);
                else
                    for (int e = 0; e < g; e++)
                        d[t * g + e] = (int8_t)((t < live && p0 + e < k ? (uint8_t)s[e] : 0) ^ flip);
            }
        }
    }
}

/* B rows (columns of C) into 16-column panels [x0, x1) of k quads. */
static void pack_b(void *arg, int64_t x0, int64_t x1, int tid) {
    const s8_job *j = arg;
    const int8_t *b = j->b;
    int8_t *dst = j->dst;
    const int64_t n = j->n, k = j->k, ldb = j->ldb, kp = j->kp;
    int64_t quads = kp / 4, full = k / 4;
    (void)tid;
    for (int64_t j0 = x0 * 16; j0 < x1 * 16; j0 += 16) {
        int8_t *d = dst + (j0 / 16) * quads * 64;
        const int8_t *rows[16];
        int live = n - j0 < 16 ? (int)(n - j0) : 16;
        for (int t = 0; t < live; t++) rows[t] = b + (j0 + t) * ldb;
        /* quad by quad: each 64-byte line of the panel is written whole */
        if (live == 16)
            for (int64_t q = 0; q < full; q++, d += 64)
                for (int t = 0; t < 16; t++) memcpy(d + t * 4, rows[t] + q * 4, 4);
        else
            for (int64_t q = 0; q < full; q++, d += 64) {
                memset(d, 0, 64);
                for (int t = 0; t < live; t++) memcpy(d + t * 4, rows[t] + q * 4, 4);
            }
        for (int64_t q = full; q < quads; q++, d += 64) {
            memset(d, 0, 64);
            for (int t = 0; t < live; t++)
                for (int e = 0; e < 4 && q * 4 + e < k; e++) d[t * 4 + e] = rows[t][q * 4 + e];
        }
    }
}


typedef enum path { PATH_SCALAR, PATH_AMX, PATH_AVX512VNNI, PATH_AVXVNNI, PATH_NEONDOT, PATH_NEON } path;

static path choose(void) {
    const kiln_cpu_caps *caps = kiln__cpu_caps();
#if defined(__x86_64__)
    if (kiln__cpu_amx(caps)) return PATH_AMX;
    if (kiln__cpu_avx512vnni(caps)) return PATH_AVX512VNNI;
    if (kiln__cpu_avxvnni(caps)) return PATH_AVXVNNI;
#elif defined(__aarch64__)
    if (kiln__cpu_neondot(caps)) return PATH_NEONDOT;
    if (kiln__cpu_neon(caps)) return PATH_NEON;
#else
    (void)caps;
#endif
    return PATH_SCALAR;
}

static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

static kiln_status packed(path pa, int64_t m, int64_t n, int64_t k, const int8_t *a, int64_t lda, const int8_t *b,
                          int64_t ldb, int32_t *c, int64_t ldc, int nt) {
    int r, g, rows, kq; /* A block shape, M rounding, K rounding */
    switch (pa) {
    case PATH_AMX: r = 16, g = 64, rows = KILN_S8_AMX_MR, kq = 64; break;
    case PATH_NEONDOT: r = KILN_S8_NEONDOT_MR, g = 16, rows = r, kq = 16; break;
    case PATH_NEON: r = KILN_S8_NEON_MR, g = 4, rows = r, kq = 4; break;
    default: r = KILN_S8_VNNI_MR, g = 4, rows = r, kq = 4; break;
    }
    bool vnni = pa == PATH_AVX512VNNI || pa == PATH_AVXVNNI;
    kiln_s8_packed p = {.m = m, .n = n, .mp = round_up(m, rows), .np = round_up(n, pa == PATH_AMX ? 32 : 16),
                        .kp = round_up(k, kq)};
    /* a second thread saves less than waking it costs on small products
     * (and waiting for it at the join costs more on a busy machine) */
    double work = (double)p.mp * (double)p.np * (double)p.kp;
    if (work < (pa == PATH_AMX ? (double)(1 << 25) : (double)(1 << 22))) nt = 1;
    size_t abytes = (size_t)(p.mp * p.kp), bbytes = (size_t)(p.np * p.kp), sbytes = vnni ? (size_t)p.np * 4 : 0;
    size_t total = round_up((int64_t)(abytes + bbytes + sbytes), 64);
    bool owned;
    int8_t *ap = kiln__scratch_get(total, &owned);
    if (!ap)
        return kiln__errs(KILN_ERR_OOM, "gemm_s8: no memory to pack a [%lld, %lld] x [%lld, %lld]^T product",
                          (long long)m, (long long)k, (long long)n, (long long)k);
    int8_t *bp = ap + abytes;
    int32_t *cs = vnni ? (int32_t *)(bp + bbytes) : NULL; /* abytes, bbytes are multiples of 4 */
    p.a = ap, p.b = bp, p.colsum = cs;
    s8_job ja = {.a = a, .dst = ap, .m = m, .k = k, .lda = lda, .kp = p.kp, .r = r, .g = g, .flip = vnni ? 0x80 : 0};
    s8_job jb = {.b = b, .dst = bp, .n = n, .k = k, .ldb = ldb, .kp = p.kp};
    kiln__pool_for(p.mp / r, 1, nt, pack_a, &ja);
    kiln__pool_for(p.np / 16, 1, nt, pack_b, &jb);
    switch (pa) {
#if defined(__x86_64__)
    case PATH_AMX: kiln__gemm_s8_kernel_amx(&p, c, ldc, nt); break;
    case PATH_AVX512VNNI: kiln__gemm_s8_kernel_avx512vnni(&p, c, ldc, nt); break;
    case PATH_AVXVNNI: kiln__gemm_s8_kernel_avxvnni(&p, c, ldc, nt); break;
#endif
#if defined(__aarch64__)
    case PATH_NEONDOT: kiln__gemm_s8_kernel_neondot(&p, c, ldc, nt); break;
    case PATH_NEON: kiln__gemm_s8_kernel_neon(&p, c, ldc, nt); break;
#endif
    default: break;
    }
    if (owned) free(ap);
    return KILN_OK;
}

kiln_status kiln__gemm_s8(int64_t m, int64_t n, int64_t k, const int8_t *a, int64_t lda, const int8_t *b,
                          int64_t ldb, int32_t *c, int64_t ldc, int n_threads) {
    if (m < 0 || n < 0 || k < 0)
        return kiln__errs(KILN_ERR_ARG, "gemm_s8: negative size m %lld n %lld k %lld", (long long)m, (long long)n,
                          (long long)k);
    if (m == 0 || n == 0) return KILN_OK;
    if (!c || (k > 0 && (!a || !b)))
        return kiln__errs(KILN_ERR_ARG, "gemm_s8: NULL operand for a [%lld, %lld] x [%lld, %lld]^T product",
                          (long long)m, (long long)k, (long long)n, (long long)k);
    if ((k > 0 && (lda < k || ldb < k)) || ldc < n)
        return kiln__errs(KILN_ERR_ARG, "gemm_s8: strides lda %lld ldb %lld ldc %lld too small for m %lld n %lld k %lld",
                          (long long)lda, (long long)ldb, (long long)ldc, (long long)m, (long long)n, (long long)k);
    if (n_threads < 1) n_threads = 1;
    if (k == 0) { /* an empty sum */
        for (int64_t i = 0; i < m; i++) memset(c + i * ldc, 0, (size_t)n * sizeof *c);
        return KILN_OK;
    }
    path pa = choose();
    if (pa == PATH_SCALAR) {
        scalar(m, n, k, a, lda, b, ldb, c, ldc, n_threads);
        return KILN_OK;
    }
    return packed(pa, m, n, k, a, lda, b, ldb, c, ldc, n_threads);
}
