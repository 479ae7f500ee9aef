/* test_movement.c — reshape/view/flatten, permute/transpose, slice,
 * broadcast_to, contiguous, concat, pad, repeat, detach and cast: values
 * against naive loops (f32 and f64), gradient checks (also through chains
 * of views and non-contiguous inputs) and the error paths. */
#include "internal.h"
#include "test_mov_util.h"

/* ---- forward values ---- */

KT_TEST(movement_reshape_view_flatten) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = mt_leaf(ctx, KILN_F32, 3, (int64_t[]){2, 3, 4}, 1);
    KT_NOTNULL(x);
    double want[24];
    for (int i = 0; i < 24; i++) want[i] = (float)mt_val(i, 1);
    kiln_tensor *r = kiln_reshape(ctx, x, 2, (int64_t[]){4, -1});
    KT_NOTNULL(r);
    KT_CHECK(kiln_tensor_data(r) == kiln_tensor_data(x), "reshape of a contiguous leaf is a view");
    KT_OK(mt_compute(ctx, r));
    mt_check_close("reshape [4, -1]", r, 2, (int64_t[]){4, 6}, want, 0, 0);
    kiln_tensor *v = kiln_view(ctx, x, 1, (int64_t[]){24});
    KT_NOTNULL(v);
    KT_OK(mt_compute(ctx, v));
    mt_check_close("view [24]", v, 1, (int64_t[]){24}, want, 0, 0);
    kiln_tensor *f = kiln_flatten(ctx, x, -2);
    KT_NOTNULL(f);
    KT_OK(mt_compute(ctx, f));
    mt_check_close("flatten(-2)", f, 2, (int64_t[]){2, 12}, want, 0, 0);
    /* reshape of a transposed view copies in the transposed order */
    kiln_tensor *t = kiln_transpose(ctx, x, 0, 2); /* [4, 3, 2] */
    kiln_tensor *rt = kiln_reshape(ctx, t, 2, (int64_t[]){-1, 2});
    KT_NOTNULL(rt);
    KT_OK(mt_compute(ctx, rt));
    double wt[24];
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 3; j++)
            for (int i = 0; i < 2; i++) wt[(k * 3 + j) * 2 + i] = want[(i * 3 + j) * 4 + k];
    mt_check_close("reshape of a transpose", rt, 2, (int64_t[]){12, 2}, wt, 0, 0);
    kiln_ctx_free(ctx);
}

KT_TEST(movement_permute_transpose) {
    kiln_ctx *ctx = kiln_ctx_new();
    for (int dt = 0; dt < 2; dt++) {
        kiln_tensor *x = mt_leaf(ctx, dt ? KILN_F64 : KILN_F32, 4, (int64_t[]){2, 3, 4, 5}, 2);
        kiln_tensor *p = kiln_contiguous(ctx, kiln_permute(ctx, x, (int[]){2, -1, 0, 1})); /* [4, 5, 2, 3] */
        KT_NOTNULL(p);
        KT_OK(mt_compute(ctx, p));
        double want[120];
        for (int c = 0; c < 4; c++)
            for (int d = 0; d < 5; d++)
                for (int a = 0; a < 2; a++)
                    for (int b = 0; b < 3; b++) {
                        double v = mt_val(((a * 3 + b) * 4 + c) * 5 + d, 2);
                        want[((c * 5 + d) * 2 + a) * 3 + b] = dt ? v : (float)v;
                    }
        mt_check_close("permute (2, -1, 0, 1)", p, 4, (int64_t[]){4, 5, 2, 3}, want, 0, 0);
        kiln_tensor *t = kiln_transpose(ctx, x, -1, 1); /* [2, 5, 4, 3] */
        KT_NOTNULL(t);
        KT_CHECK(!kiln_tensor_is_contiguous(t), "a transpose is a strided view");
        KT_OK(mt_compute(ctx, t));
        for (int a = 0; a < 2; a++)
            for (int d = 0; d < 5; d++)
                for (int c = 0; c < 4; c++)
                    for (int b = 0; b < 3; b++) {
                        double v = mt_val(((a * 3 + b) * 4 + c) * 5 + d, 2);
                        want[((a * 5 + d) * 4 + c) * 3 + b] = dt ? v : (float)v;
                    }
        mt_check_close("transpose(-1, 1)", t, 4, (int64_t[]){2, 5, 4, 3}, want, 0, 0);
    }
    kiln_ctx_free(ctx);
}

