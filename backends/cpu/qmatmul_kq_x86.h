/* qmatmul_kq_x86.h — the K types' and IQ4_XS's dot products of
 * qmatmul_kq.h on ymm, shared by qmatmul_kq_avx2.c, _avxvnni.c, _avx512.c
 * and _avx512vnni.c, which define KQ_NAME(x) (the function suffix) and
 * KQ_ACC(acc, p, sc): acc (8 int32) plus the int16 pairs p times the
 * int16 scales sc, summed pairwise (madd, or vpdpwssd). Included once per
 * file, built with that file's flags. With KQ_ZMM defined it leaves out
 * Q4_K / Q5_K's block sums (k45_ints) and Q6_K's kernels, and with
 * KQ_ZMM_IQ4 IQ4_XS's: the AVX-512 files have zmm ones (qmatmul_kq_zmm.h,
 * the AVX512-VNNI file's IQ4_XS). The rows kernels
 * (several rows of x at once) are qmatmul_kq_rows_x86.h's. */
#include "qmatmul_kq.h"

#include "../../quant/quant.h"
#include "qmatmul.h"

#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

/* W streams once from DRAM: the lines of block p's bytes QMM_PREFETCH
 * ahead (a block spans two to four lines). always_inline: GCC 12 took the
 * out-of-line loop of prefetches for a const function and deleted every
 * call, so no K kernel prefetched at all */
static inline __attribute__((always_inline)) void KQ_NAME(prefetch)(const void *p, size_t size) {
    const char *c = (const char *)p + QMM_PREFETCH;
    for (size_t off = 0; off < size; off += 64)
        _mm_prefetch(c + off, _MM_HINT_T0);
    _mm_prefetch(c + size - 1, _MM_HINT_T0);
}

/* the loops over a block's sub-blocks unrolled, so that the shifts and
 * shuffles of each step are constants */
#define KQ_UNROLL _Pragma("GCC unroll 8")

/* the int16 at index s (< 8) of each 128-bit lane, in every int16 */
#define KQ_PICK16(v, s) _mm256_shuffle_epi8((v), _mm256_set1_epi16((short)(0x0100 + 0x0202 * (s))))

/* the sum of a's 8 int32 lanes (exact) */
static inline int32_t KQ_NAME(hsum)(__m256i a) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1)));
}

/* x to Q8_K as kiln__quantize_q8_K_ref, a block of 256 at a time: amax as
 * the largest |x| bits (integers order finite non-negative floats as
 * floats do), max the first x of that magnitude, q = round-to-even of
 * (-127 / max) x by vcvtps2dq (the reference's magic-number rounding for
 * |v| < 2^22) capped at 127; a block with an infinity or a NaN, or so
 * small that -127 / max overflows, goes to the reference */
static void KQ_NAME(quantize_q8_K)(const float *x, void *blocks, int64_t n) {
    kiln_block_q8_K *y = blocks;
    const __m256i absm = _mm256_set1_epi32(0x7fffffff), ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1),
                  order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7), cap = _mm256_set1_epi32(127);
    for (int64_t b = 0; b < n / KILN_QK_K; b++, x += KILN_QK_K) {
        __m256i mx = _mm256_setzero_si256();
        for (int c = 0; c < KILN_QK_K / 8; c++)
            mx = _mm256_max_epi32(mx, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + 8 * c)), absm));
        __m128i m4 = _mm_max_epi32(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1));
        m4 = _mm_max_epi32(m4, _mm_shuffle_epi32(m4, 0x4e));
        const int32_t mbits = _mm_cvtsi128_si32(_mm_max_epi32(m4, _mm_shuffle_epi32(m4, 0xb1)));
        float max = 0.0f, amax;
        memcpy(&amax, &mbits, 4);
        if (mbits >= 0x7f800000 || (mbits && !isfinite(-127.0f / amax))) {
            kiln__quantize_q8_K_ref(x, y + b, KILN_QK_K);
            continue;
        }
        memset(&y[b], 0, sizeof y[b]);
        if (!mbits) continue;
        for (int c = 0; c < KILN_QK_K / 8; c++) {
            const __m256i a = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + 8 * c)), absm);
            const int m = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a, _mm256_set1_epi32(mbits))));
            if (m) {
                max = x[8 * c + __builtin_ctz((unsigned)m)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 is = _mm256_set1_ps(iscale);
        for (int c = 0; c < KILN_QK_K / 32; c++) {
            __m256i q[4];
            for (int k = 0; k < 4; k++)
                q[k] =
                    _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + 32 * c + 8 * k))), cap);
            const __m256i q8 = _mm256_permutevar8x32_epi32(
                _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])), order);
            _mm256_storeu_si256((__m256i *)(y[b].qs + 32 * c), q8);
            const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q8), ones16);
            __m128i h = _mm_hadd_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            h = _mm_hadd_epi32(h, h);
            y[b].bsums[2 * c] = (int16_t)_mm_cvtsi128_si32(h), y[b].bsums[2 * c + 1] = (int16_t)_mm_extract_epi32(h, 1);
        }
        y[b].d = 1 / iscale;
    }
}

