/* test_vk_matmul.c — the Vulkan matmul and conv kernels (vk_matmul.c,
 * vk_conv.c) against the CPU backend on the same inputs: matmul at odd
 * sizes (each tile variant and both split-K kernels), transposed, batched and
 * broadcast (more batches than one dispatch holds), f16 and bf16
 * precision, strided operand views, accumulating into the output; the
 * im2col/col2im primitives; conv2d,
 * conv_transpose2d and the pools (NaNs and ties included) forward and
 * backward. No node may fall back to the CPU (the loss and the layers'
 * other ops are other families' kernels), and validation messages must
 * stay at 0 (the runner sets KILN_VULKAN_VALIDATE=1). */
#include "backend.h"
#include "kt_device.h"

#include <time.h>

/* The Vulkan backend, or the end of the test (skipped without a device). */
#define VULKAN(vk)                                \
    kiln_backend *vk = kt_device("vulkan");      \
    if (!vk) return

/* ---- running one computation on a backend ---- */

#define MAX_IN 4

typedef struct leaf_spec {
    kiln_dtype dt;
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    bool grad;
    bool ties; /* values rounded to quarters: many equal ones */
    bool nans; /* every 23rd value NaN */
} leaf_spec;

/* Round t's values to multiples of 1/4, and make some NaN. */
static kiln_status doctor(kiln_tensor *t, bool ties, bool nans) {
    int64_t n = kiln_tensor_numel(t);
    double *v = malloc((size_t)n * sizeof *v);
    if (!v) return KILN_ERR_OOM;
    kiln_status s = kiln_tensor_get_f64(t, v, n);
    for (int64_t i = 0; i < n; i++) {
        if (ties) v[i] = round(v[i] * 4) / 4;
        if (nans && i % 23 == 5) v[i] = NAN;
    }
    if (!s) s = kiln_tensor_set_f64(t, v, n);
    free(v);
    return s;
}

typedef kiln_tensor *(*build_fn)(kiln_ctx *ctx, kiln_tensor **in, const void *arg);

/* What one run gave: the output's values, the inputs' gradients and what
 * the graph did. */
typedef struct run_out {
    double *y, *g[MAX_IN];
    int64_t ny, ng[MAX_IN];
    kiln_graph_stats st;
    int mine, mine_unclaimed; /* matmul/im2col/col2im nodes, and those the backend declined */
} run_out;

static void run_out_free(run_out *r) {
    free(r->y);
    for (int i = 0; i < MAX_IN; i++) free(r->g[i]);
}

static double *values(const kiln_tensor *t, int64_t *n) {
    *n = kiln_tensor_numel(t);
    double *v = malloc((size_t)(*n ? *n : 1) * sizeof *v);
    if (v && kiln_tensor_get_f64(t, v, *n)) return free(v), NULL;
    return v;
}

static bool is_mine(kiln_op op) { return op == KILN_OP_MATMUL || op == KILN_OP_IM2COL || op == KILN_OP_COL2IM; }

/* Build f over seeded uniform inputs on backend b (NULL: the CPU),
 * compute it (and, with backward, the gradients of sum(y * r) for a fixed
 * random r) and read everything back. */
static bool run_case(kiln_backend *b, int nin, const leaf_spec *spec, build_fn f, const void *arg, bool backward,
                     run_out *out) {
    memset(out, 0, sizeof *out);
    kiln_ctx *ctx = kiln_ctx_new();
    if (!ctx) return false;
    bool ok = false;
    if (b && kiln_ctx_set_backend(ctx, b)) goto done;
    kiln_tensor *in[MAX_IN];
    for (int i = 0; i < nin; i++) {
        in[i] = kiln_tensor_new(ctx, spec[i].dt, spec[i].ndim, spec[i].shape);
        if (!in[i] || kiln_tensor_fill_uniform(in[i], 1000 + (uint64_t)i, -1, 1)) goto done;
        if ((spec[i].ties || spec[i].nans) && doctor(in[i], spec[i].ties, spec[i].nans)) goto done;
        if (backward && spec[i].grad && kiln_tensor_set_requires_grad(in[i], true)) goto done;
    }
    kiln_tensor *y = f(ctx, in, arg);
    kiln_graph *g = kiln_graph_new(ctx);
    if (!y || !g || kiln_graph_add(g, y)) goto done;
    if (backward) {
        kiln_tensor *r = kiln_tensor_new(ctx, kiln_tensor_dtype(y), kiln_tensor_ndim(y), kiln_tensor_shape(y));
        if (!r || kiln_tensor_fill_uniform(r, 99, -1, 1)) goto done;
        kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, y, r));
        if (!loss || kiln_graph_add(g, loss) || kiln_graph_backward(g, loss)) goto done;
    }
    /* twice: a recorded graph must compute the same again */
    if (kiln_graph_compute(g) || kiln_graph_compute(g)) goto done;
    if (!(out->y = values(y, &out->ny))) goto done;
    for (int i = 0; i < nin; i++)
        if (backward && spec[i].grad && !(out->g[i] = values(kiln_tensor_grad(in[i]), &out->ng[i]))) goto done;
    out->st = kiln_graph_get_stats(g);
    for (int i = 0; i < kiln_graph_n_nodes(g); i++) {
        kiln_tensor *t = kiln_graph_node(g, i);
        if (!is_mine(t->op)) continue;
        out->mine++;
        if (b && !b->vt->supports(b, t)) out->mine_unclaimed++;
    }
    ok = true;