KT_TEST(movement_slice_python_semantics) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = mt_leaf(ctx, KILN_F64, 2, (int64_t[]){3, 7}, 3);
    KT_NOTNULL(x);
    /* expected columns, as Python's range(*slice(start, end, step).indices(7)) */
    struct { int64_t start, end, step; int n; int cols[7]; } cases[] = {
        {1, 5, 1, 4, {1, 2, 3, 4}},     {-3, 7, 1, 3, {4, 5, 6}},      {0, 100, 3, 3, {0, 3, 6}},
        {-100, -2, 2, 3, {0, 2, 4}},    {2, -1, 2, 2, {2, 4}},          {5, INT64_MAX, 1, 2, {5, 6}},
        {6, 7, 5, 1, {6}},              {0, 7, 1, 7, {0, 1, 2, 3, 4, 5, 6}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        kiln_tensor *s = kiln_slice(ctx, x, -1, cases[c].start, cases[c].end, cases[c].step);
        KT_NOTNULL(s);
        KT_OK(mt_compute(ctx, s));
        double want[21];
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < cases[c].n; j++) want[i * cases[c].n + j] = mt_val(i * 7 + cases[c].cols[j], 3);
        char what[64];
        snprintf(what, sizeof what, "slice [%lld:%lld:%lld]", (long long)cases[c].start, (long long)cases[c].end,
                 (long long)cases[c].step);
        mt_check_close(what, s, 2, (int64_t[]){3, cases[c].n}, want, 0, 0);
    }
    /* slice of a transpose, then of axis 0 of the result */
    kiln_tensor *s2 = kiln_slice(ctx, kiln_slice(ctx, kiln_transpose(ctx, x, 0, 1), 0, 1, 6, 2), 1, -2, 3, 1);
    KT_NOTNULL(s2);
    KT_OK(mt_compute(ctx, s2));
    double want2[6];
    for (int j = 0; j < 3; j++)
        for (int i = 0; i < 2; i++) want2[j * 2 + i] = mt_val((1 + i) * 7 + 1 + 2 * j, 3);
    mt_check_close("slice of a slice of a transpose", s2, 2, (int64_t[]){3, 2}, want2, 0, 0);
    kiln_ctx_free(ctx);
}

KT_TEST(movement_contiguous_and_dtypes) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = mt_leaf(ctx, KILN_F32, 3, (int64_t[]){4, 5, 6}, 4);
    KT_NOTNULL(x);
    KT_CHECK(kiln_contiguous(ctx, x) == x, "contiguous of a contiguous tensor is the tensor");
    /* a strided view in every dtype: [6, 2, 5] = x[::2].permute(2, 0, 1) */
    for (int dt = 0; dt <= KILN_I32; dt++) { /* the plain dtypes */
        kiln_tensor *xd = kiln_cast(ctx, x, (kiln_dtype)dt);
        KT_OK(mt_compute(ctx, xd));
        kiln_tensor *v = kiln_permute(ctx, kiln_slice(ctx, xd, 0, 0, 4, 2), (int[]){2, 0, 1});
        kiln_tensor *c = kiln_contiguous(ctx, v);
        KT_NOTNULL(c);
        KT_CHECK(c != v && kiln_tensor_is_contiguous(c), "a copy for %s", kiln_dtype_name((kiln_dtype)dt));
        KT_OK(mt_compute(ctx, c));
        double xv[120], want[60];
        KT_OK(kiln_tensor_get_f64(xd, xv, 120));
        for (int k = 0; k < 6; k++)
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 5; j++) want[(k * 2 + i) * 5 + j] = xv[(2 * i * 5 + j) * 6 + k];
        mt_check_close(kiln_dtype_name((kiln_dtype)dt), c, 3, (int64_t[]){6, 2, 5}, want, 0, 0);
    }
    kiln_ctx_free(ctx);
}

KT_TEST(movement_contiguous_large_strided) {
    /* above the threading threshold, one long strided row and many short rows */
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = mt_leaf(ctx, KILN_F32, 2, (int64_t[]){400, 301}, 5);
    KT_NOTNULL(x);
    kiln_tensor *c = kiln_contiguous(ctx, kiln_transpose(ctx, x, 0, 1));
    kiln_tensor *s = kiln_contiguous(ctx, kiln_slice(ctx, kiln_reshape(ctx, x, 1, (int64_t[]){-1}), 0, 1, -1, 3));
    KT_NOTNULL(c);
    KT_NOTNULL(s);
    KT_OK(mt_compute(ctx, c));
    KT_OK(mt_compute(ctx, s));
    double *want = malloc(400 * 301 * sizeof *want);
    KT_NOTNULL(want);
    for (int j = 0; j < 301; j++)
        for (int i = 0; i < 400; i++) want[j * 400 + i] = (float)mt_val(i * 301 + j, 5);
    mt_check_close("transpose copy", c, 2, (int64_t[]){301, 400}, want, 0, 0);
    int64_t n = 400 * 301 / 3; /* elements 1, 4, ..., 400*301 - 3 */
    for (int64_t i = 0; i < n; i++) want[i] = (float)mt_val(1 + 3 * i, 5);
    mt_check_close("strided 1-D copy", s, 1, (int64_t[]){n}, want, 0, 0);
    free(want);
    kiln_ctx_free(ctx);
}

