/* test_conv.c — im2col/col2im, conv2d, conv_transpose2d, max/avg pooling:
 * values and gradients against PyTorch fixtures and naive loops, gradient
 * checks, non-contiguous inputs and the error paths. */
#include "fixture.h"
#include "gradcheck.h"
#include "internal.h" /* the im2col/col2im primitives */
#include "test_nn_util.h"

#include <stdint.h>
#include <string.h>

static const int NHWC_TO_NCHW[4] = {0, 3, 1, 2};

/* Fail unless t has want's shape and values within atol + rtol*|want|. */
static void check_close(const char *what, const kiln_tensor *t, int ndim, const int64_t *shape, const double *want,
                        double atol, double rtol) {
    if (!t || kiln_tensor_ndim(t) != ndim || memcmp(kiln_tensor_shape(t), shape, (size_t)ndim * sizeof *shape)) {
        kt_fail(__FILE__, __LINE__, "%s: missing tensor or wrong shape", what);
        return;
    }
    double *v = nnt_values(t);
    if (!v) {
        kt_fail(__FILE__, __LINE__, "%s: cannot read values: %s", what, kiln_last_error());
        return;
    }
    int64_t worst, n = kiln_tensor_numel(t);
    double e = kt_rel_err(v, want, n, atol, rtol, &worst);
    KT_CHECK(e <= 1, "%s: element %lld is %.10g, want %.10g", what, (long long)worst, v[worst], want[worst]);
    free(v);
}

static void check_fx(const char *what, const kiln_tensor *t, const fx_tensor *ref, double tol) {
    if (!ref) {
        kt_fail(__FILE__, __LINE__, "%s: the fixture lacks this tensor", what);
        return;
    }
    check_close(what, t, ref->ndim, ref->shape, ref->v, tol, tol);
}

/* A leaf of dtype dt holding a fixture tensor; NHWC stores it transposed
 * and returns the NCHW view of that (a non-contiguous input). */
static kiln_tensor *fx_leaf(kiln_ctx *ctx, const fx_tensor *f, kiln_dtype dt, bool grad, bool nhwc) {
    if (!f) return NULL;
    if (!nhwc) {
        kiln_tensor *t = kiln_tensor_new(ctx, dt, f->ndim, f->shape);
        if (!t || kiln_tensor_set_f64(t, f->v, f->n) || (grad && kiln_tensor_set_requires_grad(t, true))) return NULL;
        return t;
    }
    int64_t n = f->shape[0], c = f->shape[1], h = f->shape[2], w = f->shape[3];
    kiln_tensor *t = kiln_new_4d(ctx, dt, n, h, w, c);
    double *v = malloc((size_t)f->n * sizeof *v);
    if (!t || !v) return free(v), NULL;
    for (int64_t i = 0; i < f->n; i++) {
        int64_t jw = i % w, jh = i / w % h, jc = i / (w * h) % c, jn = i / (w * h * c);
        v[((jn * h + jh) * w + jw) * c + jc] = f->v[i];
    }
    kiln_status s = kiln_tensor_set_f64(t, v, f->n);
    free(v);
    return s ? NULL : kiln_permute(ctx, t, NHWC_TO_NCHW);
}

static kiln_conv2d_params fx_conv_params(const fx_case *c) {
    kiln_conv2d_params p = {
        .stride = {(int)fx_param(c, "stride_h", 1), (int)fx_param(c, "stride_w", 1)},
        .padding = {(int)fx_param(c, "pad_h", 0), (int)fx_param(c, "pad_w", 0)},
        .dilation = {(int)fx_param(c, "dilation_h", 1), (int)fx_param(c, "dilation_w", 1)},
        .groups = (int)fx_param(c, "groups", 1),
        .output_padding = {(int)fx_param(c, "output_padding_h", 0), (int)fx_param(c, "output_padding_w", 0)},
    };
    return p;
}

/* Build y from a fixture case (conv or pool), check y and, for contiguous
 * inputs, the gradients of sum(y * gy) against torch's. */
