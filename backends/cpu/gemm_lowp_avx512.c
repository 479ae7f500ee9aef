/* gemm_lowp_avx512.c — the packers of the bf16 GEMM (AVX-512): op(A) and
 * op(B), bf16 or f32 (rounded to bf16 on the way), into the tile-ready
 * layout of gemm_lowp.h. Untransposed operands are read a row at a time
 * and written whole lines; transposed ones are read as 32-bit bf16 pairs,
 * 16 x 16 of them transposed in registers and written whole lines.
 * Threads split the row groups (A) or the pairs or panels (B). */
#if defined(__x86_64__)
#include "gemm_lowp_x86.h"
#include "pool.h"

#include <string.h>

/* Untransposed sources are read 16 rows (A) or 2 rows (B) at a time, too
 * many streams for the hardware prefetcher: each row's lines are fetched
 * this many bytes ahead (Zen 5, 1 thread, CPU time: the 1024^2 product
 * of f32 operands 1.07x faster, its packing 17% of it before) */
#define PACK_AHEAD 256

static inline __mmask16 mask16(int64_t cnt) {
    return cnt <= 0 ? 0 : cnt >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << cnt) - 1);
}
static inline __mmask32 mask32(int64_t cnt) {
    return cnt <= 0 ? 0 : cnt >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << cnt) - 1);
}

/* cnt (<= 16) consecutive elements as bf16, one per 32-bit lane, zero above */
static inline __m512i load16_lanes(kiln_dtype dt, const void *p, int64_t cnt) {
    if (cnt <= 0) return _mm512_setzero_si512();
    if (dt == KILN_BF16) return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask16(cnt), p));
    return _mm512_maskz_mov_epi32(mask16(cnt), lowp_bf16_lanes(_mm512_maskz_loadu_ps(mask16(cnt), p)));
}

/* cnt (<= 32) consecutive elements as 32 packed bf16, zero above */
static inline __m512i load32(kiln_dtype dt, const void *p, int64_t cnt) {
    if (cnt <= 0) return _mm512_setzero_si512();
    if (dt == KILN_BF16) return _mm512_maskz_loadu_epi16(mask32(cnt), p);
    const float *f = p;
    __m256i lo = _mm512_cvtepi32_epi16(load16_lanes(dt, f, cnt));
    __m256i hi = _mm512_cvtepi32_epi16(load16_lanes(dt, f + 16, cnt - 16));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* r[i][j] = r[j][i] over 16 x 16 dwords: the transposed operands' bf16
 * pairs into place (16 scatters of 16 dwords each cost Zen 5 several
 * times the packing: the 1024^2 product of f32 operands ran 1.2x slower
 * with A transposed than with neither) */
static inline void transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int j = 0; j < 4; j++) { /* 128-bit lanes: 0x88 takes the even ones of both, 0xdd the odd */
        t[j] = _mm512_shuffle_i32x4(r[j], r[j + 4], 0x88);
        t[j + 4] = _mm512_shuffle_i32x4(r[j], r[j + 4], 0xdd);
        t[j + 8] = _mm512_shuffle_i32x4(r[j + 8], r[j + 12], 0x88);
        t[j + 12] = _mm512_shuffle_i32x4(r[j + 8], r[j + 12], 0xdd);
    }
    for (int j = 0; j < 8; j++) {
        r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
    }
}

/* One operand to pack: its dtype, layout and sizes, and where to. */
typedef struct pack_job {
    kiln_dtype dt;
    bool t;
    int64_t rows, cols; /* A: m, k; B: k, n */
    const char *src;
    int64_t ld;
    uint16_t *dst;
    int64_t kp, np;
} pack_job;

