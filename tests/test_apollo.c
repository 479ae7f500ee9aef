/* test_apollo.c — APOLLO and APOLLO-Mini: the random projector's
 * statistics and its determinism from the seed; the step against an
 * independent double-precision reference over several steps (a projector
 * refresh, the norm-growth limiter firing, both projection sides, weight
 * decay); non-matrix parameters stepping exactly as kiln_adamw; the state
 * size (APOLLO-Mini's O(m + n)); the defaults and config errors. */
#include "kt.h"
#include "../optim/optim_impl.h"
#include "../core/lowrank.h"

#include <stdlib.h>

/* P ~ N(0, 1/rank): mean and variance within 5 standard errors; the same
 * seed gives the same bits, another refresh other values. */
KT_TEST(apollo_projector_statistics) {
    const int rank = 16;
    const int64_t n = 1 << 18;
    float *P = malloc((size_t)n * sizeof *P), *Q = malloc((size_t)n * sizeof *Q);
    KT_REQUIRE(P && Q, "out of memory");
    uint64_t s0 = kiln__apollo_param_seed(5, 3);
    kiln__apollo_projector(P, n, s0, rank, 4);
    double sum = 0, sum2 = 0, sum4 = 0;
    for (int64_t i = 0; i < n; i++) sum += P[i], sum2 += (double)P[i] * P[i], sum4 += pow(P[i], 4);
    double mean = sum / (double)n, var = sum2 / (double)n - mean * mean, want = 1.0 / rank;
    KT_CHECK(fabs(mean) < 5 * sqrt(want / (double)n), "mean %g", mean);
    KT_CHECK(fabs(var - want) < 5 * want * sqrt(2.0 / (double)n), "variance %g, want %g", var, want);
    /* Gaussian: fourth moment 3 var^2 (a uniform or sign projector fails this) */
    KT_CHECK(fabs(sum4 / (double)n / (want * want) - 3) < 0.1, "kurtosis %g", sum4 / (double)n / (want * want));
    kiln__apollo_projector(Q, n, s0, rank, 1); /* other thread count, same bits */
    KT_CHECK(memcmp(P, Q, (size_t)n * sizeof *P) == 0, "projector differs between runs");
    /* the seed chain: refresh 0 is the parameter's seed, each next its hash */
    KT_CHECK(kiln__apollo_proj_seed(s0, 0) == s0, "refresh 0 seed");
    KT_CHECK(kiln__apollo_proj_seed(s0, 3) == kiln__hash64(kiln__apollo_proj_seed(s0, 2)), "seed chain");
    kiln__apollo_projector(Q, n, kiln__apollo_proj_seed(s0, 1), rank, 4);
    int64_t same = 0;
    for (int64_t i = 0; i < n; i++) same += P[i] == Q[i];
    KT_CHECK(same < 16, "%lld of %lld elements equal after a refresh", (long long)same, (long long)n);
    KT_CHECK(kiln__apollo_param_seed(5, 3) != kiln__apollo_param_seed(5, 4) &&
                 kiln__apollo_param_seed(5, 3) != kiln__apollo_param_seed(6, 3),
             "parameter seeds collide");
    free(P);
    free(Q);
}

/* ---- the double-precision reference (the formula in optim/apollo.c) ---- */

typedef struct ref_mat {
    int m, n, index;
    double *p, *em, *ev, prev;
} ref_mat;

