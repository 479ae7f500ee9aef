/* test_simd_elementwise.c — the f32 element-wise and reduction kernels at
 * every SIMD level this machine has (scalar, AVX2, AVX-512 or NEON, chosen
 * by narrowing the CPU caps) against double references: every unary op on
 * edge values and odd lengths at unaligned starts, every binary layout
 * (same shape, scalar, row, column, outer, strided), where, and sum / max /
 * min / argmax over rows, columns, a middle axis and whole arrays. */
#include "kt.h"

#include "../backends/cpu/cpu_features.h"
#include "../backends/cpu/vecmath.h"

#include <float.h>

/* ---- levels ---- */

static int levels(int *lv) {
    int n = 0;
    for (int l = KILN_SIMD_SCALAR; l <= KILN_SIMD_AVX512; l++)
        if (kiln__vm_for(l)) lv[n++] = l;
    return n;
}

static void use_level(int l) {
    kiln_cpu_caps c = *kiln__cpu_caps_detected();
    kiln__cpu_caps_limit(&c, (kiln_simd_level)l);
    kiln__cpu_caps_set(&c);
}

static kiln_status compute(kiln_ctx *ctx, kiln_tensor *y) {
    kiln_graph *g = kiln_graph_new(ctx);
    kiln_status s = kiln_graph_add(g, y);
    return s ? s : kiln_graph_compute(g);
}

/* ---- unary ---- */

static const struct {
    kiln_op op;
    double p;
    double rtol, atol; /* |y - ref| <= rtol |ref| + atol (atol covers zero crossings of the grads) */
} unaries[] = {
    {KILN_OP_NEG, 0, 0, 0},           {KILN_OP_SCALE, 1.5, 0, 0},        {KILN_OP_ADD_SCALAR, 0.25, 0, 0},
    {KILN_OP_EXP, 0, 1e-6, 0},        {KILN_OP_LOG, 0, 1e-6, 0},         {KILN_OP_SQRT, 0, 0, 0},
    {KILN_OP_RSQRT, 0, 2.5e-7, 0},    {KILN_OP_ABS, 0, 0, 0},            {KILN_OP_SIGN, 0, 0, 0},
    {KILN_OP_POW, 2, 0, 0},           {KILN_OP_POW, 3, 2.5e-7, 0},       {KILN_OP_POW, -1, 2.5e-7, 0},
    {KILN_OP_POW, 1.75, 2.5e-7, 0},   {KILN_OP_TANH, 0, 1e-6, 0},        {KILN_OP_SIGMOID, 0, 1e-6, 0},
    {KILN_OP_RELU, 0, 0, 0},          {KILN_OP_LEAKY_RELU, 0.125, 0, 0}, {KILN_OP_GELU, 0, 1e-6, 0},
    {KILN_OP_GELU_TANH, 0, 1e-6, 0},  {KILN_OP_SILU, 0, 1e-6, 0},        {KILN_OP_SOFTPLUS, 0, 1e-6, 0},
    {KILN_OP_GELU_GRAD, 0, 1e-6, 1e-7}, {KILN_OP_GELU_TANH_GRAD, 0, 1e-6, 1e-7},
};
#define N_UNARY ((int)(sizeof unaries / sizeof *unaries))

static const float edges[] = {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, NAN, 1e-45f, -1e-45f, 1e-40f,
                              FLT_MIN, FLT_MAX, -FLT_MAX, 88.72f, 88.73f, 89.0f, -87.3f, -103.0f, -104.0f, -150.0f,
                              1e-8f, -1e-8f, 0.6f, -0.6f, 0.5999f, 0.55f, 14.5f, -14.5f, -13.0f, 20.0f, -20.0f,
                              30.0f, -30.0f, 100.0f, -100.0f, 1e10f, -1e10f, 1e30f, -1e30f, 0.7518f, -0.7518f,
                              -0.75f, 2.0f, 1.4142135f, 0.70710677f, 3e-39f, 1e-30f};
#define N_EDGE ((int)(sizeof edges / sizeof *edges))

/* Edge values, then samples in widening ranges and log-uniform magnitudes. */
static int64_t fill_inputs(float *x, int64_t n) {
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(s >> 11) / 9007199254740992.0;
        if (i < N_EDGE) x[i] = edges[i];
        else if (i % 4 == 0) x[i] = (float)(2 * u - 1);
        else if (i % 4 == 1) x[i] = (float)(24 * u - 12);
        else if (i % 4 == 2) x[i] = (float)(200 * u - 100);
        else x[i] = (float)((s & 1 ? -1 : 1) * exp(u * 180 - 90));
    }
    return n;
}

