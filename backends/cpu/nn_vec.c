/* nn_vec.c — the portable scalar kiln_nn_vec table (one lane; the
 * reference the SIMD tables are tested against) and the run-time choice
 * among the tables. */
#include "nn_vec.h"

#include "cpu_features.h"

#include <stdint.h>

typedef float VT;
#define VL 1
#define VLOAD(p) (*(p))
#define VSTORE(p, v) (*(p) = (v))
#define VSET1(s) (s)
#define VZERO() 0.0f
#define VADD(a, b) ((a) + (b))
#define VSUB(a, b) ((a) - (b))
#define VMUL(a, b) ((a) * (b))
#define VMAX(a, b) ((a) > (b) ? (a) : (b))
#define VMIN(a, b) ((a) < (b) ? (a) : (b))
#define VNE01(a, b) ((a) != (b) ? 1.0f : 0.0f)
#define VFMA(a, b, c) ((a) * (b) + (c))
#define VFNMA(a, b, c) ((c) - (a) * (b))
#define VHSUM(v) (v)
#define VHMAX(v) (v)
#define VROUND(v) rintf(v)
#define VPOW2(n) nv_pow2_scalar(n)
#define NV_SUF scalar
#define NV_NAME "scalar"

#include <math.h>
#include <string.h>

static inline float nv_pow2_scalar(float n) {
    if (n != n) return n; /* NaN in, NaN out: (int32_t)NaN and its shift are undefined */
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    return s;
}

#include "nn_vec_body.h"

const kiln_nn_vec *kiln__nn_vec_scalar(void) { return &nv_table_scalar; }

const kiln_nn_vec *kiln__nn_vec(void) {
    const kiln_cpu_caps *c = kiln__cpu_caps();
    const kiln_nn_vec *v = NULL;
#if defined(__x86_64__)
    if (kiln__cpu_avx512(c)) v = kiln__nn_vec_avx512();
    else if (kiln__cpu_avx2(c)) v = kiln__nn_vec_avx2();
#elif defined(__aarch64__)
    if (kiln__cpu_neon(c)) v = kiln__nn_vec_neon();
#else
    (void)c;
#endif
    return v ? v : &nv_table_scalar;
}