KT_TEST(movement_broadcast_to) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = mt_leaf(ctx, KILN_F64, 2, (int64_t[]){3, 1}, 6);
    kiln_tensor *b = kiln_broadcast_to(ctx, x, 3, (int64_t[]){2, -1, 4});
    KT_NOTNULL(b);
    KT_OK(mt_compute(ctx, b));
    double want[24];
    for (int i = 0; i < 24; i++) want[i] = mt_val((i / 4) % 3, 6);
    mt_check_close("broadcast [3, 1] to [2, 3, 4]", b, 3, (int64_t[]){2, 3, 4}, want, 0, 0);
    MT_FAILS(kiln_broadcast_to(ctx, x, 2, (int64_t[]){2, 4}), KILN_ERR_SHAPE, "kiln_broadcast_to");
    MT_FAILS(kiln_broadcast_to(ctx, x, 1, (int64_t[]){3}), KILN_ERR_SHAPE, "kiln_broadcast_to");
    kiln_ctx_free(ctx);
}

KT_TEST(movement_concat_values) {
    kiln_ctx *ctx = kiln_ctx_new();
    for (int dt = 0; dt < 2; dt++) {
        kiln_dtype d = dt ? KILN_F64 : KILN_F32;
        kiln_tensor *p[3] = {mt_leaf(ctx, d, 3, (int64_t[]){2, 1, 3}, 1), mt_leaf(ctx, d, 3, (int64_t[]){2, 3, 3}, 2),
                             kiln_transpose(ctx, mt_leaf(ctx, d, 3, (int64_t[]){2, 3, 2}, 3), 1, 2)};
        kiln_tensor *c = kiln_concat(ctx, p, 3, -2);
        KT_NOTNULL(c);
        KT_OK(mt_compute(ctx, c));
        double want[36];
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 6; j++)
                for (int k = 0; k < 3; k++) {
                    double v = j < 1 ? mt_val(i * 3 + k, 1)
                             : j < 4 ? mt_val((i * 3 + j - 1) * 3 + k, 2)
                                     : mt_val((i * 3 + k) * 2 + j - 4, 3);
                    want[(i * 6 + j) * 3 + k] = dt ? v : (float)v;
                }
        mt_check_close("concat axis -2", c, 3, (int64_t[]){2, 6, 3}, want, 0, 0);
    }
    /* more parts than one node holds: chained nodes */
    kiln_tensor *parts[19];
    for (int i = 0; i < 19; i++) parts[i] = mt_leaf(ctx, KILN_F64, 2, (int64_t[]){1 + i % 3, 2}, i);
    kiln_tensor *c = kiln_concat(ctx, parts, 19, 0);
    KT_NOTNULL(c);
    KT_OK(mt_compute(ctx, c));
    double want[76];
    int n = 0;
    for (int i = 0; i < 19; i++)
        for (int j = 0; j < 2 * (1 + i % 3); j++) want[n++] = mt_val(j, i);
    mt_check_close("concat of 19 parts", c, 2, (int64_t[]){n / 2, 2}, want, 0, 0);
    kiln_ctx_free(ctx);
}

KT_TEST(movement_pad_values) {
    kiln_ctx *ctx = kiln_ctx_new();
    for (int dt = 0; dt < 2; dt++) {
        kiln_tensor *x = mt_leaf(ctx, dt ? KILN_F64 : KILN_F32, 3, (int64_t[]){2, 3, 4}, 7);
        kiln_tensor *p = kiln_pad(ctx, kiln_transpose(ctx, x, 1, 2), (int64_t[]){0, 1, 2, 0, 1, 3}, -1.5);
        KT_NOTNULL(p); /* [3, 6, 7] */
        KT_OK(mt_compute(ctx, p));
        double want[3 * 6 * 7];
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 6; j++)
                for (int k = 0; k < 7; k++) {
                    bool in = i < 2 && j >= 2 && k >= 1 && k < 4;
                    double v = in ? mt_val((i * 3 + (k - 1)) * 4 + (j - 2), 7) : -1.5;
                    want[(i * 6 + j) * 7 + k] = dt ? v : (float)v;
                }
        mt_check_close("pad", p, 3, (int64_t[]){3, 6, 7}, want, 0, 0);
    }
    kiln_tensor *x = mt_leaf(ctx, KILN_F32, 1, (int64_t[]){3}, 1);
    KT_CHECK(kiln_pad(ctx, x, (int64_t[]){0, 0}, 1) == x, "no padding gives the input");
    MT_FAILS(kiln_pad(ctx, x, (int64_t[]){-1, 2}, 0), KILN_ERR_ARG, "kiln_pad");
    kiln_ctx_free(ctx);
}

