/* test_nn_attention.c — rope and attention: values and gradients against
 * PyTorch, gradient checks (causal, grouped-query heads, T != S,
 * non-contiguous inputs), the blocked (flash) kernels against a reference
 * that stores the scores and against the decomposition into ops (values
 * and gradients, sizes that are not multiples of the block), every SIMD
 * variant of their loops against the scalar one, a decoding step against
 * the last row of the blocked way, memory that grows with
 * T, not T x S, and error paths. */
#include "../backends/cpu/cpu_features.h"
#include "../backends/cpu/nn_attention_simd.h"
#include "kt_simd.h"
#include "test_nn_util.h"

#include <string.h>

/* ---- rope ---- */

static kiln_tensor *build_rope_fixture(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    kiln_tensor *pos = fx_param(c, "has_pos", 0) != 0 ? in[1] : NULL;
    return kiln_rope(ctx, in[0], pos, fx_param(c, "theta", 0), (kiln_rope_mode)fx_param(c, "mode", -1));
}

KT_TEST(nn_rope_fixture) {
    const char *cases[] = {"rope_neox", "rope_neox_pos", "rope_interleaved", "rope_interleaved_pos"};
    const char *plain[] = {"x", NULL}, *with_pos[] = {"x", "pos", NULL};
    for (int i = 0; i < 4; i++) {
        const char *const *inputs = i % 2 ? with_pos : plain;
        nnt_fixture("tests/fixtures/rope.txt", cases[i], inputs, build_rope_fixture, KILN_F64, 1e-10, 1e-10);
        nnt_fixture("tests/fixtures/rope.txt", cases[i], inputs, build_rope_fixture, KILN_F32, 1e-5, 1e-5);
    }
}

typedef struct {
    kiln_rope_mode mode;
    bool pos, transpose;
} rope_case;

/* in[0]: x [.., T, D] (or [T, B, D] transposed to [B, T, D]); in[1]: pos. */
static kiln_tensor *build_rope(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    const rope_case *c = arg;
    kiln_tensor *x = c->transpose ? kiln_transpose(ctx, in[0], 0, 1) : in[0];
    return kiln_rope(ctx, x, c->pos ? in[1] : NULL, 500.0, c->mode);
}

KT_TEST(nn_rope_grad) {
    static const int32_t pos[5] = {3, -1, 7, 0, 12};
    for (int v = 0; v < 8; v++) {
        rope_case c = {v & 1 ? KILN_ROPE_INTERLEAVED : KILN_ROPE_NEOX, (v & 2) != 0, (v & 4) != 0};
        gc_input in[2] = {c.transpose ? GC_IN(3, 5, 2, 6) : GC_IN(3, 2, 5, 6), GC_IN(1, 5)};
        in[1].is_index = true;
        in[1].ivalues = pos;
        char what[80];
        snprintf(what, sizeof what, "rope mode %d pos %d transposed %d", (int)c.mode, c.pos, c.transpose);
        gc_check(what, build_rope, &c, c.pos ? 2 : 1, in, (uint64_t)(51 + v));
    }
}

