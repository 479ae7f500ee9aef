/* qmatmul_vnni.c — AVX512-VNNI / AVX-VNNI dot products of KILN_OP_QMATMUL
 * (qmatmul.h): vpdpbusd on ymm for Q8_0 / Q4_0 (the same lanes as the AVX2
 * path), and the NF4 dot with the codes decoded by vpermps on zmm. */
#include "qmatmul.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define QMM_NAME(x) x##_vnni
#define QMM_DOT32(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (s))
#include "qmatmul_x86.h"

/* 16 codes (8 bytes, high nibble first) as table values */
static inline __m512 nf4_16(const uint8_t *c, __m512 table) {
    const __m128i p = _mm_loadl_epi64((const __m128i *)c);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(p, 4), _mm_set1_epi8(0x0f)), lo = _mm_and_si128(p, _mm_set1_epi8(0x0f));
    return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(hi, lo)), table);
}

static float dot_nf4_vnni(const uint8_t *codes, int64_t code_stride, const float *absmax, int64_t absmax_stride,
                          int64_t nb, const float *x) {
    const __m512 table = _mm512_loadu_ps(kiln__nf4_table);
    __m512 tot = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++, codes += code_stride, absmax += absmax_stride, x += 64) {
        _mm_prefetch((const char *)codes + QMM_PREFETCH, _MM_HINT_T0);
        __m512 s = _mm512_mul_ps(_mm512_loadu_ps(x), nf4_16(codes, table));
        s = _mm512_fmadd_ps(_mm512_loadu_ps(x + 16), nf4_16(codes + 8, table), s);
        s = _mm512_fmadd_ps(_mm512_loadu_ps(x + 32), nf4_16(codes + 16, table), s);
        s = _mm512_fmadd_ps(_mm512_loadu_ps(x + 48), nf4_16(codes + 24, table), s);
        tot = _mm512_fmadd_ps(s, _mm512_set1_ps(absmax[0]), tot);
    }
    return _mm512_reduce_add_ps(tot);
}

const kiln_qmm_kernels *kiln__qmm_kernels_vnni(void) {
    static const kiln_qmm_kernels k = {dot_q8_0_vnni, dot_q4_0_vnni, dot_nf4_vnni};
    return &k;
}
#else
const kiln_qmm_kernels *kiln__qmm_kernels_vnni(void) { return NULL; }
#endif