/* out[i...] = x[i... % shape] for any ndim */
static void repeat_ref(int ndim, const int64_t *shape, const int64_t *reps, int seed, double *want, int64_t *oshape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (oshape[d] = shape[d] * reps[d]);
    for (int64_t i = 0; i < n; i++) {
        int64_t idx[KILN_MAX_DIMS], src = 0;
        mt_unravel(i, ndim, oshape, idx);
        for (int d = 0; d < ndim; d++) src = src * shape[d] + idx[d] % shape[d];
        want[i] = mt_val(src, seed);
    }
}

KT_TEST(movement_repeat_values) {
    kiln_ctx *ctx = kiln_ctx_new();
    struct { int ndim; int64_t shape[6], reps[6]; } cases[] = {
        {2, {2, 3}, {2, 3}},
        {1, {5}, {3}},
        {3, {2, 1, 3}, {1, 4, 1}},
        {4, {2, 3, 2, 2}, {2, 2, 3, 2}},         /* 8 dims at once: more than one pass */
        {6, {1, 2, 1, 2, 1, 2}, {2, 1, 3, 1, 2, 2}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        kiln_tensor *x = mt_leaf(ctx, KILN_F64, cases[c].ndim, cases[c].shape, (int)c);
        kiln_tensor *r = kiln_repeat(ctx, x, cases[c].reps);
        KT_NOTNULL(r);
        KT_OK(mt_compute(ctx, r));
        int64_t oshape[6];
        double want[2048];
        repeat_ref(cases[c].ndim, cases[c].shape, cases[c].reps, (int)c, want, oshape);
        char what[32];
        snprintf(what, sizeof what, "repeat case %zu", c);
        mt_check_close(what, r, cases[c].ndim, oshape, want, 0, 0);
    }
    kiln_tensor *x = mt_leaf(ctx, KILN_F32, 2, (int64_t[]){2, 2}, 0);
    KT_CHECK(kiln_repeat(ctx, x, (int64_t[]){1, 1}) == x, "repeat by ones gives the input");
    MT_FAILS(kiln_repeat(ctx, x, (int64_t[]){1, -1}), KILN_ERR_ARG, "kiln_repeat");
    kiln_ctx_free(ctx);
}

KT_TEST(movement_cast_values) {
    kiln_ctx *ctx = kiln_ctx_new();
    double in[8] = {1.0, -2.5, 3.14159265358979, 1e-3, 65504.0, -0.0, 2.5, 1.0 / 3.0};
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F64, 2, 4);
    KT_OK(kiln_tensor_set_f64(x, in, 8));
    KT_CHECK(kiln_cast(ctx, x, KILN_F64) == x, "cast to the same dtype gives the input");
    kiln_tensor *t = kiln_transpose(ctx, x, 0, 1); /* a strided source */
    double tin[8];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++) tin[i * 2 + j] = in[j * 4 + i];
    kiln_dtype dts[] = {KILN_F32, KILN_F16, KILN_BF16, KILN_I32};
    for (int k = 0; k < 4; k++) {
        kiln_tensor *c = kiln_cast(ctx, t, dts[k]);
        kiln_tensor *back = kiln_cast(ctx, c, KILN_F64);
        KT_NOTNULL(back);
        KT_OK(mt_compute(ctx, back));
        double want[8];
        for (int i = 0; i < 8; i++) {
            float f = (float)tin[i];
            want[i] = dts[k] == KILN_F32   ? f
                    : dts[k] == KILN_F16   ? kiln__f16_to_f32(kiln__f32_to_f16(f))
                    : dts[k] == KILN_BF16  ? kiln__bf16_to_f32(kiln__f32_to_bf16(f))
                                           : (double)lrint(tin[i]); /* round half to even */
        }
        mt_check_close(kiln_dtype_name(dts[k]), back, 2, (int64_t[]){4, 2}, want, 0, 0);
    }
    /* f16 -> f32 and i32 -> f32 from contiguous sources (the row converters) */
    kiln_tensor *h = kiln_cast(ctx, x, KILN_F16), *hf = kiln_cast(ctx, h, KILN_F32);
    kiln_tensor *i32 = kiln_cast(ctx, x, KILN_I32), *i32f = kiln_cast(ctx, i32, KILN_F32);
    KT_OK(mt_compute(ctx, hf));
    KT_OK(mt_compute(ctx, i32f));
    double wh[8], wi[8];
    for (int i = 0; i < 8; i++) {
        wh[i] = kiln__f16_to_f32(kiln__f32_to_f16((float)in[i]));
        wi[i] = (double)lrint(in[i]);
    }
    mt_check_close("f16 -> f32", hf, 2, (int64_t[]){2, 4}, wh, 0, 0);
    mt_check_close("i32 -> f32", i32f, 2, (int64_t[]){2, 4}, wi, 0, 0);
    KT_CHECK(mt_compute(ctx, i32) == KILN_OK && kiln_tensor_get_i32(i32, (int32_t[8]){0}, 8) == KILN_OK,
             "i32 readable");
    MT_FAILS(kiln_cast(ctx, x, (kiln_dtype)99), KILN_ERR_DTYPE, "kiln_cast");
    kiln_ctx_free(ctx);
}

