/* test_nn_fused.c — the fused backward kernels (SOFTMAX_GRAD,
 * LAYER_NORM_GRAD, RMS_NORM_GRAD, CROSS_ENTROPY_GRAD) and the f32 SIMD row
 * primitives under them: every SIMD level the CPU has against the scalar
 * table, on odd row lengths; f32 against f64 on a threaded size; and
 * second derivatives of every input (x, w, b and gy) in f64. */
#include "internal.h"
#include "kt_simd.h"
#include "test_nn_util.h"
#include "../backends/cpu/cpu_features.h"
#include "../backends/cpu/nn_vec.h"

typedef enum { FO_SOFTMAX, FO_SOFTMAX_CAUSAL, FO_LOG_SOFTMAX, FO_LOG_SOFTMAX_CAUSAL, FO_LAYER_NORM, FO_LAYER_NORM_PLAIN,
               FO_RMS_NORM, FO_RMS_NORM_PLAIN, FO_CROSS_ENTROPY, FO_COUNT } fused_op;

static const char *fo_name[FO_COUNT] = {"softmax", "softmax causal", "log_softmax", "log_softmax causal",
                                        "layer_norm", "layer_norm plain", "rms_norm", "rms_norm plain",
                                        "cross_entropy"};

/* Forward and backward of op on x [rows, n] (f32 or f64, fixed seeds):
 * y, then the gradients of sum(y * gy) for x [, w, b], all as doubles in
 * one malloc'd array (length in *len); NULL after a recorded failure. */
/* In run_fused: a failing call records the error and gives up. */
#define FUSED_OK(failed)                                                                    \
    do {                                                                                    \
        if (failed) {                                                                       \
            kt_fail(__FILE__, __LINE__, "%s: %s", #failed, kiln_last_error());              \
            return NULL;                                                                    \
        }                                                                                   \
    } while (0)

static double *run_fused(fused_op op, int64_t rows, int64_t n, kiln_dtype dt, int64_t *len) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, dt, rows, n), *w = kiln_new_1d(ctx, dt, n), *b = kiln_new_1d(ctx, dt, n);
    kiln_tensor *lab = kiln_tensor_new(ctx, KILN_I32, 1, &rows);
    FUSED_OK(!(x && w && b && lab));
    FUSED_OK(kiln_tensor_fill_uniform(x, 3 + (uint64_t)n, op == FO_LAYER_NORM ? 97.0 : -4.0, op == FO_LAYER_NORM ? 103.0 : 4.0));
    FUSED_OK(kiln_tensor_fill_uniform(w, 4, 0.5, 1.5));
    FUSED_OK(kiln_tensor_fill_uniform(b, 5, -1, 1));
    int32_t *lv = kiln_tensor_data(lab);
    for (int64_t r = 0; r < rows; r++) lv[r] = r % 4 == 3 ? -100 : (int32_t)((r * 7) % n);
    kiln_tensor *targets[3] = {x, w, b}, *grads[3] = {0}, *y = NULL;
    int nt = op == FO_LAYER_NORM ? 3 : op == FO_RMS_NORM ? 2 : 1;
    for (int i = 0; i < nt; i++) FUSED_OK(kiln_tensor_set_requires_grad(targets[i], true));
    switch (op) {
    case FO_SOFTMAX: y = kiln_softmax(ctx, x, false); break;
    case FO_SOFTMAX_CAUSAL: y = kiln_softmax(ctx, x, true); break;
    case FO_LOG_SOFTMAX: y = kiln_log_softmax(ctx, x, false); break;
    case FO_LOG_SOFTMAX_CAUSAL: y = kiln_log_softmax(ctx, x, true); break;
    case FO_LAYER_NORM: y = kiln_layer_norm(ctx, x, w, b, 1e-5); break;
    case FO_LAYER_NORM_PLAIN: y = kiln_layer_norm(ctx, x, NULL, NULL, 1e-5); break;
    case FO_RMS_NORM: y = kiln_rms_norm(ctx, x, w, 1e-5); break;
    case FO_RMS_NORM_PLAIN: y = kiln_rms_norm(ctx, x, NULL, 1e-5); break;
    default: y = kiln_cross_entropy(ctx, x, lab, -100); break;
    }
    FUSED_OK(!y);
    kiln_tensor *gy = kiln_tensor_new(ctx, dt, kiln_tensor_ndim(y), kiln_tensor_shape(y));
    FUSED_OK(kiln_tensor_fill_uniform(gy, 6, -1, 1));
    FUSED_OK(kiln__vjp(ctx, y, gy, nt, targets, grads));
    kiln_graph *g = kiln_graph_new(ctx);
    FUSED_OK(kiln_graph_add(g, y));
    for (int i = 0; i < nt; i++) FUSED_OK(kiln_graph_add(g, grads[i]));
    FUSED_OK(kiln_graph_compute(g));
    int64_t total = kiln_tensor_numel(y);
    for (int i = 0; i < nt; i++) total += kiln_tensor_numel(grads[i]);
    double *v = malloc((size_t)total * sizeof *v);
    FUSED_OK(!v);
    int64_t at = kiln_tensor_numel(y);
    FUSED_OK(kiln_tensor_get_f64(y, v, at));
    for (int i = 0; i < nt; i++) {
        FUSED_OK(kiln_tensor_get_f64(grads[i], v + at, kiln_tensor_numel(grads[i])));
        at += kiln_tensor_numel(grads[i]);
    }
    *len = total;
    kiln_ctx_free(ctx);
    return v;
}

