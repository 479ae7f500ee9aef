/* test_matmul.c — matmul, matmul_t and linear: values against a double
 * loop reference (every transpose combination, broadcast batch dims, the
 * folded-batch path, f32 at sizes up to 300), gradient checks and the
 * error paths. */
#include "test_mov_util.h"

typedef struct {
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
} mm_shape;

/* out = op(a) @ op(b) with NumPy batch broadcasting, in double. Fills
 * the output shape; returns its element count. */
static int64_t matmul_ref(const double *a, mm_shape sa, bool ta, const double *b, mm_shape sb, bool tb, double *out,
                          mm_shape *so) {
    int64_t m = sa.shape[sa.ndim - (ta ? 1 : 2)], k = sa.shape[sa.ndim - (ta ? 2 : 1)];
    int64_t n = sb.shape[sb.ndim - (tb ? 2 : 1)];
    int nba = sa.ndim - 2, nbb = sb.ndim - 2, nb = nba > nbb ? nba : nbb;
    so->ndim = nb + 2;
    for (int i = 0; i < nb; i++) {
        int64_t da = i - (nb - nba) >= 0 ? sa.shape[i - (nb - nba)] : 1,
                db = i - (nb - nbb) >= 0 ? sb.shape[i - (nb - nbb)] : 1;
        so->shape[i] = da > db ? da : db;
    }
    so->shape[nb] = m;
    so->shape[nb + 1] = n;
    int64_t batch = 1;
    for (int i = 0; i < nb; i++) batch *= so->shape[i];
    for (int64_t p = 0; p < batch; p++) {
        int64_t idx[KILN_MAX_DIMS], oa = 0, ob = 0;
        mt_unravel(p, nb, so->shape, idx);
        for (int i = 0; i < nb; i++) {
            int ia = i - (nb - nba), ib = i - (nb - nbb);
            if (ia >= 0) oa = oa * sa.shape[ia] + (sa.shape[ia] == 1 ? 0 : idx[i]);
            if (ib >= 0) ob = ob * sb.shape[ib] + (sb.shape[ib] == 1 ? 0 : idx[i]);
        }
        const double *A = a + oa * m * k, *B = b + ob * k * n;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t q = 0; q < k; q++)
                    s += (ta ? A[q * m + i] : A[i * k + q]) * (tb ? B[j * k + q] : B[q * n + j]);
                out[(p * m + i) * n + j] = s;
            }
    }
    return batch * m * n;
}

static const char *shape_str(mm_shape s, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < s.ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, i ? ", %lld" : "%lld", (long long)s.shape[i]);
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}

/* Compute op(a) @ op(b) in dtype dt from mt_val inputs and compare with the reference. */
static void check_matmul(kiln_dtype dt, mm_shape sa, bool ta, mm_shape sb, bool tb, double atol, double rtol) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = mt_leaf(ctx, dt, sa.ndim, sa.shape, 1), *b = mt_leaf(ctx, dt, sb.ndim, sb.shape, 2);
    kiln_tensor *c = kiln_matmul_t(ctx, a, ta, b, tb);
    char what[160], s1[64], s2[64];
    snprintf(what, sizeof what, "%s %s%s @ %s%s", kiln_dtype_name(dt), shape_str(sa, s1, sizeof s1), ta ? "^T" : "",
             shape_str(sb, s2, sizeof s2), tb ? "^T" : "");
    if (!c || mt_compute(ctx, c)) {
        kt_fail(__FILE__, __LINE__, "%s: %s", what, kiln_last_error());
        kiln_ctx_free(ctx);
        return;
    }
    int64_t na = kiln_tensor_numel(a), nb = kiln_tensor_numel(b);
    double *av = malloc((size_t)na * sizeof *av), *bv = malloc((size_t)nb * sizeof *bv);
    double *want = malloc((size_t)kiln_tensor_numel(c) * sizeof *want);
    if (av && bv && want && !kiln_tensor_get_f64(a, av, na) && !kiln_tensor_get_f64(b, bv, nb)) {
        mm_shape so;
        matmul_ref(av, sa, ta, bv, sb, tb, want, &so);
        mt_check_close(what, c, so.ndim, so.shape, want, atol, rtol);
    } else kt_fail(__FILE__, __LINE__, "%s: set-up failed", what);
    free(av);
    free(bv);
    free(want);
    kiln_ctx_free(ctx);
}

#define SH(nd, ...) ((mm_shape){(nd), {__VA_ARGS__}})

