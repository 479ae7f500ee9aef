/* test_nn_attention.c — rope and attention: values and gradients against
 * PyTorch, gradient checks (causal, grouped-query heads, T != S,
 * non-contiguous inputs), the fused kernel against a reference that
 * stores the scores, and error paths. */
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
