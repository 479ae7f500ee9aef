/* vecmath_avx2.c — the kiln_vm table on AVX2 + FMA (8 f32 lanes, vector
 * masks); the kernels are vecmath_body.h over the vocabulary defined here. */
#if defined(__x86_64__)
#include "vecmath.h"

#include <immintrin.h>

typedef __m256 V;
typedef __m256 VM;
typedef __m256i VI;
#define W 8
#define VLD(p) _mm256_loadu_ps(p)
#define VST(p, v) _mm256_storeu_ps(p, v)
#define VSTNT(p, v) _mm256_stream_ps(p, v)
#define VSFENCE() _mm_sfence()
#define VDUP(f) _mm256_set1_ps(f)
#define VIDUP(i) _mm256_set1_epi32(i)
#define VADD _mm256_add_ps
#define VSUB _mm256_sub_ps
#define VMUL _mm256_mul_ps
#define VDIV _mm256_div_ps
#define VRCP0 _mm256_rcp_ps
#define VSQRT _mm256_sqrt_ps
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VFNMA(a, b, c) _mm256_fnmadd_ps(a, b, c)
#define VROUND(x) _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
/* vmaxps/vminps return the second operand when either is NaN */
#define VMIN_C(x, c) _mm256_min_ps(c, x)
#define VMAX_C(x, c) _mm256_max_ps(c, x)
#define VLT(a, b) _mm256_cmp_ps(a, b, _CMP_LT_OQ)
#define VLE(a, b) _mm256_cmp_ps(a, b, _CMP_LE_OQ)
#define VGT(a, b) _mm256_cmp_ps(a, b, _CMP_GT_OQ)
#define VGE(a, b) _mm256_cmp_ps(a, b, _CMP_GE_OQ)
#define VEQ(a, b) _mm256_cmp_ps(a, b, _CMP_EQ_OQ)
#define VNE(a, b) _mm256_cmp_ps(a, b, _CMP_NEQ_UQ)
#define VNAN(x) _mm256_cmp_ps(x, x, _CMP_UNORD_Q)
#define VSEL(m, a, b) _mm256_blendv_ps(b, a, m)
#define VCVT _mm256_cvttps_epi32
#define VCVTF _mm256_cvtepi32_ps
#define VASI _mm256_castps_si256
#define VASF _mm256_castsi256_ps
#define VIADD _mm256_add_epi32
#define VISUB _mm256_sub_epi32
#define VIAND _mm256_and_si256
#define VIOR _mm256_or_si256
#define VIXOR _mm256_xor_si256
#define VISHL(i, n) _mm256_slli_epi32(i, n)
#define VISRA(i, n) _mm256_srai_epi32(i, n)
#define VANY(m) (_mm256_movemask_ps(m) != 0)
static inline VM VINZ(VI i) {
    return _mm256_castsi256_ps(_mm256_xor_si256(_mm256_cmpeq_epi32(i, _mm256_setzero_si256()), _mm256_set1_epi32(-1)));
}
static inline V VMAXP(V acc, V x) { return _mm256_blendv_ps(_mm256_max_ps(acc, x), acc, VNAN(acc)); }
static inline V VMINP(V acc, V x) { return _mm256_blendv_ps(_mm256_min_ps(acc, x), acc, VNAN(acc)); }
typedef __m256d VD;
#define VDZERO _mm256_setzero_pd()
#define VDADD _mm256_add_pd
#define VDLD(p) _mm256_loadu_pd(p)
#define VDST(p, v) _mm256_storeu_pd(p, v)
#define VDLO(v) _mm256_cvtps_pd(_mm256_castps256_ps128(v))
#define VDHI(v) _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))
#define VM_TABLE kiln__vm_avx2
#define VM_NAME "avx2"

#include "vecmath_body.h"
#endif