/* Each SIMD variant of the CPU (kt_simd.h), f32, against the scalar
 * table's results. */
KT_TEST(nn_fused_simd_matches_scalar) {
    static const int64_t lens[] = {1, 3, 7, 16, 17, 33, 100, 257, 1000};
    kiln_cpu_caps saved = *kiln__cpu_caps();
    for (int op = 0; op < FO_COUNT; op++)
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            int64_t n = lens[li], rows = 9, len = 0, len2 = 0;
            kiln_cpu_caps c = saved;
            kiln__cpu_caps_limit(&c, KILN_SIMD_SCALAR);
            kiln__cpu_caps_set(&c);
            double *want = run_fused(op, rows, n, KILN_F32, &len);
            kiln__cpu_caps_set(&saved);
            if (want) KT_FOR_EACH_SIMD(v) {
                double *got = run_fused(op, rows, n, KILN_F32, &len2);
                char what[96];
                snprintf(what, sizeof what, "%s n=%lld (table %s)", fo_name[op], (long long)n, kiln__nn_vec()->name);
                if (got && len2 == len) nnt_close(what, got, want, len, 2e-5, 2e-5);
                free(got);
            }
            free(want);
        }
}

/* f32 (the SIMD table in force, several threads, dw/db summed per thread)
 * against f64 on rows long enough to take the threaded path. */
KT_TEST(nn_fused_f32_matches_f64) {
    kiln_set_threads(2);
    for (int op = 0; op < FO_COUNT; op++) {
        int64_t len = 0, len2 = 0;
        double *want = run_fused(op, 301, 203, KILN_F64, &len);
        double *got = run_fused(op, 301, 203, KILN_F32, &len2);
        if (want && got && len == len2) nnt_close(fo_name[op], got, want, len, 3e-5, 3e-4);
        free(want);
        free(got);
    }
}

/* The gradient of an nn op's input gradients (all of x, w, b at once, as
 * one flat tensor) with respect to every input and gy: second derivatives
 * through the fused grad ops' own backward rules. in[0] = x, then w, b as
 * the case has them, gy last. */
typedef struct {
    fused_op op;
    int nparam; /* w [, b] inputs after x */
} so_case;

static kiln_tensor *build_all_grads(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    const so_case *c = arg;
    kiln_tensor *x = in[0], *w = c->nparam > 0 ? in[1] : NULL, *b = c->nparam > 1 ? in[2] : NULL;
    kiln_tensor *gy = in[1 + c->nparam], *y = NULL;
    switch (c->op) {
    case FO_SOFTMAX: y = kiln_softmax(ctx, x, false); break;
    case FO_SOFTMAX_CAUSAL: y = kiln_softmax(ctx, x, true); break;
    case FO_LOG_SOFTMAX: y = kiln_log_softmax(ctx, x, false); break;
    case FO_LAYER_NORM: case FO_LAYER_NORM_PLAIN: y = kiln_layer_norm(ctx, x, w, b, 1e-5); break;
    case FO_RMS_NORM: case FO_RMS_NORM_PLAIN: y = kiln_rms_norm(ctx, x, w, 1e-5); break;
    default: return NULL;
    }
    kiln_tensor *targets[3] = {x, w, b}, *grads[3] = {0};
    int nt = 1 + c->nparam;
    if (!y || kiln__vjp(ctx, y, gy, nt, targets, grads)) return NULL;
    for (int i = 0; i < nt; i++) grads[i] = kiln_reshape(ctx, grads[i], 1, (int64_t[]){-1});
    return nt == 1 ? grads[0] : kiln_concat(ctx, grads, nt, 0);
}

