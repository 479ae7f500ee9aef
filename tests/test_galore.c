/* test_galore.c — GaLore AdamW: the projector is orthonormal and made of
 * the gradient's top-r singular vectors, a full-rank projection round-trips
 * a gradient, several steps with projector refreshes match an independent
 * double-precision reference (both orientations, weight decay, moments kept
 * across refreshes), non-matrix parameters follow kiln_adamw bit for bit,
 * state bytes, config errors. A BLAS=0 build has no LAPACK: there the
 * constructors must fail with KILN_ERR_UNSUPPORTED, and only that is tested. */
#include "kt.h"
#include "../optim/optim_impl.h"

#include <stdlib.h>

KT_TEST(galore_defaults_and_lapack) {
    kiln_galore_config d = kiln_galore_defaults();
    KT_CHECK(d.rank == 128 && d.update_gap == 200 && d.scale == 0.25f && d.adamw.lr == 1e-3f &&
                 d.adamw.eps == 1e-6f && d.adamw.weight_decay == 0.0f && !d.adamw.amsgrad,
             "defaults: rank %d gap %d scale %g", d.rank, d.update_gap, (double)d.scale);
    kiln_ctx *ctx = kiln_ctx_new();
    KT_NOTNULL(kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){4, 3}));
    kiln_optim *opt = kiln_galore_adamw_new(ctx, NULL);
#ifdef KILN_BLAS
    KT_CHECK(opt != NULL, "kiln_galore_adamw_new: %s", kiln_last_error());
#else
    KT_CHECK(!opt && kiln_last_status() == KILN_ERR_UNSUPPORTED && strstr(kiln_last_error(), "BLAS=0"),
             "BLAS=0 build: expected KILN_ERR_UNSUPPORTED naming BLAS=0, got %s: %s",
             kiln_status_name(kiln_last_status()), kiln_last_error());
#endif
    kiln_ctx_free(ctx);
}

#ifdef KILN_BLAS

/* Read the step node's projector of parameter i, f32 -> double. */
static kiln_tensor *proj_of(kiln_optim *opt, int i) { return opt->nodes[i]->src[2]; }

/* P for p [m, n]: the r basis vectors, each of length len, at vec[a*len..]
 * (rows of P when m >= n, columns otherwise). */
static void basis(const double *P, int64_t m, int64_t n, int64_t r, double *vec, int64_t *len) {
    bool right = m >= n;
    *len = right ? n : m;
    for (int64_t a = 0; a < r; a++)
        for (int64_t j = 0; j < *len; j++) vec[a * *len + j] = right ? P[a * n + j] : P[j * r + a];
}

/* y = A x with A = G^T G (len n) or G G^T (len m). */
static void gram_mul(const double *G, int64_t m, int64_t n, const double *x, double *y) {
    bool right = m >= n;
    int64_t len = right ? n : m, other = right ? m : n;
    double *tmp = calloc((size_t)other, sizeof *tmp);
    for (int64_t i = 0; i < other; i++)
        for (int64_t j = 0; j < len; j++) tmp[i] += (right ? G[i * n + j] : G[j * n + i]) * x[j];
    for (int64_t j = 0; j < len; j++) {
        y[j] = 0;
        for (int64_t i = 0; i < other; i++) y[j] += (right ? G[i * n + j] : G[j * n + i]) * tmp[i];
    }
    free(tmp);
}

/* The basis vectors are orthonormal (to 1e-5) and are eigenvectors of the
 * gradient's Gram matrix with descending eigenvalues, none smaller than
 * what power iteration finds in the complement: the top-r singular
 * vectors. */