static void run_fixture(const char *file, const char *name, kiln_dtype dt, bool nhwc) {
    char what[96];
    double tol = dt == KILN_F64 ? 1e-10 : 2e-5;
    fx_file *f = fx_load(file);
    KT_REQUIRE(f, "cannot load %s", file);
    const fx_case *c = fx_find(f, name);
    kiln_ctx *ctx = kiln_ctx_new();
    if (!c) {
        kt_fail(__FILE__, __LINE__, "%s has no case %s", file, name);
        goto done;
    }
    bool has_b = fx_param(c, "has_b", 0) != 0, grads = !nhwc;
    kiln_tensor *x = fx_leaf(ctx, fx_tensor_get(c, "x"), dt, grads, nhwc), *w = NULL, *b = NULL, *y;
    if (strstr(name, "pool")) {
        int kh = (int)fx_param(c, "kh", 0), kw = (int)fx_param(c, "kw", 0);
        int stride = (int)fx_param(c, "stride", 0), pad = (int)fx_param(c, "padding", 0);
        y = strstr(name, "max") ? kiln_max_pool2d(ctx, x, kh, kw, stride, pad) : kiln_avg_pool2d(ctx, x, kh, kw, stride, pad);
    } else {
        kiln_conv2d_params p = fx_conv_params(c);
        w = fx_leaf(ctx, fx_tensor_get(c, "w"), dt, grads, false);
        if (has_b) b = fx_leaf(ctx, fx_tensor_get(c, "b"), dt, grads, false);
        y = strstr(name, "transpose") ? kiln_conv_transpose2d(ctx, x, w, b, &p) : kiln_conv2d(ctx, x, w, b, &p);
    }
    kiln_tensor *gy = fx_leaf(ctx, fx_tensor_get(c, "gy"), dt, false, false);
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, y, gy));
    kiln_graph *g = kiln_graph_new(ctx);
    if (!loss || kiln_graph_add(g, y) || kiln_graph_add(g, loss) || (grads && kiln_graph_backward(g, loss)) ||
        kiln_graph_compute(g)) {
        kt_fail(__FILE__, __LINE__, "%s: %s", name, kiln_last_error());
        goto done;
    }
    snprintf(what, sizeof what, "%s %s%s y", name, kiln_dtype_name(dt), nhwc ? " nhwc" : "");
    check_fx(what, y, fx_tensor_get(c, "y"), tol);
    if (!grads) goto done;
    kiln_tensor *leaves[3] = {x, w, b};
    const char *gnames[3] = {"gx", "gw", "gb"};
    for (int i = 0; i < 3; i++) {
        if (!leaves[i]) continue;
        snprintf(what, sizeof what, "%s %s %s", name, kiln_dtype_name(dt), gnames[i]);
        check_fx(what, kiln_tensor_grad(leaves[i]), fx_tensor_get(c, gnames[i]), tol);
    }
done:
    kiln_ctx_free(ctx);
    fx_free(f);
}

KT_TEST(conv_conv2d_fixture) {
    const char *cases[] = {"conv2d", "conv2d_grouped", "conv_transpose2d", "conv_transpose2d_grouped"};
    for (int i = 0; i < 4; i++) {
        run_fixture("tests/fixtures/conv.txt", cases[i], KILN_F64, false);
        run_fixture("tests/fixtures/conv.txt", cases[i], KILN_F32, false);
        run_fixture("tests/fixtures/conv.txt", cases[i], KILN_F64, true);
    }
}

KT_TEST(conv_pool_fixture) {
    const char *cases[] = {"max_pool2d", "max_pool2d_k2", "avg_pool2d", "avg_pool2d_k2"};
    for (int i = 0; i < 4; i++) {
        run_fixture("tests/fixtures/pool.txt", cases[i], KILN_F64, false);
        run_fixture("tests/fixtures/pool.txt", cases[i], KILN_F32, false);
        run_fixture("tests/fixtures/pool.txt", cases[i], KILN_F32, true);
    }
}

/* ---- naive references ---- */

typedef struct conv_case {
    int64_t n, c, h, w, o, kh, kw;
    kiln_conv2d_params p;
    bool bias, transpose;
} conv_case;

static int64_t dflt(int v, int d) { return v ? v : d; }

/* Direct loops over every output (conv) or input (transposed) element. */
static double *conv_reference(const conv_case *cc, const double *x, const double *w, const double *b, int64_t *oh,
                              int64_t *ow) {
    int64_t sh = dflt(cc->p.stride[0], 1), sw = dflt(cc->p.stride[1], 1), ph = cc->p.padding[0], pw = cc->p.padding[1];
    int64_t dh = dflt(cc->p.dilation[0], 1), dw = dflt(cc->p.dilation[1], 1), g = dflt(cc->p.groups, 1);
    int64_t cg = cc->c / g, og = cc->o / g;
    if (cc->transpose) {
        *oh = (cc->h - 1) * sh - 2 * ph + dh * (cc->kh - 1) + cc->p.output_padding[0] + 1;
        *ow = (cc->w - 1) * sw - 2 * pw + dw * (cc->kw - 1) + cc->p.output_padding[1] + 1;
    } else {
        *oh = (cc->h + 2 * ph - dh * (cc->kh - 1) - 1) / sh + 1;
        *ow = (cc->w + 2 * pw - dw * (cc->kw - 1) - 1) / sw + 1;
    }
    double *y = calloc((size_t)(cc->n * cc->o * *oh * *ow), sizeof *y);
    if (!y) return NULL;
    for (int64_t n = 0; n < cc->n; n++)
        for (int64_t o = 0; o < cc->o; o++)
            for (int64_t ic = 0; ic < cg; ic++)
                for (int64_t ki = 0; ki < cc->kh; ki++)
                    for (int64_t kj = 0; kj < cc->kw; kj++) {
                        int64_t c = o / og * cg + ic;
                        double wv = cc->transpose ? w[((c * og + o % og) * cc->kh + ki) * cc->kw + kj]
                                                  : w[((o * cg + ic) * cc->kh + ki) * cc->kw + kj];
                        int64_t gh = cc->transpose ? cc->h : *oh, gw = cc->transpose ? cc->w : *ow;
                        int64_t ih = cc->transpose ? *oh : cc->h, iw = cc->transpose ? *ow : cc->w;
                        for (int64_t i = 0; i < gh; i++)
                            for (int64_t j = 0; j < gw; j++) {
                                int64_t ii = i * sh - ph + ki * dh, jj = j * sw - pw + kj * dw;
                                if (ii < 0 || ii >= ih || jj < 0 || jj >= iw) continue;
                                if (cc->transpose)
                                    y[((n * cc->o + o) * *oh + ii) * *ow + jj] +=
                                        x[((n * cc->c + c) * cc->h + i) * cc->w + j] * wv;
                                else
                                    y[((n * cc->o + o) * *oh + i) * *ow + j] +=
                                        x[((n * cc->c + c) * cc->h + ii) * cc->w + jj] * wv;
                            }
                    }
    for (int64_t i = 0; b && i < cc->n * cc->o * *oh * *ow; i++) y[i] += b[i / (*oh * *ow) % cc->o];
    return y;
}