/* Error of y against the reference at x in units of the op's tolerance
 * (<= 1 passes). Subnormal results may be off by 4 * 2^-149. Where the
 * function amplifies its input's rounding (exp-like tails, |f'(x) x / f(x)|
 * >> 1), y also passes when it is f at an x moved by at most 2 ulp (a
 * backward error of 2 ulp). *rel: plain relative error where ref is normal. */
static double unary_err(int u, float xf, float y, double *rel, int *bw) {
    kiln_op op = unaries[u].op;
    double p = unaries[u].p, x = xf, ref = kiln__unary_ref(op, x, p);
    *rel = 0;
    if (ref != ref) return y != y ? 0 : INFINITY;
    float rf = (float)ref;
    if (isinf(rf)) return y == rf ? 0 : INFINITY;
    if (y == rf) return 0;
    double d = fabs((double)y - ref);
    if (fabs(ref) >= FLT_MIN) *rel = d / fabs(ref);
    double tol = fmax(unaries[u].rtol, 6e-8) * fabs(ref) + unaries[u].atol + 5.7e-45;
    if (d <= tol) return d / tol;
    double lo = kiln__unary_ref(op, x * (1 - 0x1p-22), p), hi = kiln__unary_ref(op, x * (1 + 0x1p-22), p);
    if (fmin(lo, hi) - tol <= y && y <= fmax(lo, hi) + tol) {
        *rel = 0, ++*bw;
        return 1;
    }
    return d / tol;
}

static kiln_tensor *unary_node(kiln_ctx *ctx, int u, kiln_tensor *x) {
    kiln_tensor *t = kiln__node_new(ctx, unaries[u].op, KILN_F32, x->ndim, x->shape, 1, &x);
    if (t) t->fp[0] = unaries[u].p;
    return t;
}

KT_TEST(simd_unary_values_and_edges) {
    enum { N = 6000 };
    static float x[N], y[N];
    fill_inputs(x, N);
    kiln_cpu_caps saved = *kiln__cpu_caps();
    int lv[4], nl = levels(lv);
    for (int li = 0; li < nl; li++) {
        use_level(lv[li]);
        for (int u = 0; u < N_UNARY; u++) {
            kiln_ctx *ctx = kiln_ctx_new();
            kiln_tensor *xt = kiln_new_1d(ctx, KILN_F32, N);
            KT_OK(kiln_tensor_set_f32(xt, x, N));
            kiln_tensor *yt = unary_node(ctx, u, xt);
            KT_NOTNULL(yt);
            KT_OK(compute(ctx, yt));
            KT_OK(kiln_tensor_get_f32(yt, y, N));
            double worst = 0, max_rel = 0;
            int64_t at = 0;
            int bw = 0;
            for (int64_t i = 0; i < N; i++) {
                double rel, e = unary_err(u, x[i], y[i], &rel, &bw);
                if (!(e <= worst)) worst = e == e ? e : INFINITY, at = i;
                if (rel > max_rel) max_rel = rel;
            }
            KT_CHECK(worst <= 1, "%s p=%g at %s: x=%.9g y=%.9g ref=%.9g (error %.3g of tolerance)",
                     kiln__op_table[unaries[u].op].name, unaries[u].p, kiln__simd_level_name(lv[li]), x[at], y[at],
                     kiln__unary_ref(unaries[u].op, x[at], unaries[u].p), worst);
            if (getenv("KT_VERBOSE"))
                fprintf(stderr, "    %-8s %-15s p=%-5g max relative error %.2e (%d tail values within 2 ulp of x)\n",
                        kiln__simd_level_name(lv[li]), kiln__op_table[unaries[u].op].name, unaries[u].p, max_rel, bw);
            kiln_ctx_free(ctx);
        }
    }
    kiln__cpu_caps_set(&saved);
}

