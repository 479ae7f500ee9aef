/* test_rows.c — get_rows (every table dtype), its gradient scatter_add_rows
 * with repeated indices, one_hot, an index out of range reported by
 * kiln_graph_compute, and the constructors' error paths. */
#include "internal.h"
#include "test_mov_util.h"

KT_TEST(rows_get_rows_values) {
    kiln_ctx *ctx = kiln_ctx_new();
    int32_t iv[6] = {3, 0, 3, 9, 1, 3};
    kiln_tensor *idx = kiln_new_2d(ctx, KILN_I32, 2, 3);
    KT_OK(kiln_tensor_set_i32(idx, iv, 6));
    for (int dt = 0; dt < KILN_I32; dt++) {
        kiln_dtype d = (kiln_dtype)dt;
        kiln_tensor *table = mt_leaf(ctx, d, 2, (int64_t[]){10, 4}, 1);
        kiln_tensor *y = kiln_get_rows(ctx, table, idx);
        KT_NOTNULL(y);
        KT_CHECK(kiln_tensor_dtype(y) == (d == KILN_F64 ? KILN_F64 : KILN_F32), "result dtype for a %s table",
                 kiln_dtype_name(d));
        KT_OK(mt_compute(ctx, y));
        double tv[40], want[24];
        KT_OK(kiln_tensor_get_f64(table, tv, 40));
        for (int p = 0; p < 6; p++)
            for (int j = 0; j < 4; j++) want[p * 4 + j] = tv[iv[p] * 4 + j];
        mt_check_close(kiln_dtype_name(d), y, 3, (int64_t[]){2, 3, 4}, want, 0, 0);
    }
    /* a transposed table and strided indices are made contiguous first */
    kiln_tensor *t = mt_leaf(ctx, KILN_F32, 2, (int64_t[]){4, 10}, 2);
    kiln_tensor *y = kiln_get_rows(ctx, kiln_transpose(ctx, t, 0, 1), kiln_transpose(ctx, idx, 0, 1));
    KT_NOTNULL(y);
    KT_OK(mt_compute(ctx, y));
    double want[24];
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 2; b++)
            for (int j = 0; j < 4; j++) want[(a * 2 + b) * 4 + j] = (float)mt_val(j * 10 + iv[b * 3 + a], 2);
    mt_check_close("strided table and indices", y, 3, (int64_t[]){3, 2, 4}, want, 0, 0);
    kiln_ctx_free(ctx);
}

KT_TEST(rows_get_rows_large_threaded) {
    /* above the threading threshold, with every row used several times */
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t v = 50, d = 300, n = 400;
    kiln_tensor *table = mt_leaf(ctx, KILN_F32, 2, (int64_t[]){v, d}, 3), *idx = kiln_new_1d(ctx, KILN_I32, n);
    int32_t *iv = kiln_tensor_data(idx);
    for (int64_t p = 0; p < n; p++) iv[p] = (int32_t)((p * 7) % v);
    kiln_tensor *y = kiln_get_rows(ctx, table, idx);
    KT_NOTNULL(y);
    KT_OK(mt_compute(ctx, y));
    double *want = malloc((size_t)(n * d) * sizeof *want);
    KT_NOTNULL(want);
    for (int64_t p = 0; p < n; p++)
        for (int64_t j = 0; j < d; j++) want[p * d + j] = (float)mt_val(iv[p] * d + j, 3);
    mt_check_close("get_rows 400 x 300", y, 2, (int64_t[]){n, d}, want, 0, 0);
    free(want);
    kiln_ctx_free(ctx);
}

KT_TEST(rows_get_rows_index_out_of_range) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *table = mt_leaf(ctx, KILN_F32, 2, (int64_t[]){10, 3}, 1), *idx = kiln_new_1d(ctx, KILN_I32, 5);
    KT_OK(kiln_tensor_set_i32(idx, (int32_t[]){1, 2, 9, 12, 0}, 5));
    kiln_tensor *y = kiln_get_rows(ctx, table, idx);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_NOTNULL(y);
    KT_OK(kiln_graph_add(g, y));
    kiln_clear_error();
    KT_CHECK(kiln_graph_compute(g) == KILN_ERR_ARG, "compute status %s", kiln_status_name(kiln_last_status()));
    KT_CHECK(!strcmp(kiln_last_error(), "kiln_get_rows: index 12 at position 3 is outside [0, 10)"), "message: %s",
             kiln_last_error());
    /* a negative index, and the same graph recovers once the indices are fixed */
    KT_OK(kiln_tensor_set_i32(idx, (int32_t[]){-1, 2, 9, 3, 0}, 5));
    KT_CHECK(kiln_graph_compute(g) == KILN_ERR_ARG && strstr(kiln_last_error(), "index -1 at position 0"), "%s",
             kiln_last_error());
    KT_OK(kiln_tensor_set_i32(idx, (int32_t[]){4, 2, 9, 3, 0}, 5));
    KT_OK(kiln_graph_compute(g));
    float out[15];
    KT_OK(kiln_tensor_get_f32(y, out, 15));
    KT_CHECK(out[0] == (float)mt_val(12, 1) && out[14] == (float)mt_val(2, 1), "values after the fix");
    kiln_ctx_free(ctx);
}