/* ---- error paths ---- */

KT_TEST(movement_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = mt_leaf(ctx, KILN_F32, 3, (int64_t[]){2, 3, 4}, 1);
    KT_NOTNULL(x);
    MT_FAILS(kiln_reshape(ctx, x, 2, (int64_t[]){5, 5}), KILN_ERR_SHAPE, "kiln_reshape");
    MT_FAILS(kiln_reshape(ctx, x, 2, (int64_t[]){5, -1}), KILN_ERR_SHAPE, "kiln_reshape");
    MT_FAILS(kiln_reshape(ctx, x, 2, (int64_t[]){-1, -1}), KILN_ERR_SHAPE, "kiln_reshape");
    MT_FAILS(kiln_reshape(ctx, x, 2, (int64_t[]){0, 24}), KILN_ERR_SHAPE, "kiln_reshape");
    MT_FAILS(kiln_reshape(ctx, x, 7, (int64_t[]){1, 1, 1, 2, 3, 4, 1}), KILN_ERR_SHAPE, "kiln_reshape");
    MT_FAILS(kiln_view(ctx, kiln_transpose(ctx, x, 0, 1), 1, (int64_t[]){24}), KILN_ERR_SHAPE, "kiln_view");
    MT_FAILS(kiln_view(ctx, x, 1, (int64_t[]){25}), KILN_ERR_SHAPE, "kiln_view");
    MT_FAILS(kiln_flatten(ctx, x, 3), KILN_ERR_ARG, "kiln_flatten");
    MT_FAILS(kiln_permute(ctx, x, (int[]){0, 1, 1}), KILN_ERR_ARG, "kiln_permute");
    MT_FAILS(kiln_permute(ctx, x, (int[]){0, 1, 3}), KILN_ERR_ARG, "kiln_permute");
    MT_FAILS(kiln_transpose(ctx, x, 0, -4), KILN_ERR_ARG, "kiln_transpose");
    /* an empty slice is a tensor with a dim of 0, as in torch (tests/test_zero_size.c) */
    KT_CHECK(kiln_tensor_dim(kiln_slice(ctx, x, 1, 2, 2, 1), 1) == 0, "[2:2] is empty");
    KT_CHECK(kiln_tensor_dim(kiln_slice(ctx, x, 1, -1, -1, 1), 1) == 0, "[-1:-1] is empty");
    MT_FAILS(kiln_slice(ctx, x, 1, 0, 3, 0), KILN_ERR_ARG, "kiln_slice");
    MT_FAILS(kiln_slice(ctx, x, 3, 0, 1, 1), KILN_ERR_ARG, "kiln_slice");
    kiln_tensor *y = mt_leaf(ctx, KILN_F32, 3, (int64_t[]){2, 4, 4}, 2);
    MT_FAILS(kiln_concat(ctx, (kiln_tensor *[]){x, y}, 2, 2), KILN_ERR_SHAPE, "kiln_concat");
    MT_FAILS(kiln_concat(ctx, (kiln_tensor *[]){x, kiln_new_2d(ctx, KILN_F32, 2, 3)}, 2, 0), KILN_ERR_SHAPE,
             "kiln_concat");
    MT_FAILS(kiln_concat(ctx, (kiln_tensor *[]){x, kiln_new_3d(ctx, KILN_F64, 2, 3, 4)}, 2, 0), KILN_ERR_DTYPE,
             "kiln_concat");
    MT_FAILS(kiln_concat(ctx, (kiln_tensor *[]){x}, 0, 0), KILN_ERR_ARG, "kiln_concat");
    /* a NULL source keeps the first error */
    kiln_clear_error();
    kiln_tensor *bad = kiln_reshape(ctx, x, 1, (int64_t[]){5});
    KT_CHECK(!bad, "bad reshape");
    KT_CHECK(!kiln_permute(ctx, bad, (int[]){0}) && !kiln_slice(ctx, bad, 0, 0, 1, 1) &&
                 !kiln_concat(ctx, (kiln_tensor *[]){x, bad}, 2, 0) && !kiln_cast(ctx, bad, KILN_F64) &&
                 !kiln_contiguous(ctx, bad) && !kiln_pad(ctx, bad, (int64_t[]){1, 1}, 0) && !kiln_detach(ctx, bad) &&
                 !kiln_repeat(ctx, bad, (int64_t[]){2}) && !kiln_broadcast_to(ctx, bad, 1, (int64_t[]){5}),
             "NULL in, NULL out");
    KT_CHECK(strstr(kiln_last_error(), "kiln_reshape") != NULL, "first error kept: %s", kiln_last_error());
    kiln_ctx_free(ctx);
}