/* Lengths 1..67 at starts 0, 1 and 5 floats into a buffer (views). */
KT_TEST(simd_unary_odd_lengths_unaligned) {
    enum { N = 80 };
    float x[N], y[N];
    fill_inputs(x, N);
    for (int i = 0; i < N; i++) x[i] = x[(i * 7 + 3) % N]; /* spread the edges across positions */
    kiln_cpu_caps saved = *kiln__cpu_caps();
    int lv[4], nl = levels(lv);
    for (int li = 0; li < nl; li++) {
        use_level(lv[li]);
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *xt = kiln_new_1d(ctx, KILN_F32, N);
        KT_OK(kiln_tensor_set_f32(xt, x, N));
        int bad = 0, bw = 0;
        for (int u = 0; u < N_UNARY && !bad; u++)
            for (int start = 0; start <= 5 && !bad; start += start ? 4 : 1)
                for (int len = 1; len <= 67 && !bad; len++) {
                    kiln_tensor *v = kiln_slice(ctx, xt, 0, start, start + len, 1);
                    kiln_tensor *yt = unary_node(ctx, u, v);
                    KT_NOTNULL(yt);
                    KT_OK(compute(ctx, yt));
                    KT_OK(kiln_tensor_get_f32(yt, y, len));
                    for (int i = 0; i < len && !bad; i++) {
                        double rel, ref = kiln__unary_ref(unaries[u].op, x[start + i], unaries[u].p);
                        if (!(unary_err(u, x[start + i], y[i], &rel, &bw) <= 1)) {
                            bad = 1;
                            KT_CHECK(0, "%s %s start %d len %d [%d]: x=%.9g y=%.9g ref=%.9g",
                                     kiln__simd_level_name(lv[li]), kiln__op_table[unaries[u].op].name, start, len, i,
                                     x[start + i], y[i], ref);
                        }
                    }
                }
        kiln_ctx_free(ctx);
    }
    kiln__cpu_caps_set(&saved);
}

/* gelu and its gradient on a dense grid over [-4.25, 4.25]: whole vectors
 * inside |x| <= 4 take the central path (no clamps, no reciprocal), those
 * at the ends the general one, and the vectors around ±4 mix both. */
KT_TEST(simd_gelu_central_range) {
    enum { N = 40000 };
    static float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = (float)(-4.25 + 8.5 * i / (N - 1));
    int lv[4], nl = levels(lv);
    for (int li = 0; li < nl; li++) {
        const kiln_vm *vm = kiln__vm_for(lv[li]);
        for (int u = 0; u < N_UNARY; u++) {
            if (unaries[u].op != KILN_OP_GELU && unaries[u].op != KILN_OP_GELU_GRAD) continue;
            vm->unary(unaries[u].op, 0, x, y, N, false);
            double worst = 0, max_rel = 0;
            int at = 0, bw = 0;
            for (int i = 0; i < N; i++) {
                double rel, e = unary_err(u, x[i], y[i], &rel, &bw);
                if (!(e <= worst)) worst = e == e ? e : INFINITY, at = i;
                if (rel > max_rel) max_rel = rel;
            }
            const char *name = unaries[u].op == KILN_OP_GELU ? "gelu" : "gelu_grad";
            KT_CHECK(worst <= 1, "%s %s: x=%.9g y=%.9g (error %.3g of tolerance)", kiln__simd_level_name(lv[li]), name,
                     x[at], y[at], worst);
            if (getenv("KT_VERBOSE"))
                fprintf(stderr, "    %-8s %-10s central grid: max relative error %.2e, worst %.2f of tolerance\n",
                        kiln__simd_level_name(lv[li]), name, max_rel, worst);
        }
    }
}

/* Non-temporal stores (large outputs) through the tables directly, at odd
 * starts so the head and tail take the partial-vector path. */
KT_TEST(simd_nontemporal_runs) {
    enum { N = 300 };
    float a[N + 16], b[N + 16], y[N + 16], want[N + 16];
    fill_inputs(a, N + 16);
    for (int i = 0; i < N + 16; i++) b[i] = a[(i * 5 + 1) % (N + 16)];
    int lv[4], nl = levels(lv);
    for (int li = 0; li < nl; li++) {
        const kiln_vm *vm = kiln__vm_for(lv[li]);
        for (int start = 0; start < 16; start += 3) {
            int n = N - start;
            vm->binary(KILN_OP_MUL, 0, a + start, 1, b, 1, y + start, n, true);
            for (int i = 0; i < n; i++) want[i] = a[start + i] * b[i];
            KT_CHECK(!memcmp(y + start, want, (size_t)n * sizeof(float)) || n == 0, "%s mul nt start %d",
                     kiln__simd_level_name(lv[li]), start);
            vm->unary(KILN_OP_RELU, 0, a + start, y + start, n, true);
            for (int i = 0; i < n; i++) { /* NaN stays NaN */
                float w = a[start + i] < 0 ? 0.0f : a[start + i];
                KT_CHECK(y[start + i] == w || (isnan(y[start + i]) && isnan(w)), "relu nt of %g", a[start + i]);
            }
        }
    }
}