KT_TEST(matmul_values_f64) {
    /* every transpose combination (operands stored as the flags say) */
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        check_matmul(KILN_F64, ta ? SH(2, 4, 3) : SH(2, 3, 4), ta, tb ? SH(2, 5, 4) : SH(2, 4, 5), tb, 1e-12, 1e-12);
        /* batch dims broadcast both ways: [2, 1] with [5] */
        check_matmul(KILN_F64, ta ? SH(4, 2, 1, 4, 3) : SH(4, 2, 1, 3, 4), ta, tb ? SH(3, 5, 6, 4) : SH(3, 5, 4, 6),
                     tb, 1e-12, 1e-12);
        /* a 2-D b shared by a batch (the folded path when a is not transposed) */
        check_matmul(KILN_F64, ta ? SH(3, 4, 5, 3) : SH(3, 4, 3, 5), ta, tb ? SH(2, 2, 5) : SH(2, 5, 2), tb, 1e-12,
                     1e-12);
        /* a 2-D a shared by a batch of b */
        check_matmul(KILN_F64, ta ? SH(2, 5, 3) : SH(2, 3, 5), ta, tb ? SH(3, 4, 2, 5) : SH(3, 4, 5, 2), tb, 1e-12,
                     1e-12);
    }
    /* attention-like [B, H, T, D] @ [B, H, D, S], and b with a leading 1 */
    check_matmul(KILN_F64, SH(4, 2, 3, 4, 5), false, SH(4, 2, 3, 5, 6), false, 1e-12, 1e-12);
    check_matmul(KILN_F64, SH(3, 4, 3, 5), false, SH(3, 1, 5, 2), false, 1e-12, 1e-12);
    check_matmul(KILN_F64, SH(2, 1, 1), false, SH(2, 1, 1), false, 1e-12, 1e-12);
}

KT_TEST(matmul_values_f32_sizes) {
    /* f32 against the double reference; the error grows with K */
    int64_t sizes[][3] = {{1, 1, 1}, {7, 13, 5}, {64, 33, 70}, {300, 257, 130}};
    for (int i = 0; i < 4; i++) {
        int64_t m = sizes[i][0], k = sizes[i][1], n = sizes[i][2];
        double atol = 2e-6 * (double)k;
        check_matmul(KILN_F32, SH(2, m, k), false, SH(2, k, n), false, atol, 1e-5);
        check_matmul(KILN_F32, SH(2, k, m), true, SH(2, n, k), true, atol, 1e-5);
    }
    check_matmul(KILN_F32, SH(3, 3, 100, 260), false, SH(2, 70, 260), true, 2e-6 * 260, 1e-5);
    check_matmul(KILN_F32, SH(4, 2, 1, 40, 30), true, SH(3, 3, 40, 20), false, 2e-6 * 40, 1e-5);
}

KT_TEST(matmul_transposed_view_is_not_copied) {
    /* a @ transpose(b) reads b through the transpose flag: no copy node */
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = mt_leaf(ctx, KILN_F64, 3, (int64_t[]){2, 3, 4}, 1),
                *b = mt_leaf(ctx, KILN_F64, 2, (int64_t[]){5, 4}, 2);
    kiln_tensor *c = kiln_matmul(ctx, a, kiln_transpose(ctx, b, 0, 1));
    kiln_tensor *d =
        kiln_matmul(ctx, kiln_transpose(ctx, c, -1, -2), kiln_slice(ctx, c, 0, 0, 1, 1)); /* [2,5,3]@[1,3,5] */
    kiln_graph *g = kiln_graph_new(ctx);
    KT_NOTNULL(d);
    KT_OK(kiln_graph_add(g, c));
    KT_OK(kiln_graph_add(g, d));
    KT_OK(kiln_graph_compute(g));
    for (int i = 0; i < kiln_graph_n_nodes(g); i++)
        KT_CHECK(strcmp(kiln_op_name_of(kiln_graph_node(g, i)), "contiguous"), "node %d is a copy", i);
    double av[24], bv[20], cv[30], want[50];
    KT_OK(kiln_tensor_get_f64(a, av, 24));
    KT_OK(kiln_tensor_get_f64(b, bv, 20));
    mm_shape so;
    matmul_ref(av, SH(3, 2, 3, 4), false, bv, SH(2, 5, 4), true, want, &so);
    mt_check_close("a @ b^T", c, so.ndim, so.shape, want, 1e-12, 1e-12);
    memcpy(cv, want, sizeof cv);
    matmul_ref(cv, SH(3, 2, 3, 5), true, cv, SH(3, 1, 3, 5), false, want, &so);
    mt_check_close("c^T @ c[0:1]", d, so.ndim, so.shape, want, 1e-12, 1e-12);
    kiln_ctx_free(ctx);
}

