/* qmatmul_kq_x86.h — the K types' and IQ4_XS's dot products of
 * qmatmul_kq.h on ymm, shared by qmatmul_kq_avx2.c, _avxvnni.c and
 * _avx512vnni.c, which define KQ_NAME(x) (the function suffix) and
 * KQ_ACC(acc, p, sc): acc (8 int32) plus the int16 pairs p times the
 * int16 scales sc, summed pairwise (madd, or vpdpwssd). Included once per
 * file, built with that file's flags. */
#include "qmatmul_kq.h"

#include "../../quant/quant.h"
#include "qmatmul.h"

#include <immintrin.h>
#include <string.h>

/* W streams once from DRAM: the lines of block p's bytes QMM_PREFETCH
 * ahead (a block spans two to four lines) */
static inline void KQ_NAME(prefetch)(const void *p, size_t size) {
    const char *c = (const char *)p + QMM_PREFETCH;
    for (size_t off = 0; off < size; off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
    _mm_prefetch(c + size - 1, _MM_HINT_T0);
}

/* the int16 at index s (< 8) of each 128-bit lane, in every int16 */
#define KQ_PICK16(v, s) _mm256_shuffle_epi8((v), _mm256_set1_epi16((short)(0x0100 + 0x0202 * (s))))

/* the sum of a's 8 int32 lanes and of b's 4 (exact) */
static inline void KQ_NAME(hsum2)(__m256i a, __m128i b, int32_t *ra, int32_t *rb) {
    __m128i s = _mm_hadd_epi32(_mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)), b);
    s = _mm_hadd_epi32(s, s);
    *ra = _mm_cvtsi128_si32(s), *rb = _mm_extract_epi32(s, 1);
}

static inline int32_t KQ_NAME(hsum)(__m256i a) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1)));
}

/* Q4_K / Q5_K's 8 six-bit scales (*sc) and mins (*mn) as int16, from
 * their 12 bytes: kiln__scale_min_k4 four at a time on 32-bit words */
static inline void KQ_NAME(scales_k4)(const uint8_t s[12], __m256i *sc, __m128i *mn) {
    uint32_t a, b, c;
    memcpy(&a, s, 4), memcpy(&b, s + 4, 4), memcpy(&c, s + 8, 4);
    const uint32_t sc_hi = (c & 0x0f0f0f0f) | ((a >> 6) & 0x03030303) << 4;
    const uint32_t mn_hi = ((c >> 4) & 0x0f0f0f0f) | ((b >> 6) & 0x03030303) << 4;
    *sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_setr_epi32((int)(a & 0x3f3f3f3f), (int)sc_hi, 0, 0)));
    *mn = _mm_cvtepu8_epi16(_mm_setr_epi32((int)(b & 0x3f3f3f3f), (int)mn_hi, 0, 0));
}

/* Q8_K's 16 bsums as 8 sums of pairs: x's sums over the 8 sub-blocks of 32 */
static inline __m128i KQ_NAME(bsums32)(const kiln_block_q8_K *a) {
    return _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)a->bsums), _mm_loadu_si128((const __m128i *)(a->bsums + 8)));
}

static inline __m256i KQ_NAME(load)(const int8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* A Q4_K / Q5_K block's f32 term from its scaled lanes (acc) and mins
 * (mn, against Q8_K's bsums), in the reference's operations */
static inline float KQ_NAME(k45_block)(__m256i acc, __m128i mn, const kiln_block_q8_K *a, uint16_t d, uint16_t dmin) {
    int32_t is, ms;
    KQ_NAME(hsum2)(acc, _mm_madd_epi16(KQ_NAME(bsums32)(a), mn), &is, &ms);
    return a->d * _cvtsh_ss(d) * (float)is + a->d * -_cvtsh_ss(dmin) * (float)ms;
}

static float KQ_NAME(dot_q4_K)(const void *w, const void *xa, int64_t nb) {
    const kiln_block_q4_K *b = w;
    const kiln_block_q8_K *a = xa;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        KQ_NAME(prefetch)(b + i, sizeof *b);
        __m256i sc, acc = _mm256_setzero_si256();
        __m128i mn;
        KQ_NAME(scales_k4)(b[i].scales, &sc, &mn);
        for (int j = 0; j < 4; j++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * j));
            const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            acc = KQ_ACC(acc, _mm256_maddubs_epi16(lo, KQ_NAME(load)(a[i].qs + 64 * j)), KQ_PICK16(sc, 2 * j));
            acc = KQ_ACC(acc, _mm256_maddubs_epi16(hi, KQ_NAME(load)(a[i].qs + 64 * j + 32)), KQ_PICK16(sc, 2 * j + 1));
        }
        sum += KQ_NAME(k45_block)(acc, mn, a + i, b[i].d, b[i].dmin);
    }
    return sum;
}