/* ---- gradients ---- */

static kiln_tensor *build_view_chain(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    (void)arg; /* [3, 4, 5] -> transpose -> slice -> reshape -> permute -> flatten */
    kiln_tensor *t = kiln_transpose(ctx, in[0], 0, 2);     /* [5, 4, 3] */
    kiln_tensor *s = kiln_slice(ctx, t, 0, -4, 5, 2);      /* [2, 4, 3] */
    kiln_tensor *r = kiln_reshape(ctx, s, 3, (int64_t[]){2, 2, 6});
    kiln_tensor *p = kiln_permute(ctx, r, (int[]){2, 0, 1});
    return kiln_flatten(ctx, p, 1);
}

static kiln_tensor *build_slice_steps(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    (void)arg; /* two slices that overlap and a view of the input: gradients add */
    kiln_tensor *a = kiln_slice(ctx, in[0], 1, 1, INT64_MAX, 3);
    kiln_tensor *b = kiln_slice(ctx, kiln_transpose(ctx, in[0], 0, 1), 0, 0, 4, 3);
    return kiln_add(ctx, kiln_mul(ctx, a, kiln_transpose(ctx, b, 0, 1)), kiln_slice(ctx, in[0], 1, -2, INT64_MAX, 1));
}

static kiln_tensor *build_expand(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    (void)arg;
    kiln_tensor *b =
        kiln_broadcast_to(ctx, kiln_transpose(ctx, in[0], 0, 1), 4, (int64_t[]){2, -1, 4, 5}); /* [3, 1, 5] */
    return kiln_mul(ctx, b, in[1]);
}

static kiln_tensor *build_concat(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    int n = *(int *)arg; /* in[0] used twice: its gradients add */
    kiln_tensor *parts[12];
    for (int i = 0; i < n; i++) parts[i] = i % 3 == 0 ? in[0] : i % 3 == 1 ? kiln_transpose(ctx, in[1], 0, 1) : in[2];
    return kiln_concat(ctx, parts, n, 1);
}

static kiln_tensor *build_pad(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    (void)arg;
    kiln_tensor *p = kiln_pad(ctx, kiln_transpose(ctx, in[0], 0, 1), (int64_t[]){1, 2, 0, 3}, 0.75);
    return kiln_mul(ctx, p, p); /* the padding value is a constant */
}

static kiln_tensor *build_contiguous_repeat(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    (void)arg;
    kiln_tensor *c = kiln_contiguous(ctx, kiln_permute(ctx, in[0], (int[]){1, 2, 0})); /* [3, 2, 2] */
    kiln_tensor *v = kiln_view(ctx, c, 2, (int64_t[]){3, 4});
    return kiln_repeat(ctx, kiln_mul(ctx, v, v), (int64_t[]){2, 3});
}

KT_TEST(movement_grad_views) {
    gc_check("view chain", build_view_chain, NULL, 1, (gc_input[]){GC_IN(3, 3, 4, 5)}, 11);
    gc_check("slices", build_slice_steps, NULL, 1, (gc_input[]){GC_IN(2, 4, 7)}, 12);
    gc_check("broadcast_to", build_expand, NULL, 2, (gc_input[]){GC_IN(3, 1, 3, 5), GC_IN(4, 2, 3, 4, 5)}, 13);
}

