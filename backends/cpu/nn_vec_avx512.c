/* nn_vec_avx512.c — the kiln_nn_vec table for AVX-512 (16 f32 lanes);
 * the body is nn_vec_body.h. */
#include "nn_vec.h"

#if defined(__x86_64__)
#include <immintrin.h>

typedef __m512 VT;
#define VL 16
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, v) _mm512_storeu_ps((p), (v))
#define VSET1(s) _mm512_set1_ps(s)
#define VZERO() _mm512_setzero_ps()
#define VADD(a, b) _mm512_add_ps((a), (b))
#define VSUB(a, b) _mm512_sub_ps((a), (b))
#define VMUL(a, b) _mm512_mul_ps((a), (b))
#define VMAX(a, b) _mm512_max_ps((a), (b))
#define VMIN(a, b) _mm512_min_ps((a), (b))
#define VNE01(a, b) _mm512_maskz_mov_ps(_mm512_cmp_ps_mask((a), (b), _CMP_NEQ_UQ), _mm512_set1_ps(1.0f))
#define VFMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define VFNMA(a, b, c) _mm512_fnmadd_ps((a), (b), (c))
#define VHSUM(v) _mm512_reduce_add_ps(v)
#define VHMAX(v) _mm512_reduce_max_ps(v)
#define VROUND(v) _mm512_roundscale_ps((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VPOW2(n) \
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23))
#define NV_SUF avx512
#define NV_NAME "avx512"

#include "nn_vec_body.h"

const kiln_nn_vec *kiln__nn_vec_avx512(void) { return &nv_table_avx512; }
#endif
