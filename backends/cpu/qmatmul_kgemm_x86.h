/* qmatmul_kgemm_x86.h — the tile of the K types' integer GEMM
 * (qmatmul_kgemm.h) on ymm, shared by qmatmul_kgemm_avx2.c and
 * _avxvnni.c, which define KG_NAME(x) (the function suffix), KG_DPBUSD(acc,
 * u, x) (acc plus the sums of 4 unsigned u times signed x),
 * KG_DPWSSD(acc, a, b) (acc plus the sums of int16 pairs a times b) and
 * KG_PAIRS16 (1 on AVX2: the groups' sums in int16 pairs, tile_rows).
 * Included once per file, built with that file's flags.
 *
 * The panel's 16 columns go in two halves of 8 (one ymm each), up to
 * KG_MR rows of x at a time: each row's P, group sum and f32 sum live in
 * registers, 16 ymm in all. The f32 operations are the AVX-512 tile's, so
 * the sums are the batch-1 reference's bits. */
#include "qmatmul_kgemm_pack_x86.h"
#include "qmatmul_kgemm_tile.h"

#define KG_MR 4 /* rows of x per pass: 3 ymm each, of 16 */
#define KG_UNROLL _Pragma("GCC unroll 8")

static inline int32_t KG_NAME(load32)(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* the masked store of R rows' sums (cols of 8) */
static inline __attribute__((always_inline)) void KG_NAME(store)(const int R, const __m256 *acc, float *y,
                                                                 int64_t ldy, int cols) {
    const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    KG_UNROLL
    for (int r = 0; r < R; r++) {
        if (cols == 8) _mm256_storeu_ps(y + r * ldy, acc[r]);
        else _mm256_maskstore_ps(y + r * ldy, keep, acc[r]);
    }
}

/* R rows (a constant once inlined) against half h (columns 8h .. 8h + 7)
 * of the panel; cols of that half stored. Q16 (a constant, AVX2's: see
 * KG_PAIRS16 below): the quads a group's int16 pair sums take before its
 * scale, 4 or 2; 1: IQ4_XS's codes less 128, signed. */
static inline __attribute__((always_inline)) void KG_NAME(tile_body)(const int R, const int Q16, const char *xa,
                                                                     size_t xrow, const char *panel, int64_t nb,
                                                                     bool has_min, float *y, int64_t ldy, int h,
                                                                     int cols) {
    const int nc = KILN_KGEMM_NC;
    __m256 acc[KG_MR];
    KG_UNROLL
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *p = panel + b * KILN_KGEMM_BLOCK;
        const int32_t *sc = (const int32_t *)(p + nc * 256) + 8 * h, *cp = sc + 16 * nc; /* half h of each row */
        const float *d = (const float *)(cp + 8 * nc);
        const kiln_block_q8_K *xb[KG_MR];
        __m256i P[KG_MR], C[KG_MR];
        KG_UNROLL
        for (int r = 0; r < R; r++) {
            xb[r] = (const kiln_block_q8_K *)(xa + (size_t)r * xrow) + b;
            P[r] = _mm256_setzero_si256();
        }
        for (int g = 0; g < 16; g++) {
            const __m256i s = _mm256_load_si256((const __m256i *)(sc + g * nc));
#if KG_PAIRS16
            /* the group's scale in both int16 halves of each lane */
            const __m256i s16 = _mm256_blend_epi16(s, _mm256_slli_epi32(s, 16), 0xaa);
            const char *ug = p + 4 * g * 64 + 32 * h;
            if (Q16 == 1) { /* w x as |w| times sign(x, w): no pair past 2 * 127 * 128 */
                KG_UNROLL
                for (int qd = 0; qd < 4; qd++) {
                    const __m256i w = _mm256_xor_si256(_mm256_load_si256((const __m256i *)(ug + qd * 64)),
                                                       _mm256_set1_epi8((char)0x80)),
                                  aw = _mm256_abs_epi8(w);
                    KG_UNROLL
                    for (int r = 0; r < R; r++) {
                        const __m256i x = _mm256_set1_epi32(KG_NAME(load32)(xb[r]->qs + 16 * g + 4 * qd));
                        P[r] = _mm256_add_epi32(
                            P[r], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w)), s16));
                    }
                }
                continue;
            }
            KG_UNROLL
            for (int r = 0; r < R; r++) { /* a row at a time: one int16 sum live, not R (no spills) */
                const int8_t *xq = xb[r]->qs + 16 * g;
                __m256i m[4];
                KG_UNROLL
                for (int qd = 0; qd < 4; qd++)
                    m[qd] = _mm256_maddubs_epi16(_mm256_load_si256((const __m256i *)(ug + qd * 64)),
                                                 _mm256_set1_epi32(KG_NAME(load32)(xq + 4 * qd)));
                const __m256i lo = _mm256_add_epi16(m[0], m[1]), hi = _mm256_add_epi16(m[2], m[3]);
                P[r] = _mm256_add_epi32(P[r], Q16 == 4 ? _mm256_madd_epi16(_mm256_add_epi16(lo, hi), s16)
                                                   : _mm256_add_epi32(_mm256_madd_epi16(lo, s16),
                                                                      _mm256_madd_epi16(hi, s16)));
            }