KT_TEST(nn_fused_second_order_all_inputs) {
    const struct {
        so_case c;
        const char *what;
    } cases[] = {
        {{FO_SOFTMAX, 0}, "softmax"},          {{FO_SOFTMAX_CAUSAL, 0}, "softmax causal"},
        {{FO_LOG_SOFTMAX, 0}, "log_softmax"},  {{FO_LAYER_NORM, 2}, "layer_norm w b"},
        {{FO_LAYER_NORM, 1}, "layer_norm w"},  {{FO_LAYER_NORM_PLAIN, 0}, "layer_norm plain"},
        {{FO_RMS_NORM, 1}, "rms_norm w"},      {{FO_RMS_NORM_PLAIN, 0}, "rms_norm plain"},
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof *cases); i++) {
        so_case c = cases[i].c;
        gc_input in[4] = {GC_IN(2, 3, 5), GC_IN(1, 5), GC_IN(1, 5), GC_IN(1, 1)};
        in[1 + c.nparam] = GC_IN(2, 3, 5); /* gy */
        char what[80];
        snprintf(what, sizeof what, "second order of %s", cases[i].what);
        gc_check(what, build_all_grads, &c, 2 + c.nparam, in, (uint64_t)(131 + i));
    }
}

/* The row primitives themselves, each SIMD table against the scalar one,
 * on every length up to 70 (all tail sizes of every vector width). */