KT_TEST(movement_grad_copies) {
    int three = 3, eleven = 11;
    gc_input cin[3] = {GC_IN(2, 2, 3), GC_IN(2, 2, 2), GC_IN(2, 2, 1)};
    gc_check("concat", build_concat, &three, 3, cin, 21);
    gc_check("concat of 11 parts", build_concat, &eleven, 3, cin, 22);
    gc_check("pad", build_pad, NULL, 1, (gc_input[]){GC_IN(2, 3, 2)}, 23);
    gc_check("contiguous + view + repeat", build_contiguous_repeat, NULL, 1, (gc_input[]){GC_IN(3, 2, 3, 2)}, 24);
}

/* The gradient of a slice (a slice_scatter node) as a function of the
 * upstream gradient: its own gradient is a slice again. */
static kiln_tensor *build_slice_scatter(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    (void)arg;
    kiln_tensor *y = kiln_slice(ctx, in[0], 1, 1, 8, 3); /* [3, 3] of [3, 8] */
    kiln_tensor *g = NULL;
    if (kiln__vjp(ctx, y, kiln_transpose(ctx, in[1], 0, 1), 1, &in[0], &g)) return NULL;
    return g;
}

KT_TEST(movement_grad_slice_scatter) {
    gc_check("slice_scatter", build_slice_scatter, NULL, 2, (gc_input[]){GC_IN(2, 3, 8), GC_IN(2, 3, 3)}, 31);
}

/* x [2, 7, 3] split along axis 1 into parts used apart (an attention's q,
 * k and v sliced from one projection); *(int *)arg parts: 3 cover x, 2
 * leave a gap, 4 has two that overlap. */
static kiln_tensor *split_parts(kiln_ctx *ctx, kiln_tensor *x, int n) {
    kiln_tensor *a = kiln_slice(ctx, x, 1, 0, 2, 1), *b = kiln_slice(ctx, x, 1, 2, 5, 1), *c = kiln_slice(ctx, x, 1, 5, 7, 1);
    kiln_tensor *parts[4] = {c, kiln_tanh(ctx, a), kiln_mul(ctx, b, b), kiln_slice(ctx, x, 1, 1, 4, 1)};
    if (n == 2) parts[1] = kiln_tanh(ctx, a), parts[0] = kiln_scale(ctx, c, 2.0);
    return kiln_concat(ctx, parts, n, 1);
}

static kiln_tensor *build_split(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    return split_parts(ctx, in[0], *(int *)arg);
}

/* The parts' gradients add up to x's: when they cover x, as one concat of
 * them (no zero-filled x-sized tensor per part). */
KT_TEST(movement_grad_split_parts) {
    for (int n = 2; n <= 4; n++) {
        char what[32];
        snprintf(what, sizeof what, "%d parts of a split", n);
        gc_check(what, build_split, &n, 1, (gc_input[]){GC_IN(3, 2, 7, 3)}, 41 + (uint64_t)n);
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *x = mt_leaf(ctx, KILN_F64, 3, (int64_t[]){2, 7, 3}, 5), *g = NULL;
        KT_OK(kiln_tensor_set_requires_grad(x, true));
        kiln_tensor *y = split_parts(ctx, x, n);
        KT_OK(kiln__vjp(ctx, y, kiln__full_like(ctx, y, 1.0), 1, &x, &g));
        KT_CHECK(g && (g->op == KILN_OP_CONCAT) == (n == 3), "%s: x's gradient is %s", what, kiln_op_name_of(g));
        kiln_ctx_free(ctx);
    }
}

KT_TEST(movement_grad_cast) {
    /* loss = sum(cast(x, f64) * w) in f64 for an f32 parameter: grad = w in f32 */
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_param(ctx, "x", KILN_F32, 2, (int64_t[]){3, 4});
    kiln_tensor *w = mt_leaf(ctx, KILN_F64, 2, (int64_t[]){4, 3}, 3);
    KT_NOTNULL(x);
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, kiln_cast(ctx, kiln_transpose(ctx, x, 0, 1), KILN_F64), w));
    KT_OK(mt_compute_backward(ctx, loss));
    KT_CHECK(kiln_tensor_dtype(kiln_tensor_grad(x)) == KILN_F32, "f32 gradient");
    double want[12];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) want[i * 4 + j] = (float)mt_val(j * 3 + i, 3);
    mt_check_close("grad through cast", kiln_tensor_grad(x), 2, (int64_t[]){3, 4}, want, 0, 0);
    /* an integer cast carries no gradient */
    KT_CHECK(!kiln_tensor_requires_grad(kiln_cast(ctx, x, KILN_I32)), "i32 cast needs no grad");
    kiln_ctx_free(ctx);
}

