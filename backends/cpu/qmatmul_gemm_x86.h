/* qmatmul_gemm_x86.h — the block-scaled int8 GEMM of qmatmul_gemm.h on ymm,
 * shared by qmatmul_gemm_avx2.c and _avxvnni.c (CPUs without AVX-512),
 * which define QG_NAME(x) (the function suffix) and QG_VNNI (1: AVX-VNNI's
 * vpdpbusd; 0: AVX2's vpmaddubsw + vpmaddwd). Included once per file,
 * built with that file's flags.
 *
 * The driver's packed operands are AVX-512's: a group of 16 rows of x is
 * two ymm halves of 8 rows, taken against half the tile's 6 columns at a
 * time (W's quads broadcast), with the f32 operations of AVX-512's tile
 * in each lane, so every output is kiln__qmm_gemm_ref's bits. */
#include "qmatmul_gemm.h"

/* Q8_0's W + 128 (unsigned) for vpdpbusd; AVX2 keeps it signed, as its
 * pairs of unsigned w times x in int16 would saturate above 128, and
 * takes |w| from the panel too (one vpsignb fewer per quad and column:
 * 0.93x the time at 128 x 5632 x 2048) */
#define QG_Q8_OFF (QG_VNNI ? 128 : 0)
#define QG_Q8_SPLIT (QG_VNNI ? 0 : 1)
#include "qmatmul_gemm_pack_x86.h"
#include "qmatmul_quant_ymm.h"

#include <immintrin.h>
#include <string.h>

#define NC KILN_QMM_GEMM_NC
#define QG_UNROLL _Pragma("GCC unroll 8")
/* v stays in its register here: without it gcc 12 hoists every product of
 * a fully unrolled block ahead of the sums and spills them (AVX2's 48
 * vpmaddubsw per block, 190 stack moves in the tile) */
#define QG_KEEP(v) __asm__("" : "+x"(v))

/* One row of x (nb blocks) into the packed layout (qmatmul_gemm.h), the
 * bits of kiln__qmm_gemm_pack_x: each block's codes as
 * kiln__qmm_quantize_x's (qmatmul_quant_ymm.h), and -off * (their sum). */
static void QG_NAME(pack_x)(const float *x, int64_t nb, int32_t off, int8_t *xp, float *da, int32_t *xs) {
    for (int64_t b = 0; b < nb; b++, x += 32, xp += 512, da += 16, xs += 16) {
        const __m256i codes = kiln__qmm_quantize_block_ymm(x, da);
        int32_t quads[8];
        _mm256_storeu_si256((__m256i *)quads, codes);
        for (int qd = 0; qd < 8; qd++) memcpy(xp + 64 * qd, quads + qd, 4);
        /* the codes' sum: psadbw of codes + 128, less 32 * 128 */
        const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(codes, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
        const __m128i hs = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        xs[0] = -off * (int32_t)(_mm_cvtsi128_si64(hs) + _mm_extract_epi64(hs, 1) - 32 * 128);
    }
}

/* W's quad q of column c of the panel block wb, in every lane */
static inline __m256i QG_NAME(wquad)(const uint8_t *wb, int64_t nb, int c, int q) {
    return _mm256_set1_epi32(QG_NAME(load32)(wb + c * nb * 32 + q * 4));
}

/* Rows and columns per pass of the tile: HH (2, or 1 for a last odd 8
 * rows) halves of a group (8 rows each) times QG_CC of the NC columns, an
 * int32 and an f32 accumulator each. 128 x 2048 x 5632, 1 thread (Zen 5,
 * KILN_SIMD=avx2 / avxvnni): 16 rows x 3 columns took 0.91-0.96x the time
 * of 8 x 6 (whose 6 broadcasts of W per quad serve one vector of x each). */
#define QG_CC (NC / 2)

/* One quad of W (w, |w| in aw) against one vector of x added to acc:
 * VNNI's vpdpbusd (w + off unsigned); AVX2's Q8_0 as |w| times sign(x, w)
 * (no pair above 128 * 127 * 2 < 2^15), to int32 per quad; AVX2's Q4_0
 * as int16 pairs (at most 15 * 127 * 2 each: a block's 8 quads stay below
 * 2^15), to int32 once per block (sums()). */
static inline __attribute__((always_inline)) __m256i QG_NAME(dot)(const bool q8, __m256i acc, __m256i w, __m256i aw,
                                                                   __m256i x) {
#if QG_VNNI
    (void)q8, (void)aw;
    return _mm256_dpbusd_avx_epi32(acc, w, x);
#else
    if (q8)
        return _mm256_add_epi32(
            acc, _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1)));
    return _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, x));
#endif
}

/* The exact int32 sums S - off * sum(x) of one block of HH halves of a
 * group (xb: their codes, 32 bytes apart per quad) against QG_CC columns
 * (wb: their block), from init (the rows' -off * sum(x)). */