done:
    if (!ok) fprintf(stderr, "    run_case on %s: %s\n", b ? "vulkan" : "cpu", kiln_last_error());
    kiln_ctx_free(ctx);
    return ok;
}

/* Largest |a-b| / (atol + rtol*|b|), NaN matching NaN. */
static double max_err(const double *a, const double *b, int64_t n, double atol, double rtol, int64_t *worst) {
    double w = 0;
    *worst = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) && isnan(b[i])) continue;
        double e = fabs(a[i] - b[i]) / (atol + rtol * fabs(b[i]));
        if (!(e <= w)) w = e == e ? e : INFINITY, *worst = i;
    }
    return w;
}

static void check_same(const char *what, const char *part, const double *v, int64_t nv, const double *c, int64_t nc,
                       double tol) {
    KT_REQUIRE(nv == nc, "%s %s: %lld values on Vulkan, %lld on the CPU", what, part, (long long)nv, (long long)nc);
    int64_t w;
    double e = max_err(v, c, nv, tol, tol, &w);
    KT_CHECK(e <= 1, "%s %s: element %lld is %.9g on Vulkan, %.9g on the CPU", what, part, (long long)w, v[w], c[w]);
}

/* Run f on the CPU and on Vulkan and compare; no node may fall back (the
 * matmul/im2col/col2im ones are named when they do). */
static void compare(kiln_backend *vk, const char *what, int nin, const leaf_spec *spec, build_fn f, const void *arg,
                    bool backward, double tol) {
    run_out c, v;
    bool okc = run_case(NULL, nin, spec, f, arg, backward, &c);
    bool okv = okc && run_case(vk, nin, spec, f, arg, backward, &v);
    if (okc && okv) {
        check_same(what, "y", v.y, v.ny, c.y, c.ny, tol);
        for (int i = 0; i < nin; i++)
            if (c.g[i]) check_same(what, i == 0 ? "grad 0" : i == 1 ? "grad 1" : "grad 2+", v.g[i], v.ng[i], c.g[i],
                                   c.ng[i], tol);
        KT_CHECK(v.mine > 0, "%s: no matmul/im2col/col2im node in the graph", what);
        KT_CHECK(v.mine_unclaimed == 0, "%s: %d of %d matmul/im2col/col2im nodes declined", what, v.mine_unclaimed,
                 v.mine);
        KT_CHECK(v.st.nodes_fallback == 0, "%s: %lld nodes fell back", what, (long long)v.st.nodes_fallback);
        KT_CHECK(v.st.nodes_on_backend > 0, "%s: nothing ran on Vulkan", what);
    } else {
        kt_fail(__FILE__, __LINE__, "%s: a run failed", what);
    }
    if (okc) run_out_free(&c);
    if (okv) run_out_free(&v);
    KT_CHECK(kiln_backend_validation_messages(vk) == 0, "%s: %lld validation messages", what,
             (long long)kiln_backend_validation_messages(vk));
}

/* ---- matmul ---- */

typedef struct mm_arg {
    bool ta, tb;   /* kiln_matmul_t's flags */
    bool view_a;   /* pass a as the transpose view of a contiguous [.., K, M] */
} mm_arg;

static kiln_tensor *build_mm(kiln_ctx *ctx, kiln_tensor **in, const void *arg) {
    const mm_arg *m = arg;
    kiln_tensor *a = m->view_a ? kiln_transpose(ctx, in[0], -2, -1) : in[0];
    return kiln_matmul_t(ctx, a, m->ta, in[1], m->tb);
}

/* a [.., M, K] (or as op wants it) and b [.., K, N] with batch dims ba, bb */
static void mm_specs(leaf_spec *s, kiln_dtype dt, int nba, const int64_t *ba, int nbb, const int64_t *bb, int64_t m,
                     int64_t k, int64_t n, bool ta, bool tb, bool grad) {
    s[0] = (leaf_spec){.dt = dt, .ndim = nba + 2, .grad = grad};
    s[1] = (leaf_spec){.dt = dt, .ndim = nbb + 2, .grad = grad};
    for (int i = 0; i < nba; i++) s[0].shape[i] = ba[i];
    for (int i = 0; i < nbb; i++) s[1].shape[i] = bb[i];
    s[0].shape[nba] = ta ? k : m, s[0].shape[nba + 1] = ta ? m : k;
    s[1].shape[nbb] = tb ? n : k, s[1].shape[nbb + 1] = tb ? k : n;
}