KT_TEST(nn_rope_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_3d(ctx, KILN_F32, 2, 5, 6), *x_odd = kiln_new_3d(ctx, KILN_F32, 2, 5, 7);
    kiln_tensor *x1 = kiln_new_1d(ctx, KILN_F32, 6), *xi = kiln_new_3d(ctx, KILN_I32, 2, 5, 6);
    kiln_tensor *pos = kiln_new_1d(ctx, KILN_I32, 5), *pos4 = kiln_new_1d(ctx, KILN_I32, 4);
    kiln_tensor *posf = kiln_new_1d(ctx, KILN_F32, 5), *pos2d = kiln_new_2d(ctx, KILN_I32, 1, 5);
    const char *op = "kiln_rope";
    KT_CHECK(kiln_rope(ctx, x, pos, 10000, KILN_ROPE_NEOX) != NULL, "valid rope failed: %s", kiln_last_error());
    NNT_FAILS(kiln_rope(ctx, x_odd, NULL, 10000, KILN_ROPE_NEOX), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_rope(ctx, x1, NULL, 10000, KILN_ROPE_NEOX), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_rope(ctx, xi, NULL, 10000, KILN_ROPE_NEOX), KILN_ERR_DTYPE, op);
    NNT_FAILS(kiln_rope(ctx, x, pos4, 10000, KILN_ROPE_NEOX), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_rope(ctx, x, pos2d, 10000, KILN_ROPE_NEOX), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_rope(ctx, x, posf, 10000, KILN_ROPE_NEOX), KILN_ERR_DTYPE, op);
    NNT_FAILS(kiln_rope(ctx, x, NULL, 10000, (kiln_rope_mode)2), KILN_ERR_ARG, op);
    NNT_FAILS(kiln_rope(ctx, x, NULL, 0, KILN_ROPE_NEOX), KILN_ERR_ARG, op);
    NNT_FAILS(kiln_rope(ctx, x, NULL, INFINITY, KILN_ROPE_INTERLEAVED), KILN_ERR_ARG, op);
    KT_CHECK(!kiln_rope(ctx, NULL, pos, 10000, KILN_ROPE_NEOX) && strstr(kiln_last_error(), op),
             "NULL x replaced the error: %s", kiln_last_error());
    kiln_ctx_free(ctx);
}

/* ---- attention ---- */

static kiln_tensor *build_attention_fixture(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    return kiln_attention(ctx, in[0], in[1], in[2], fx_param(c, "causal", 0) != 0, fx_param(c, "scale", 0));
}

KT_TEST(nn_attention_fixture) {
    const char *cases[] = {"attention", "attention_causal", "attention_causal_cache"};
    const char *inputs[] = {"q", "k", "v", NULL};
    for (int i = 0; i < 3; i++) {
        nnt_fixture("tests/fixtures/attention.txt", cases[i], inputs, build_attention_fixture, KILN_F64, 1e-10, 1e-10);
        nnt_fixture("tests/fixtures/attention.txt", cases[i], inputs, build_attention_fixture, KILN_F32, 1e-5, 1e-4);
    }
}

typedef struct {
    bool causal, transpose_q;
    double scale;
} attention_case;

/* in: q (or q given as [B, T, H, D] and transposed), k, v. */
static kiln_tensor *build_attention(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    const attention_case *c = arg;
    kiln_tensor *q = c->transpose_q ? kiln_transpose(ctx, in[0], 1, 2) : in[0];
    return kiln_attention(ctx, q, in[1], in[2], c->causal, c->scale);
}

KT_TEST(nn_attention_grad) {
    const struct {
        gc_input q, k, v;
        attention_case c;
        const char *what;
    } cases[] = {
        {GC_IN(4, 1, 2, 3, 4), GC_IN(4, 1, 2, 3, 4), GC_IN(4, 1, 2, 3, 4), {false, false, 0}, "multi-head"},
        {GC_IN(4, 1, 2, 4, 4), GC_IN(4, 1, 2, 4, 4), GC_IN(4, 1, 2, 4, 4), {true, false, 0.7}, "causal"},
        {GC_IN(4, 2, 4, 3, 4), GC_IN(4, 2, 2, 3, 4), GC_IN(4, 2, 2, 3, 3), {false, false, 0}, "grouped, Dv != D"},
        {GC_IN(4, 1, 4, 2, 3), GC_IN(4, 1, 1, 5, 3), GC_IN(4, 1, 1, 5, 2), {true, false, 0}, "causal, T < S, Hkv 1"},
        {GC_IN(4, 1, 2, 5, 3), GC_IN(4, 1, 2, 3, 3), GC_IN(4, 1, 2, 3, 3), {true, false, 0}, "causal, T > S"},
        {GC_IN(4, 1, 3, 4, 4), GC_IN(4, 1, 2, 3, 4), GC_IN(4, 1, 2, 3, 4), {false, true, 0}, "q transposed, GQA"},
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof *cases); i++) {
        gc_input in[3] = {cases[i].q, cases[i].k, cases[i].v};
        for (int j = 0; j < 3; j++) in[j].lo = -1.5, in[j].hi = 1.5;
        gc_check(cases[i].what, build_attention, (void *)&cases[i].c, 3, in, (uint64_t)(61 + i));
    }
}