/* Q4_K / Q5_K's 8 six-bit scales (*sc, in both 128-bit lanes) and mins
 * (*mn) as int16 from their 12 bytes (s: the block's scales, read as 16
 * bytes, the last 4 the codes after them): kiln__scale_min_k4 on 32-bit
 * words a, b, c, four scales or mins per word: [a & 63, c & 15 | bits 6-7
 * of a, b & 63, c >> 4 | bits 6-7 of b] */
static inline void KQ_NAME(scales_k4)(const uint8_t *s, __m256i *sc, __m128i *mn) {
    const __m128i v = _mm_loadu_si128((const __m128i *)s);
    const __m128i ab = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, 0x50), _mm_setr_epi32(0, 2, 0, 2)),
                                     _mm_setr_epi32(0x3f3f3f3f, 0x30303030, 0x3f3f3f3f, 0x30303030));
    const __m128i c = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, 0xaa), _mm_setr_epi32(0, 0, 0, 4)),
                                    _mm_setr_epi32(0, 0x0f0f0f0f, 0, 0x0f0f0f0f));
    const __m128i r = _mm_or_si128(ab, c);
    *sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(r));
    *mn = _mm_cvtepu8_epi16(_mm_srli_si128(r, 8));
}

/* Q8_K's 16 bsums as 8 sums of pairs: x's sums over the 8 sub-blocks of 32 */
static inline __m128i KQ_NAME(bsums32)(const kiln_block_q8_K *a) {
    return _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)a->bsums), _mm_loadu_si128((const __m128i *)(a->bsums + 8)));
}