KT_TEST(vk_matmul_odd_sizes_and_transposes) {
    VULKAN(vk);
    static const int64_t sz[] = {1, 7, 33, 65, 130};
    char what[96];
    for (int i = 0; i < 5; i++)
        for (int rot = 0; rot < 2; rot++) {
            int64_t m = sz[i], k = sz[(i + rot) % 5], n = sz[(i + 2 * rot) % 5];
            for (int t = 0; t < 4; t++) {
                mm_arg arg = {t & 1, t >> 1, false};
                leaf_spec s[2];
                mm_specs(s, KILN_F32, 0, NULL, 0, NULL, m, k, n, arg.ta, arg.tb, false);
                snprintf(what, sizeof what, "f32 %lldx%lldx%lld ta %d tb %d", (long long)m, (long long)k, (long long)n,
                         arg.ta, arg.tb);
                compare(vk, what, 2, s, build_mm, &arg, false, 1e-4);
            }
        }
    /* a transpose view of a contiguous tensor (ops/matmul.c flips the flag) */
    mm_arg arg = {false, false, true};
    leaf_spec s[2];
    mm_specs(s, KILN_F32, 0, NULL, 0, NULL, 65, 33, 7, true, false, false);
    compare(vk, "transposed view", 2, s, build_mm, &arg, false, 1e-4);
}

KT_TEST(vk_matmul_batched_and_broadcast) {
    VULKAN(vk);
    struct {
        int nba, nbb;
        int64_t ba[3], bb[3], m;
        bool ta, tb;
    } cases[] = {
        {2, 2, {2, 3}, {2, 3}, 33, false, false},
        {2, 1, {2, 1}, {3}, 33, false, true},      /* a broadcast along the 3, b along the 2 */
        {0, 1, {0}, {4}, 33, true, false},         /* a 2-D shared by the batch */
        {3, 0, {2, 2, 3}, {0}, 33, false, false},  /* b 2-D shared: one tall matrix */
        {3, 0, {2, 2, 3}, {0}, 33, true, false},   /* ... but not with a transposed */
        {1, 0, {5}, {0}, 1, false, true},          /* rows of one: a's batch stride is the row stride */
        {3, 3, {2, 1, 3}, {1, 2, 1}, 33, true, true},
    };
    char what[96];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mm_arg arg = {cases[i].ta, cases[i].tb, false};
        leaf_spec s[2];
        mm_specs(s, KILN_F32, cases[i].nba, cases[i].ba, cases[i].nbb, cases[i].bb, cases[i].m, 17, 70, arg.ta, arg.tb,
                 false);
        snprintf(what, sizeof what, "batched case %zu", i);
        compare(vk, what, 2, s, build_mm, &arg, false, 1e-4);
    }
}

/* More batch matrices than a dispatch's z may have (65535 on lavapipe):
 * the kernel runs in more dispatches. */
KT_TEST(vk_matmul_many_batches) {
    VULKAN(vk);
    mm_arg arg = {false, true, false};
    leaf_spec s[2];
    mm_specs(s, KILN_F32, 1, (int64_t[]){70000}, 1, (int64_t[]){70000}, 2, 3, 2, false, true, false);
    compare(vk, "70000 batches", 2, s, build_mm, &arg, false, 1e-5);
}

/* A tolerance for C of dtype dt: f32's, or one ulp of the 16-bit result
 * where both sides may round a sum to either neighbour. */
static double half_tol(kiln_dtype dt, double f32) { return dt == KILN_F16 ? 4e-3 : dt == KILN_BF16 ? 8e-3 : f32; }

/* Small outputs over a long K (a convolution's weight gradient): the
 * split-K kernel, f32, f16 and bf16 tensors and bf16 precision, with a batch, transposes and
 * the edges of its 4 x 4 blocks. */
KT_TEST(vk_matmul_split_k) {
    VULKAN(vk);
    struct {
        int64_t m, k, n, batch;
        kiln_dtype dt;
        bool ta, tb, bf16;
    } cases[] = {
        {7, 1500, 5, 0, KILN_F32, false, false, false}, {33, 2048, 17, 0, KILN_F32, true, false, false},
        {16, 1100, 9, 0, KILN_F32, false, true, false}, {1, 1024, 1, 0, KILN_F32, true, true, false},
        {9, 1100, 13, 2, KILN_F32, false, true, false}, {6, 1300, 11, 0, KILN_F16, false, true, false},
        {10, 1200, 7, 0, KILN_F32, false, true, true}, {6, 1300, 11, 2, KILN_BF16, true, false, false},
    };
    char what[96];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mm_arg arg = {cases[i].ta, cases[i].tb, false};
        leaf_spec s[2];
        int nb = cases[i].batch ? 1 : 0;
        mm_specs(s, cases[i].dt, nb, &cases[i].batch, nb, &cases[i].batch, cases[i].m, cases[i].k, cases[i].n,
                 arg.ta, arg.tb, false);
        snprintf(what, sizeof what, "split-K case %zu", i);
        if (cases[i].bf16) KT_OK(kiln_set_matmul_precision(KILN_MATMUL_BF16));
        /* sums of 1000+ products in another order: a looser tolerance */
        compare(vk, what, 2, s, build_mm, &arg, false, half_tol(cases[i].dt, 3e-4));
        if (cases[i].bf16) KT_OK(kiln_set_matmul_precision(KILN_MATMUL_F32));
    }
}

/* Small outputs over a long K split across workgroups (partial tiles in
 * scratch, then their sums): odd sizes at every partial tile's edges, f32
 * and f16, transposes, a batch, bf16 precision and a broadcast operand. */