static void run_reference(const conv_case *cc, kiln_dtype dt, uint64_t seed) {
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t g = dflt(cc->p.groups, 1);
    kiln_tensor *x = kiln_new_4d(ctx, dt, cc->n, cc->c, cc->h, cc->w);
    kiln_tensor *w = cc->transpose ? kiln_new_4d(ctx, dt, cc->c, cc->o / g, cc->kh, cc->kw)
                                   : kiln_new_4d(ctx, dt, cc->o, cc->c / g, cc->kh, cc->kw);
    kiln_tensor *b = cc->bias ? kiln_new_1d(ctx, dt, cc->o) : NULL;
    KT_NOTNULL(x && w && (b || !cc->bias));
    KT_OK(kiln_tensor_fill_uniform(x, seed, -1, 1));
    KT_OK(kiln_tensor_fill_uniform(w, seed + 1, -1, 1));
    if (b) KT_OK(kiln_tensor_fill_uniform(b, seed + 2, -1, 1));
    kiln_tensor *y = cc->transpose ? kiln_conv_transpose2d(ctx, x, w, b, &cc->p) : kiln_conv2d(ctx, x, w, b, &cc->p);
    kiln_graph *gr = kiln_graph_new(ctx);
    KT_NOTNULL(y);
    KT_OK(kiln_graph_add(gr, y));
    KT_OK(kiln_graph_compute(gr));
    double *xv = nnt_values(x), *wv = nnt_values(w), *bv = b ? nnt_values(b) : NULL;
    int64_t oh, ow;
    double *want = conv_reference(cc, xv, wv, bv, &oh, &ow);
    char what[96];
    snprintf(what, sizeof what, "%s %s seed %llu", cc->transpose ? "conv_transpose2d" : "conv2d", kiln_dtype_name(dt),
             (unsigned long long)seed);
    double tol = dt == KILN_F64 ? 1e-11 : 1e-4;
    check_close(what, y, 4, (int64_t[]){cc->n, cc->o, oh, ow}, want, tol, tol);
    free(xv), free(wv), free(bv), free(want);
    kiln_ctx_free(ctx);
}

/* Every parameter combination the fixtures do not cover, and shapes big
 * enough to run the kernels' threaded path. */
KT_TEST(conv_reference_values) {
    const conv_case cases[] = {
        {2, 3, 7, 6, 4, 3, 2, {{2, 1}, {1, 2}, {1, 2}, 1, {0, 0}}, true, false},
        {1, 6, 5, 8, 6, 2, 3, {{1, 3}, {0, 1}, {2, 1}, 3, {0, 0}}, false, false},
        {2, 4, 6, 6, 4, 3, 3, {{0, 0}, {1, 1}, {0, 0}, 4, {0, 0}}, true, false}, /* depthwise, defaults */
        {2, 8, 20, 20, 6, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 2, {0, 0}}, true, false}, /* threaded */
        {2, 3, 4, 5, 4, 3, 3, {{2, 2}, {1, 0}, {1, 1}, 1, {1, 1}}, true, true},
        {1, 4, 3, 4, 6, 2, 3, {{1, 2}, {0, 1}, {2, 1}, 2, {1, 0}}, false, true}, /* output_padding < dilation */
        {2, 6, 16, 16, 8, 3, 3, {{2, 2}, {1, 1}, {1, 1}, 2, {1, 1}}, true, true}, /* threaded */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        run_reference(&cases[i], KILN_F64, 10 + i);
        run_reference(&cases[i], KILN_F32, 20 + i);
    }
}

/* im2col against direct indexing, and col2im as its adjoint:
 * <im2col(x), c> == <x, col2im(c)> on random geometries. */