#else
            __m256i T[KG_MR];
            (void)Q16;
            KG_UNROLL
            for (int r = 0; r < R; r++) T[r] = _mm256_setzero_si256();
            KG_UNROLL
            for (int qd = 0; qd < 4; qd++) {
                const __m256i u = _mm256_load_si256((const __m256i *)(p + (4 * g + qd) * 64 + 32 * h));
                KG_UNROLL
                for (int r = 0; r < R; r++)
                    T[r] = KG_DPBUSD(T[r], u, _mm256_set1_epi32(KG_NAME(load32)(xb[r]->qs + 16 * g + 4 * qd)));
            }
            KG_UNROLL
            for (int r = 0; r < R; r++) P[r] = _mm256_add_epi32(P[r], _mm256_mullo_epi32(T[r], s));
#endif
        }
        KG_UNROLL
        for (int r = 0; r < R; r++) C[r] = _mm256_setzero_si256();
        KG_UNROLL
        for (int t = 0; t < 8 && Q16 != 1; t++) { /* Q16 1's P is already P - C */
            const __m256i c = _mm256_load_si256((const __m256i *)(cp + t * nc));
            KG_UNROLL
            for (int r = 0; r < R; r++)
                C[r] = KG_DPWSSD(C[r], c, _mm256_set1_epi32(KG_NAME(load32)(xb[r]->bsums + 2 * t)));
        }
        const __m256 dw = _mm256_load_ps(d), dmw = _mm256_load_ps(d + nc);
        KG_UNROLL
        for (int r = 0; r < R; r++) {
            const __m256 da = _mm256_set1_ps(xb[r]->d);
            const __m256 v =
                has_min ? _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(da, dw), _mm256_cvtepi32_ps(P[r])),
                                        _mm256_mul_ps(_mm256_mul_ps(da, dmw), _mm256_cvtepi32_ps(C[r])))
                        : _mm256_mul_ps(_mm256_mul_ps(da, dw), _mm256_cvtepi32_ps(_mm256_sub_epi32(P[r], C[r])));
            acc[r] = _mm256_add_ps(acc[r], v);
        }
    }
    KG_NAME(store)(R, acc, y, ldy, cols);
}

/* With KG_PAIRS16 (AVX2) the codes times x are summed in int16 pairs
 * (vpmaddubsw, vpaddw) over several quads and taken to int32 by one
 * vpmaddwd with the group's scale, instead of a vpmaddwd by ones per quad
 * and a vpmulld per group: the same exact integers while no int16 sum
 * passes 2^15. A pair is 2 codes times |x| <= 128; a group's 4 quads add 4
 * pairs: 8 * 31 * 128 < 2^15 for the types with a min (Q2_K, Q4_K, Q5_K:
 * codes below 32); Q3_K and Q6_K (below 64) take 2 quads at a time,
 * 4 * 63 * 128 < 2^15. IQ4_XS's codes (to 241) go signed, one quad a time
 * (tile_iq4xs). */
static inline __attribute__((always_inline)) void KG_NAME(tile_rows)(const int R, const char *xa, size_t xrow,
                                                                     const char *panel, int64_t nb, bool has_min,
                                                                     float *y, int64_t ldy, int h, int cols) {
#if KG_PAIRS16
    if (has_min) KG_NAME(tile_body)(R, 4, xa, xrow, panel, nb, true, y, ldy, h, cols);
    else KG_NAME(tile_body)(R, 2, xa, xrow, panel, nb, false, y, ldy, h, cols);
#else
    KG_NAME(tile_body)(R, 0, xa, xrow, panel, nb, has_min, y, ldy, h, cols);
#endif
}

KG_TILE(KG_NAME(tile), KG_NAME(tile_rows))

#if KG_PAIRS16
static inline __attribute__((always_inline)) void KG_NAME(tile_rows_iq4xs)(const int R, const char *xa, size_t xrow,
                                                                           const char *panel, int64_t nb,
                                                                           bool has_min, float *y, int64_t ldy, int h,
                                                                           int cols) {
    (void)has_min;
    KG_NAME(tile_body)(R, 1, xa, xrow, panel, nb, false, y, ldy, h, cols);
}

KG_TILE(KG_NAME(tile_iq4xs), KG_NAME(tile_rows_iq4xs))
#endif

