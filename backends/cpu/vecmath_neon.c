/* vecmath_neon.c — the kiln_vm table on ARM64 Advanced SIMD (4 f32 lanes);
 * the kernels are vecmath_body.h over the vocabulary defined here. NEON's
 * fmax/fmin already let a NaN win; it has no non-temporal store worth using. */
#if defined(__aarch64__)
#include "vecmath.h"

#include <arm_neon.h>

typedef float32x4_t V;
typedef uint32x4_t VM;
typedef int32x4_t VI;
#define W 4
#define VLD(p) vld1q_f32(p)
#define VST(p, v) vst1q_f32(p, v)
#define VSTNT(p, v) vst1q_f32(p, v)
#define VSFENCE() ((void)0)
#define VDUP(f) vdupq_n_f32(f)
#define VIDUP(i) vdupq_n_s32(i)
#define VADD vaddq_f32
#define VSUB vsubq_f32
#define VMUL vmulq_f32
#define VDIV vdivq_f32
#define VRCP0 vrecpeq_f32
#define VSQRT vsqrtq_f32
#define VFMA(a, b, c) vfmaq_f32(c, a, b)
#define VFNMA(a, b, c) vfmsq_f32(c, a, b)
#define VROUND vrndnq_f32
#define VMIN_C(x, c) vminq_f32(x, c)
#define VMAX_C(x, c) vmaxq_f32(x, c)
#define VMAXP vmaxq_f32
#define VMINP vminq_f32
#define VLT vcltq_f32
#define VLE vcleq_f32
#define VGT vcgtq_f32
#define VGE vcgeq_f32
#define VEQ vceqq_f32
#define VNE(a, b) vmvnq_u32(vceqq_f32(a, b))
#define VNAN(x) vmvnq_u32(vceqq_f32(x, x))
#define VSEL(m, a, b) vbslq_f32(m, a, b)
#define VCVT vcvtq_s32_f32
#define VCVTF vcvtq_f32_s32
#define VASI vreinterpretq_s32_f32
#define VASF vreinterpretq_f32_s32
#define VIADD vaddq_s32
#define VISUB vsubq_s32
#define VIAND vandq_s32
#define VIOR vorrq_s32
#define VIXOR veorq_s32
#define VISHL(i, n) vshlq_n_s32(i, n)
#define VISRA(i, n) vshrq_n_s32(i, n)
#define VINZ(i) vtstq_s32(i, i)
#define VANY(m) (vmaxvq_u32(m) != 0)
typedef float64x2_t VD;
#define VDZERO vdupq_n_f64(0.0)
#define VDADD vaddq_f64
#define VDLD(p) vld1q_f64(p)
#define VDST(p, v) vst1q_f64(p, v)
#define VDLO(v) vcvt_f64_f32(vget_low_f32(v))
#define VDHI(v) vcvt_high_f64_f32(v)
#define VM_TABLE kiln__vm_neon
#define VM_NAME "neon"

#include "vecmath_body.h"
#endif