KT_TEST(conv_im2col_col2im_values) {
    uint64_t s = 1;
    for (int trial = 0; trial < 60; trial++) {
        /* n, c, h, w, then kh, kw, sh, sw, ph, pw, dh, dw, drawn in order */
        const int64_t lo[12] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1}, hi[12] = {2, 3, 7, 7, 3, 3, 3, 3, 2, 2, 2, 2};
        int64_t r[12];
        for (int i = 0; i < 12; i++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            r[i] = lo[i] + (int64_t)(s >> 33) % (hi[i] - lo[i] + 1);
        }
        int64_t n = r[0], c = r[1], h = r[2], w = r[3], *g = r + 4;
        int64_t sh = h + 2 * g[4] - g[6] * (g[0] - 1) - 1, sw = w + 2 * g[5] - g[7] * (g[1] - 1) - 1;
        if (sh < 0 || sw < 0) continue;
        int64_t oh = sh / g[2] + 1, ow = sw / g[3] + 1;
        kiln_dtype dt = trial % 2 ? KILN_F64 : KILN_F32;
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *x = kiln_new_4d(ctx, dt, n, c, h, w);
        kiln_tensor *cols = kiln_tensor_new(ctx, dt, 6, (int64_t[]){n, c, g[0], g[1], oh, ow});
        KT_NOTNULL(x && cols);
        KT_OK(kiln_tensor_fill_uniform(x, (uint64_t)trial, -1, 1));
        KT_OK(kiln_tensor_fill_uniform(cols, (uint64_t)trial + 1000, -1, 1));
        kiln_tensor *a = kiln__im2col(ctx, x, g, oh, ow, -5.0), *b = kiln__col2im(ctx, cols, g, h, w);
        /* the [C, kh, kw, N, OH, OW] layout: the same taps, the same image */
        static const int TO_CN[6] = {1, 2, 3, 0, 4, 5}, FROM_CN[6] = {3, 0, 1, 2, 4, 5};
        kiln_tensor *a_cn = kiln_contiguous(ctx, kiln_permute(ctx, kiln__im2col_cn(ctx, x, g, oh, ow, -5.0), FROM_CN));
        kiln_tensor *b_cn = kiln__col2im_cn(ctx, kiln_permute(ctx, cols, TO_CN), g, h, w);
        kiln_graph *gr = kiln_graph_new(ctx);
        KT_NOTNULL(a && b && a_cn && b_cn);
        KT_OK(kiln_graph_add(gr, a));
        KT_OK(kiln_graph_add(gr, b));
        KT_OK(kiln_graph_add(gr, a_cn));
        KT_OK(kiln_graph_add(gr, b_cn));
        KT_OK(kiln_graph_compute(gr));
        double *xv = nnt_values(x), *cv = nnt_values(cols), *av = nnt_values(a), *bv = nnt_values(b), dot_cols = 0, dot_img = 0;
        double *acv = nnt_values(a_cn), *bcv = nnt_values(b_cn);
        int64_t diff_cn = 0;
        for (int64_t i = 0; i < kiln_tensor_numel(cols); i++) diff_cn += acv[i] != av[i];
        for (int64_t i = 0; i < n * c * h * w; i++) diff_cn += bcv[i] != bv[i];
        KT_CHECK(diff_cn == 0, "trial %d: %lld values of the CN layout differ", trial, (long long)diff_cn);
        free(acv), free(bcv);
        int64_t nc = kiln_tensor_numel(cols), bad = 0;
        for (int64_t i = 0; i < nc; i++) {
            int64_t oj = i % ow, oi = i / ow % oh, kj = i / (ow * oh) % g[1], ki = i / (ow * oh * g[1]) % g[0];
            int64_t plane = i / (ow * oh * g[1] * g[0]);
            int64_t ii = oi * g[2] - g[4] + ki * g[6], jj = oj * g[3] - g[5] + kj * g[7];
            bool in = ii >= 0 && ii < h && jj >= 0 && jj < w;
            double want = in ? xv[(plane * h + ii) * w + jj] : -5.0;
            bad += av[i] != want;
            if (in) dot_cols += want * cv[i];
        }
        for (int64_t i = 0; i < n * c * h * w; i++) dot_img += xv[i] * bv[i];
        KT_CHECK(bad == 0, "trial %d: %lld im2col values differ", trial, (long long)bad);
        double tol = dt == KILN_F64 ? 1e-12 : 1e-6;
        KT_CHECK(fabs(dot_cols - dot_img) <= tol * (1 + fabs(dot_cols)), "trial %d: adjoint %.10g vs %.10g", trial,
                 dot_cols, dot_img);
        free(xv), free(cv), free(av), free(bv);
        kiln_ctx_free(ctx);
    }
}

/* ---- gradient checks ---- */

typedef struct grad_case {
    kiln_conv2d_params p;
    bool transpose, nhwc; /* nhwc: in[0] is [N, H, W, C], permuted into NCHW */
    int pool;             /* 1 max, 2 avg */
    int kh, kw, stride, padding;
} grad_case;

