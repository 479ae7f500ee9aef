/* nn_vec_avx2.c — the kiln_nn_vec table for AVX2 + FMA (8 f32 lanes);
 * the body is nn_vec_body.h. */
#include "nn_vec.h"

#if defined(__x86_64__)
#include <immintrin.h>

static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hmax256(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

typedef __m256 VT;
#define VL 8
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps((p), (v))
#define VSET1(s) _mm256_set1_ps(s)
#define VZERO() _mm256_setzero_ps()
#define VADD(a, b) _mm256_add_ps((a), (b))
#define VSUB(a, b) _mm256_sub_ps((a), (b))
#define VMUL(a, b) _mm256_mul_ps((a), (b))
#define VMAX(a, b) _mm256_max_ps((a), (b))
#define VMIN(a, b) _mm256_min_ps((a), (b))
#define VNE01(a, b) _mm256_and_ps(_mm256_cmp_ps((a), (b), _CMP_NEQ_UQ), _mm256_set1_ps(1.0f))
#define VFMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define VFNMA(a, b, c) _mm256_fnmadd_ps((a), (b), (c))
#define VHSUM(v) hsum256(v)
#define VHMAX(v) hmax256(v)
#define VROUND(v) _mm256_round_ps((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VPOW2(n) \
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23))
#define NV_SUF avx2
#define NV_NAME "avx2"

#include "nn_vec_body.h"

const kiln_nn_vec *kiln__nn_vec_avx2(void) { return &nv_table_avx2; }
#endif