typedef struct {
    bool ta, tb, slice_a;
} mm_case;

static kiln_tensor *build_matmul(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    const mm_case *c = arg;
    kiln_tensor *a = c->slice_a ? kiln_slice(ctx, in[0], -1, 1, INT64_MAX, 2) : in[0]; /* a non-contiguous a */
    return kiln_matmul_t(ctx, a, c->ta, in[1], c->tb);
}

KT_TEST(matmul_grad_transposes_and_broadcast) {
    for (int t = 0; t < 4; t++) {
        mm_case c = {t & 1, t & 2, false};
        char what[48];
        snprintf(what, sizeof what, "matmul_t(%d, %d)", c.ta, c.tb);
        /* a [2, 1, M, K] with b [3, K, N]: both broadcast over the batch */
        gc_input in[2] = {c.ta ? GC_IN(4, 2, 1, 4, 3) : GC_IN(4, 2, 1, 3, 4),
                          c.tb ? GC_IN(3, 3, 2, 4) : GC_IN(3, 3, 4, 2)};
        gc_check(what, build_matmul, &c, 2, in, 40 + (uint64_t)t);
        /* a 2-D b shared by a batched a (the folded path) */
        gc_input in2[2] = {c.ta ? GC_IN(3, 2, 4, 3) : GC_IN(3, 2, 3, 4), c.tb ? GC_IN(2, 5, 4) : GC_IN(2, 4, 5)};
        gc_check(what, build_matmul, &c, 2, in2, 50 + (uint64_t)t);
        /* a sliced (strided) a, 2-D */
        c.slice_a = true;
        gc_input in3[2] = {c.ta ? GC_IN(2, 3, 5) : GC_IN(2, 4, 6), c.tb ? GC_IN(2, 2, 3) : GC_IN(2, 3, 2)};
        gc_check(what, build_matmul, &c, 2, in3, 60 + (uint64_t)t);
    }
}

static kiln_tensor *build_matmul_transposed_views(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    (void)arg; /* operands that are transposed views take the flag path */
    return kiln_matmul(ctx, kiln_transpose(ctx, in[0], -1, -2), kiln_transpose(ctx, in[1], 0, 1));
}

static kiln_tensor *build_linear(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    return kiln_linear(ctx, in[0], in[1], arg ? in[2] : NULL);
}

KT_TEST(matmul_grad_views_and_linear) {
    gc_check("matmul of transposed views", build_matmul_transposed_views, NULL, 2,
             (gc_input[]){GC_IN(3, 2, 4, 3), GC_IN(2, 5, 4)}, 71);
    int yes = 1;
    gc_check("linear 3-D with bias", build_linear, &yes, 3,
             (gc_input[]){GC_IN(3, 2, 3, 4), GC_IN(2, 5, 4), GC_IN(1, 5)}, 72);
    gc_check("linear 1-D", build_linear, &yes, 3, (gc_input[]){GC_IN(1, 4), GC_IN(2, 3, 4), GC_IN(1, 3)}, 73);
    gc_check("linear without bias", build_linear, NULL, 2, (gc_input[]){GC_IN(2, 6, 4), GC_IN(2, 3, 4)}, 74);
}

KT_TEST(matmul_linear_values) {
    kiln_ctx *ctx = kiln_ctx_new();
    for (int dt = 0; dt < 2; dt++) {
        kiln_dtype d = dt ? KILN_F64 : KILN_F32;
        kiln_tensor *x = mt_leaf(ctx, d, 3, (int64_t[]){2, 3, 4}, 1), *w = mt_leaf(ctx, d, 2, (int64_t[]){5, 4}, 2);
        kiln_tensor *b = mt_leaf(ctx, d, 1, (int64_t[]){5}, 3);
        kiln_tensor *x1 = kiln_slice(ctx, kiln_reshape(ctx, x, 1, (int64_t[]){24}), 0, 0, 4, 1); /* row 0 of x */
        kiln_tensor *y = kiln_linear(ctx, x, w, b), *y1 = kiln_linear(ctx, x1, w, NULL);
        KT_NOTNULL(y);
        KT_NOTNULL(y1);
        KT_OK(mt_compute(ctx, y));
        KT_OK(mt_compute(ctx, y1));
        double xv[24], wv[20], bv[5], want[30];
        KT_OK(kiln_tensor_get_f64(x, xv, 24));
        KT_OK(kiln_tensor_get_f64(w, wv, 20));
        KT_OK(kiln_tensor_get_f64(b, bv, 5));
        for (int r = 0; r < 6; r++)
            for (int o = 0; o < 5; o++) {
                double s = bv[o];
                for (int i = 0; i < 4; i++) s += xv[r * 4 + i] * wv[o * 4 + i];
                want[r * 5 + o] = s;
            }
        double tol = dt ? 1e-12 : 1e-5;
        mt_check_close("linear", y, 3, (int64_t[]){2, 3, 5}, want, tol, tol);
        for (int o = 0; o < 5; o++) want[o] -= bv[o];
        mt_check_close("linear of a vector", y1, 1, (int64_t[]){5}, want, tol, tol);
    }
    kiln_ctx_free(ctx);
}