static kiln_tensor *build_layer(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    const grad_case *gc = arg;
    kiln_tensor *x = gc->nhwc ? kiln_permute(ctx, in[0], NHWC_TO_NCHW) : in[0];
    if (gc->pool == 1) return kiln_max_pool2d(ctx, x, gc->kh, gc->kw, gc->stride, gc->padding);
    if (gc->pool == 2) return kiln_avg_pool2d(ctx, x, gc->kh, gc->kw, gc->stride, gc->padding);
    return gc->transpose ? kiln_conv_transpose2d(ctx, x, in[1], in[2], &gc->p) : kiln_conv2d(ctx, x, in[1], in[2], &gc->p);
}

KT_TEST(conv_grad_conv2d) {
    grad_case strided = {.p = {.stride = {2, 1}, .padding = {1, 2}, .dilation = {1, 2}}};
    gc_input in[3] = {GC_IN(4, 2, 3, 6, 5), GC_IN(4, 4, 3, 3, 2), GC_IN(1, 4)};
    gc_check("conv2d stride/padding/dilation/bias", build_layer, &strided, 3, in, 1);
    grad_case grouped = {.p = {.padding = {1, 1}, .groups = 2}};
    gc_input ing[3] = {GC_IN(4, 1, 4, 5, 4), GC_IN(4, 6, 2, 3, 3), GC_IN(1, 6)};
    gc_check("conv2d groups", build_layer, &grouped, 3, ing, 2);
    grad_case nhwc = {.p = {.stride = {1, 2}, .groups = 3}, .nhwc = true};
    gc_input inn[3] = {GC_IN(4, 2, 5, 6, 3), GC_IN(4, 3, 1, 2, 2), GC_IN(1, 3)};
    gc_check("conv2d depthwise, permuted x", build_layer, &nhwc, 3, inn, 3);
}

KT_TEST(conv_grad_conv_transpose2d) {
    grad_case strided = {.p = {.stride = {2, 2}, .padding = {1, 0}, .output_padding = {1, 1}}, .transpose = true};
    gc_input in[3] = {GC_IN(4, 2, 3, 4, 3), GC_IN(4, 3, 2, 3, 3), GC_IN(1, 2)};
    gc_check("conv_transpose2d stride/output_padding/bias", build_layer, &strided, 3, in, 4);
    grad_case grouped = {.p = {.stride = {2, 1}, .dilation = {1, 2}, .groups = 2, .output_padding = {0, 1}},
                         .transpose = true, .nhwc = true};
    gc_input ing[3] = {GC_IN(4, 1, 3, 4, 4), GC_IN(4, 4, 2, 2, 3), GC_IN(1, 4)};
    gc_check("conv_transpose2d groups/dilation, permuted x", build_layer, &grouped, 3, ing, 5);
}

KT_TEST(conv_grad_pool) {
    grad_case cases[] = {
        {.pool = 1, .kh = 3, .kw = 3, .stride = 2, .padding = 1},
        {.pool = 1, .kh = 2, .kw = 3, .stride = 0, .padding = 0, .nhwc = true},
        {.pool = 2, .kh = 3, .kw = 3, .stride = 2, .padding = 1},
        {.pool = 2, .kh = 2, .kw = 2, .stride = 1, .padding = 1, .nhwc = true},
        {.pool = 1, .kh = 3, .kw = 2, .stride = 1, .padding = 0}, /* overlapping windows, no padding */
        {.pool = 1, .kh = 2, .kw = 2, .stride = 2, .padding = 0}, /* windows tile all but an edge */
    };
    for (int i = 0; i < 6; i++) {
        char what[64];
        snprintf(what, sizeof what, "%s_pool2d case %d", cases[i].pool == 1 ? "max" : "avg", i);
        gc_input in = cases[i].nhwc ? GC_IN(4, 2, 5, 6, 3) : GC_IN(4, 2, 3, 5, 6);
        gc_check(what, build_layer, &cases[i], 1, &in, 10 + (uint64_t)i);
    }
}

/* The fused max-pool's backward is itself differentiable (in gy): the
 * gradient of d<pool(x), gy>/dx with respect to x and gy. */
static kiln_tensor *build_pool_grad(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    const grad_case *gc = arg;
    kiln_tensor *y = kiln_max_pool2d(ctx, in[0], gc->kh, gc->kw, gc->stride, gc->padding), *gx = NULL;
    if (!y || kiln__vjp(ctx, y, in[1], 1, &in[0], &gx)) return NULL;
    return gx;
}

KT_TEST(conv_max_pool_second_order) {
    grad_case cases[] = {{.kh = 2, .kw = 2, .stride = 2}, {.kh = 3, .kw = 3, .stride = 2, .padding = 1},
                         {.kh = 2, .kw = 3, .stride = 1}};
    for (int i = 0; i < 3; i++) {
        gc_input in[2] = {GC_IN(4, 2, 2, 5, 6), GC_IN(4, 2, 2, 0, 0)};
        int64_t oh = (5 + 2 * cases[i].padding - cases[i].kh) / cases[i].stride + 1;
        int64_t ow = (6 + 2 * cases[i].padding - cases[i].kw) / cases[i].stride + 1;
        in[1].shape[2] = oh, in[1].shape[3] = ow;
        char what[64];
        snprintf(what, sizeof what, "max_pool2d backward case %d", i);
        gc_check(what, build_pool_grad, &cases[i], 2, in, 20 + (uint64_t)i);
    }
}