KT_TEST(vk_matmul_split_k_across) {
    VULKAN(vk);
    struct {
        int64_t m, k, n, batch;
        kiln_dtype dt;
        bool ta, tb, bf16, bcast;
    } cases[] = {
        {16, 33001, 9, 0, KILN_F32, false, true, false, false},  /* a conv weight gradient's shape */
        {31, 2999, 45, 0, KILN_F32, true, false, false, false},
        {5, 40000, 3, 0, KILN_F32, true, true, false, false},
        {100, 1100, 90, 0, KILN_F32, false, true, false, false},
        {130, 1030, 129, 0, KILN_F32, true, false, false, false},
        {70, 1537, 33, 0, KILN_F32, false, false, false, false},
        {13, 33000, 7, 3, KILN_F32, false, true, false, false},
        {9, 33100, 11, 2, KILN_F32, true, false, false, true},   /* b shared by the batch */
        {20, 1500, 24, 3, KILN_F32, true, true, false, false},
        {64, 1100, 60, 0, KILN_F32, false, true, false, false},
        {24, 2000, 40, 2, KILN_F16, false, false, false, false},
        {17, 3001, 23, 0, KILN_F16, false, true, false, false},
        {6, 33000, 10, 2, KILN_F16, true, false, false, false},
        {21, 2500, 10, 0, KILN_F32, false, true, true, false},
        {17, 3001, 23, 2, KILN_BF16, false, true, false, false},
    };
    char what[96];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mm_arg arg = {cases[i].ta, cases[i].tb, false};
        leaf_spec s[2];
        int nb = cases[i].batch ? 1 : 0;
        mm_specs(s, cases[i].dt, nb, &cases[i].batch, cases[i].bcast ? 0 : nb, &cases[i].batch, cases[i].m,
                 cases[i].k, cases[i].n, arg.ta, arg.tb, false);
        snprintf(what, sizeof what, "split-K across case %zu", i);
        if (cases[i].bf16) KT_OK(kiln_set_matmul_precision(KILN_MATMUL_BF16));
        compare(vk, what, 2, s, build_mm, &arg, false, half_tol(cases[i].dt, 3e-4));
        if (cases[i].bf16) KT_OK(kiln_set_matmul_precision(KILN_MATMUL_F32));
    }
    /* the backward of a small-output matmul: both gradients */
    mm_arg arg = {false, true, false};
    leaf_spec s[2];
    mm_specs(s, KILN_F32, 0, NULL, 0, NULL, 12, 33000, 10, false, true, true);
    compare(vk, "split-K across backward", 2, s, build_mm, &arg, true, 3e-4);
}

/* ---- ex->accumulate, straight through the backend ---- */

/* A [rows, cols] tensor of dt in a fresh device buffer holding v (NULL
 * when the allocation fails). */
static kiln_devbuf *dev_tensor(kiln_backend *vk, kiln_tensor *t, kiln_dtype dt, int64_t rows, int64_t cols,
                               const float *v) {
    memset(t, 0, sizeof *t);
    t->dtype = dt, t->ndim = 2;
    t->shape[0] = rows, t->shape[1] = cols, t->stride[0] = cols, t->stride[1] = 1;
    int64_t n = rows * cols;
    size_t bytes = (size_t)n * (dt == KILN_F32 ? 4 : 2);
    void *host = malloc(bytes);
    kiln_devbuf *d = host ? vk->vt->alloc(vk, bytes) : NULL;
    if (d) {
        for (int64_t i = 0; i < n; i++)
            if (dt == KILN_F16) ((uint16_t *)host)[i] = kiln__f32_to_f16(v[i]);
            else if (dt == KILN_BF16) ((uint16_t *)host)[i] = kiln__f32_to_bf16(v[i]);
            else ((float *)host)[i] = v[i];
        if (vk->vt->upload(vk, d, 0, host, bytes)) vk->vt->free(vk, d), d = NULL;
    }
    free(host);
    t->dbuf = d;
    return d;
}

/* uniform in [-0.5, 0.5) */
static float rnd(uint64_t *x) {
    *x = *x * 6364136223846793005ull + 1;
    return (float)(*x >> 40) / (1 << 24) - 0.5f;
}

static float as_dt(kiln_dtype dt, float v) {
    return dt == KILN_F16 ? kiln__f16_to_f32(kiln__f32_to_f16(v)) : dt == KILN_BF16 ? kiln__bf16_to_f32(kiln__f32_to_bf16(v)) : v;
}

static float from_bits(kiln_dtype dt, const void *h, int64_t i) {
    const uint16_t *b = h;
    return dt == KILN_F16 ? kiln__f16_to_f32(b[i]) : dt == KILN_BF16 ? kiln__bf16_to_f32(b[i]) : ((const float *)h)[i];
}

/* C += A B (a matmul adding into a gradient, core/fuse.c) on the tiled and
 * the split-K paths, f32, f16 and bf16: C's old values plus the product rounded
 * to C's dtype; without accumulate, two runs give the same bits. */