/* softmax(q k^T * scale) v with the scores stored, in double. */
static void attention_reference(const double *q, const double *k, const double *v, double *o, int64_t b, int64_t hq,
                                int64_t hkv, int64_t t, int64_t s, int64_t d, int64_t dv, bool causal, double scale) {
    double *p = malloc((size_t)s * sizeof *p);
    if (!p) return;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t h = 0; h < hq; h++)
            for (int64_t i = 0; i < t; i++) {
                const double *qi = q + ((bi * hq + h) * t + i) * d;
                int64_t kv = bi * hkv + h / (hq / hkv);
                double m = -INFINITY, l = 0;
                for (int64_t j = 0; j < s; j++) {
                    p[j] = -INFINITY;
                    if (causal && j > i + s - t) continue;
                    p[j] = 0;
                    for (int64_t e = 0; e < d; e++) p[j] += qi[e] * k[(kv * s + j) * d + e];
                    p[j] *= scale;
                    m = fmax(m, p[j]);
                }
                for (int64_t j = 0; j < s; j++) l += p[j] == -INFINITY ? 0 : exp(p[j] - m);
                double *oi = o + ((bi * hq + h) * t + i) * dv;
                for (int64_t e = 0; e < dv; e++) {
                    oi[e] = 0;
                    for (int64_t j = 0; j < s; j++)
                        if (p[j] != -INFINITY) oi[e] += exp(p[j] - m) / l * v[(kv * s + j) * dv + e];
                }
            }
    free(p);
}

/* The online softmax over many keys (scores spread wide, so the running
 * maximum moves often) on the threaded path, both dtypes. */
KT_TEST(nn_attention_large_matches_reference) {
    const int64_t b = 2, hq = 4, hkv = 2, t = 33, s = 70, d = 16, dv = 8;
    const int64_t nq = b * hq * t * d, nk = b * hkv * s * d, nv = b * hkv * s * dv, no = b * hq * t * dv;
    double *q = malloc((size_t)(nq + nk + nv + no) * sizeof *q), *k = q + nq, *v = k + nk, *want = v + nv;
    KT_REQUIRE(q, "out of memory");
    for (int f = 0; f < 2; f++)
        for (int causal = 0; causal < 2; causal++) {
            kiln_ctx *ctx = kiln_ctx_new();
            kiln_dtype dt = f ? KILN_F32 : KILN_F64;
            kiln_tensor *tq = kiln_new_4d(ctx, dt, b, hq, t, d), *tk = kiln_new_4d(ctx, dt, b, hkv, s, d);
            kiln_tensor *tv = kiln_new_4d(ctx, dt, b, hkv, s, dv);
            KT_NOTNULL(tv);
            KT_OK(kiln_tensor_fill_uniform(tq, 1, -2, 2));
            KT_OK(kiln_tensor_fill_uniform(tk, 2, -2, 2));
            KT_OK(kiln_tensor_fill_uniform(tv, 3, -1, 1));
            KT_OK(kiln_tensor_get_f64(tq, q, nq));
            KT_OK(kiln_tensor_get_f64(tk, k, nk));
            KT_OK(kiln_tensor_get_f64(tv, v, nv));
            attention_reference(q, k, v, want, b, hq, hkv, t, s, d, dv, causal, 0.5);
            kiln_tensor *y = kiln_attention(ctx, tq, tk, tv, causal, 0.5);
            double *got = nnt_eval(ctx, y);
            if (!got) return;
            char what[64];
            snprintf(what, sizeof what, "attention %s causal %d", kiln_dtype_name(dt), causal);
            nnt_close(what, got, want, no, f ? 1e-5 : 1e-12, f ? 1e-5 : 1e-12);
            free(got);
            kiln_ctx_free(ctx);
        }
    free(q);
}

