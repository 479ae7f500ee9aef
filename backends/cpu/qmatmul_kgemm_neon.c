/* qmatmul_kgemm_neon.c — the tiles of the K types' and the blocks of 32's
 * integer GEMMs (qmatmul_kgemm.h, qmatmul_q32gemm.h) on ARMv8-A's Advanced
 * SIMD without the dot product (qmatmul_kgemm_neon.h), as the batch-1
 * kernels: smull of the codes of two columns by x's quad repeated, into
 * int16 (|q x| <= 128 * 128 fits), pairwise added into int32 (two lanes
 * a column), the two lanes of each column added once per 16 elements. */
#include "qmatmul_kgemm.h"
#include "qmatmul_q32gemm.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#define KG_NAME(x) kg_##x##_neon

/* quad L of x in every lane, times 4 columns' quads at q: into lo (columns
 * 0, 1) and hi (2, 3) */
#define KG_QUAD(L)                                                                                       \
    do {                                                                                                 \
        const int8x16_t u = vld1q_s8(q + 4 * KILN_KGEMM_NC * (L)),                                       \
                        x4 = vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(x16), (L)));      \
        lo = vpadalq_s16(lo, vmull_s8(vget_low_s8(u), vget_low_s8(x4)));                                 \
        hi = vpadalq_s16(hi, vmull_high_s8(u, x4));                                                      \
    } while (0)

static inline __attribute__((always_inline)) int32x4_t KG_NAME(group)(int32x4_t acc, const int8_t *q, int8x16_t x16) {
    int32x4_t lo = vdupq_n_s32(0), hi = vdupq_n_s32(0);
    KG_QUAD(0);
    KG_QUAD(1);
    KG_QUAD(2);
    KG_QUAD(3);
    return vaddq_s32(acc, vpaddq_s32(lo, hi));
}
#undef KG_QUAD
#include "qmatmul_kgemm_neon.h"

const kiln_kgemm_kernels *kiln__kgemm_kernels_neon(void) { return &KG_NAME(k_kernels); }
const kiln_kgemm_kernels *kiln__q32gemm_kernels_neon(void) { return &KG_NAME(q32_kernels); }
#else
const kiln_kgemm_kernels *kiln__kgemm_kernels_neon(void) { return NULL; }
const kiln_kgemm_kernels *kiln__q32gemm_kernels_neon(void) { return NULL; }
#endif