static inline __attribute__((always_inline)) void QG_NAME(sums)(const int HH, const bool q8, const int8_t *xb,
                                                                 const uint8_t *wb, int64_t nb, const __m256i init[2],
                                                                 __m256i s[QG_CC][2]) {
    const bool i16 = !QG_VNNI && !q8; /* int16 pairs until the block's end */
    QG_UNROLL
    for (int c = 0; c < QG_CC; c++)
        QG_UNROLL
        for (int h = 0; h < HH; h++) s[c][h] = i16 ? _mm256_setzero_si256() : init[h];
    QG_UNROLL
    for (int q = 0; q < 8; q++) {
        __m256i x[2];
        QG_UNROLL
        for (int h = 0; h < HH; h++) x[h] = _mm256_load_si256((const __m256i *)(xb + q * 64 + 32 * h));
        QG_UNROLL
        for (int c = 0; c < QG_CC; c++) {
            const __m256i w = QG_NAME(wquad)(wb, nb, c, q),
                          aw = q8 && QG_Q8_SPLIT ? QG_NAME(wquad)(wb + KILN_QMM_GEMM_NU * nb * 32, nb, c, q) : w;
            QG_UNROLL
            for (int h = 0; h < HH; h++) {
                s[c][h] = QG_NAME(dot)(q8, s[c][h], w, aw, x[h]);
                QG_KEEP(s[c][h]);
            }
        }
    }
    if (!i16) return;
    QG_UNROLL
    for (int c = 0; c < QG_CC; c++)
        QG_UNROLL
        for (int h = 0; h < HH; h++)
            s[c][h] = _mm256_add_epi32(init[h], _mm256_madd_epi16(s[c][h], _mm256_set1_epi16(1)));
}

/* HH halves of a group of rows (xh, dh, sh at the first's block 0)
 * against QG_CC panel columns (wp, dw at the first) over blocks [b0, b1):
 * out[c][r0 ..] set or added to */
static inline __attribute__((always_inline)) void QG_NAME(tile_part)(const int HH, const bool q8, const int8_t *xh,
                                                                      const float *dh, const int32_t *sh,
                                                                      const uint8_t *wp, const float *dw, int64_t nb,
                                                                      int64_t b0, int64_t b1, bool first,
                                                                      float (*out)[32], int r0) {
    __m256 f[QG_CC][2];
    QG_UNROLL
    for (int c = 0; c < QG_CC; c++)
        QG_UNROLL
        for (int h = 0; h < HH; h++)
            f[c][h] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(out[c] + r0 + 8 * h);
    for (int64_t b = b0; b < b1; b++) {
        __m256i s[QG_CC][2], init[2];
        __m256 d[2];
        QG_UNROLL
        for (int h = 0; h < HH; h++) {
            init[h] = _mm256_load_si256((const __m256i *)(sh + b * 16 + 8 * h));
            d[h] = _mm256_load_ps(dh + b * 16 + 8 * h);
        }
        QG_NAME(sums)(HH, q8, xh + b * 512, wp + b * 32, nb, init, s);
        QG_UNROLL
        for (int c = 0; c < QG_CC; c++) {
            const __m256 dc = _mm256_set1_ps(dw[c * nb + b]);
            QG_UNROLL
            for (int h = 0; h < HH; h++)
                f[c][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c][h]), _mm256_mul_ps(d[h], dc), f[c][h]);
        }
    }
    QG_UNROLL
    for (int c = 0; c < QG_CC; c++)
        QG_UNROLL
        for (int h = 0; h < HH; h++) _mm256_storeu_ps(out[c] + r0 + 8 * h, f[c][h]);
}

/* rows (1 .. 32) of 1 or 2 groups, two halves a pass while two hold rows */
static inline __attribute__((always_inline)) void QG_NAME(tile_any)(const bool q8, const int8_t *xp,
                                                                     const float *da, const int32_t *xs, int rows,
                                                                     const uint8_t *wp, const float *dw, int64_t nb,
                                                                     int64_t b0, int64_t b1, bool first,
                                                                     float out[NC][32]) {
    const int halves = (rows + 7) / 8;
    for (int g = 0; 2 * g < halves; g++)
        for (int c0 = 0; c0 < NC; c0 += QG_CC) {
            const int8_t *xg = xp + g * nb * 512;
            if (halves - 2 * g > 1)
                QG_NAME(tile_part)(2, q8, xg, da + g * nb * 16, xs + g * nb * 16, wp + c0 * nb * 32, dw + c0 * nb,
                                   nb, b0, b1, first, out + c0, 16 * g);
            else
                QG_NAME(tile_part)(1, q8, xg, da + g * nb * 16, xs + g * nb * 16, wp + c0 * nb * 32, dw + c0 * nb,
                                   nb, b0, b1, first, out + c0, 16 * g);
        }
}

static void QG_NAME(tile_q8)(const int8_t *xp, const float *da, const int32_t *xs, int rows, const uint8_t *wp,
                             const float *dw, int64_t nb, int64_t b0, int64_t b1, bool first, float out[NC][32]) {
    QG_NAME(tile_any)(true, xp, da, xs, rows, wp, dw, nb, b0, b1, first, out);
}

static void QG_NAME(tile_q4)(const int8_t *xp, const float *da, const int32_t *xs, int rows, const uint8_t *wp,
                             const float *dw, int64_t nb, int64_t b0, int64_t b1, bool first, float out[NC][32]) {
    QG_NAME(tile_any)(false, xp, da, xs, rows, wp, dw, nb, b0, b1, first, out);
}

static const kiln_qmm_gemm_kernels QG_NAME(kernels) = {QG_NAME(pack_x), QG_NAME(pack_w), QG_NAME(tile_q8),
                                                       QG_NAME(tile_q4), QG_Q8_OFF, QG_Q8_SPLIT};

#undef NC