/* A's groups [g0, g1) of 16 rows */
static void pack_a_groups(void *arg, int64_t g0, int64_t g1, int tid) {
    const pack_job *j = arg;
    const kiln_dtype in_dt = j->dt;
    const bool ta = j->t;
    const int64_t m = j->rows, k = j->cols, lda = j->ld, chunks = j->kp / 32;
    const char *src = j->src;
    uint16_t *dst = j->dst;
    size_t es = in_dt == KILN_BF16 ? 2 : 4;
    (void)tid;
    /* untransposed: each group's rows left to right; transposed: storage
     * top down, each 32 rows across the groups (a group at a time read 64
     * bytes of each row, a page apart: the 1024^2 product of f32 operands
     * ran 1.18x slower, Zen 5, 1 thread, CPU time) */
    for (int64_t x = 0; x < (g1 - g0) * chunks; x++) {
        int64_t g = ta ? g0 + x % (g1 - g0) : g0 + x / chunks, c = ta ? x / (g1 - g0) : x % chunks;
        uint16_t *blk = dst + (g * chunks + c) * 512;
        int64_t p0 = c * 32;
        if (!ta) {
            for (int64_t ii = 0; ii < 16; ii++) {
                int64_t i = g * 16 + ii;
                if (i < m) _mm_prefetch(src + ((size_t)(i * lda + p0)) * es + PACK_AHEAD, _MM_HINT_T0);
                __m512i v = i < m ? load32(in_dt, src + ((size_t)(i * lda + p0)) * es, k - p0)
                                  : _mm512_setzero_si512();
                _mm512_storeu_si512(blk + ii * 32, v);
            }
        } else { /* A stored k x m: rows p, p+1 of storage interleaved give pair p/2 of 16 rows of op(A) */
            __m512i v[16];
            for (int64_t pq = 0; pq < 16; pq++) {
                int64_t p = p0 + 2 * pq, cnt = m - g * 16;
                __m512i lo = p < k ? load16_lanes(in_dt, src + ((size_t)(p * lda + g * 16)) * es, cnt)
                                   : _mm512_setzero_si512();
                __m512i hi = p + 1 < k ? load16_lanes(in_dt, src + ((size_t)((p + 1) * lda + g * 16)) * es, cnt)
                                       : _mm512_setzero_si512();
                v[pq] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
            }
            transpose16(v);
            for (int ii = 0; ii < 16; ii++) _mm512_storeu_si512(blk + ii * 32, v[ii]);
        }
    }
}

void kiln__lowp_pack_a_avx512(kiln_dtype in_dt, bool ta, int64_t m, int64_t k, const void *a, int64_t lda,
                              uint16_t *dst, int64_t mp, int64_t kp, int n_threads) {
    pack_job j = {in_dt, ta, m, k, a, lda, dst, kp, 0};
    kiln__pool_for(mp / 16, 1, n_threads, pack_a_groups, &j);
}

/* B's pairs of k rows (untransposed) or panels of 16 columns [x0, x1) */
static void pack_b_items(void *arg, int64_t x0, int64_t x1, int tid) {
    const pack_job *j = arg;
    const kiln_dtype in_dt = j->dt;
    const bool tb = j->t;
    const int64_t k = j->rows, n = j->cols, ldb = j->ld, pairs = j->kp / 2, panels = j->np / 16;
    const char *src = j->src;
    size_t es = in_dt == KILN_BF16 ? 2 : 4;
    uint32_t *d32 = (uint32_t *)j->dst;
    (void)tid;
    if (!tb) { /* rows 2q and 2q+1 interleaved into one line per panel */
        for (int64_t q = x0; q < x1; q++) {
            for (int64_t g = 0; g < panels; g++) {
                int64_t j0 = g * 16;
                if (2 * q + 3 < k) {
                    _mm_prefetch(src + ((size_t)((2 * q + 2) * ldb + j0)) * es + PACK_AHEAD, _MM_HINT_T0);
                    _mm_prefetch(src + ((size_t)((2 * q + 3) * ldb + j0)) * es + PACK_AHEAD, _MM_HINT_T0);
                }
                __m512i lo = 2 * q < k ? load16_lanes(in_dt, src + ((size_t)(2 * q * ldb + j0)) * es, n - j0)
                                       : _mm512_setzero_si512();
                __m512i hi = 2 * q + 1 < k
                                 ? load16_lanes(in_dt, src + ((size_t)((2 * q + 1) * ldb + j0)) * es, n - j0)
                                 : _mm512_setzero_si512();
                _mm512_storeu_si512(d32 + (g * pairs + q) * 16, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
            }
        }
        return;
    }
    /* B stored n x k: each pair is two neighbours in a row of storage */
    for (int64_t g = x0; g < x1; g++) {
        uint32_t *panel = d32 + g * pairs * 16;
        for (int64_t q0 = 0; q0 < pairs; q0 += 16) { /* pairs: a multiple of 16 */
            __m512i v[16];
            for (int64_t jj = 0; jj < 16; jj++) {
                int64_t j = g * 16 + jj;
                v[jj] = j < n ? load32(in_dt, src + ((size_t)(j * ldb + 2 * q0)) * es, k - 2 * q0)
                              : _mm512_setzero_si512();
            }
            transpose16(v);
            for (int qq = 0; qq < 16; qq++) _mm512_storeu_si512(panel + (q0 + qq) * 16, v[qq]);
        }
    }
}

void kiln__lowp_pack_b_avx512(kiln_dtype in_dt, bool tb, int64_t k, int64_t n, const void *b, int64_t ldb,
                              uint16_t *dst, int64_t kp, int64_t np, int n_threads) {
    pack_job j = {in_dt, tb, k, n, b, ldb, dst, kp, np};
    kiln__pool_for(tb ? np / 16 : kp / 2, 1, n_threads, pack_b_items, &j);
}
#endif