KT_TEST(vk_matmul_accumulate) {
    VULKAN(vk);
    struct {
        int64_t m, k, n;
        kiln_dtype dt;
    } cases[] = {
        {33, 40, 17, KILN_F32}, {7, 33000, 13, KILN_F32}, {33, 40, 17, KILN_F16},
        {7, 33000, 13, KILN_F16}, {40, 3001, 21, KILN_F16}, {9, 1100, 5, KILN_F32},
        {33, 40, 17, KILN_BF16}, {7, 33000, 13, KILN_BF16},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        int64_t M = cases[ci].m, K = cases[ci].k, N = cases[ci].n;
        kiln_dtype dt = cases[ci].dt;
        float *av = malloc(M * K * sizeof *av), *bv = malloc(K * N * sizeof *bv), *cv = malloc(M * N * sizeof *cv);
        float *got = malloc(M * N * 4), *again = malloc(M * N * 4);
        KT_REQUIRE(av && bv && cv && got && again, "out of memory");
        uint64_t x = 12345 + ci;
        for (int64_t i = 0; i < M * K; i++) av[i] = as_dt(dt, rnd(&x));
        for (int64_t i = 0; i < K * N; i++) bv[i] = as_dt(dt, rnd(&x));
        for (int64_t i = 0; i < M * N; i++) cv[i] = as_dt(dt, (float)(i % 7) - 3.0f);
        kiln_tensor a, b, c;
        kiln_devbuf *da = dev_tensor(vk, &a, dt, M, K, av), *db = dev_tensor(vk, &b, dt, K, N, bv);
        kiln_devbuf *dc = dev_tensor(vk, &c, dt, M, N, cv);
        KT_REQUIRE(da && db && dc, "device buffers: %s", kiln_last_error());
        c.op = KILN_OP_MATMUL, c.nsrc = 2, c.src[0] = &a, c.src[1] = &b;
        KT_CHECK(vk->vt->supports(vk, &c), "case %zu: matmul not claimed", ci);
        size_t es = dt == KILN_F32 ? 4 : 2;
        uint16_t *h = malloc(M * N * es);
        KT_REQUIRE(h, "out of memory");
        /* C += AB, then read C back */
        kiln_exec ex = {.accumulate = true};
        KT_OK(vk->vt->compute(vk, &c, &ex));
        KT_OK(vk->vt->flush(vk));
        KT_OK(vk->vt->download(vk, dc, 0, h, M * N * es));
        for (int64_t i = 0; i < M * N; i++) got[i] = from_bits(dt, h, i);
        double worst = 0;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double p = 0;
                for (int64_t k = 0; k < K; k++) p += (double)av[i * K + k] * bv[k * N + j];
                double want = as_dt(dt, cv[i * N + j] + as_dt(dt, (float)p));
                double e = fabs(got[i * N + j] - want) / (1 + fabs(want)); /* sums of up to 33000 terms */
                if (e > worst) worst = e;
            }
        KT_CHECK(worst < half_tol(dt, 1e-4), "case %zu (%lldx%lldx%lld %s): accumulate off by %g", ci,
                 (long long)M, (long long)K, (long long)N, kiln_dtype_name(dt), worst);
        /* plain C = AB twice: the same bits (the splits add in a fixed order) */
        ex.accumulate = false;
        KT_OK(vk->vt->compute(vk, &c, &ex));
        KT_OK(vk->vt->flush(vk));
        KT_OK(vk->vt->download(vk, dc, 0, got, M * N * es));
        KT_OK(vk->vt->compute(vk, &c, &ex));
        KT_OK(vk->vt->flush(vk));
        KT_OK(vk->vt->download(vk, dc, 0, again, M * N * es));
        KT_CHECK(memcmp(got, again, M * N * es) == 0, "case %zu: two runs differ", ci);
        vk->vt->free(vk, da), vk->vt->free(vk, db), vk->vt->free(vk, dc);
        free(av), free(bv), free(cv), free(got), free(again), free(h);
    }
    KT_CHECK(kiln_backend_validation_messages(vk) == 0, "%lld validation messages",
             (long long)kiln_backend_validation_messages(vk));
}

KT_TEST(vk_matmul_backward) {
    VULKAN(vk);
    char what[96];
    for (int t = 0; t < 4; t++) {
        mm_arg arg = {t & 1, t >> 1, false};
        leaf_spec s[2];
        mm_specs(s, KILN_F32, 2, (int64_t[]){3, 2}, 1, (int64_t[]){2}, 19, 40, 9, arg.ta, arg.tb, true);
        snprintf(what, sizeof what, "backward ta %d tb %d", arg.ta, arg.tb);
        compare(vk, what, 2, s, build_mm, &arg, true, 1e-4);
    }
}

/* 16-bit tensors of dtype dt over odd sizes and every transpose, a
 * batch; gradients too for the last transpose when grad_last. Both sides
 * accumulate in f32; the 16-bit result may round one ulp apart. */
