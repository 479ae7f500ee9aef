/* qmatmul_kgemm_neondot.c — the tiles of the K types' and the blocks of
 * 32's integer GEMMs (qmatmul_kgemm.h, qmatmul_q32gemm.h) with the ARMv8.2
 * dot product (qmatmul_kgemm_neon.h): one sdot by element per quad of 4
 * columns, x's quad taken from its lane. */
#include "qmatmul_kgemm.h"
#include "qmatmul_q32gemm.h"

#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#include <arm_neon.h>

#define KG_NAME(x) kg_##x##_neondot

static inline __attribute__((always_inline)) int32x4_t KG_NAME(group)(int32x4_t acc, const int8_t *q, int8x16_t x16) {
    acc = vdotq_laneq_s32(acc, vld1q_s8(q), x16, 0);
    acc = vdotq_laneq_s32(acc, vld1q_s8(q + 4 * KILN_KGEMM_NC), x16, 1);
    acc = vdotq_laneq_s32(acc, vld1q_s8(q + 8 * KILN_KGEMM_NC), x16, 2);
    return vdotq_laneq_s32(acc, vld1q_s8(q + 12 * KILN_KGEMM_NC), x16, 3);
}
#include "qmatmul_kgemm_neon.h"

const kiln_kgemm_kernels *kiln__kgemm_kernels_neondot(void) { return &KG_NAME(k_kernels); }
const kiln_kgemm_kernels *kiln__q32gemm_kernels_neondot(void) { return &KG_NAME(q32_kernels); }
#else
const kiln_kgemm_kernels *kiln__kgemm_kernels_neondot(void) { return NULL; }
const kiln_kgemm_kernels *kiln__q32gemm_kernels_neondot(void) { return NULL; }
#endif