static void check_projector(const char *what, const double *G, const double *P, int64_t m, int64_t n, int64_t r) {
    int64_t len, L = m > n ? m : n;
    double *v = malloc((size_t)(r * L) * sizeof *v), *y = malloc((size_t)L * sizeof *y);
    double *x = malloc((size_t)L * sizeof *x), lam[16], lam1 = 0;
    basis(P, m, n, r, v, &len);
    for (int64_t a = 0; a < r; a++)
        for (int64_t b = 0; b < r; b++) {
            double d = 0;
            for (int64_t j = 0; j < len; j++) d += v[a * len + j] * v[b * len + j];
            KT_CHECK(fabs(d - (a == b)) < 1e-5, "%s: <P%lld, P%lld> = %.9g", what, (long long)a, (long long)b, d);
        }
    for (int64_t a = 0; a < r; a++) {
        gram_mul(G, m, n, v + a * len, y);
        double l = 0, res = 0;
        for (int64_t j = 0; j < len; j++) l += v[a * len + j] * y[j];
        for (int64_t j = 0; j < len; j++) res += (y[j] - l * v[a * len + j]) * (y[j] - l * v[a * len + j]);
        lam[a] = l;
        if (a == 0) lam1 = l;
        KT_CHECK(sqrt(res) <= 1e-4 * lam1, "%s: P%lld is not a singular vector (residual %g, sigma^2 %g)", what,
                 (long long)a, sqrt(res), l);
        if (a) KT_CHECK(lam[a] <= lam[a - 1] * (1 + 1e-5), "%s: sigma^2 %g after %g", what, lam[a], lam[a - 1]);
    }
    if (r < len) { /* the largest eigenvalue in the complement of P's span */
        for (int64_t j = 0; j < len; j++) x[j] = 1.0 + 0.1 * (double)j;
        double l = 0;
        for (int it = 0; it < 500; it++) {
            for (int64_t a = 0; a < r; a++) { /* project out P's span */
                double d = 0;
                for (int64_t j = 0; j < len; j++) d += v[a * len + j] * x[j];
                for (int64_t j = 0; j < len; j++) x[j] -= d * v[a * len + j];
            }
            double nx = 0;
            for (int64_t j = 0; j < len; j++) nx += x[j] * x[j];
            for (int64_t j = 0; j < len; j++) x[j] /= sqrt(nx);
            gram_mul(G, m, n, x, y);
            l = 0;
            for (int64_t j = 0; j < len; j++) l += x[j] * y[j];
            memcpy(x, y, (size_t)len * sizeof *x);
        }
        KT_CHECK(l <= lam[r - 1] * (1 + 1e-4), "%s: sigma^2 %g outside P beats sigma_r^2 %g", what, l, lam[r - 1]);
    }
    free(v);
    free(y);
    free(x);
}

/* Random gradient for parameter t at step k, into g (as the tensor holds it). */
static void set_grad(kiln_tensor *p, double *g, int64_t n, uint64_t seed) {
    KT_OK(kiln_tensor_fill_randn(kiln_tensor_grad(p), seed, 0.0, 1.0));
    KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(p), g, n));
}

/* Both orientations and a square matrix (each its own LAPACK call): one
 * step gives an orthonormal projector of the gradient's top-r singular
 * vectors. */
KT_TEST(galore_projector_orthonormal) {
    const int64_t shapes[3][2] = {{12, 7}, {5, 9}, {6, 6}};
    for (int s = 0; s < 3; s++) {
        int64_t m = shapes[s][0], n = shapes[s][1], r = 3;
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 2, shapes[s]);
        KT_NOTNULL(w);
        kiln_galore_config c = kiln_galore_defaults();
        c.rank = (int)r;
        kiln_optim *opt = kiln_galore_adamw_new(ctx, &c);
        KT_NOTNULL(opt);
        double G[12 * 9], P[12 * 9];
        set_grad(w, G, m * n, 11 + (uint64_t)s);
        KT_OK(kiln_optim_step(opt));
        kiln_tensor *pt = proj_of(opt, 0);
        KT_CHECK(kiln_tensor_dim(pt, 0) == (m >= n ? r : m) && kiln_tensor_dim(pt, 1) == (m >= n ? n : r),
                 "projector shape [%lld, %lld]", (long long)kiln_tensor_dim(pt, 0), (long long)kiln_tensor_dim(pt, 1));
        KT_OK(kiln_tensor_get_f64(pt, P, r * (m >= n ? n : m)));
        char what[32];
        snprintf(what, sizeof what, "[%lld, %lld]", (long long)m, (long long)n);
        check_projector(what, G, P, m, n, r);
        kiln_ctx_free(ctx);
    }
}

/* At full rank P is square and orthogonal: projecting a gradient and
 * projecting it back returns it (to 1e-5). rank above min(m, n) is clamped. */