static void mm_16bit(kiln_backend *vk, kiln_dtype dt, double tol, bool grad_last) {
    static const int64_t sz[] = {1, 7, 33, 65, 130};
    char what[96];
    for (int i = 0; i < 5; i++) {
        int64_t m = sz[i], k = sz[(i + 1) % 5], n = sz[(i + 3) % 5];
        for (int t = 0; t < 4; t++) {
            mm_arg arg = {t & 1, t >> 1, false};
            leaf_spec s[2];
            bool grad = grad_last && t == 3;
            mm_specs(s, dt, 1, (int64_t[]){2}, 0, NULL, m, k, n, arg.ta, arg.tb, grad);
            snprintf(what, sizeof what, "%s %lldx%lldx%lld ta %d tb %d", kiln_dtype_name(dt), (long long)m,
                     (long long)k, (long long)n, arg.ta, arg.tb);
            compare(vk, what, 2, s, build_mm, &arg, grad, tol);
        }
    }
}

KT_TEST(vk_matmul_f16) {
    VULKAN(vk);
    mm_16bit(vk, KILN_F16, 2e-3, false);
}

/* bf16 tensors: stored as bf16, summed in f32, the result rounded to bf16
 * (as the CPU), every node on the device; both gradients for one
 * transpose of each shape. */
KT_TEST(vk_matmul_bf16) {
    VULKAN(vk);
    mm_16bit(vk, KILN_BF16, half_tol(KILN_BF16, 0), true);
}

KT_TEST(vk_matmul_bf16_precision) {
    VULKAN(vk);
    mm_arg arg = {false, true, false};
    leaf_spec s[2];
    mm_specs(s, KILN_F32, 0, NULL, 0, NULL, 40, 70, 33, false, true, false);
    KT_OK(kiln_set_matmul_precision(KILN_MATMUL_BF16));
    compare(vk, "bf16 precision", 2, s, build_mm, &arg, false, 1e-4);
    KT_OK(kiln_set_matmul_precision(KILN_MATMUL_F32));
}

/* Operands that are views the constructors would never pass (a row slice
 * with a long row stride, a stride-0 batch, a transposed batch) given to a
 * hand-made MATMUL node, against a loop over the logical values. */
KT_TEST(vk_matmul_strided_views) {
    VULKAN(vk);
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, vk));
    const int64_t B = 3, M = 21, K = 35, N = 66;
    kiln_tensor *wide = kiln_new_3d(ctx, KILN_F32, B, M, K + 9), *bm = kiln_new_2d(ctx, KILN_F32, N, K);
    KT_NOTNULL(wide);
    KT_NOTNULL(bm);
    KT_OK(kiln_tensor_fill_uniform(wide, 1, -1, 1));
    KT_OK(kiln_tensor_fill_uniform(bm, 2, -1, 1));
    /* a = wide[:, :, 5:5+K] ; b = bm broadcast over the batch, used transposed (ip[1] = 1) */
    kiln_tensor *a = kiln_slice(ctx, wide, 2, 5, 5 + K, 1);
    kiln_tensor *b = kiln_broadcast_to(ctx, kiln_reshape(ctx, bm, 3, (int64_t[]){1, N, K}), 3, (int64_t[]){B, N, K});
    KT_NOTNULL(a);
    KT_NOTNULL(b);
    kiln_tensor *src[2] = {a, b};
    kiln_tensor *y = kiln__node_new(ctx, KILN_OP_MATMUL, KILN_F32, 3, (int64_t[]){B, M, N}, 2, src);
    KT_NOTNULL(y);
    y->ip[0] = 0, y->ip[1] = 1;
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    KT_OK(kiln_graph_compute(g));
    kiln_graph_stats st = kiln_graph_get_stats(g);
    KT_CHECK(st.nodes_fallback == 0 && st.nodes_on_backend == 1, "fallback %lld on backend %lld",
             (long long)st.nodes_fallback, (long long)st.nodes_on_backend);
    int64_t nw = B * M * (K + 9), nbm = N * K, ny = B * M * N;
    double *wv = malloc(nw * sizeof *wv), *bv = malloc(nbm * sizeof *bv), *yv = malloc(ny * sizeof *yv);
    KT_REQUIRE(wv && bv && yv, "out of memory");
    KT_OK(kiln_tensor_get_f64(wide, wv, nw));
    KT_OK(kiln_tensor_get_f64(bm, bv, nbm));
    KT_OK(kiln_tensor_get_f64(y, yv, ny));
    double worst = 0;
    for (int64_t p = 0; p < B; p++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) s += wv[(p * M + i) * (K + 9) + 5 + k] * bv[j * K + k];
                double e = fabs(yv[(p * M + i) * N + j] - s);
                if (e > worst) worst = e;
            }
    KT_CHECK(worst < 1e-4, "strided matmul off by %g", worst);
    KT_CHECK(kiln_backend_validation_messages(vk) == 0, "%lld validation messages",
             (long long)kiln_backend_validation_messages(vk));
    free(wv), free(bv), free(yv);
    kiln_ctx_free(ctx);
}

/* ---- convolution primitives ---- */

typedef struct pool_arg {
    int k, stride, pad;
    bool max;
} pool_arg;

static kiln_tensor *build_pool(kiln_ctx *ctx, kiln_tensor **in, const void *arg) {
    const pool_arg *p = arg;
    return p->max ? kiln_max_pool2d(ctx, in[0], p->k, p->k, p->stride, p->pad)
                  : kiln_avg_pool2d(ctx, in[0], p->k, p->k, p->stride, p->pad);
}