static inline __m256i KQ_NAME(load)(const int8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* A block's f32 term, for the types with mins (Q2_K, Q4_K, Q5_K), from
 * its scaled lanes (acc) and the mins times x's sums (mins, 4 lanes), in
 * the reference's operations: [dx d, dx -dmin] times [isum, summs], the
 * two added (dd: the f16 d and dmin, adjacent) */
static inline float KQ_NAME(min_block)(__m256i acc, __m128i mins, const kiln_block_q8_K *a, const void *dd) {
    __m128i s = _mm_hadd_epi32(_mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1)), mins);
    s = _mm_hadd_epi32(s, s);
    uint32_t h;
    memcpy(&h, dd, 4);
    const __m128 m = _mm_mul_ps(
        _mm_set1_ps(a->d), _mm_xor_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)h)), _mm_setr_ps(0.0f, -0.0f, 0.0f, 0.0f)));
    const __m128 t = _mm_mul_ps(m, _mm_cvtepi32_ps(s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

/* Q4_K and Q5_K share a layout up to the codes (d, dmin, scales; Q5_K's
 * qh before its qs): their kernels take the block size, where the codes
 * start, and whether a qh is there */
/* Two blocks' f32 terms as min_block's, in one xmm, added to *sum in
 * block order */
static inline void KQ_NAME(min_block2)(__m256i acc0, __m128i mins0, __m256i acc1, __m128i mins1,
                                       const kiln_block_q8_K *a, const void *dd0, const void *dd1, float *sum) {
    const __m128i s0 =
        _mm_hadd_epi32(_mm_add_epi32(_mm256_castsi256_si128(acc0), _mm256_extracti128_si256(acc0, 1)), mins0);
    const __m128i s1 =
        _mm_hadd_epi32(_mm_add_epi32(_mm256_castsi256_si128(acc1), _mm256_extracti128_si256(acc1, 1)), mins1);
    uint32_t h0, h1;
    memcpy(&h0, dd0, 4), memcpy(&h1, dd1, 4);
    const __m128 dx = _mm_setr_ps(a[0].d, a[0].d, a[1].d, a[1].d);
    const __m128 m = _mm_mul_ps(
        dx, _mm_xor_ps(_mm_cvtph_ps(_mm_setr_epi32((int)h0, (int)h1, 0, 0)), _mm_setr_ps(0.0f, -0.0f, 0.0f, -0.0f)));
    const __m128 t = _mm_mul_ps(m, _mm_cvtepi32_ps(_mm_hadd_epi32(s0, s1)));
    const __m128 v = _mm_hadd_ps(t, t);
    *sum += _mm_cvtss_f32(v);
    *sum += _mm_cvtss_f32(_mm_movehdup_ps(v));
}

#define KQ_K45(T, q5) sizeof(T), offsetof(T, qs), q5
_Static_assert(offsetof(kiln_block_q4_K, scales) == offsetof(kiln_block_q5_K, scales), "Q4_K / Q5_K scales");

/* Q4_K / Q5_K blocks' integer sums (q5: 16 added to the codes of
 * sub-block s where bit s of qh is set) for R rows of x (a[q]: row q's
 * block), the block decoded once: the scaled lanes (lanes[q]) and the mins
 * times x's sums (mins[q], 4 lanes). On ymm in qmatmul_kq_rows_x86.h; the
 * AVX512-VNNI file has its own on zmm. */
static inline __attribute__((always_inline)) void KQ_NAME(k45_rows_ints)(const uint8_t *w, size_t qs_off, bool q5,
                                                                         const kiln_block_q8_K *const *a, int R,
                                                                         __m256i *lanes, __m128i *mins);

/* The same for one row: the mins returned */
static inline __attribute__((always_inline)) __m128i KQ_NAME(k45_ints)(const uint8_t *w, size_t qs_off, bool q5,
                                                                       const kiln_block_q8_K *a, __m256i *lanes) {
    __m128i mins;
    KQ_NAME(k45_rows_ints)(w, qs_off, q5, &a, 1, lanes, &mins);
    return mins;
}

/* Q4_K, Q5_K: two blocks per step share the f32 work (min_block2) */
static inline __attribute__((always_inline)) float KQ_NAME(dot_k45)(const uint8_t *w, size_t bsz, size_t qs_off,
                                                                    bool q5, const void *xa, int64_t nb) {
    const kiln_block_q8_K *a = xa;
    float sum = 0.0f;
    int64_t i = 0;
    for (; i + 1 < nb; i += 2, w += 2 * bsz) {
        KQ_NAME(prefetch)(w, 2 * bsz);
        __m256i l0, l1;
        const __m128i m0 = KQ_NAME(k45_ints)(w, qs_off, q5, a + i, &l0),
                      m1 = KQ_NAME(k45_ints)(w + bsz, qs_off, q5, a + i + 1, &l1);
        KQ_NAME(min_block2)(l0, m0, l1, m1, a + i, w, w + bsz, &sum);
    }
    if (i < nb) {
        KQ_NAME(prefetch)(w, bsz);
        __m256i l0;
        const __m128i m0 = KQ_NAME(k45_ints)(w, qs_off, q5, a + i, &l0);
        sum += KQ_NAME(min_block)(l0, m0, a + i, w);
    }
    return sum;
}

static float KQ_NAME(dot_q4_K)(const void *w, const void *xa, int64_t nb) {
    return KQ_NAME(dot_k45)(w, KQ_K45(kiln_block_q4_K, false), xa, nb);
}
static float KQ_NAME(dot_q5_K)(const void *w, const void *xa, int64_t nb) {
    return KQ_NAME(dot_k45)(w, KQ_K45(kiln_block_q5_K, true), xa, nb);
}


/* The types of 16 sub-blocks of 16 (Q2_K, Q3_K, Q6_K): a ymm of unsigned
 * codes u (elements 32 r .. 32 r + 31 of half h) spans sub-blocks s, s + 1
 * (s = 8 h + 2 r), scaled by [sc[s] x 8, sc[s + 1] x 8] from the 16 int8
 * scales sc8 */
static inline __m256i KQ_NAME(acc16)(__m256i acc, __m256i u, const int8_t *x, __m128i sc8, int s) {
    const __m256i sc = _mm256_cvtepi8_epi16(
        _mm_shuffle_epi8(sc8, _mm_set_epi64x(0x0101010101010101LL * (s + 1), 0x0101010101010101LL * s)));
    return KQ_ACC(acc, _mm256_maddubs_epi16(u, KQ_NAME(load)(x)), sc);
}

/* Those types' codes q = u - off: off sc times x's sums per 16 (Q8_K's
 * bsums) taken off the lanes, then their sum */
static inline int32_t KQ_NAME(isum16)(__m256i acc, __m128i sc8, const kiln_block_q8_K *a, int shift) {
    const __m256i off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), _mm256_loadu_si256((const __m256i *)a->bsums));
    return KQ_NAME(hsum)(_mm256_sub_epi32(acc, _mm256_sll_epi32(off, _mm_cvtsi32_si128(shift))));
}