/* Tied maxima share the window's gradient evenly (torch.amax's rule), on
 * the tiled, overlapping and padded paths. */
KT_TEST(conv_max_pool_ties_share) {
    const struct { int k, stride, pad; double want[16]; } cases[] = {
        {2, 2, 0, {0.25, 0.25, 0.5, 0.5, 0.25, 0.25, 0.5, 0.5, 0.75, 0.75, 1, 1, 0.75, 0.75, 1, 1}},
        {2, 1, 0, {0.25, 0.75, 1.25, 0.75, 1.25, 3, 4, 2.25, 2.75, 6, 7, 3.75, 1.75, 3.75, 4.25, 2.25}},
        {3, 2, 1, {1 / 4., 1 / 4. + 2 / 6., 2 / 6., 2 / 6., 1 / 4. + 3 / 6., 1 / 4. + 2 / 6. + 3 / 6. + 4 / 9., 2 / 6. + 4 / 9.,
                   2 / 6. + 4 / 9., 3 / 6., 3 / 6. + 4 / 9., 4 / 9., 4 / 9., 3 / 6., 3 / 6. + 4 / 9., 4 / 9., 4 / 9.}},
    };
    for (int i = 0; i < 3; i++) {
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *x = kiln_new_4d(ctx, KILN_F32, 1, 1, 4, 4);
        KT_OK(kiln_tensor_fill(x, 2.0)); /* every tap ties */
        KT_OK(kiln_tensor_set_requires_grad(x, true));
        kiln_tensor *y = kiln_max_pool2d(ctx, x, cases[i].k, cases[i].k, cases[i].stride, cases[i].pad);
        KT_NOTNULL(y);
        kiln_tensor *gy = kiln_tensor_new(ctx, KILN_F32, 4, kiln_tensor_shape(y)), *gx = NULL;
        int64_t n = kiln_tensor_numel(y);
        float *gv = kiln_tensor_data(gy);
        for (int64_t j = 0; j < n; j++) gv[j] = (float)(j + 1);
        KT_OK(kiln__vjp(ctx, y, gy, 1, &x, &gx));
        kiln_graph *g = kiln_graph_new(ctx);
        KT_OK(kiln_graph_add(g, gx));
        KT_OK(kiln_graph_compute(g));
        double got[16];
        KT_OK(kiln_tensor_get_f64(gx, got, 16));
        for (int j = 0; j < 16; j++)
            KT_CHECK(fabs(got[j] - cases[i].want[j]) < 1e-6, "case %d pixel %d: %g, want %g", i, j, got[j],
                     cases[i].want[j]);
        kiln_ctx_free(ctx);
    }
}

typedef struct cols_case {
    int64_t g[8], oh, ow, h, w;
    bool col2im, cn; /* cn: the [C, kh, kw, N, OH, OW] layout */
    double pad;
} cols_case;

static kiln_tensor *build_cols(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    const cols_case *c = arg;
    if (c->col2im) return (c->cn ? kiln__col2im_cn : kiln__col2im)(ctx, in[0], c->g, c->h, c->w);
    /* through a transpose so im2col copies a non-contiguous input */
    return (c->cn ? kiln__im2col_cn : kiln__im2col)(ctx, kiln_transpose(ctx, in[0], 2, 3), c->g, c->oh, c->ow, c->pad);
}

KT_TEST(conv_grad_im2col_col2im) {
    cols_case im = {.g = {3, 2, 2, 1, 1, 1, 1, 2}, .oh = 3, .ow = 4, .pad = 0.5};
    gc_input in = GC_IN(4, 2, 3, 4, 5); /* im2col sees [2, 3, 5, 4] */
    gc_check("im2col", build_cols, &im, 1, &in, 20);
    /* a grid bigger than the image needs (a transposed conv's output_padding) */
    cols_case c2 = {.g = {2, 3, 1, 2, 0, 1, 2, 1}, .oh = 5, .ow = 3, .h = 5, .w = 4, .col2im = true};
    gc_input inc = GC_IN(6, 2, 2, 2, 3, 5, 3);
    gc_check("col2im", build_cols, &c2, 1, &inc, 21);
    im.cn = c2.cn = true;
    gc_check("im2col cn", build_cols, &im, 1, &in, 22);
    gc_input inc_cn = GC_IN(6, 2, 2, 3, 2, 5, 3); /* [C, kh, kw, N, OH, OW] */
    gc_check("col2im cn", build_cols, &c2, 1, &inc_cn, 23);
}

/* ---- errors ---- */