/* Queries that see no key (causal, T > S) give zeros, not NaN. */
KT_TEST(nn_attention_query_without_keys_is_zero) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *q = kiln_new_4d(ctx, KILN_F32, 1, 1, 4, 2), *k = kiln_new_4d(ctx, KILN_F32, 1, 1, 2, 2);
    kiln_tensor *v = kiln_new_4d(ctx, KILN_F32, 1, 1, 2, 2);
    KT_OK(kiln_tensor_fill_uniform(q, 1, -1, 1));
    KT_OK(kiln_tensor_fill_uniform(k, 2, -1, 1));
    KT_OK(kiln_tensor_set_f32(v, (float[]){1, 2, 3, 4}, 4));
    kiln_tensor *y = kiln_attention(ctx, q, k, v, true, 0);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    KT_OK(kiln_graph_compute(g));
    float o[8];
    KT_OK(kiln_tensor_get_f32(y, o, 8));
    /* query i sees keys j <= i - 2: none, none, key 0, both */
    for (int e = 0; e < 4; e++) KT_CHECK(o[e] == 0.0f, "query %d value %d is %g, want 0", e / 2, e % 2, o[e]);
    KT_CHECK(o[4] == 1.0f && o[5] == 2.0f, "query 2 sees only key 0: got %g %g", o[4], o[5]);
    KT_CHECK(o[6] > 1.0f && o[6] < 3.0f && o[7] > 2.0f && o[7] < 4.0f, "query 3 mixes both keys: %g %g", o[6], o[7]);
    kiln_ctx_free(ctx);
}

KT_TEST(nn_attention_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *q = kiln_new_4d(ctx, KILN_F32, 2, 4, 3, 8), *k = kiln_new_4d(ctx, KILN_F32, 2, 2, 5, 8);
    kiln_tensor *v = kiln_new_4d(ctx, KILN_F32, 2, 2, 5, 6);
    kiln_tensor *q3 = kiln_new_3d(ctx, KILN_F32, 4, 3, 8), *qb = kiln_new_4d(ctx, KILN_F32, 3, 4, 3, 8);
    kiln_tensor *k3h = kiln_new_4d(ctx, KILN_F32, 2, 3, 5, 8), *kd = kiln_new_4d(ctx, KILN_F32, 2, 2, 5, 4);
    kiln_tensor *vs = kiln_new_4d(ctx, KILN_F32, 2, 2, 4, 6), *vh = kiln_new_4d(ctx, KILN_F32, 2, 1, 5, 6);
    kiln_tensor *k64 = kiln_new_4d(ctx, KILN_F64, 2, 2, 5, 8), *qi = kiln_new_4d(ctx, KILN_I32, 2, 4, 3, 8);
    kiln_tensor *vb = kiln_new_4d(ctx, KILN_F32, 1, 2, 5, 6), *v3h = kiln_new_4d(ctx, KILN_F32, 2, 3, 5, 6);
    const char *op = "kiln_attention";
    kiln_tensor *y = kiln_attention(ctx, q, k, v, true, 0);
    KT_NOTNULL(y);
    KT_CHECK(kiln_tensor_dim(y, 0) == 2 && kiln_tensor_dim(y, 1) == 4 && kiln_tensor_dim(y, 2) == 3 &&
                 kiln_tensor_dim(y, 3) == 6,
             "result is not [2, 4, 3, 6]");
    NNT_FAILS(kiln_attention(ctx, q3, k, v, false, 0), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_attention(ctx, qb, k, v, false, 0), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_attention(ctx, q, k, vb, false, 0), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_attention(ctx, q, k3h, v3h, false, 0), KILN_ERR_SHAPE, op);
    KT_CHECK(strstr(kiln_last_error(), "multiple"), "message: %s", kiln_last_error());
    NNT_FAILS(kiln_attention(ctx, q, kd, v, false, 0), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_attention(ctx, q, k, vs, false, 0), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_attention(ctx, q, k, vh, false, 0), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_attention(ctx, q, k64, v, false, 0), KILN_ERR_DTYPE, op);
    NNT_FAILS(kiln_attention(ctx, q, k, kiln_new_4d(ctx, KILN_F64, 2, 2, 5, 6), false, 0), KILN_ERR_DTYPE, op);
    NNT_FAILS(kiln_attention(ctx, qi, k, v, false, 0), KILN_ERR_DTYPE, op);
    NNT_FAILS(kiln_attention(ctx, q, k, v, false, NAN), KILN_ERR_ARG, op);
    NNT_FAILS(kiln_attention(ctx, q, k, v, false, INFINITY), KILN_ERR_ARG, op);
    KT_CHECK(!kiln_attention(ctx, q, NULL, v, false, 0) && strstr(kiln_last_error(), "scale"),
             "NULL k replaced the error: %s", kiln_last_error());
    kiln_ctx_free(ctx);
}