KT_TEST(movement_detach_stops_gradient) {
    /* finite differences see through detach, so check by hand: d/dx sum(x * detach(x)) = x */
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_param(ctx, "x", KILN_F64, 2, (int64_t[]){2, 3});
    KT_NOTNULL(x);
    double xv[6];
    for (int i = 0; i < 6; i++) xv[i] = mt_val(i, 9);
    KT_OK(kiln_tensor_set_f64(x, xv, 6));
    kiln_tensor *d = kiln_detach(ctx, kiln_transpose(ctx, x, 0, 1));
    KT_NOTNULL(d);
    KT_CHECK(!kiln_tensor_requires_grad(d) && kiln_tensor_data(d) == kiln_tensor_data(x), "a view without grad");
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, x, kiln_transpose(ctx, d, 0, 1)));
    KT_OK(mt_compute_backward(ctx, loss));
    mt_check_close("grad through detach", kiln_tensor_grad(x), 2, (int64_t[]){2, 3}, xv, 0, 0);
    kiln_ctx_free(ctx);
}

KT_TEST(movement_slice_assign_in_place) {
    /* two writes into a [2, 5, 3] cache along axis 1 (the second through the
     * first's result), a transposed source; values and gradients by hand */
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *cache = kiln_new_3d(ctx, KILN_F32, 2, 5, 3);
    kiln_tensor *a = kiln_param(ctx, "a", KILN_F32, 3, (int64_t[]){2, 3, 2}); /* transposed to [2, 2, 3] */
    kiln_tensor *b = kiln_param(ctx, "b", KILN_F32, 3, (int64_t[]){2, 1, 3});
    KT_NOTNULL(cache && a && b);
    KT_OK(kiln_tensor_fill(cache, -1.0));
    float av[12], bv[6];
    for (int i = 0; i < 12; i++) av[i] = (float)(i + 1);
    for (int i = 0; i < 6; i++) bv[i] = (float)(100 + i);
    KT_OK(kiln_tensor_set_f32(a, av, 12));
    KT_OK(kiln_tensor_set_f32(b, bv, 6));
    kiln_tensor *t1 = kiln_slice_assign(ctx, cache, kiln_transpose(ctx, a, 1, 2), 1, 1);
    kiln_tensor *t2 = kiln_slice_assign(ctx, t1, b, 1, 4);
    kiln_tensor *seen = kiln_slice(ctx, t2, 1, 0, 5, 1); /* a read ordered after both writes */
    kiln_tensor *w = kiln_new_3d(ctx, KILN_F32, 2, 5, 3);
    KT_NOTNULL(seen && w);
    float wv[30];
    for (int i = 0; i < 30; i++) wv[i] = (float)(i % 7);
    KT_OK(kiln_tensor_set_f32(w, wv, 30));
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, seen, w));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    KT_OK(kiln_graph_compute(g));
    float got[30], want[30];
    KT_OK(kiln_tensor_get_f32(cache, got, 30));
    for (int n = 0; n < 2; n++)
        for (int p = 0; p < 5; p++)
            for (int c = 0; c < 3; c++) {
                float v = -1.0f;
                if (p == 1 || p == 2) v = av[n * 6 + c * 2 + (p - 1)];
                if (p == 4) v = bv[n * 3 + c];
                want[(n * 5 + p) * 3 + c] = v;
            }
    for (int i = 0; i < 30; i++) KT_CHECK(got[i] == want[i], "cache[%d] = %g, want %g", i, got[i], want[i]);
    float ga[12], gb[6];
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(a), ga, 12));
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(b), gb, 6));
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 3; c++) {
            for (int p = 0; p < 2; p++)
                KT_CHECK(ga[n * 6 + c * 2 + p] == wv[(n * 5 + 1 + p) * 3 + c], "grad a");
            KT_CHECK(gb[n * 3 + c] == wv[(n * 5 + 4) * 3 + c], "grad b");
        }
    /* a leaf that requires grad is refused, as torch refuses it */
    KT_EXPECT_ERR(kiln_slice_assign(ctx, a, a, 0, 0), KILN_ERR_ARG, "requires grad");
    kiln_ctx_free(ctx);
}