/* One APOLLO step of a matrix; returns whether the limiter fired. */
static bool ref_step(ref_mat *r, const double *G, int t, const kiln_apollo_config *c, double lr) {
    const int m = r->m, n = r->n, rk = c->rank;
    const bool right = m >= n;
    const int rows = right ? m : rk, cols = right ? rk : n, nch = right ? m : n;
    float *P = malloc(sizeof(float) * (size_t)(right ? rk * n : m * rk));
    double *R = calloc((size_t)rows * cols, sizeof(double)), *a = calloc((size_t)nch, sizeof(double)),
           *b = calloc((size_t)nch, sizeof(double));
    uint64_t seed = kiln__apollo_proj_seed(kiln__apollo_param_seed(c->seed, r->index), (t - 1) / c->update_gap);
    kiln__apollo_projector(P, right ? rk * n : m * rk, seed, rk, 1);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            double s = 0;
            if (right) /* R[i, j] = sum_k G[i, k] P[j, k] */
                for (int k = 0; k < n; k++) s += G[i * n + k] * P[j * n + k];
            else /* R[i, j] = sum_k P[k, i] G[k, j] */
                for (int k = 0; k < m; k++) s += P[k * rk + i] * G[k * n + j];
            R[i * cols + j] = s;
        }
    double b1 = c->adamw.beta1, b2 = c->adamw.beta2, eps = c->adamw.eps;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            int k = i * cols + j, ch = right ? i : j;
            r->em[k] = b1 * r->em[k] + (1 - b1) * R[k];
            r->ev[k] = b2 * r->ev[k] + (1 - b2) * R[k] * R[k];
            double rt = r->em[k] / (sqrt(r->ev[k]) + eps);
            a[ch] += rt * rt;
            b[ch] += R[k] * R[k];
        }
    if (c->mini) {
        double sa = 0, sb = 0;
        for (int ch = 0; ch < nch; ch++) sa += a[ch], sb += b[ch];
        for (int ch = 0; ch < nch; ch++) a[ch] = sqrt(sa) / (sqrt(sb) + 1e-8);
    } else {
        for (int ch = 0; ch < nch; ch++) a[ch] = sqrt(a[ch]) / (sqrt(b[ch]) + 1e-8);
    }
    double sq = sqrt((double)c->scale), u2 = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double u = sq * a[right ? i : j] * G[i * n + j];
            u2 += u * u;
        }
    double norm = sqrt(u2), lim = 1;
    if (t > 1) lim = fmax(norm / (r->prev + 1e-8), 1.01) / 1.01;
    r->prev = norm / lim;
    double step = lr * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t));
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            int k = i * n + j;
            r->p[k] *= 1 - lr * c->adamw.weight_decay;
            r->p[k] -= step * sq * a[right ? i : j] * G[k] / lim;
        }
    free(P);
    free(R);
    free(a);
    free(b);
    return lim > 1;
}

#define STEPS 8
#define BURST 5 /* the step whose gradients are 20 times larger (the channel-wise limiter fires) */

/* Matrices a [ms[0], ns[0]] and b [ms[1], ns[1]] (one projected on each
 * side), STEPS steps (with update_gap 3: refreshes before steps 1, 4, 7),
 * each compared with the reference: p, both moments, the limiter's norm. */