static const int32_t REPEATED[8] = {2, 0, 2, 4, 2, 0, 1, 2}; /* row 3 never used, row 2 four times */

static kiln_tensor *build_get_rows(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    (void)arg;
    return kiln_get_rows(ctx, in[0], in[1]);
}

static kiln_tensor *build_get_rows_strided(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    (void)arg; /* a transposed table: the gradient flows back through the copy and the permute */
    return kiln_get_rows(ctx, kiln_transpose(ctx, in[0], 0, 1), in[1]);
}

/* The gradient of get_rows (a scatter_add_rows node) as a function of the
 * upstream gradient in[2]: its own gradient is get_rows again. */
static kiln_tensor *build_scatter(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    (void)arg;
    kiln_tensor *y = kiln_get_rows(ctx, in[0], in[1]);
    kiln_tensor *g = NULL;
    if (kiln__vjp(ctx, y, in[2], 1, &in[0], &g)) return NULL;
    return g;
}

KT_TEST(rows_grad_repeated_indices) {
    gc_input idx24 = {.ndim = 2, .shape = {2, 4}, .is_index = true, .ivalues = REPEATED};
    gc_check("get_rows", build_get_rows, NULL, 2, (gc_input[]){GC_IN(2, 5, 3), idx24}, 81);
    gc_check("get_rows of a transposed table", build_get_rows_strided, NULL, 2, (gc_input[]){GC_IN(2, 3, 5), idx24},
             82);
    gc_check("scatter_add_rows", build_scatter, NULL, 3, (gc_input[]){GC_IN(2, 5, 3), idx24, GC_IN(3, 2, 4, 3)}, 83);
}

KT_TEST(rows_scatter_add_accumulates) {
    /* d/dtable sum(get_rows(table, idx) * w): row r gets the sum of w's rows with idx == r */
    kiln_ctx *ctx = kiln_ctx_new();
    for (int dt = 0; dt < 2; dt++) {
        kiln_dtype d = dt ? KILN_F64 : KILN_F32;
        kiln_tensor *table = kiln_param(ctx, dt ? "emb64" : "emb32", d, 2, (int64_t[]){5, 70}),
                    *idx = kiln_new_1d(ctx, KILN_I32, 8);
        KT_OK(kiln_tensor_set_i32(idx, REPEATED, 8));
        kiln_tensor *w = mt_leaf(ctx, d, 2, (int64_t[]){8, 70}, 4);
        kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, kiln_get_rows(ctx, table, idx), w));
        KT_OK(mt_compute_backward(ctx, loss));
        double want[350] = {0};
        for (int p = 0; p < 8; p++)
            for (int j = 0; j < 70; j++)
                want[REPEATED[p] * 70 + j] += dt ? mt_val(p * 70 + j, 4) : (float)mt_val(p * 70 + j, 4);
        mt_check_close(kiln_dtype_name(d), kiln_tensor_grad(table), 2, (int64_t[]){5, 70}, want, 1e-6, 1e-6);
    }
    kiln_ctx_free(ctx);
}

KT_TEST(rows_one_hot_values) {
    kiln_ctx *ctx = kiln_ctx_new();
    int32_t lv[6] = {0, 3, -1, 2, 4, 3};
    kiln_tensor *labels = kiln_new_2d(ctx, KILN_I32, 3, 2);
    KT_OK(kiln_tensor_set_i32(labels, lv, 6));
    for (int dt = 0; dt < KILN_I32; dt++) {
        kiln_tensor *y = kiln_one_hot(ctx, kiln_transpose(ctx, labels, 0, 1), 4, (kiln_dtype)dt);
        KT_NOTNULL(y);
        KT_CHECK(kiln_tensor_dtype(y) == (kiln_dtype)dt, "dtype");
        KT_OK(mt_compute(ctx, y));
        double want[24];
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 3; b++)
                for (int c = 0; c < 4; c++) want[(a * 3 + b) * 4 + c] = lv[b * 2 + a] == c; /* -1 and 4: zero rows */
        mt_check_close(kiln_dtype_name((kiln_dtype)dt), y, 3, (int64_t[]){2, 3, 4}, want, 0, 0);
    }
    kiln_ctx_free(ctx);
}

