/* nn_attention_loops.c — the portable (scalar) tile loops of blocked
 * attention, f64 and f32, and the choice of the f32 variant for the CPU.
 * The SIMD variants are tested against these. */
#include "cpu_features.h"
#include "nn_attention_simd.h"

#include <math.h>

#define DEFINE_LOOPS(T, SUF, EXP)                                                                             \
    static void gemm_##SUF(int64_t m, int64_t n, int64_t k, const T *a, int64_t ars, int64_t acs, const T *b,     \
                           int64_t ldb, T *c, int64_t ldc, bool acc) {                                                       \
        for (int64_t i = 0; i < m; i++) {                                                                      \
            T *ci = c + i * ldc;                                                                               \
            if (!acc)                                                                                          \
                for (int64_t j = 0; j < n; j++) ci[j] = 0;                                                     \
            for (int64_t p = 0; p < k; p++) {                                                                  \
                T x = a[i * ars + p * acs];                                                                          \
                const T *bp = b + p * ldb;                                                                     \
                for (int64_t j = 0; j < n; j++) ci[j] += x * bp[j];                                            \
            }                                                                                                  \
        }                                                                                                      \
    }                                                                                                          \
    static T exp_sum_##SUF(T *x, int64_t n, T scale, T sub) {                                                  \
        T sum = 0;                                                                                             \
        for (int64_t j = 0; j < n; j++) sum += x[j] = EXP(x[j] * scale - sub);                                 \
        return sum;                                                                                            \
    }                                                                                                          \
    static T max_##SUF(const T *x, int64_t n) {                                                                \
        T m = x[0];                                                                                            \
        for (int64_t j = 1; j < n; j++)                                                                        \
            if (x[j] > m) m = x[j];                                                                            \
        return m;                                                                                              \
    }
DEFINE_LOOPS(double, f64, exp)
DEFINE_LOOPS(float, f32, expf)

const kiln_attn_ops_f64 kiln__attn_ops_f64 = {gemm_f64, exp_sum_f64, max_f64};
const kiln_attn_ops_f32 kiln__attn_ops_f32_scalar = {gemm_f32, exp_sum_f32, max_f32};

const kiln_attn_ops_f32 *kiln__attn_ops_f32(void) {
    const kiln_cpu_caps *c = kiln__cpu_caps();
#if defined(__x86_64__)
    if (kiln__cpu_avx512(c)) return &kiln__attn_ops_f32_avx512;
    if (kiln__cpu_avx2(c)) return &kiln__attn_ops_f32_avx2;
#endif
#if defined(__aarch64__)
    if (kiln__cpu_neon(c)) return &kiln__attn_ops_f32_neon;
#endif
    (void)c;
    return &kiln__attn_ops_f32_scalar;
}