static void check_apollo(const char *what, kiln_apollo_config cfg, const int ms[2], const int ns[2]) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *ps[2];
    ref_mat ref[2];
    for (int j = 0; j < 2; j++) {
        ps[j] = kiln_param(ctx, j ? "b" : "a", KILN_F32, 2, (int64_t[]){ms[j], ns[j]});
        KT_NOTNULL(ps[j]);
        KT_OK(kiln_tensor_fill_uniform(ps[j], 1 + (uint64_t)j, -1.0, 1.0));
        int mn = ms[j] * ns[j], lr_ = (ms[j] >= ns[j] ? ms[j] : ns[j]) * cfg.rank;
        ref[j] = (ref_mat){ms[j], ns[j], j, calloc((size_t)mn, 8), calloc((size_t)lr_, 8), calloc((size_t)lr_, 8), 0};
        KT_OK(kiln_tensor_get_f64(ps[j], ref[j].p, mn));
    }
    kiln_optim *opt = kiln_apollo_new_for(ctx, ps, 2, &cfg);
    KT_NOTNULL(opt);
    int fired[2] = {0, 0};
    int big = 0;
    for (int j = 0; j < 2; j++) {
        int mn = ms[j] * ns[j], nr = (ms[j] >= ns[j] ? ms[j] : ns[j]) * cfg.rank;
        big = mn > big ? mn : big;
        big = nr > big ? nr : big;
    }
    double *g = malloc((size_t)big * sizeof *g), *got = malloc((size_t)big * sizeof *got);
    KT_REQUIRE(g && got, "out of memory");
    for (int t = 1; t <= STEPS; t++) {
        double lr = kiln_optim_lr(opt);
        for (int j = 0; j < 2; j++) {
            int mn = ms[j] * ns[j];
            kiln_tensor *gt = kiln_tensor_grad(ps[j]);
            KT_OK(kiln_tensor_fill_randn(gt, 100 * (uint64_t)t + (uint64_t)j, 0.0, t == BURST ? 20.0 : 1.0));
            KT_OK(kiln_tensor_get_f64(gt, g, mn));
            fired[j] += ref_step(&ref[j], g, t, &cfg, lr);
        }
        KT_OK(kiln_optim_step(opt));
        for (int j = 0; j < 2; j++) {
            int64_t worst, mn = ms[j] * ns[j], nr = ref[j].m >= ref[j].n ? ref[j].m * cfg.rank : ref[j].n * cfg.rank;
            KT_OK(kiln_tensor_get_f64(ps[j], got, mn));
            double e = kt_rel_err(got, ref[j].p, mn, 1e-6, 1e-5, &worst);
            KT_CHECK(e <= 1, "%s step %d: p%d[%lld] = %.9g, reference %.9g", what, t, j, (long long)worst, got[worst],
                     ref[j].p[worst]);
            /* moments: f32 projection sums (the burst's large ones too) give
             * errors relative to the largest element */
            double big_m = 0, big_v = 0;
            for (int64_t k = 0; k < nr; k++) big_m = fmax(big_m, fabs(ref[j].em[k])), big_v = fmax(big_v, ref[j].ev[k]);
            KT_OK(kiln_tensor_get_f64(opt->nodes[j]->src[2], got, nr));
            e = kt_rel_err(got, ref[j].em, nr, 1e-5 * big_m, 1e-5, &worst);
            KT_CHECK(e <= 1, "%s step %d: exp_avg%d[%lld] = %.9g, reference %.9g", what, t, j, (long long)worst,
                     got[worst], ref[j].em[worst]);
            KT_OK(kiln_tensor_get_f64(opt->nodes[j]->src[3], got, nr));
            e = kt_rel_err(got, ref[j].ev, nr, 1e-5 * big_v, 1e-5, &worst);
            KT_CHECK(e <= 1, "%s step %d: exp_avg_sq%d[%lld] = %.9g, reference %.9g", what, t, j, (long long)worst,
                     got[worst], ref[j].ev[worst]);
            KT_OK(kiln_tensor_get_f64(opt->nodes[j]->src[4], got, 1));
            KT_CHECK(fabs(got[0] - ref[j].prev) <= 1e-5 * ref[j].prev, "%s step %d: norm%d %.9g, reference %.9g", what,
                     t, j, got[0], ref[j].prev);
        }
    }
    /* the limiter must have fired on each matrix, and not on every step */
    for (int j = 0; j < 2; j++)
        KT_CHECK(fired[j] >= 1 && fired[j] < STEPS - 1, "%s: the limiter fired on %d steps of matrix %d", what,
                 fired[j], j);
    for (int j = 0; j < 2; j++) free(ref[j].p), free(ref[j].em), free(ref[j].ev);
    free(g);
    free(got);
    kiln_ctx_free(ctx);
}

KT_TEST(apollo_reference_channel) {
    kiln_apollo_config c = kiln_apollo_defaults();
    c.adamw.lr = 0.01f;
    c.adamw.weight_decay = 0.1f;
    c.rank = 3;
    c.update_gap = 3;
    c.seed = 42;
    check_apollo("apollo", c, (int[]){12, 6}, (int[]){8, 14});
}

/* Large enough for every threaded loop of the kernel (m * n > 32768, and
 * more than 32768 moments on each side: a [1000, 40] projected on the
 * right, b [2, 33000] on the left, rank 40 > 2 there). */
KT_TEST(apollo_reference_threaded) {
    kiln_apollo_config c = kiln_apollo_defaults();
    c.adamw.lr = 0.01f;
    c.adamw.weight_decay = 0.1f;
    c.rank = 40;
    c.update_gap = 3;
    check_apollo("apollo threaded", c, (int[]){1000, 2}, (int[]){40, 33000});
    c = kiln_apollo_mini_defaults();
    c.update_gap = 3;
    check_apollo("apollo-mini threaded", c, (int[]){1000, 2}, (int[]){40, 33000});
}