/* ---- blocked attention against the decomposition into ops ---- */

typedef struct {
    int64_t b, hq, hkv, t, s, d, dv;
    bool causal;
} flash_case;

/* k or v [B, Hkv, S, E] with each head repeated to Hq heads. */
static kiln_tensor *repeat_kv(kiln_ctx *ctx, kiln_tensor *x, int64_t group) {
    const int64_t *s = kiln_tensor_shape(x);
    kiln_tensor *e = kiln_reshape(ctx, x, 5, (int64_t[]){s[0], s[1], 1, s[2], s[3]});
    e = kiln_broadcast_to(ctx, e, 5, (int64_t[]){s[0], s[1], group, s[2], s[3]});
    return kiln_reshape(ctx, e, 4, (int64_t[]){s[0], s[1] * group, s[2], s[3]});
}

/* Output, then the gradients of sum(y * w) for q, k, v, all as doubles in
 * one malloc'd array: by kiln_attention (ref false) or by matmul/softmax. */
static double *flash_run(const flash_case *c, kiln_dtype dt, bool ref) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *q = kiln_new_4d(ctx, dt, c->b, c->hq, c->t, c->d), *k = kiln_new_4d(ctx, dt, c->b, c->hkv, c->s, c->d);
    kiln_tensor *v = kiln_new_4d(ctx, dt, c->b, c->hkv, c->s, c->dv), *w = kiln_new_4d(ctx, dt, c->b, c->hq, c->t, c->dv);
    double scale = 0.6, *out = NULL;
    if (!w || kiln_tensor_fill_uniform(q, 11, -2, 2) || kiln_tensor_fill_uniform(k, 12, -2, 2) ||
        kiln_tensor_fill_uniform(v, 13, -1, 1) || kiln_tensor_fill_uniform(w, 14, -1, 1))
        goto done;
    kiln_tensor_set_requires_grad(q, true), kiln_tensor_set_requires_grad(k, true);
    kiln_tensor_set_requires_grad(v, true);
    kiln_tensor *y;
    if (ref) {
        int64_t group = c->hq / c->hkv;
        kiln_tensor *sc = kiln_scale(ctx, kiln_matmul_t(ctx, q, false, repeat_kv(ctx, k, group), true), scale);
        y = kiln_matmul(ctx, kiln_softmax(ctx, sc, c->causal), repeat_kv(ctx, v, group));
    } else {
        y = kiln_attention(ctx, q, k, v, c->causal, scale);
    }
    kiln_graph *g = kiln_graph_new(ctx);
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, y, w));
    if (kiln_graph_add(g, y) || kiln_graph_backward(g, loss) || kiln_graph_compute(g)) goto done;
    kiln_tensor *parts[4] = {y, kiln_tensor_grad(q), kiln_tensor_grad(k), kiln_tensor_grad(v)};
    int64_t n = 0;
    for (int i = 0; i < 4; i++) n += kiln_tensor_numel(parts[i]);
    if (!(out = malloc((size_t)n * sizeof *out))) goto done;
    n = 0;
    for (int i = 0; i < 4; i++) {
        kiln_tensor_get_f64(parts[i], out + n, kiln_tensor_numel(parts[i]));
        n += kiln_tensor_numel(parts[i]);
    }
done:
    if (!out) kt_fail(__FILE__, __LINE__, "attention run failed: %s", kiln_last_error());
    kiln_ctx_free(ctx);
    return out;
}

static int64_t flash_count(const flash_case *c) {
    return c->b * c->hq * c->t * (c->dv + c->d) + c->b * c->hkv * c->s * (c->d + c->dv);
}

/* Several key and query blocks with ragged ends, causal with the KV
 * offset S - T of either sign, grouped heads, Dv != D; threaded, with dQ
 * summed from per-thread copies when one head's key blocks are shared. */
