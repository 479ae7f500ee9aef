/* nn_vec_neon.c — the kiln_nn_vec table for ARM64 Advanced SIMD (4 f32
 * lanes); the body is nn_vec_body.h. */
#include "nn_vec.h"

#if defined(__aarch64__)
#include <arm_neon.h>

typedef float32x4_t VT;
#define VL 4
#define VLOAD(p) vld1q_f32(p)
#define VSTORE(p, v) vst1q_f32((p), (v))
#define VSET1(s) vdupq_n_f32(s)
#define VZERO() vdupq_n_f32(0.0f)
#define VADD(a, b) vaddq_f32((a), (b))
#define VSUB(a, b) vsubq_f32((a), (b))
#define VMUL(a, b) vmulq_f32((a), (b))
#define VMAX(a, b) vmaxq_f32((a), (b))
#define VMIN(a, b) vminq_f32((a), (b))
#define VNE01(a, b) \
    vreinterpretq_f32_u32(vandq_u32(vmvnq_u32(vceqq_f32((a), (b))), vreinterpretq_u32_f32(vdupq_n_f32(1.0f))))
#define VFMA(a, b, c) vfmaq_f32((c), (a), (b))
#define VFNMA(a, b, c) vfmsq_f32((c), (a), (b))
#define VHSUM(v) vaddvq_f32(v)
#define VHMAX(v) vmaxvq_f32(v)
#define VROUND(v) vrndnq_f32(v)
#define VPOW2(n) vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23))
#define NV_SUF neon
#define NV_NAME "neon"

#include "nn_vec_body.h"

const kiln_nn_vec *kiln__nn_vec_neon(void) { return &nv_table_neon; }
#endif