KT_TEST(apollo_reference_mini) {
    kiln_apollo_config c = kiln_apollo_mini_defaults();
    c.adamw.lr = 0.005f;
    c.adamw.beta1 = 0.8f;
    c.adamw.weight_decay = 0.05f;
    c.update_gap = 3;
    check_apollo("apollo-mini", c, (int[]){12, 6}, (int[]){8, 14});
}

/* A parameter that is not a matrix steps exactly (bit for bit) as
 * kiln_adamw with the same settings. */
KT_TEST(apollo_nonmatrix_is_adamw) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_param(ctx, "a", KILN_F32, 1, (int64_t[]){37});
    kiln_tensor *b = kiln_param(ctx, "b", KILN_F32, 1, (int64_t[]){37});
    kiln_tensor *c3 = kiln_param(ctx, "c", KILN_F64, 3, (int64_t[]){2, 3, 4});
    kiln_tensor *d3 = kiln_param(ctx, "d", KILN_F64, 3, (int64_t[]){2, 3, 4});
    KT_NOTNULL(a);
    KT_NOTNULL(b);
    KT_NOTNULL(c3);
    KT_NOTNULL(d3);
    KT_OK(kiln_tensor_fill_uniform(a, 3, -1, 1));
    KT_OK(kiln_tensor_fill_uniform(b, 3, -1, 1));
    KT_OK(kiln_tensor_fill_uniform(c3, 4, -1, 1));
    KT_OK(kiln_tensor_fill_uniform(d3, 4, -1, 1));
    kiln_apollo_config cfg = kiln_apollo_defaults();
    cfg.adamw.lr = 0.02f;
    cfg.adamw.weight_decay = 0.3f;
    kiln_optim *ap = kiln_apollo_new_for(ctx, (kiln_tensor *[]){a, c3}, 2, &cfg);
    kiln_optim *aw = kiln_adamw_new_for(ctx, (kiln_tensor *[]){b, d3}, 2, &cfg.adamw);
    KT_NOTNULL(ap);
    KT_NOTNULL(aw);
    for (int t = 0; t < 5; t++) {
        KT_OK(kiln_tensor_fill_randn(kiln_tensor_grad(a), 9 + (uint64_t)t, 0, 1));
        KT_OK(kiln_tensor_fill_randn(kiln_tensor_grad(b), 9 + (uint64_t)t, 0, 1));
        KT_OK(kiln_tensor_fill_randn(kiln_tensor_grad(c3), 19 + (uint64_t)t, 0, 1));
        KT_OK(kiln_tensor_fill_randn(kiln_tensor_grad(d3), 19 + (uint64_t)t, 0, 1));
        if (t == 3) {
            KT_OK(kiln_optim_set_lr(ap, 0.005f));
            KT_OK(kiln_optim_set_lr(aw, 0.005f));
        }
        KT_OK(kiln_optim_step(ap));
        KT_OK(kiln_optim_step(aw));
        double x[37], y[37];
        KT_OK(kiln_tensor_get_f64(a, x, 37));
        KT_OK(kiln_tensor_get_f64(b, y, 37));
        KT_CHECK(memcmp(x, y, sizeof x) == 0, "step %d: 1-D f32 parameter differs from AdamW's", t);
        KT_OK(kiln_tensor_get_f64(c3, x, 24));
        KT_OK(kiln_tensor_get_f64(d3, y, 24));
        KT_CHECK(memcmp(x, y, 24 * sizeof(double)) == 0, "step %d: 3-D f64 parameter differs from AdamW's", t);
    }
    KT_CHECK(kiln_optim_state_bytes(ap) == kiln_optim_state_bytes(aw), "state %zu vs AdamW's %zu",
             kiln_optim_state_bytes(ap), kiln_optim_state_bytes(aw));
    kiln_ctx_free(ctx);
}

/* State: two moments of R's shape and one f64 norm per matrix (the
 * projector is regenerated, not stored). APOLLO-Mini on a 2048 x 4096
 * matrix: 2 * 4096 * 4 + 8 bytes, under 0.01 bytes per parameter. */
