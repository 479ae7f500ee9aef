/* qmatmul_gemm_vnni.c — the block-scaled int8 GEMM of qmatmul_gemm.h on
 * AVX512-VNNI. A tile is 6 columns of W x 32 rows of x (two groups of 16
 * rows, one per zmm lane set): 12 int32 accumulators restart each block
 * from -128 sum(w) (a broadcast load), take 8 vpdpbusd per block (x + 128
 * unsigned in a register, one 4-byte quad of w broadcast from memory), then
 * go to f32 with one convert, one scale multiply and one FMA into the 12
 * f32 accumulators: 96 vpdpbusd per 36 other vector operations. */
#include "qmatmul_gemm.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include "../../quant/quant.h"
#include "qmatmul_quant_x86.h"

#include <immintrin.h>
#include <string.h>

#define NC KILN_QMM_GEMM_NC

static inline int32_t load32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* -128 sum of 32 int8 values (v: the values xor 0x80, i.e. w + 128 unsigned) */
static inline int32_t corr_of(__m256i v) {
    const __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
    const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    const int64_t t = _mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1) - 32 * 128;
    return (int32_t)(-128 * t);
}

static void pack_w_vnni(kiln_dtype t, const void *w, int64_t cols, int64_t nc, int64_t nb, int8_t *wp, float *dw,
                        int32_t *corr) {
    const __m256i flip = _mm256_set1_epi8((char)0x80), lo4 = _mm256_set1_epi8(0x0f), eight = _mm256_set1_epi8(8);
    for (int64_t c = 0; c < cols; c++) {
        int8_t *o = wp + c * nb * 32;
        if (t == KILN_Q8_0) {
            const kiln_block_q8_0 *b = (const kiln_block_q8_0 *)w + c * nb;
            for (int64_t i = 0; i < nb; i++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)b[i].qs);
                _mm256_storeu_si256((__m256i *)(o + 32 * i), v);
                corr[c * nb + i] = corr_of(_mm256_xor_si256(v, flip));
                dw[c * nb + i] = _cvtsh_ss(b[i].d);
            }
        } else {
            const kiln_block_q4_0 *b = (const kiln_block_q4_0 *)w + c * nb;
            for (int64_t i = 0; i < nb; i++) {
                const __m128i p = _mm_loadu_si128((const __m128i *)b[i].qs);
                const __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(p, 4), p), lo4); /* nibbles */
                _mm256_storeu_si256((__m256i *)(o + 32 * i), _mm256_sub_epi8(u, eight));
                corr[c * nb + i] = corr_of(_mm256_add_epi8(u, _mm256_set1_epi8(120))); /* w + 128 = nibble + 120 */
                dw[c * nb + i] = _cvtsh_ss(b[i].d);
            }
        }
    }
    for (int64_t c = cols; c < nc; c++) {
        memset(wp + c * nb * 32, 0, (size_t)(nb * 32));
        memset(dw + c * nb, 0, (size_t)nb * sizeof(float));
        memset(corr + c * nb, 0, (size_t)nb * sizeof(int32_t));
    }
}

/* One row of x (nb blocks) into the packed layout: codes + 128 at
 * xp + 512 b + 64 q (+ the row's 4 bytes, already in xp), scales at
 * da + 16 b. */
static void pack_x_vnni(const float *x, int64_t nb, uint8_t *xp, float *da) {
    const __m512i vidx = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int64_t b = 0; b < nb; b++, x += 32, xp += 512, da += 16) {
        const __m256i codes = _mm256_xor_si256(kiln__qmm_quantize_block(x, da), _mm256_set1_epi8((char)0x80));
        _mm512_mask_i32scatter_epi32(xp, 0xff, vidx, _mm512_castsi256_si512(codes), 4);
    }
}

static inline __attribute__((always_inline)) void tile_n(const uint8_t *xp, const float *da, const int gs,
                                                          const int8_t *wp, const float *dw, const int32_t *corr,
                                                          int64_t nb, int64_t b0, int64_t b1, bool first,
                                                          float out[NC][32]) {
    __m512 f[NC][2];
#pragma GCC unroll 6
    for (int c = 0; c < NC; c++)
#pragma GCC unroll 2
        for (int g = 0; g < gs; g++) f[c][g] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out[c] + 16 * g);
    for (int64_t b = b0; b < b1; b++) {
        __m512i s[NC][2];
#pragma GCC unroll 6
        for (int c = 0; c < NC; c++)
#pragma GCC unroll 2
            for (int g = 0; g < gs; g++) s[c][g] = _mm512_set1_epi32(corr[c * nb + b]);
        const uint8_t *xb = xp + b * 512;
        const int8_t *wb = wp + b * 32;
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) {
            __m512i a[2];
#pragma GCC unroll 2
            for (int g = 0; g < gs; g++) a[g] = _mm512_load_si512((const void *)(xb + g * nb * 512 + q * 64));
#pragma GCC unroll 6
            for (int c = 0; c < NC; c++) {
                const __m512i wv = _mm512_set1_epi32(load32(wb + c * nb * 32 + q * 4));
#pragma GCC unroll 2
                for (int g = 0; g < gs; g++) s[c][g] = _mm512_dpbusd_epi32(s[c][g], a[g], wv);
            }
        }
        __m512 d[2];
#pragma GCC unroll 2
        for (int g = 0; g < gs; g++) d[g] = _mm512_load_ps(da + (g * nb + b) * 16);
#pragma GCC unroll 6
        for (int c = 0; c < NC; c++) {
            const __m512 dc = _mm512_set1_ps(dw[c * nb + b]);
#pragma GCC unroll 2
            for (int g = 0; g < gs; g++)
                f[c][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[c][g]), _mm512_mul_ps(d[g], dc), f[c][g]);
        }
    }
#pragma GCC unroll 6
    for (int c = 0; c < NC; c++)
#pragma GCC unroll 2
        for (int g = 0; g < gs; g++) _mm512_storeu_ps(out[c] + 16 * g, f[c][g]);
}

static void tile_vnni(const uint8_t *xp, const float *da, int groups, const int8_t *wp, const float *dw,
                      const int32_t *corr, int64_t nb, int64_t b0, int64_t b1, bool first, float out[NC][32]) {
    if (groups == 2) tile_n(xp, da, 2, wp, dw, corr, nb, b0, b1, first, out);
    else tile_n(xp, da, 1, wp, dw, corr, nb, b0, b1, first, out);
}

const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_vnni(void) {
    static const kiln_qmm_gemm_kernels k = {pack_x_vnni, pack_w_vnni, tile_vnni};
    return &k;
}
#else
const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_vnni(void) { return NULL; }
#endif