/* The max-pool of in[0] [C, N, H, W] seen as [N, C, H, W] through the copy
 * the pool skips (a conv2d product's layout; ip[11] = 1). */
static kiln_tensor *build_pool_cn(kiln_ctx *ctx, kiln_tensor **in, const void *arg) {
    const pool_arg *p = arg;
    kiln_tensor *x = kiln_contiguous(ctx, kiln_permute(ctx, in[0], (const int[]){1, 0, 2, 3}));
    return kiln_max_pool2d(ctx, x, p->k, p->k, p->stride, p->pad);
}


typedef struct conv_arg {
    int64_t g[8];   /* kh kw sh sw ph pw dh dw */
    int64_t groups; /* conv2d */
    int layout;     /* primitives: ip[11] */
    double pad;
    bool bias;
} conv_arg;

static int64_t out_len(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d) { return (n + 2 * p - d * (k - 1) - 1) / s + 1; }

static kiln_tensor *build_im2col(kiln_ctx *ctx, kiln_tensor **in, const void *arg) {
    const conv_arg *c = arg;
    const int64_t *x = kiln_tensor_shape(in[0]), *g = c->g;
    int64_t oh = out_len(x[2], g[0], g[2], g[4], g[6]), ow = out_len(x[3], g[1], g[3], g[5], g[7]);
    return c->layout ? kiln__im2col_cn(ctx, in[0], g, oh, ow, c->pad) : kiln__im2col(ctx, in[0], g, oh, ow, c->pad);
}

/* in[0] is cols of an 11 x 9 image */
static kiln_tensor *build_col2im(kiln_ctx *ctx, kiln_tensor **in, const void *arg) {
    const conv_arg *c = arg;
    return c->layout ? kiln__col2im_cn(ctx, in[0], c->g, 11, 9) : kiln__col2im(ctx, in[0], c->g, 11, 9);
}

static const conv_arg GEOMS[] = {
    {{3, 3, 1, 1, 1, 1, 1, 1}, 1, 0, 0.0, false},
    {{3, 2, 2, 1, 0, 1, 1, 2}, 1, 0, 0.5, false},
    {{2, 3, 1, 2, 1, 0, 2, 1}, 1, 0, -1.5, false},
    {{1, 1, 2, 2, 0, 0, 1, 1}, 1, 0, 0.0, false},
    {{5, 3, 3, 2, 2, 1, 1, 1}, 1, 0, 0.0, false},
};
#define N_GEOMS (sizeof GEOMS / sizeof *GEOMS)

KT_TEST(vk_conv_im2col_col2im) {
    VULKAN(vk);
    char what[96];
    for (size_t i = 0; i < N_GEOMS; i++)
        for (int layout = 0; layout < 2; layout++) {
            conv_arg c = GEOMS[i];
            c.layout = layout;
            leaf_spec x = {.dt = KILN_F32, .ndim = 4, .shape = {2, 3, 11, 9}, .grad = false};
            snprintf(what, sizeof what, "im2col geometry %zu layout %d", i, layout);
            compare(vk, what, 1, &x, build_im2col, &c, false, 1e-6);
            const int64_t *g = c.g;
            int64_t oh = out_len(11, g[0], g[2], g[4], g[6]), ow = out_len(9, g[1], g[3], g[5], g[7]);
            leaf_spec cols = {.dt = KILN_F32, .ndim = 6, .shape = {2, 3, g[0], g[1], oh, ow}, .grad = false};
            if (layout) cols.shape[0] = 3, cols.shape[1] = g[0], cols.shape[2] = g[1], cols.shape[3] = 2;
            snprintf(what, sizeof what, "col2im geometry %zu layout %d", i, layout);
            compare(vk, what, 1, &cols, build_col2im, &c, false, 1e-6);
        }
}

/* More blocks (image planes, or planes x taps) than one grid dim holds
 * (65535 on lavapipe): the kernels spread them over y and z. */
KT_TEST(vk_conv_many_blocks) {
    VULKAN(vk);
    char what[96];
    for (int layout = 0; layout < 2; layout++) {
        conv_arg c = GEOMS[0]; /* 3x3, pad 1: 8 * 1024 * 9 blocks of 2 x 2 */
        c.layout = layout;
        leaf_spec x = {.dt = KILN_F32, .ndim = 4, .shape = {8, 1024, 2, 2}};
        snprintf(what, sizeof what, "im2col of many planes, layout %d", layout);
        compare(vk, what, 1, &x, build_im2col, &c, false, 1e-6);
    }
    pool_arg mp = {2, 1, 1, true};
    leaf_spec x = {.dt = KILN_F32, .ndim = 4, .shape = {2, 33000, 2, 2}, .grad = true};
    compare(vk, "max pool of many planes", 1, &x, build_pool, &mp, true, 1e-6);
}

/* ---- layers ---- */

static kiln_tensor *build_conv(kiln_ctx *ctx, kiln_tensor **in, const void *arg) {
    const conv_arg *c = arg;
    kiln_conv2d_params p = {.stride = {(int)c->g[2], (int)c->g[3]}, .padding = {(int)c->g[4], (int)c->g[5]},
                            .dilation = {(int)c->g[6], (int)c->g[7]}, .groups = (int)c->groups};
    return kiln_conv2d(ctx, in[0], in[1], c->bias ? in[2] : NULL, &p);
}