KT_TEST(galore_full_rank_roundtrip) {
    const int64_t shapes[2][2] = {{9, 6}, {4, 8}};
    for (int s = 0; s < 2; s++) {
        int64_t m = shapes[s][0], n = shapes[s][1], k = m < n ? m : n;
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 2, shapes[s]);
        KT_NOTNULL(w);
        kiln_galore_config c = kiln_galore_defaults();
        c.rank = 100;
        kiln_optim *opt = kiln_galore_adamw_new(ctx, &c);
        KT_NOTNULL(opt);
        double G[72], P[64], R[72], back[72];
        set_grad(w, G, m * n, 21 + (uint64_t)s);
        KT_OK(kiln_optim_step(opt));
        KT_REQUIRE(kiln_tensor_numel(proj_of(opt, 0)) == k * k, "projector is not %lldx%lld", (long long)k,
                   (long long)k);
        KT_OK(kiln_tensor_get_f64(proj_of(opt, 0), P, k * k));
        double worst = 0;
        if (m >= n) { /* R = G P^T [m, k], back = R P */
            for (int64_t i = 0; i < m; i++)
                for (int64_t a = 0; a < k; a++) {
                    R[i * k + a] = 0;
                    for (int64_t j = 0; j < n; j++) R[i * k + a] += G[i * n + j] * P[a * n + j];
                }
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    back[i * n + j] = 0;
                    for (int64_t a = 0; a < k; a++) back[i * n + j] += R[i * k + a] * P[a * n + j];
                }
        } else { /* R = P^T G [k, n], back = P R */
            for (int64_t a = 0; a < k; a++)
                for (int64_t j = 0; j < n; j++) {
                    R[a * n + j] = 0;
                    for (int64_t i = 0; i < m; i++) R[a * n + j] += P[i * k + a] * G[i * n + j];
                }
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    back[i * n + j] = 0;
                    for (int64_t a = 0; a < k; a++) back[i * n + j] += P[i * k + a] * R[a * n + j];
                }
        }
        for (int64_t i = 0; i < m * n; i++) worst = fmax(worst, fabs(back[i] - G[i]));
        KT_CHECK(worst < 1e-5, "[%lld, %lld]: round trip off by %g", (long long)m, (long long)n, worst);
        kiln_ctx_free(ctx);
    }
}

/* One galore_torch step on a matrix in double, with kiln's projector P. */
typedef struct ref_mat {
    int64_t m, n, r;
    double p[80], m1[80], m2[80];
} ref_mat;

static void ref_step(ref_mat *s, const double *G, const double *P, const kiln_galore_config *c, double lr, int t) {
    int64_t m = s->m, n = s->n, r = s->r;
    bool right = m >= n;
    int64_t nr = right ? m * r : r * n;
    double R[80], U[80];
    for (int64_t e = 0; e < nr; e++) {
        double acc = 0;
        if (right) { /* R[i, a] = sum_j G[i, j] P[a, j] */
            int64_t i = e / r, a = e % r;
            for (int64_t j = 0; j < n; j++) acc += G[i * n + j] * P[a * n + j];
        } else { /* R[a, j] = sum_i P[i, a] G[i, j] */
            int64_t a = e / n, j = e % n;
            for (int64_t i = 0; i < m; i++) acc += P[i * r + a] * G[i * n + j];
        }
        R[e] = acc;
    }
    double b1 = c->adamw.beta1, b2 = c->adamw.beta2, eps = c->adamw.eps, wd = c->adamw.weight_decay;
    for (int64_t e = 0; e < nr; e++) {
        s->m1[e] = b1 * s->m1[e] + (1 - b1) * R[e];
        s->m2[e] = b2 * s->m2[e] + (1 - b2) * R[e] * R[e];
        R[e] = s->m1[e] / (sqrt(s->m2[e]) + eps);
    }
    double step = lr * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0;
            for (int64_t a = 0; a < r; a++) acc += right ? R[i * r + a] * P[a * n + j] : P[i * r + a] * R[a * n + j];
            U[i * n + j] = acc;
        }
    for (int64_t e = 0; e < m * n; e++) {
        s->p[e] -= step * c->scale * U[e];
        s->p[e] -= lr * wd * s->p[e];
    }
}

/* torch.optim.AdamW on n doubles. */
static void ref_adamw(double *p, double *m1, double *m2, const double *g, int64_t n, const kiln_adam_config *c,
                      double lr, int t) {
    double b1 = c->beta1, b2 = c->beta2;
    for (int64_t i = 0; i < n; i++) {
        p[i] *= 1 - lr * c->weight_decay;
        m1[i] = b1 * m1[i] + (1 - b1) * g[i];
        m2[i] = b2 * m2[i] + (1 - b2) * g[i] * g[i];
        p[i] -= lr / (1 - pow(b1, t)) * m1[i] / (sqrt(m2[i]) / sqrt(1 - pow(b2, t)) + c->eps);
    }
}

#define STEPS 8
#define GAP 3 /* refreshes on steps 1, 4, 7 */

/* W [10, 6] (P on the right), V [4, 11] (P on the left) and a bias b [5]
 * over STEPS steps with an lr change: p against the reference each step;
 * P changes exactly on refresh steps and is then the top-r basis of that
 * step's gradient. */
