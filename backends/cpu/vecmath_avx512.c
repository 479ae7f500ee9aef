/* vecmath_avx512.c — the kiln_vm table on AVX-512 (16 f32 lanes, k-masks);
 * the kernels are vecmath_body.h over the vocabulary defined here. */
#if defined(__x86_64__)
#include "vecmath.h"

#include <immintrin.h>

typedef __m512 V;
typedef __mmask16 VM;
typedef __m512i VI;
#define W 16
#define VLD(p) _mm512_loadu_ps(p)
#define VST(p, v) _mm512_storeu_ps(p, v)
#define VSTNT(p, v) _mm512_stream_ps(p, v)
#define VLD_PART(p, n) _mm512_maskz_loadu_ps((__mmask16)((1u << (n)) - 1), p) /* n <= 16 lanes */
#define VST_PART(p, v, n) _mm512_mask_storeu_ps(p, (__mmask16)((1u << (n)) - 1), v)
#define VSFENCE() _mm_sfence()
#define VDUP(f) _mm512_set1_ps(f)
#define VIDUP(i) _mm512_set1_epi32(i)
#define VADD _mm512_add_ps
#define VSUB _mm512_sub_ps
#define VMUL _mm512_mul_ps
#define VDIV _mm512_div_ps
#define VRCP0 _mm512_rcp14_ps
#define VSQRT _mm512_sqrt_ps
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VFNMA(a, b, c) _mm512_fnmadd_ps(a, b, c)
#define VROUND(x) _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
/* vmaxps/vminps return the second operand when either is NaN */
#define VMIN_C(x, c) _mm512_min_ps(c, x)
#define VMAX_C(x, c) _mm512_max_ps(c, x)
#define VLT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ)
#define VLE(a, b) _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ)
#define VGT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ)
#define VGE(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ)
#define VEQ(a, b) _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ)
#define VNE(a, b) _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ)
#define VNAN(x) _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q)
#define VSEL(m, a, b) _mm512_mask_blend_ps(m, b, a)
#define VCVT _mm512_cvttps_epi32
#define VCVTF _mm512_cvtepi32_ps
#define VASI _mm512_castps_si512
#define VASF _mm512_castsi512_ps
#define VIADD _mm512_add_epi32
#define VISUB _mm512_sub_epi32
#define VIAND _mm512_and_si512
#define VIOR _mm512_or_si512
#define VIXOR _mm512_xor_si512
#define VISHL(i, n) _mm512_slli_epi32(i, n)
#define VISRA(i, n) _mm512_srai_epi32(i, n)
#define VINZ(i) _mm512_test_epi32_mask(i, i)
#define VANY(m) ((m) != 0)
static inline V VMAXP(V acc, V x) { return _mm512_mask_blend_ps(VNAN(acc), _mm512_max_ps(acc, x), acc); }
static inline V VMINP(V acc, V x) { return _mm512_mask_blend_ps(VNAN(acc), _mm512_min_ps(acc, x), acc); }
typedef __m512d VD;
#define VDZERO _mm512_setzero_pd()
#define VDADD _mm512_add_pd
#define VDLD(p) _mm512_loadu_pd(p)
#define VDST(p, v) _mm512_storeu_pd(p, v)
#define VDLO(v) _mm512_cvtps_pd(_mm512_castps512_ps256(v))
#define VDHI(v) _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))
#define VM_TABLE kiln__vm_avx512
#define VM_NAME "avx512"

#include "vecmath_body.h"
#endif