KT_TEST(nn_vec_tables_match_scalar) {
    const kiln_nn_vec *ref = kiln__nn_vec_scalar();
    float x[70], y[70], gy[70], w[70], b[70], o1[70], o2[70], a1[70], a2[70], c1[70], c2[70];
    for (int i = 0; i < 70; i++)
        x[i] = (float)(3.0 * sin(1.7 * i)), y[i] = (float)(0.02 * (1 + i % 5)), gy[i] = (float)cos(0.9 * i),
        w[i] = (float)(1.0 + 0.01 * i), b[i] = (float)(0.1 * i - 3);
    KT_FOR_EACH_SIMD(simd) {
        const kiln_nn_vec *v = kiln__nn_vec();
        if (v == ref) continue;
        for (int n = 0; n <= 70; n++) {
#define NEAR(a, e, what) KT_CHECK(fabs((double)(a) - (double)(e)) <= 1e-5 * (1 + fabs((double)(e))), \
                                  "%s n=%d %s: %.9g vs scalar %.9g", v->name, n, what, (double)(a), (double)(e))
#define NEAR_ARR(p, q, what) for (int i_ = 0; i_ < n; i_++) NEAR(p[i_], q[i_], what)
            if (n) NEAR(v->max(x, n), ref->max(x, n), "max");
            NEAR(v->exp_sum(x, o1, n, 3.0f), ref->exp_sum(x, o2, n, 3.0f), "exp_sum");
            NEAR_ARR(o1, o2, "exp_sum values");
            NEAR(v->sum(x, n), ref->sum(x, n), "sum");
            NEAR(v->dot(x, gy, n), ref->dot(x, gy, n), "dot");
            NEAR(v->sum_dev(x, n, 0.5f), ref->sum_dev(x, n, 0.5f), "sum_dev");
            NEAR(v->sum_sq_dev(x, n, 0.5f), ref->sum_sq_dev(x, n, 0.5f), "sum_sq_dev");
            v->add_const(x, o1, n, 2.0f, 1e-3f), ref->add_const(x, o2, n, 2.0f, 1e-3f);
            NEAR_ARR(o1, o2, "add_const");
            v->exp_scale(x, o1, n, 1.0f, 1e-3f, 0.5f), ref->exp_scale(x, o2, n, 1.0f, 1e-3f, 0.5f);
            NEAR_ARR(o1, o2, "exp_scale");
            memcpy(o1, x, sizeof x), memcpy(o2, x, sizeof x);
            v->scale(o1, n, 0.7f), ref->scale(o2, n, 0.7f);
            NEAR_ARR(o1, o2, "scale");
            v->softmax_bwd(y, gy, o1, n, 0.3f), ref->softmax_bwd(y, gy, o2, n, 0.3f);
            NEAR_ARR(o1, o2, "softmax_bwd");
            v->log_softmax_bwd(x, gy, o1, n, 0.3f), ref->log_softmax_bwd(x, gy, o2, n, 0.3f);
            NEAR_ARR(o1, o2, "log_softmax_bwd");
            for (int m = 0; m < 4; m++) {
                const float *wm = m & 1 ? w : NULL, *bm = m & 2 ? b : NULL;
                v->norm_fwd(x, wm, bm, o1, n, 0.2f, 1e-4f, 1.3f), ref->norm_fwd(x, wm, bm, o2, n, 0.2f, 1e-4f, 1.3f);
                NEAR_ARR(o1, o2, "norm_fwd");
                double s1, s2, t1, t2;
                memset(a1, 0, sizeof a1), memset(a2, 0, sizeof a2), memset(c1, 0, sizeof c1), memset(c2, 0, sizeof c2);
                v->norm_bwd_sums(x, gy, wm, n, 0.2f, 1e-4f, 1.3f, a1, c1, &s1, &t1);
                ref->norm_bwd_sums(x, gy, wm, n, 0.2f, 1e-4f, 1.3f, a2, c2, &s2, &t2);
                NEAR(s1, s2, "norm_bwd_sums sg");
                NEAR(t1, t2, "norm_bwd_sums sgx");
                NEAR_ARR(a1, a2, "norm_bwd_sums dw");
                NEAR_ARR(c1, c2, "norm_bwd_sums db");
                v->norm_bwd_dx(x, gy, wm, o1, n, 0.2f, 1e-4f, 1.3f, 0.1f, 0.2f);
                ref->norm_bwd_dx(x, gy, wm, o2, n, 0.2f, 1e-4f, 1.3f, 0.1f, 0.2f);
                NEAR_ARR(o1, o2, "norm_bwd_dx");
            }
            double p1[4] = {0}, p2[4] = {0};
            v->sums_dev(x, n, 0.5f, &p1[0], &p1[1]), ref->sums_dev(x, n, 0.5f, &p2[0], &p2[1]);
            NEAR(p1[0], p2[0], "sums_dev s1");
            NEAR(p1[1], p2[1], "sums_dev s2");
            for (int relu = 0; relu < 2; relu++) {
                v->affine(x, o1, n, 0.2f, 1.3f, -0.4f, relu), ref->affine(x, o2, n, 0.2f, 1.3f, -0.4f, relu);
                NEAR_ARR(o1, o2, relu ? "affine relu" : "affine");
            }
            memset(p1, 0, sizeof p1), memset(p2, 0, sizeof p2);
            v->bn_bwd_sums(x, gy, n, 0.5f, p1), ref->bn_bwd_sums(x, gy, n, 0.5f, p2);
            for (int k = 0; k < 4; k++) NEAR(p1[k], p2[k], "bn_bwd_sums");
            v->bn_bwd_dx(x, gy, o1, n, 0.2f, 1.3f, -0.4f, 0.1f), ref->bn_bwd_dx(x, gy, o2, n, 0.2f, 1.3f, -0.4f, 0.1f);
            NEAR_ARR(o1, o2, "bn_bwd_dx");
            memcpy(o1, x, sizeof x), memcpy(o2, x, sizeof x);
            v->add(o1, gy, n), ref->add(o2, gy, n);
            NEAR_ARR(o1, o2, "add");
#undef NEAR
#undef NEAR_ARR
        }
    }
}

/* The vectorized exp against libm over the range the kernels feed it. */
KT_TEST(nn_vec_exp_accuracy) {
    const kiln_nn_vec *v = kiln__nn_vec();
    float x[256], y[256];
    double worst = 0;
    for (int k = 0; k < 400; k++) {
        for (int i = 0; i < 256; i++) x[i] = -87.0f + (float)(k * 256 + i) * (87.0f + 20.0f) / (400.0f * 256.0f);
        v->exp_sum(x, y, 256, 0.0f);
        for (int i = 0; i < 256; i++) {
            double e = exp((double)x[i]), err = fabs(y[i] - e) / e;
            if (err > worst) worst = err;
        }
    }
    KT_CHECK(worst < 4e-7, "%s exp: worst relative error %.3g", v->name, worst);
}