/* ---- binary and where ---- */

/* Fill a tensor with values including ties, zeros and (optionally) NaN/inf. */
static void fill_bin(kiln_tensor *t, uint64_t seed, bool specials) {
    int64_t n = kiln_tensor_numel(t);
    float *v = malloc((size_t)n * sizeof *v);
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int k = (int)(s >> 59);
        v[i] = k < 4 ? (float)(k - 2) : (float)((double)(s >> 11) / 9007199254740992.0 * 8 - 4);
        if (specials && k == 31) v[i] = (s >> 20) & 1 ? NAN : -INFINITY;
    }
    kiln_tensor_set_f32(t, v, n);
    free(v);
}

/* Read a (possibly strided) f32 tensor's element at flat index i of its broadcast to shape. */
static double at_bcast(const kiln_tensor *t, int nd, const int64_t *shape, int64_t i) {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t k = i % shape[d];
        i /= shape[d];
        int td = t->ndim - nd + d;
        if (td >= 0 && t->shape[td] != 1) off += k * t->stride[td];
    }
    return ((const float *)t->data)[off];
}

typedef struct {
    const char *name;
    int nda, ndb;
    int64_t sa[3], sb[3];
    int view; /* 0: as is; 1: a = transposed view; 2: both sliced by one along the last axis */
} layout;

static const layout layouts[] = {
    {"same", 2, 2, {5, 37}, {5, 37}, 0},        {"scalar_b", 2, 1, {5, 37}, {1}, 0},
    {"scalar_a", 1, 2, {1}, {5, 37}, 0},        {"row", 2, 1, {6, 67}, {67}, 0},
    {"row_a", 1, 2, {67}, {6, 67}, 0},          {"col", 2, 2, {9, 37}, {9, 1}, 0},
    {"col_a", 2, 2, {9, 1}, {9, 37}, 0},        {"outer", 2, 2, {7, 1}, {1, 45}, 0},
    {"3d_mid", 3, 3, {3, 4, 19}, {3, 1, 19}, 0}, {"transposed", 2, 2, {23, 7}, {23, 7}, 1},
    {"sliced", 2, 2, {4, 50}, {4, 50}, 2},      {"long", 1, 1, {70001}, {70001}, 0},
};

static kiln_tensor *make_operand(kiln_ctx *ctx, int nd, const int64_t *s, int view, uint64_t seed, bool specials) {
    int64_t shape[3] = {s[0], s[1], s[2]};
    if (view == 1) {
        int64_t tmp = shape[0];
        shape[0] = shape[1], shape[1] = tmp;
    }
    if (view == 2) shape[nd - 1] += 1;
    kiln_tensor *t = kiln_tensor_new(ctx, KILN_F32, nd, shape);
    if (!t) return NULL;
    fill_bin(t, seed, specials);
    if (view == 1) return kiln_permute(ctx, t, (const int[]){1, 0});
    if (view == 2) return kiln_slice(ctx, t, nd - 1, 1, shape[nd - 1], 1);
    return t;
}