static kiln_tensor *build_conv_t(kiln_ctx *ctx, kiln_tensor **in, const void *arg) {
    const conv_arg *c = arg;
    kiln_conv2d_params p = {.stride = {(int)c->g[2], (int)c->g[3]}, .padding = {(int)c->g[4], (int)c->g[5]},
                            .dilation = {(int)c->g[6], (int)c->g[7]}, .groups = (int)c->groups,
                            .output_padding = {c->g[2] > 1, 0}};
    return kiln_conv_transpose2d(ctx, in[0], in[1], c->bias ? in[2] : NULL, &p);
}

KT_TEST(vk_conv2d_forward_backward) {
    VULKAN(vk);
    char what[96];
    for (size_t i = 0; i < N_GEOMS; i++)
        for (int groups = 1; groups <= 2; groups++) {
            conv_arg c = GEOMS[i];
            c.groups = groups, c.bias = i % 2 == 0;
            /* x [2, 4, 11, 9], w [6, 4/groups, kh, kw], bias [6] */
            leaf_spec s[3] = {{.dt = KILN_F32, .ndim = 4, .shape = {2, 4, 11, 9}, .grad = true},
                              {.dt = KILN_F32, .ndim = 4, .shape = {6, 4 / groups, c.g[0], c.g[1]}, .grad = true},
                              {.dt = KILN_F32, .ndim = 1, .shape = {6}, .grad = true}};
            snprintf(what, sizeof what, "conv2d geometry %zu groups %d", i, groups);
            compare(vk, what, c.bias ? 3 : 2, s, build_conv, &c, true, 1e-4);
        }
    /* a batch of bigger images: the weight gradient sums over N*OH*OW = 1600
     * (the split-K kernel) */
    conv_arg c = GEOMS[0];
    c.groups = 1, c.bias = true;
    leaf_spec s[3] = {{.dt = KILN_F32, .ndim = 4, .shape = {4, 3, 20, 20}, .grad = true},
                      {.dt = KILN_F32, .ndim = 4, .shape = {5, 3, 3, 3}, .grad = true},
                      {.dt = KILN_F32, .ndim = 1, .shape = {5}, .grad = true}};
    compare(vk, "conv2d of 20 x 20 images", 3, s, build_conv, &c, true, 3e-4);
}

KT_TEST(vk_conv_transpose2d_forward_backward) {
    VULKAN(vk);
    char what[96];
    for (size_t i = 0; i < N_GEOMS; i++) {
        conv_arg c = GEOMS[i];
        c.groups = 2, c.bias = true;
        /* x [2, 4, 6, 5], w [4, 3, kh, kw]: 6 output channels */
        leaf_spec s[3] = {{.dt = KILN_F32, .ndim = 4, .shape = {2, 4, 6, 5}, .grad = true}, {.dt = KILN_F32, .ndim = 4, .shape = {4, 3, c.g[0], c.g[1]}, .grad = true},
                          {.dt = KILN_F32, .ndim = 1, .shape = {6}, .grad = true}};
        snprintf(what, sizeof what, "conv_transpose2d geometry %zu", i);
        compare(vk, what, 3, s, build_conv_t, &c, true, 1e-4);
    }
}

KT_TEST(vk_pool_forward_backward) {
    VULKAN(vk);
    static const pool_arg cases[] = {
        {2, 2, 0, true}, {3, 2, 1, true}, {3, 1, 0, true}, {3, 3, 0, true}, {2, 1, 1, true},
        {2, 2, 0, false}, {3, 2, 1, false},
    };
    char what[96];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        leaf_spec x = {.dt = KILN_F32, .ndim = 4, .shape = {2, 3, 9, 8}, .grad = true};
        snprintf(what, sizeof what, "%s pool k %d stride %d pad %d", cases[i].max ? "max" : "avg", cases[i].k,
                 cases[i].stride, cases[i].pad);
        /* forward alone: the fused max-pool is one IM2COL node */
        if (cases[i].max) compare(vk, what, 1, &x, build_pool, &cases[i], false, 1e-6);
        compare(vk, what, 1, &x, build_pool, &cases[i], true, 1e-5);
        if (cases[i].max) {
            snprintf(what, sizeof what, "max pool with ties k %d stride %d pad %d", cases[i].k, cases[i].stride,
                     cases[i].pad);
            x.ties = true; /* the backward shares gy among equal maxima */
            compare(vk, what, 1, &x, build_pool, &cases[i], true, 1e-5);
            snprintf(what, sizeof what, "max pool with NaNs k %d stride %d pad %d", cases[i].k, cases[i].stride,
                     cases[i].pad);
            x.ties = false, x.nans = true; /* a NaN wins the max; the backward's rule for such windows */
            compare(vk, what, 1, &x, build_pool, &cases[i], true, 1e-5);
            snprintf(what, sizeof what, "max pool of swapped planes k %d stride %d pad %d", cases[i].k,
                     cases[i].stride, cases[i].pad);
            x.nans = false;
            compare(vk, what, 1, &x, build_pool_cn, &cases[i], true, 1e-5);
        }
    }
}