KT_TEST(galore_matches_reference) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *ps[3] = {kiln_param(ctx, "W", KILN_F32, 2, (int64_t[]){10, 6}),
                          kiln_param(ctx, "V", KILN_F32, 2, (int64_t[]){4, 11}),
                          kiln_param(ctx, "b", KILN_F32, 1, (int64_t[]){5})};
    for (int j = 0; j < 3; j++) {
        KT_NOTNULL(ps[j]);
        KT_OK(kiln_tensor_fill_uniform(ps[j], 3 + (uint64_t)j, -1.0, 1.0));
    }
    kiln_galore_config c = kiln_galore_defaults();
    c.adamw.lr = 0.01f;
    c.adamw.weight_decay = 0.1f;
    c.adamw.eps = 0.05f; /* large enough that eps's place (before the bias correction) shows */
    c.rank = 2;
    c.update_gap = GAP;
    c.scale = 0.25f;
    kiln_optim *opt = kiln_galore_adamw_new(ctx, &c);
    KT_NOTNULL(opt);
    KT_CHECK(opt->nodes[0]->op != opt->nodes[2]->op, "the bias got GaLore's step");
    ref_mat ref[2] = {{.m = 10, .n = 6, .r = 2}, {.m = 4, .n = 11, .r = 2}};
    double bp[5], bm1[5] = {0}, bm2[5] = {0}, G[80], P[80], Pold[2][80], got[80];
    for (int j = 0; j < 2; j++) KT_OK(kiln_tensor_get_f64(ps[j], ref[j].p, ref[j].m * ref[j].n));
    KT_OK(kiln_tensor_get_f64(ps[2], bp, 5));
    for (int k = 0; k < STEPS; k++) {
        if (k == 5) KT_OK(kiln_optim_set_lr(opt, 0.003f));
        double lr = kiln_optim_lr(opt);
        int t = k + 1;
        bool refresh = k % GAP == 0;
        double Gs[2][80], bg[5];
        for (int j = 0; j < 2; j++) set_grad(ps[j], Gs[j], ref[j].m * ref[j].n, 100 * (uint64_t)k + (uint64_t)j);
        set_grad(ps[2], bg, 5, 100 * (uint64_t)k + 9);
        KT_OK(kiln_optim_step(opt));
        for (int j = 0; j < 2; j++) {
            ref_mat *s = &ref[j];
            int64_t np = s->r * (s->m >= s->n ? s->n : s->m), nw = s->m * s->n, worst;
            KT_OK(kiln_tensor_get_f64(proj_of(opt, j), P, np));
            if (k) {
                bool same = memcmp(P, Pold[j], (size_t)np * sizeof *P) == 0;
                KT_CHECK(same != refresh, "step %d param %d: projector %s", t, j,
                         refresh ? "kept on a refresh step" : "changed between refreshes");
            }
            memcpy(Pold[j], P, (size_t)np * sizeof *P);
            if (refresh) check_projector(j ? "V" : "W", Gs[j], P, s->m, s->n, s->r);
            memcpy(G, Gs[j], (size_t)nw * sizeof *G);
            ref_step(s, G, P, &c, lr, t);
            KT_OK(kiln_tensor_get_f64(ps[j], got, nw));
            double e = kt_rel_err(got, s->p, nw, 1e-6, 1e-5, &worst);
            KT_CHECK(e <= 1, "step %d param %d: p[%lld] = %.9g, reference %.9g", t, j, (long long)worst, got[worst],
                     s->p[worst]);
        }
        ref_adamw(bp, bm1, bm2, bg, 5, &c.adamw, lr, t);
        int64_t worst;
        KT_OK(kiln_tensor_get_f64(ps[2], got, 5));
        double e = kt_rel_err(got, bp, 5, 1e-6, 1e-5, &worst);
        KT_CHECK(e <= 1, "step %d bias: b[%lld] = %.9g, reference %.9g", t, (long long)worst, got[worst], bp[worst]);
    }
    kiln_ctx_free(ctx);
}

/* Parameters that are not matrices (1-D, 3-D, f32 and f64) get exactly
 * kiln_adamw's bits. */