KT_TEST(simd_binary_layouts) {
    kiln_cpu_caps saved = *kiln__cpu_caps();
    int lv[4], nl = levels(lv);
    for (int li = 0; li < nl; li++) {
        use_level(lv[li]);
        for (int l = 0; l < (int)(sizeof layouts / sizeof *layouts); l++) {
            const layout *L = &layouts[l];
            kiln_ctx *ctx = kiln_ctx_new();
            kiln_tensor *a = make_operand(ctx, L->nda, L->sa, L->view, 1 + (uint64_t)l, true);
            kiln_tensor *b = make_operand(ctx, L->ndb, L->sb, L->view == 1 ? 0 : L->view, 7 + (uint64_t)l, true);
            KT_NOTNULL(a && b);
            for (int k = 0; k < 10; k++) {
                kiln_op op = k < 4 ? (kiln_op)(KILN_OP_ADD + k) : KILN_OP_CMP;
                int cmp = k - 4;
                kiln_tensor *y = op == KILN_OP_CMP ? kiln_cmp(ctx, a, b, (kiln_cmp_op)cmp)
                                                   : (kiln_tensor *(*[])(kiln_ctx *, kiln_tensor *, kiln_tensor *)){
                                                         kiln_add, kiln_sub, kiln_mul, kiln_div}[k](ctx, a, b);
                KT_NOTNULL(y);
                KT_OK(compute(ctx, y));
                int64_t n = kiln_tensor_numel(y);
                const float *yv = y->data;
                int64_t bad = -1;
                for (int64_t i = 0; i < n && bad < 0; i++) {
                    double want = kiln__binary_ref(op, cmp, at_bcast(a, y->ndim, y->shape, i), at_bcast(b, y->ndim, y->shape, i));
                    float wf = (float)want;
                    if (!(yv[i] == wf || (yv[i] != yv[i] && wf != wf))) bad = i;
                }
                KT_CHECK(bad < 0, "%s %s %s cmp %d: element %lld", kiln__simd_level_name(lv[li]), L->name,
                         kiln__op_table[op].name, cmp, (long long)bad);
            }
            kiln_ctx_free(ctx);
        }
    }
    kiln__cpu_caps_set(&saved);
}

KT_TEST(simd_where_layouts) {
    kiln_cpu_caps saved = *kiln__cpu_caps();
    int lv[4], nl = levels(lv);
    for (int li = 0; li < nl; li++) {
        use_level(lv[li]);
        for (int ci = 0; ci < 2; ci++)
            for (int l = 0; l < 4; l++) {
                kiln_ctx *ctx = kiln_ctx_new();
                int64_t n = 37 + l;
                kiln_tensor *c = ci ? kiln_new_2d(ctx, KILN_I32, l == 1 ? 1 : 5, n) : kiln_new_2d(ctx, KILN_F32, 5, l == 2 ? 1 : n);
                kiln_tensor *a = kiln_new_2d(ctx, KILN_F32, 5, n), *b = l == 3 ? kiln_new_1d(ctx, KILN_F32, 1) : kiln_new_1d(ctx, KILN_F32, n);
                int64_t cn = kiln_tensor_numel(c);
                if (ci) {
                    int32_t *cv = c->data;
                    for (int64_t i = 0; i < cn; i++) cv[i] = i % 3 == 0 ? 0 : (int32_t)(i % 5) - 2;
                    cv[cn - 1] = (int32_t)0x80000000u; /* -0.0f's bits: true as an int */
                } else {
                    float *cv = c->data;
                    for (int64_t i = 0; i < cn; i++) cv[i] = i % 3 == 0 ? 0.0f : i % 3 == 1 ? -0.0f : (i % 7 ? 0.5f : NAN);
                }
                fill_bin(a, 3, true);
                fill_bin(b, 4, true);
                kiln_tensor *y = kiln_where(ctx, c, a, b);
                KT_NOTNULL(y);
                KT_OK(compute(ctx, y));
                const float *yv = y->data;
                for (int64_t i = 0; i < kiln_tensor_numel(y); i++) {
                    int64_t r = i / n, j = i % n, off = (c->shape[0] == 1 ? 0 : r) * c->shape[1] + (c->shape[1] == 1 ? 0 : j);
                    bool on = ci ? ((const int32_t *)c->data)[off] != 0 : ((const float *)c->data)[off] != 0;
                    float want = on ? (float)at_bcast(a, 2, y->shape, i) : (float)at_bcast(b, 2, y->shape, i);
                    KT_CHECK(yv[i] == want || (yv[i] != yv[i] && want != want), "%s where cond %s layout %d [%lld]",
                             kiln__simd_level_name(lv[li]), ci ? "i32" : "f32", l, (long long)i);
                }
                kiln_ctx_free(ctx);
            }
    }
    kiln__cpu_caps_set(&saved);
}

/* ---- reductions ---- */

static const struct {
    int nd;
    int64_t shape[3];
    int axis; /* -1: all */
} reductions[] = {
    {2, {7, 67}, 1},     {2, {67, 37}, 0},  {3, {3, 5, 37}, 1},  {2, {300, 1030}, 0}, {1, {1}, 0},
    {2, {5, 3}, 0},      {1, {200001}, -1}, {2, {2, 70001}, 1},  {2, {3, 19}, -1},    {3, {2, 3, 1}, 1},
    {2, {2000, 24}, 0},
};