KT_TEST(rows_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *table = kiln_new_2d(ctx, KILN_F32, 10, 4), *idx = kiln_new_1d(ctx, KILN_I32, 3);
    MT_FAILS(kiln_get_rows(ctx, kiln_new_3d(ctx, KILN_F32, 2, 5, 4), idx), KILN_ERR_SHAPE, "kiln_get_rows");
    MT_FAILS(kiln_get_rows(ctx, kiln_new_2d(ctx, KILN_I32, 10, 4), idx), KILN_ERR_DTYPE, "kiln_get_rows");
    MT_FAILS(kiln_get_rows(ctx, table, kiln_new_1d(ctx, KILN_F32, 3)), KILN_ERR_DTYPE, "kiln_get_rows");
    MT_FAILS(kiln_get_rows(ctx, table, kiln_tensor_new(ctx, KILN_I32, 6, (int64_t[]){1, 1, 1, 1, 1, 2})),
             KILN_ERR_SHAPE, "kiln_get_rows");
    MT_FAILS(kiln_one_hot(ctx, kiln_new_1d(ctx, KILN_F32, 3), 4, KILN_F32), KILN_ERR_DTYPE, "kiln_one_hot");
    MT_FAILS(kiln_one_hot(ctx, idx, 4, KILN_I32), KILN_ERR_DTYPE, "kiln_one_hot");
    MT_FAILS(kiln_one_hot(ctx, idx, -1, KILN_F32), KILN_ERR_ARG, "kiln_one_hot");
    /* half-precision tables are looked up but not trained */
    kiln_tensor *h = kiln_param(ctx, "h", KILN_F16, 2, (int64_t[]){10, 4});
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_get_rows(ctx, h, idx));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_NOTNULL(loss);
    KT_OK(kiln_graph_add(g, loss));
    KT_CHECK(kiln_graph_backward(g, loss) == KILN_ERR_UNSUPPORTED && strstr(kiln_last_error(), "kiln_get_rows"),
             "f16 table backward: %s", kiln_last_error());
    /* NULL in, NULL out, first error kept */
    kiln_clear_error();
    kiln_tensor *bad = kiln_get_rows(ctx, table, kiln_new_1d(ctx, KILN_F32, 3));
    KT_CHECK(!bad && !kiln_get_rows(ctx, bad, idx) && !kiln_get_rows(ctx, table, bad) &&
                 !kiln_one_hot(ctx, bad, 3, KILN_F32),
             "NULL in, NULL out");
    KT_CHECK(strstr(kiln_last_error(), "indices must be i32") != NULL, "first error kept: %s", kiln_last_error());
    kiln_ctx_free(ctx);
}

KT_TEST(rows_scatter_add_large_threaded) {
    /* 600 indices into 7 rows of 64: above the threading threshold, threads
     * split the columns and every row is hit many times */
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t v = 7, d = 64, n = 600;
    kiln_tensor *table = kiln_param(ctx, "emb", KILN_F64, 2, (int64_t[]){v, d}), *idx = kiln_new_1d(ctx, KILN_I32, n);
    int32_t *iv = kiln_tensor_data(idx);
    for (int64_t p = 0; p < n; p++) iv[p] = (int32_t)((p * 5) % v);
    kiln_tensor *w = mt_leaf(ctx, KILN_F64, 2, (int64_t[]){n, d}, 6);
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, kiln_get_rows(ctx, table, idx), w));
    KT_OK(mt_compute_backward(ctx, loss));
    double want[7 * 64] = {0};
    for (int64_t p = 0; p < n; p++)
        for (int64_t j = 0; j < d; j++) want[iv[p] * d + j] += mt_val(p * d + j, 6);
    mt_check_close("scatter-add 600 x 64", kiln_tensor_grad(table), 2, (int64_t[]){v, d}, want, 1e-12, 1e-12);
    kiln_ctx_free(ctx);
}