KT_TEST(galore_non_matrix_is_adamw) {
    kiln_ctx *cg = kiln_ctx_new(), *ca = kiln_ctx_new();
    const int64_t s1[1] = {7}, s3[3] = {2, 3, 4};
    kiln_tensor *pg[3] = {kiln_param(cg, "b", KILN_F32, 1, s1), kiln_param(cg, "k", KILN_F32, 3, s3),
                          kiln_param(cg, "d", KILN_F64, 1, s1)};
    kiln_tensor *pa[3] = {kiln_param(ca, "b", KILN_F32, 1, s1), kiln_param(ca, "k", KILN_F32, 3, s3),
                          kiln_param(ca, "d", KILN_F64, 1, s1)};
    for (int j = 0; j < 3; j++) {
        KT_NOTNULL(pg[j]);
        KT_NOTNULL(pa[j]);
        KT_OK(kiln_tensor_fill_uniform(pg[j], 5 + (uint64_t)j, -1.0, 1.0));
        KT_OK(kiln_tensor_fill_uniform(pa[j], 5 + (uint64_t)j, -1.0, 1.0));
    }
    kiln_galore_config c = kiln_galore_defaults();
    c.adamw.weight_decay = 0.05f;
    c.adamw.lr = 0.02f;
    kiln_optim *og = kiln_galore_adamw_new(cg, &c), *oa = kiln_adamw_new(ca, &c.adamw);
    KT_NOTNULL(og);
    KT_NOTNULL(oa);
    KT_CHECK(kiln_optim_state_bytes(og) == kiln_optim_state_bytes(oa), "state bytes %zu vs AdamW's %zu",
             kiln_optim_state_bytes(og), kiln_optim_state_bytes(oa));
    for (int k = 0; k < 5; k++) {
        for (int j = 0; j < 3; j++) {
            KT_OK(kiln_tensor_fill_randn(kiln_tensor_grad(pg[j]), 40 + 10 * (uint64_t)k + (uint64_t)j, 0.0, 1.0));
            KT_OK(kiln_tensor_fill_randn(kiln_tensor_grad(pa[j]), 40 + 10 * (uint64_t)k + (uint64_t)j, 0.0, 1.0));
        }
        KT_OK(kiln_optim_step(og));
        KT_OK(kiln_optim_step(oa));
        for (int j = 0; j < 3; j++)
            KT_CHECK(memcmp(kiln_tensor_data(pg[j]), kiln_tensor_data(pa[j]), kiln_tensor_nbytes(pg[j])) == 0,
                     "step %d: parameter %s differs from AdamW's", k + 1, kiln_tensor_name(pg[j]));
    }
    kiln_ctx_free(cg);
    kiln_ctx_free(ca);
}

/* rank 8 on [256, 512]: P [256, 8] and two [8, 512] moments, 40 KiB
 * against AdamW's 1 MiB. */
KT_TEST(galore_state_bytes) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_NOTNULL(kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){256, 512}));
    kiln_galore_config c = kiln_galore_defaults();
    c.rank = 8;
    kiln_optim *g = kiln_galore_adamw_new(ctx, &c), *a = kiln_adamw_new(ctx, NULL);
    KT_NOTNULL(g);
    KT_NOTNULL(a);
    size_t gb = kiln_optim_state_bytes(g), ab = kiln_optim_state_bytes(a);
    KT_CHECK(gb == (256 * 8 + 2 * 8 * 512) * sizeof(float), "GaLore state %zu bytes", gb);
    KT_CHECK(ab == 2 * 256 * 512 * sizeof(float) && gb * 20 < ab, "GaLore %zu bytes vs AdamW %zu", gb, ab);
    kiln_ctx_free(ctx);
}

KT_TEST(galore_config_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_NOTNULL(kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){4, 3}));
    kiln_galore_config base = kiln_galore_defaults(), c;
    c = base, c.rank = 0;
    KT_CHECK(!kiln_galore_adamw_new(ctx, &c) && kiln_last_status() == KILN_ERR_ARG, "rank 0 accepted");
    c = base, c.update_gap = 0;
    KT_CHECK(!kiln_galore_adamw_new(ctx, &c) && kiln_last_status() == KILN_ERR_ARG, "update_gap 0 accepted");
    c = base, c.scale = NAN;
    KT_CHECK(!kiln_galore_adamw_new(ctx, &c) && kiln_last_status() == KILN_ERR_ARG, "NaN scale accepted");
    c = base, c.adamw.amsgrad = true;
    KT_CHECK(!kiln_galore_adamw_new(ctx, &c) && kiln_last_status() == KILN_ERR_ARG, "amsgrad accepted");
    c = base, c.adamw.beta2 = 1.0f;
    KT_CHECK(!kiln_galore_adamw_new(ctx, &c) && kiln_last_status() == KILN_ERR_ARG, "beta2 1 accepted");
    kiln_tensor *d = kiln_param(ctx, "d", KILN_F64, 2, (int64_t[]){3, 3});
    KT_CHECK(!kiln_galore_adamw_new_for(ctx, &d, 1, NULL) && kiln_last_status() == KILN_ERR_DTYPE,
             "f64 matrix accepted");
    kiln_ctx_free(ctx);
}

#endif /* KILN_BLAS */
