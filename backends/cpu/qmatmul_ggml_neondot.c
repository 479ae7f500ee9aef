/* qmatmul_ggml_neondot.c — ggml's block types' products with the ARMv8.2
 * dot product (qmatmul_ggml_neon.h): sdot of four int8 pairs per int32
 * lane. */
#include "qmatmul_ggml.h"

#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#define GGML_NAME(x) ggml_##x##_neondot
#define GGML_DOT16(acc, a, b) ((acc) = vdotq_s32((acc), (a), (b)))
#include "qmatmul_ggml_neon.h"

kiln_qmm_dot_ggml *kiln__qmm_ggml_neondot(kiln_dtype t) { return GGML_NAME(kernel)(t); }
kiln_qmm_dot_ggml_rows *kiln__qmm_ggml_rows_neondot(kiln_dtype t) { return GGML_NAME(rows_kernel)(t); }
#else
kiln_qmm_dot_ggml *kiln__qmm_ggml_neondot(kiln_dtype t) { return (void)t, NULL; }
kiln_qmm_dot_ggml_rows *kiln__qmm_ggml_rows_neondot(kiln_dtype t) { return (void)t, NULL; }
#endif