KT_TEST(apollo_state_bytes) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){2048, 4096});
    kiln_tensor *v = kiln_param(ctx, "v", KILN_F32, 2, (int64_t[]){300, 100});
    kiln_tensor *bias = kiln_param(ctx, "bias", KILN_F32, 1, (int64_t[]){100});
    KT_NOTNULL(w);
    KT_NOTNULL(v);
    KT_NOTNULL(bias);
    kiln_apollo_config mc = kiln_apollo_mini_defaults();
    kiln_optim *o = kiln_apollo_new_for(ctx, &w, 1, &mc);
    KT_NOTNULL(o);
    size_t bytes = kiln_optim_state_bytes(o);
    double per = (double)bytes / (2048.0 * 4096.0);
    KT_CHECK(bytes == 2 * 4096 * 4 + 8, "APOLLO-Mini state %zu bytes", bytes);
    KT_CHECK(per <= 0.01, "APOLLO-Mini state %.5f bytes/param", per);
    kiln_apollo_config ac = kiln_apollo_defaults();
    ac.rank = 16;
    o = kiln_apollo_new_for(ctx, (kiln_tensor *[]){v, bias}, 2, &ac);
    KT_NOTNULL(o);
    /* v [300, 100]: R [300, 16]; bias: AdamW's two moments */
    KT_CHECK(kiln_optim_state_bytes(o) == 2 * 300 * 16 * 4 + 8 + 2 * 100 * 4, "APOLLO state %zu bytes",
             kiln_optim_state_bytes(o));
    kiln_ctx_free(ctx);
}

KT_TEST(apollo_defaults) {
    kiln_apollo_config d = kiln_apollo_defaults(), m = kiln_apollo_mini_defaults();
    KT_CHECK(d.adamw.lr == 1e-3f && d.adamw.beta1 == 0.9f && d.adamw.beta2 == 0.999f && d.adamw.eps == 1e-6f &&
                 d.adamw.weight_decay == 0 && d.rank == 256 && d.update_gap == 200 && d.scale == 1 && !d.mini,
             "APOLLO defaults differ from apollo_torch's");
    KT_CHECK(m.rank == 1 && m.scale == 128 && m.mini && m.update_gap == 200, "APOLLO-Mini defaults");
    /* cfg NULL: the defaults; rank 256 on a [4, 3] matrix still steps */
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *p = kiln_param(ctx, "p", KILN_F32, 2, (int64_t[]){4, 3});
    KT_NOTNULL(p);
    KT_OK(kiln_tensor_fill(p, 1.0));
    KT_OK(kiln_tensor_fill_randn(kiln_tensor_grad(p), 1, 0, 1));
    kiln_optim *opt = kiln_apollo_new(ctx, NULL);
    KT_NOTNULL(opt);
    KT_CHECK(kiln_optim_lr(opt) == 1e-3f, "lr %g", (double)kiln_optim_lr(opt));
    KT_OK(kiln_optim_step(opt));
    float got[12];
    KT_OK(kiln_tensor_get_f32(p, got, 12));
    bool moved = false;
    for (int i = 0; i < 12; i++) moved |= got[i] != 1.0f;
    KT_CHECK(moved, "no parameter moved");
    kiln_ctx_free(ctx);
}

KT_TEST(apollo_config_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *p = kiln_param(ctx, "p", KILN_F32, 2, (int64_t[]){4, 3});
    kiln_tensor *q = kiln_param(ctx, "q", KILN_F64, 2, (int64_t[]){4, 3});
    KT_NOTNULL(p);
    KT_NOTNULL(q);
    kiln_apollo_config c = kiln_apollo_defaults();
    c.rank = 0;
    KT_EXPECT_ERR(kiln_apollo_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "invalid rank");
    c = kiln_apollo_defaults();
    c.update_gap = 0;
    KT_EXPECT_ERR(kiln_apollo_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "invalid update_gap");
    c = kiln_apollo_defaults();
    c.scale = -1;
    KT_EXPECT_ERR(kiln_apollo_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "invalid scale");
    c = kiln_apollo_defaults();
    c.adamw.beta1 = 1;
    KT_EXPECT_ERR(kiln_apollo_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "invalid beta parameter at index 0");
    c = kiln_apollo_defaults();
    c.adamw.amsgrad = true;
    KT_EXPECT_ERR(kiln_apollo_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "amsgrad");
    KT_EXPECT_ERR(kiln_apollo_new_for(ctx, &q, 1, NULL), KILN_ERR_DTYPE, "f32 matrices");
    kiln_ctx_free(ctx);
}