/* Q3_K's 16 six-bit scales (minus 32) from 12 bytes, four per 32-bit word */
static inline __m128i KQ_NAME(q3_scales)(const kiln_block_q3_K *b) {
    uint32_t sa, sb, c;
    memcpy(&sa, b->scales, 4), memcpy(&sb, b->scales + 4, 4), memcpy(&c, b->scales + 8, 4);
    return _mm_sub_epi8(_mm_setr_epi32((int)((sa & 0x0f0f0f0f) | (c & 0x03030303) << 4),
                                       (int)((sb & 0x0f0f0f0f) | ((c >> 2) & 0x03030303) << 4),
                                       (int)(((sa >> 4) & 0x0f0f0f0f) | ((c >> 4) & 0x03030303) << 4),
                                       (int)(((sb >> 4) & 0x0f0f0f0f) | ((c >> 6) & 0x03030303) << 4)),
                        _mm_set1_epi8(32));
}

/* IQ4_XS's 8 scales ls - 32 in int32 lanes: ls's low nibble s from
 * bits 4s of scales_l, its high two bits from bits 2s of scales_h */
static inline __m256i KQ_NAME(iq4_scales)(const kiln_block_iq4_xs *b) {
    uint32_t sl;
    memcpy(&sl, b->scales_l, 4);
    const __m256i lo =
        _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)sl), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                         _mm256_set1_epi32(0x0f));
    const __m256i hi = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(b->scales_h), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
        _mm256_set1_epi32(3));
    return _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
}

/* the same 8 scales as int16 in each 128-bit lane, so that a sub-block's
 * is picked by an in-lane shuffle with a constant mask (KQ_PICK16) */
static inline __m256i KQ_NAME(iq4_scales16)(const kiln_block_iq4_xs *b) {
    const __m256i sc = KQ_NAME(iq4_scales)(b);
    return _mm256_permute4x64_epi64(_mm256_packs_epi32(sc, sc), 0x88);
}

#ifndef KQ_ZMM /* qmatmul_kq_zmm.h has a zmm Q6_K */
/* Q6_K's q + 32 (0..63) of half h: element l + 32 r of the half is ql's
 * nibble r / 2 of byte l + 32 (r & 1) and qh's bits 2r, 2r + 1 of byte l */
static inline void KQ_NAME(q6_codes)(const kiln_block_q6_K *b, int h, __m256i u[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x30);
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h)),
                  l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32)),
                  hb = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
    u[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m2));
    u[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m2));
    u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m2));
    u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                           _mm256_and_si256(_mm256_srli_epi16(hb, 2), m2));
}
#endif

#include "qmatmul_kq_rows_x86.h"

#ifndef KQ_ZMM
static const kiln_kq_kernels KQ_NAME(kernels) = {
    KQ_NAME(dot_q4_K),      KQ_NAME(dot_q5_K),      KQ_NAME(dot_q6_K),        KQ_NAME(dot_iq4_xs),
    KQ_NAME(dot_q2_K),      KQ_NAME(dot_q3_K),      KQ_NAME(quantize_q8_K),   KQ_NAME(dot_q4_K_rows),
    KQ_NAME(dot_q5_K_rows), KQ_NAME(dot_q6_K_rows), KQ_NAME(dot_iq4_xs_rows), KQ_NAME(dot_q2_K_rows),
    KQ_NAME(dot_q3_K_rows)};
#endif
