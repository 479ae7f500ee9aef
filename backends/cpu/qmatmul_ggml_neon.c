/* qmatmul_ggml_neon.c — ggml's block types' products on ARMv8-A's
 * Advanced SIMD without the dot product (qmatmul_ggml_neon.h): smull of
 * the int8 halves into int16 (|w x| <= 128 * 128 fits), pairwise added
 * into the int32 lanes. */
#include "qmatmul_ggml.h"

#if defined(__aarch64__)
#define GGML_NAME(x) ggml_##x##_neon
#define GGML_DOT16(acc, a, b) \
    ((acc) = vpadalq_s16(vpadalq_s16((acc), vmull_s8(vget_low_s8(a), vget_low_s8(b))), vmull_high_s8((a), (b))))
#include "qmatmul_ggml_neon.h"

kiln_qmm_dot_ggml *kiln__qmm_ggml_neon(kiln_dtype t) { return GGML_NAME(kernel)(t); }
kiln_qmm_dot_ggml_rows *kiln__qmm_ggml_rows_neon(kiln_dtype t) { return GGML_NAME(rows_kernel)(t); }
#else
kiln_qmm_dot_ggml *kiln__qmm_ggml_neon(kiln_dtype t) { return (void)t, NULL; }
kiln_qmm_dot_ggml_rows *kiln__qmm_ggml_rows_neon(kiln_dtype t) { return (void)t, NULL; }
#endif