KT_TEST(simd_reductions) {
    kiln_cpu_caps saved = *kiln__cpu_caps();
    int lv[4], nl = levels(lv);
    for (int li = 0; li < nl; li++) {
        use_level(lv[li]);
        for (int r = 0; r < (int)(sizeof reductions / sizeof *reductions); r++)
            for (int specials = 0; specials < 2; specials++) {
                kiln_ctx *ctx = kiln_ctx_new();
                kiln_tensor *x = kiln_tensor_new(ctx, KILN_F32, reductions[r].nd, reductions[r].shape);
                fill_bin(x, 11 + (uint64_t)r, specials);
                int axis = reductions[r].axis;
                int64_t outer = 1, n = kiln_tensor_numel(x), inner = 1;
                if (axis >= 0) {
                    n = x->shape[axis];
                    for (int d = 0; d < axis; d++) outer *= x->shape[d];
                    for (int d = axis + 1; d < x->ndim; d++) inner *= x->shape[d];
                }
                for (int k = 0; k < 4; k++) {
                    kiln_op op = (kiln_op)(KILN_OP_SUM + k);
                    if (axis < 0 && op == KILN_OP_ARGMAX) continue;
                    kiln_tensor *y = axis < 0 ? (op == KILN_OP_SUM ? kiln_sum_all(ctx, x)
                                                 : op == KILN_OP_MAX ? kiln_max_all(ctx, x) : kiln_min_all(ctx, x))
                                 : op == KILN_OP_SUM ? kiln_sum(ctx, x, axis, false)
                                 : op == KILN_OP_MAX ? kiln_max(ctx, x, axis, false)
                                 : op == KILN_OP_MIN ? kiln_min(ctx, x, axis, false)
                                                     : kiln_argmax(ctx, x, axis, false);
                    KT_NOTNULL(y);
                    KT_OK(compute(ctx, y));
                    const float *xv = x->data;
                    for (int64_t o = 0; o < outer; o++)
                        for (int64_t j = 0; j < inner; j++) {
                            const float *p = xv + o * n * inner + j;
                            double best = p[0], sum = 0, mag = 0;
                            int64_t at = 0;
                            for (int64_t i = 0; i < n; i++) {
                                double v = p[i * inner];
                                sum += v, mag += fabs(v);
                                if (best == best && (v != v || (op == KILN_OP_MIN ? v < best : v > best))) best = v, at = i;
                            }
                            int64_t oi = o * inner + j;
                            bool ok;
                            if (op == KILN_OP_ARGMAX) ok = ((const int32_t *)y->data)[oi] == at;
                            else {
                                double got = ((const float *)y->data)[oi], want = op == KILN_OP_SUM ? sum : best;
                                ok = want != want ? got != got : op != KILN_OP_SUM ? got == want
                                     : fabs(got - want) <= 1e-6 * mag + 1e-30 || (isinf(want) && got == want);
                            }
                            KT_CHECK(ok, "%s %s shape[%lld,%lld,%lld] axis %d specials %d at %lld,%lld",
                                     kiln__simd_level_name(lv[li]), kiln__op_table[op].name,
                                     (long long)reductions[r].shape[0], (long long)reductions[r].shape[1],
                                     (long long)reductions[r].shape[2], axis, specials, (long long)o, (long long)j);
                            if (!ok) goto next;
                        }
                next:;
                }
                kiln_ctx_free(ctx);
            }
    }
    kiln__cpu_caps_set(&saved);
}

/* A unary op on a view whose last axis is broadcast (stride 0), as the
 * backward of a sum produces, reads the one element per row. */
KT_TEST(simd_unary_reads_broadcast_rows) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_tensor_new(ctx, KILN_F32, 2, (int64_t[]){6, 1});
    KT_OK(kiln_tensor_set_f32(x, (float[]){1, 2, 3, 4, 5, 6}, 6));
    kiln_tensor *y = kiln_neg(ctx, kiln_broadcast_to(ctx, x, 2, (int64_t[]){6, 4}));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    KT_OK(kiln_graph_compute(g));
    float v[24];
    KT_OK(kiln_tensor_get_f32(y, v, 24));
    for (int i = 0; i < 24; i++) KT_CHECK(v[i] == -(float)(i / 4 + 1), "y[%d] = %g", i, v[i]);
    kiln_ctx_free(ctx);
}