KT_TEST(nn_attention_flash_matches_decomposition) {
    const flash_case cases[] = {
        {2, 4, 2, 150, 200, 20, 12, true},
        {2, 4, 2, 150, 200, 20, 12, false},
        {1, 3, 1, 130, 97, 16, 24, true},
        {1, 2, 2, 70, 70, 8, 8, true},
        {2, 8, 2, 1, 150, 16, 12, true}, /* a decoding step */
    };
    int saved = kiln_get_threads();
    kiln_set_threads(2);
    for (int i = 0; i < 5; i++)
        for (int f = 0; f < 2; f++) {
            kiln_dtype dt = f ? KILN_F32 : KILN_F64;
            double *got = flash_run(&cases[i], dt, false), *want = flash_run(&cases[i], dt, true);
            char what[96];
            snprintf(what, sizeof what, "case %d %s: output then dq, dk, dv", i, kiln_dtype_name(dt));
            if (got && want) nnt_close(what, got, want, flash_count(&cases[i]), f ? 2e-5 : 1e-11, f ? 1e-4 : 1e-11);
            free(got);
            free(want);
        }
    kiln_set_threads(saved);
}

/* A decoding step (T = 1: no keys transposed, a group's heads together)
 * gives bit for bit the last row of the same attention over T queries,
 * which goes the blocked way: the same products in the same order. */
KT_TEST(nn_attention_decode_step_is_last_row) {
    const flash_case cases[] = {
        {2, 8, 2, 5, 150, 16, 12, true},
        {1, 4, 4, 3, 70, 24, 40, false},
        {1, 3, 1, 4, 64, 8, 8, true},
    };
    for (int i = 0; i < 3; i++)
        for (int f = 0; f < 2; f++) {
            const flash_case *c = &cases[i];
            kiln_dtype dt = f ? KILN_F32 : KILN_F64;
            kiln_ctx *ctx = kiln_ctx_new();
            kiln_tensor *q = kiln_new_4d(ctx, dt, c->b, c->hq, c->t, c->d), *k = kiln_new_4d(ctx, dt, c->b, c->hkv, c->s, c->d);
            kiln_tensor *v = kiln_new_4d(ctx, dt, c->b, c->hkv, c->s, c->dv);
            KT_NOTNULL(v);
            KT_OK(kiln_tensor_fill_uniform(q, 21, -2, 2));
            KT_OK(kiln_tensor_fill_uniform(k, 22, -2, 2));
            KT_OK(kiln_tensor_fill_uniform(v, 23, -1, 1));
            kiln_tensor *all = kiln_attention(ctx, q, k, v, c->causal, 0.4);
            kiln_tensor *step = kiln_attention(ctx, kiln_slice(ctx, q, 2, c->t - 1, c->t, 1), k, v, c->causal, 0.4);
            double *want = nnt_eval(ctx, kiln_slice(ctx, all, 2, c->t - 1, c->t, 1)), *got = nnt_eval(ctx, step);
            int64_t n = c->b * c->hq * c->dv;
            if (got && want)
                KT_CHECK(memcmp(got, want, (size_t)n * sizeof *got) == 0, "case %d %s: the step differs from the last row",
                         i, kiln_dtype_name(dt));
            free(got);
            free(want);
            kiln_ctx_free(ctx);
        }
}

/* SIMD levels of this architecture (the caps can name the others). */
/* The f32 path of every SIMD variant (forward and backward) against the
 * scalar one. */
KT_TEST(nn_attention_simd_matches_scalar) {
    const flash_case c = {1, 4, 2, 100, 133, 24, 40, true};
    kiln_cpu_caps saved = *kiln__cpu_caps(), caps = saved;
    kiln__cpu_caps_limit(&caps, KILN_SIMD_SCALAR);
    kiln__cpu_caps_set(&caps);
    double *want = flash_run(&c, KILN_F32, false);
    kiln__cpu_caps_set(&saved);
    KT_REQUIRE(want, "scalar run: %s", kiln_last_error());
    KT_FOR_EACH_SIMD(v) {
        double *got = flash_run(&c, KILN_F32, false);
        if (got) nnt_close(v.name, got, want, flash_count(&c), 2e-5, 1e-4);
        free(got);
    }
    free(want);
}

/* The tile loops themselves, with edges in every dimension, and the exp at
 * the ends of its range. */
