// emu_cpu.h — the CPU side of the emulated checks: kiln's headers (C, and
// one parameter named `requires`, a C++20 keyword) and the comparisons.
#ifndef KILN_CUDA_EMU_CPU_H
#define KILN_CUDA_EMU_CPU_H

#define requires requires_
extern "C" {
#include "internal.h"
#include "kiln.h"
}
#undef requires

#include <cstdio>
#include <cstdlib>
#include <vector>

static int emu_failures;

static double emu_rand() { return (double)rand() / RAND_MAX * 2 - 1; }

// A tensor of dtype dt uniform in [lo, hi] (ints: integers in it), requiring grad when asked.
static kiln_tensor *emu_input(kiln_ctx *ctx, kiln_dtype dt, int nd, const int64_t *sh, double lo, double hi, bool grad,
                              bool ints = false) {
    kiln_tensor *t = kiln_tensor_new(ctx, dt, nd, sh);
    int64_t n = kiln_tensor_numel(t);
    std::vector<double> v(n);
    for (auto &e : v) e = ints ? (double)(lround(lo) + rand() % (lround(hi) - lround(lo) + 1)) : lo + (emu_rand() + 1) / 2 * (hi - lo);
    kiln_tensor_set_f64(t, v.data(), n);
    if (grad) kiln_tensor_set_requires_grad(t, true);
    return t;
}

// A host copy of a contiguous tensor's storage.
static std::vector<char> emu_bytes(const kiln_tensor *t) {
    const char *p = (const char *)kiln_tensor_data(t);
    return std::vector<char>(p, p + kiln_tensor_nbytes(t));
}

// The CPU's graph of y and loss = sum(y * w), w fixed random (so y's gradient is w), computed once.
static kiln_tensor *emu_train(kiln_ctx *ctx, kiln_tensor *y) {
    kiln_tensor *w = emu_input(ctx, kiln_tensor_dtype(y), kiln_tensor_ndim(y), kiln_tensor_shape(y), -1, 1, false);
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, y, w));
    kiln_graph *g = kiln_graph_new(ctx);
    if (kiln_graph_add(g, y) || kiln_graph_add(g, loss) || kiln_graph_backward(g, loss) || kiln_graph_compute(g)) {
        printf("cpu graph failed: %s\n", kiln_last_error());
        emu_failures++;
    }
    return w;
}

// got (n values of ref's dtype, f32, f64 or i32, from element off) against ref: bit for bit
// (tol < 0) or max|got - ref| / max|ref| <= tol. One line per check.
static void emu_check(const char *what, const kiln_tensor *ref, const std::vector<char> &got, double tol,
                      int64_t off = 0) {
    int64_t n = kiln_tensor_numel(ref);
    bool f64 = kiln_tensor_dtype(ref) == KILN_F64, i32 = kiln_tensor_dtype(ref) == KILN_I32;
    std::vector<double> r(n);
    kiln_tensor_get_f64(ref, r.data(), n);
    double scale = 1e-30, diff = 0;
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++)
        if (std::isfinite(r[i]) && fabs(r[i]) > scale) scale = fabs(r[i]);
    for (int64_t i = 0; i < n; i++) {
        double g = f64 ? ((const double *)got.data())[off + i]
                   : i32 ? ((const int32_t *)got.data())[off + i] : ((const float *)got.data())[off + i];
        if (g == r[i] || (g != g && r[i] != r[i])) continue;
        differ++;
        diff = !std::isfinite(g) || !std::isfinite(r[i]) ? INFINITY : fmax(diff, fabs(g - r[i]));
    }
    bool bad = tol < 0 ? differ > 0 : !(diff / scale <= tol);
    printf("  %-34s %s  %lld of %lld differ, err %.2e%s\n", what, kiln_dtype_name(kiln_tensor_dtype(ref)), (long long)differ,
           (long long)n, diff / scale, bad ? "  <-- FAIL" : "");
    emu_failures += bad;
}

#endif
