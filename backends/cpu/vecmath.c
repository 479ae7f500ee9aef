/* vecmath.c — the portable scalar kiln_vm table (f32 in and out, math in
 * double through vecmath.h's reference formulas) and the run-time choice
 * among the tables this build and CPU have. */
#include "vecmath.h"

#include "cpu_features.h"

#if defined(__x86_64__)
extern const kiln_vm kiln__vm_avx2, kiln__vm_avx512;
#elif defined(__aarch64__)
extern const kiln_vm kiln__vm_neon;
#endif

static void s_unary(kiln_op op, float p, const float *x, float *y, int64_t n, bool nt) {
    (void)nt;
    for (int64_t i = 0; i < n; i++) y[i] = (float)kiln__unary_ref(op, x[i], p);
}

static void s_binary(kiln_op op, int cmp, const float *a, int sa, const float *b, int sb, float *y, int64_t n, bool nt) {
    (void)nt;
    for (int64_t i = 0; i < n; i++) y[i] = (float)kiln__binary_ref(op, cmp, a[i * sa], b[i * sb]);
}

static void s_where(const void *c, bool c_i32, int sc, const float *a, int sa, const float *b, int sb, float *y,
                    int64_t n, bool nt) {
    (void)nt;
    for (int64_t i = 0; i < n; i++) {
        bool on = c_i32 ? ((const int32_t *)c)[i * sc] != 0 : ((const float *)c)[i * sc] != 0;
        y[i] = on ? a[i * sa] : b[i * sb];
    }
}

static double s_sum(const float *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    return s;
}

static inline float pick(bool is_max, float best, float v) {
    return best != best || v != v ? (best != best ? best : v) : (is_max ? (v > best ? v : best) : (v < best ? v : best));
}

static float s_maxmin(bool is_max, const float *x, int64_t n) {
    float best = x[0];
    for (int64_t i = 1; i < n && best == best; i++) best = pick(is_max, best, x[i]);
    return best;
}

static int64_t s_argmax(const float *x, int64_t n) {
    int64_t at = 0;
    for (int64_t i = 1; i < n && x[at] == x[at]; i++)
        if (x[i] != x[i] || x[i] > x[at]) at = i;
    return at;
}

static void s_col_sum(const float *x, int64_t ld, int64_t rows, int64_t n, double *acc) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) acc[j] += x[r * ld + j];
}

static void s_col_maxmin(bool is_max, const float *x, int64_t ld, int64_t rows, int64_t n, float *acc) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) acc[j] = pick(is_max, acc[j], x[r * ld + j]);
}

static const kiln_vm vm_scalar = {"scalar", s_unary, s_binary, s_where, s_sum, s_maxmin, s_argmax, s_col_sum, s_col_maxmin};

const kiln_vm *kiln__vm_for(int level) {
    const kiln_cpu_caps *det = kiln__cpu_caps_detected();
    switch (level) {
    case KILN_SIMD_SCALAR: return &vm_scalar;
#if defined(__x86_64__)
    case KILN_SIMD_AVX2: return kiln__cpu_avx2(det) ? &kiln__vm_avx2 : NULL;
    case KILN_SIMD_AVX512: return kiln__cpu_avx512(det) ? &kiln__vm_avx512 : NULL;
#elif defined(__aarch64__)
    case KILN_SIMD_NEON: return kiln__cpu_neon(det) ? &kiln__vm_neon : NULL;
#endif
    default: return NULL;
    }
}

const kiln_vm *kiln__vm(void) {
    const kiln_vm *vm = kiln__vm_for(kiln__cpu_caps()->level);
    return vm ? vm : &vm_scalar;
}