/* Q5_K: Q4_K's nibbles with the fifth bit of sub-block s from bit s of qh */
static float KQ_NAME(dot_q5_K)(const void *w, const void *xa, int64_t nb) {
    const kiln_block_q5_K *b = w;
    const kiln_block_q8_K *a = xa;
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1), two = _mm256_set1_epi8(2);
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        KQ_NAME(prefetch)(b + i, sizeof *b);
        __m256i sc, acc = _mm256_setzero_si256(), h = _mm256_loadu_si256((const __m256i *)b[i].qh);
        __m128i mn;
        KQ_NAME(scales_k4)(b[i].scales, &sc, &mn);
        for (int j = 0; j < 4; j++, h = _mm256_srli_epi16(h, 2)) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * j));
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16(_mm256_and_si256(h, one), 4));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(h, two), 3));
            acc = KQ_ACC(acc, _mm256_maddubs_epi16(lo, KQ_NAME(load)(a[i].qs + 64 * j)), KQ_PICK16(sc, 2 * j));
            acc = KQ_ACC(acc, _mm256_maddubs_epi16(hi, KQ_NAME(load)(a[i].qs + 64 * j + 32)), KQ_PICK16(sc, 2 * j + 1));
        }
        sum += KQ_NAME(k45_block)(acc, mn, a + i, b[i].d, b[i].dmin);
    }
    return sum;
}

/* Q6_K: q + 32 (0..63) unsigned against x, 16 sub-blocks of 16 (a ymm of
 * codes spans two: scales [sc_a x 8, sc_b x 8]), then 32 sc times x's
 * sums per 16 (bsums) taken off */
static float KQ_NAME(dot_q6_K)(const void *w, const void *xa, int64_t nb) {
    const kiln_block_q6_K *b = w;
    const kiln_block_q8_K *a = xa;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x30);
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        KQ_NAME(prefetch)(b + i, sizeof *b);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)b[i].scales);
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b[i].ql + 64 * h)),
                          l1 = _mm256_loadu_si256((const __m256i *)(b[i].ql + 64 * h + 32)),
                          hb = _mm256_loadu_si256((const __m256i *)(b[i].qh + 32 * h));
            /* element l + 32 r of the half: ql's nibble r / 2 of byte
             * l + 32 (r & 1), qh's bits 2r, 2r + 1 of byte l */
            const __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m2)),
                _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                _mm256_and_si256(_mm256_srli_epi16(hb, 2), m2))};
            for (int r = 0; r < 4; r++) {
                const int s = 8 * h + 2 * r;
                const __m256i scr = _mm256_cvtepi8_epi16(
                    _mm_shuffle_epi8(sc8, _mm_set_epi64x(0x0101010101010101LL * (s + 1), 0x0101010101010101LL * s)));
                acc = KQ_ACC(acc, _mm256_maddubs_epi16(q[r], KQ_NAME(load)(a[i].qs + 128 * h + 32 * r)), scr);
            }
        }
        const __m256i off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), _mm256_loadu_si256((const __m256i *)a[i].bsums));
        const int32_t is = KQ_NAME(hsum)(_mm256_sub_epi32(acc, _mm256_slli_epi32(off, 5)));
        sum += a[i].d * _cvtsh_ss(b[i].d) * (float)is;
    }
    return sum;
}

/* IQ4_XS: sub-block s's 16 bytes in both lanes, the low nibbles in the
 * first and the high ones in the second (element order), through the
 * table (pshufb), signed: |v| against sign(x, v); the 8 scales ls - 32 as
 * int16 pairs in int32 lanes, one picked per sub-block */
static float KQ_NAME(dot_iq4_xs)(const void *w, const void *xa, int64_t nb) {
    const kiln_block_iq4_xs *b = w;
    const kiln_block_q8_K *a = xa;
    const __m256i m4 = _mm256_set1_epi8(0x0f), nib = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4),
                  tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kiln__iq4nl_values)),
                  lsh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28), hsh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        KQ_NAME(prefetch)(b + i, sizeof *b);
        uint32_t sl;
        memcpy(&sl, b[i].scales_l, 4);
        const __m256i ls = _mm256_or_si256(
            _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)sl), lsh), _mm256_set1_epi32(0x0f)),
            _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b[i].scales_h), hsh), _mm256_set1_epi32(3)), 4));
        const __m256i sc = _mm256_sub_epi32(ls, _mm256_set1_epi32(32));
        const __m256i sc2 = _mm256_or_si256(_mm256_and_si256(sc, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(sc, 16));
        __m256i acc = _mm256_setzero_si256();
        for (int s = 0; s < 8; s++) {
            const __m256i c = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b[i].qs + 16 * s)));
            const __m256i v = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srlv_epi32(c, nib), m4));
            const __m256i x = KQ_NAME(load)(a[i].qs + 32 * s);
            acc = KQ_ACC(acc, _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(x, v)),
                         _mm256_permutevar8x32_epi32(sc2, _mm256_set1_epi32(s)));
        }
        sum += a[i].d * _cvtsh_ss(b[i].d) * (float)KQ_NAME(hsum)(acc);
    }
    return sum;
}

static const kiln_kq_kernels KQ_NAME(kernels) = {KQ_NAME(dot_q4_K), KQ_NAME(dot_q5_K), KQ_NAME(dot_q6_K),
                                                 KQ_NAME(dot_iq4_xs)};