#define EXPECT_ERR(expr, status, who)                                                                        \
    do {                                                                                                     \
        kiln_clear_error();                                                                                  \
        KT_CHECK(!(expr), "%s succeeded", #expr);                                                            \
        KT_CHECK(kiln_last_status() == (status), "%s: status %s (%s)", #expr,                                \
                 kiln_status_name(kiln_last_status()), kiln_last_error());                                   \
        KT_CHECK(strstr(kiln_last_error(), who), "%s: message '%s' does not name %s", #expr, kiln_last_error(), who); \
    } while (0)

KT_TEST(conv_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_4d(ctx, KILN_F32, 2, 4, 6, 6), *x3 = kiln_new_3d(ctx, KILN_F32, 4, 6, 6);
    kiln_tensor *w = kiln_new_4d(ctx, KILN_F32, 6, 4, 3, 3), *wg = kiln_new_4d(ctx, KILN_F32, 6, 2, 3, 3);
    kiln_tensor *xi = kiln_new_4d(ctx, KILN_I32, 2, 4, 6, 6), *w64 = kiln_new_4d(ctx, KILN_F64, 6, 4, 3, 3);
    kiln_tensor *b5 = kiln_new_1d(ctx, KILN_F32, 5), *big = kiln_new_4d(ctx, KILN_F32, 6, 4, 7, 3);
    kiln_tensor *wt = kiln_new_4d(ctx, KILN_F32, 4, 3, 3, 3), *w3 = kiln_new_3d(ctx, KILN_F32, 6, 4, 3);
    KT_NOTNULL(x && x3 && w && wg && xi && w64 && b5 && big && wt && w3);
    const char *c2 = "kiln_conv2d", *ct = "kiln_conv_transpose2d";
    EXPECT_ERR(kiln_conv2d(ctx, x3, w, NULL, NULL), KILN_ERR_SHAPE, c2);
    KT_CHECK(strstr(kiln_last_error(), "[4, 6, 6]"), "message names the shape: %s", kiln_last_error());
    EXPECT_ERR(kiln_conv2d(ctx, x, w3, NULL, NULL), KILN_ERR_SHAPE, c2);
    EXPECT_ERR(kiln_conv2d(ctx, xi, w, NULL, NULL), KILN_ERR_DTYPE, c2);
    EXPECT_ERR(kiln_conv2d(ctx, x, w64, NULL, NULL), KILN_ERR_DTYPE, c2);
    EXPECT_ERR(kiln_conv2d(ctx, x, wg, NULL, NULL), KILN_ERR_SHAPE, c2); /* w.shape[1] != C */
    kiln_conv2d_params g3 = {.groups = 3}, g4 = {.groups = 4}, neg = {.stride = {-1, 1}}, op = {.output_padding = {1, 0}};
    EXPECT_ERR(kiln_conv2d(ctx, x, wg, NULL, &g3), KILN_ERR_SHAPE, c2);             /* C % groups */
    EXPECT_ERR(kiln_conv2d(ctx, x, kiln_new_4d(ctx, KILN_F32, 6, 1, 3, 3), NULL, &g4), KILN_ERR_SHAPE, c2); /* O % groups */
    EXPECT_ERR(kiln_conv2d(ctx, x, w, b5, NULL), KILN_ERR_SHAPE, c2);
    EXPECT_ERR(kiln_conv2d(ctx, x, big, NULL, NULL), KILN_ERR_SHAPE, c2);           /* kernel taller than x */
    EXPECT_ERR(kiln_conv2d(ctx, x, w, NULL, &neg), KILN_ERR_ARG, c2);
    EXPECT_ERR(kiln_conv2d(ctx, x, w, NULL, &op), KILN_ERR_ARG, c2);

    EXPECT_ERR(kiln_conv_transpose2d(ctx, x3, wt, NULL, NULL), KILN_ERR_SHAPE, ct);
    EXPECT_ERR(kiln_conv_transpose2d(ctx, x, w, NULL, NULL), KILN_ERR_SHAPE, ct);   /* w.shape[0] != C */
    EXPECT_ERR(kiln_conv_transpose2d(ctx, x, wt, NULL, &g3), KILN_ERR_SHAPE, ct);   /* C % groups */
    EXPECT_ERR(kiln_conv_transpose2d(ctx, x, wt, b5, NULL), KILN_ERR_SHAPE, ct);
    kiln_conv2d_params bad_op = {.stride = {2, 2}, .output_padding = {2, 0}}, pad = {.padding = {5, 0}};
    EXPECT_ERR(kiln_conv_transpose2d(ctx, x, wt, NULL, &bad_op), KILN_ERR_ARG, ct);
    EXPECT_ERR(kiln_conv_transpose2d(ctx, x, wt, NULL, &pad), KILN_ERR_SHAPE, ct);  /* empty output */
    EXPECT_ERR(kiln_conv_transpose2d(ctx, xi, wt, NULL, NULL), KILN_ERR_DTYPE, ct);

    const char *mp = "kiln_max_pool2d", *ap = "kiln_avg_pool2d";
    EXPECT_ERR(kiln_max_pool2d(ctx, x3, 2, 2, 0, 0), KILN_ERR_SHAPE, mp);
    EXPECT_ERR(kiln_max_pool2d(ctx, x, 3, 3, 1, 2), KILN_ERR_ARG, mp);              /* padding > kernel/2 */
    EXPECT_ERR(kiln_max_pool2d(ctx, x, 0, 2, 1, 0), KILN_ERR_ARG, mp);
    EXPECT_ERR(kiln_max_pool2d(ctx, x, 7, 2, 1, 0), KILN_ERR_SHAPE, mp);            /* kernel taller than x */
    EXPECT_ERR(kiln_avg_pool2d(ctx, xi, 2, 2, 0, 0), KILN_ERR_DTYPE, ap);
    EXPECT_ERR(kiln_avg_pool2d(ctx, x, 2, 2, -1, 0), KILN_ERR_ARG, ap);
    EXPECT_ERR(kiln_avg_pool2d(ctx, x, 4, 2, 0, 2), KILN_ERR_ARG, ap);              /* padding > kw/2 */

    /* a NULL source keeps the error that made it */
    kiln_clear_error();
    KT_CHECK(!kiln_conv2d(ctx, NULL, w, NULL, NULL) && !kiln_conv_transpose2d(ctx, x, NULL, NULL, NULL) &&
                 !kiln_max_pool2d(ctx, NULL, 2, 2, 0, 0) && !kiln_avg_pool2d(ctx, NULL, 2, 2, 0, 0),
             "NULL sources give NULL");
    KT_CHECK(kiln_last_status() == KILN_OK, "a NULL source set an error: %s", kiln_last_error());
    kiln_ctx_free(ctx);
}

/* The defaults: NULL params and all-zero params are stride 1, no padding,
 * dilation 1, one group; pooling's stride 0 is the kernel size. */
KT_TEST(conv_default_params) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_4d(ctx, KILN_F64, 1, 2, 5, 4), *w = kiln_new_4d(ctx, KILN_F64, 3, 2, 2, 2);
    KT_NOTNULL(x && w);
    KT_OK(kiln_tensor_fill_uniform(x, 1, -1, 1));
    KT_OK(kiln_tensor_fill_uniform(w, 2, -1, 1));
    kiln_conv2d_params zero = {0}, ones = {.stride = {1, 1}, .dilation = {1, 1}, .groups = 1};
    kiln_tensor *ys[3] = {kiln_conv2d(ctx, x, w, NULL, NULL), kiln_conv2d(ctx, x, w, NULL, &zero),
                          kiln_conv2d(ctx, x, w, NULL, &ones)};
    kiln_tensor *p0 = kiln_max_pool2d(ctx, x, 2, 2, 0, 0), *p2 = kiln_max_pool2d(ctx, x, 2, 2, 2, 0);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_NOTNULL(ys[0] && ys[1] && ys[2] && p0 && p2);
    kiln_tensor *outs[] = {ys[0], ys[1], ys[2], p0, p2};
    for (int i = 0; i < 5; i++) KT_OK(kiln_graph_add(g, outs[i]));
    KT_OK(kiln_graph_compute(g));
    KT_CHECK(kiln_tensor_dim(ys[0], 2) == 4 && kiln_tensor_dim(ys[0], 3) == 3, "conv output shape");
    KT_CHECK(kiln_tensor_dim(p0, 2) == 2 && kiln_tensor_dim(p0, 3) == 2, "pool output shape");
    double *a = nnt_values(ys[2]), *pv = nnt_values(p2);
    check_close("conv2d NULL params", ys[0], 4, kiln_tensor_shape(ys[2]), a, 1e-300, 0);
    check_close("conv2d zero params", ys[1], 4, kiln_tensor_shape(ys[2]), a, 1e-300, 0);
    check_close("max_pool2d stride 0", p0, 4, kiln_tensor_shape(p2), pv, 1e-300, 0);
    free(a), free(pv);
    kiln_ctx_free(ctx);
}

/* The 2x2 max-pool's one-pass path: a NaN at any of a window's four taps
 * wins, as in kiln_max; other windows keep their max. */
KT_TEST(conv_max_pool_2x2_nan) {
    for (int at = 0; at < 4; at++) {
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *x = kiln_new_4d(ctx, KILN_F32, 1, 1, 2, 4);
        KT_NOTNULL(x);
        double v[8] = {1, 5, 2, 3, -1, 4, 7, 0};
        v[(at / 2) * 4 + at % 2] = NAN;
        KT_OK(kiln_tensor_set_f64(x, v, 8));
        kiln_tensor *y = kiln_max_pool2d(ctx, x, 2, 2, 0, 0);
        kiln_graph *g = kiln_graph_new(ctx);
        KT_OK(kiln_graph_add(g, y));
        KT_OK(kiln_graph_compute(g));
        double got[2];
        KT_OK(kiln_tensor_get_f64(y, got, 2));
        KT_CHECK(isnan(got[0]) && got[1] == 7, "NaN at tap %d: %g %g", at, got[0], got[1]);
        kiln_ctx_free(ctx);
    }
}