KT_TEST(nn_attention_loops_match_scalar) {
    const kiln_attn_ops_f32 *ref = &kiln__attn_ops_f32_scalar;
    enum { M = 7, N = 83, K = 13 };
    float a[M * K], b[K * N], want[M * N], got[M * N], x[N], y[N];
    for (int i = 0; i < M * K; i++) a[i] = (float)((i * 37 % 23) - 11) / 7.0f;
    for (int i = 0; i < K * N; i++) b[i] = (float)((i * 53 % 31) - 15) / 9.0f;
    KT_FOR_EACH_SIMD(v) {
        if (v.caps.level == KILN_SIMD_SCALAR) continue;
        const kiln_attn_ops_f32 *ops = kiln__attn_ops_f32();
        const char *name = v.name;
        KT_CHECK(ops != ref, "%s: no SIMD loops chosen", name);
        for (int n = 1; n <= N; n += 17)
            for (int acc = 0; acc < 2; acc++) {
                for (int i = 0; i < M * N; i++) want[i] = got[i] = (float)(i % 5);
                ref->gemm(M, n, K, a, K, 1, b, N, want, N, acc);
                ops->gemm(M, n, K, a, K, 1, b, N, got, N, acc);
                for (int i = 0; i < M * N; i++)
                    KT_CHECK(fabsf(got[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i])),
                             "%s gemm n %d acc %d: element %d is %g, want %g", name, n, acc, i, got[i], want[i]);
                /* A transposed: a read as K x M */
                ref->gemm(M, n, K, a, 1, M, b, N, want, N, acc);
                ops->gemm(M, n, K, a, 1, M, b, N, got, N, acc);
                for (int i = 0; i < M * N; i++)
                    KT_CHECK(fabsf(got[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i])),
                             "%s gemm (A^T) n %d acc %d: element %d is %g, want %g", name, n, acc, i, got[i],
                             want[i]);
            }
        for (int n = 1; n <= N; n += 9) {
            for (int i = 0; i < n; i++) x[i] = y[i] = -90.0f + 91.0f * (float)i / (float)n;
            x[0] = y[0] = -INFINITY;
            float sg = ops->exp_sum(x, n, 1.0f, 0.5f), sw = ref->exp_sum(y, n, 1.0f, 0.5f);
            KT_CHECK(x[0] == 0.0f, "%s: exp(-inf) is %g", name, x[0]);
            for (int i = 0; i < n; i++)
                KT_CHECK(fabsf(x[i] - y[i]) <= 1e-6f * y[i] + 1e-37f, "%s exp n %d: element %d is %g, want %g", name,
                         n, i, x[i], y[i]);
            KT_CHECK(fabsf(sg - sw) <= 1e-6f * sw, "%s exp sum n %d: %g, want %g", name, n, sg, sw);
            for (int i = 0; i < n; i++) x[i] = (float)((i * 29 % 41) - 20);
            KT_CHECK(ops->max(x, n) == ref->max(x, n), "%s max n %d: %g, want %g", name, n, ops->max(x, n),
                     ref->max(x, n));
        }
    }
}

/* Forward + backward of a 4096-token head plan O(T * D) bytes: far less
 * than one T x S score matrix (64 MiB in f32). */
KT_TEST(nn_attention_memory_is_linear) {
    const int64_t t = 4096, d = 64;
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *q = kiln_new_4d(ctx, KILN_F32, 1, 1, t, d), *k = kiln_new_4d(ctx, KILN_F32, 1, 1, t, d);
    kiln_tensor *v = kiln_new_4d(ctx, KILN_F32, 1, 1, t, d);
    KT_NOTNULL(v);
    KT_OK(kiln_tensor_set_requires_grad(q, true));
    KT_OK(kiln_tensor_set_requires_grad(k, true));
    KT_OK(kiln_tensor_set_requires_grad(v, true));
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_attention(ctx, q, k, v, true, 0));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    size_t planned = kiln_graph_planned_bytes(g), td = (size_t)(t * d) * sizeof(float);
    KT_CHECK(planned > 0 && planned <= 12 * td, "planned %zu bytes, more than 12 T x D buffers (%zu bytes)", planned,
             12 * td);
    kiln_ctx_free(ctx);
}