KT_TEST(matmul_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_new_2d(ctx, KILN_F32, 2, 3), *b = kiln_new_2d(ctx, KILN_F32, 4, 5);
    kiln_tensor *v = kiln_new_1d(ctx, KILN_F32, 3);
    MT_FAILS(kiln_matmul(ctx, a, b), KILN_ERR_SHAPE, "kiln_matmul");
    KT_CHECK(strstr(kiln_last_error(), "[2, 3]") && strstr(kiln_last_error(), "[4, 5]"), "names both shapes: %s",
             kiln_last_error());
    MT_FAILS(kiln_matmul_t(ctx, a, true, b, false), KILN_ERR_SHAPE, "kiln_matmul");
    MT_FAILS(kiln_matmul(ctx, v, kiln_new_2d(ctx, KILN_F32, 3, 2)), KILN_ERR_SHAPE, "kiln_matmul");
    KT_CHECK(strstr(kiln_last_error(), "2-D") != NULL, "says operands must be 2-D: %s", kiln_last_error());
    MT_FAILS(kiln_matmul(ctx, a, v), KILN_ERR_SHAPE, "kiln_matmul");
    MT_FAILS(kiln_matmul(ctx, kiln_new_3d(ctx, KILN_F32, 2, 2, 3), kiln_new_3d(ctx, KILN_F32, 3, 3, 2)), KILN_ERR_SHAPE,
             "kiln_matmul");
    MT_FAILS(kiln_matmul(ctx, a, kiln_new_2d(ctx, KILN_F64, 3, 2)), KILN_ERR_DTYPE, "kiln_matmul");
    MT_FAILS(kiln_matmul(ctx, kiln_new_2d(ctx, KILN_I32, 2, 3), kiln_new_2d(ctx, KILN_I32, 3, 2)), KILN_ERR_DTYPE,
             "kiln_matmul");
    MT_FAILS(kiln_matmul(ctx, kiln_new_2d(ctx, KILN_F16, 2, 3), kiln_new_2d(ctx, KILN_BF16, 3, 2)), KILN_ERR_DTYPE,
             "kiln_matmul");
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 6, 4), *w = kiln_new_2d(ctx, KILN_F32, 5, 4);
    MT_FAILS(kiln_linear(ctx, x, kiln_new_1d(ctx, KILN_F32, 4), NULL), KILN_ERR_SHAPE, "kiln_linear");
    MT_FAILS(kiln_linear(ctx, x, kiln_new_2d(ctx, KILN_F32, 5, 3), NULL), KILN_ERR_SHAPE, "kiln_linear");
    MT_FAILS(kiln_linear(ctx, x, w, kiln_new_1d(ctx, KILN_F32, 4)), KILN_ERR_SHAPE, "kiln_linear");
    MT_FAILS(kiln_linear(ctx, x, w, kiln_new_1d(ctx, KILN_F64, 5)), KILN_ERR_DTYPE, "kiln_linear");
    /* a NULL operand keeps the first error */
    kiln_clear_error();
    kiln_tensor *bad = kiln_matmul(ctx, a, b);
    KT_CHECK(!bad && !kiln_matmul(ctx, bad, b) && !kiln_matmul_t(ctx, a, false, bad, true) &&
                 !kiln_linear(ctx, bad, w, NULL),
             "NULL in, NULL out");
    KT_CHECK(strstr(kiln_last_error(), "inner") != NULL, "first error kept: %s", kiln_last_error());
    kiln_ctx_free(ctx);
}
