/* test_opt8bit.c — the 8-bit optimizers (optim/opt8bit.c) against an
 * independent double-precision reference of the same quantized algorithm:
 * each step the reference updates its dequantized state and parameters in
 * double, takes absmax per block of 256 and the nearest map code, and checks
 * the kernel's absmax (relative 1e-5) and codes (equal, or one code apart
 * only where the reference value lies within f32 rounding of the midpoint
 * of the two), then adopts the kernel's state (so that a rounding-tie code
 * does not make the two drift apart) while keeping its own parameters.
 * Also: 8-bit Adam near 32-bit Adam on a quadratic over 200 steps, the
 * 32-bit fallback below 4096 elements, NaN/Inf gradient elements left
 * untouched, state bytes, config errors; the SIMD block kernels
 * (backends/cpu/optim_8bit_avx512.c) against the scalar loops bit for bit. */
#include "kt.h"
#include "../backends/cpu/cpu_features.h"
#include "../backends/cpu/optim_8bit.h"
#include "../optim/optim_impl.h"
#include "../quant/dynamic_map.h"

#include <stdlib.h>
#include <string.h>

enum alg { ADAM, ADAMW, LION, SGD };

typedef struct ref_cfg {
    enum alg alg;
    kiln_adam_config adam;
    kiln_lion_config lion;
    kiln_sgd_config sgd;
} ref_cfg;

static int n_states(enum alg a) { return a == ADAM || a == ADAMW ? 2 : 1; }

/* One step of one element in double: p, its states s[0..1], gradient g,
 * step t (1 on the first). *mag gets, per state, the size of the terms
 * summed (how large the f32 rounding of the kernel's value can be); *c the
 * Lion interpolation (whose sign decides the update). Non-finite g: skip. */
static void ref_elem(const ref_cfg *c, double lr, int t, double *p, double s[2], double g, double mag[2], double *cl) {
    mag[0] = fabs(s[0]);
    mag[1] = fabs(s[1]);
    *cl = 1;
    if (!isfinite(g)) return;
    if (c->alg == ADAM || c->alg == ADAMW) {
        double b1 = c->adam.beta1, b2 = c->adam.beta2, wd = c->adam.weight_decay, eps = c->adam.eps;
        double pi = c->alg == ADAMW ? *p * (1 - lr * wd) : *p;
        if (c->alg == ADAM) g += wd * pi;
        mag[0] = fabs(b1 * s[0]) + fabs((1 - b1) * g);
        mag[1] = fabs(b2 * s[1]) + fabs((1 - b2) * g * g);
        s[0] = b1 * s[0] + (1 - b1) * g;
        s[1] = b2 * s[1] + (1 - b2) * g * g;
        double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
        *p = pi - (lr / bc1) * s[0] / (sqrt(s[1]) / sqrt(bc2) + eps);
    } else if (c->alg == LION) {
        double b1 = c->lion.beta1, b2 = c->lion.beta2, wd = c->lion.weight_decay;
        double pi = *p * (1 - lr * wd), u = b1 * s[0] + (1 - b1) * g;
        *cl = u;
        *p = pi - lr * (double)((u > 0) - (u < 0));
        mag[0] = fabs(b2 * s[0]) + fabs((1 - b2) * g);
        s[0] = b2 * s[0] + (1 - b2) * g;
    } else {
        double mom = c->sgd.momentum, keep = 1 - (double)c->sgd.dampening, wd = c->sgd.weight_decay;
        g += wd * *p;
        mag[0] = t == 1 ? fabs(g) : fabs(mom * s[0]) + fabs(keep * g);
        s[0] = t == 1 ? g : mom * s[0] + keep * g;
        *p -= lr * (c->sgd.nesterov ? g + mom * s[0] : s[0]);
    }
}

static kiln_optim *make_opt(kiln_ctx *ctx, const ref_cfg *c) {
    switch (c->alg) {
    case ADAM: return kiln_adam8bit_new(ctx, &c->adam);
    case ADAMW: return kiln_adamw8bit_new(ctx, &c->adam);
    case LION: return kiln_lion8bit_new(ctx, &c->lion);
    default: return kiln_sgd8bit_new(ctx, &c->sgd);
    }
}

/* Nearest map index to y in double: the first entry >= y by bisection,
 * then the nearer of it and the one below (ties: lower; the tie test
 * below accepts either). */
static int nearest(const float *map, double y) {
    int lo = 0, hi = 255;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (map[mid] < y) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && fabs(map[lo - 1] - y) <= fabs(map[lo] - y) ? lo - 1 : lo;
}

#define NP 3
#define STEPS 6
#define NMAX 70001

/* Parameters a [50, 100] (20 blocks, the last partial), b [70001] (many
 * blocks: the threaded path) and c [30] (32-bit fallback); STEPS steps,
 * the lr changed before step 3; step 2's gradients of the 8-bit ones hold
 * NaN and +-Inf (the fallback keeps the 32-bit step's handling of those).
 * Per step the reference starts from the kernel's parameters and state
 * (adopted after the previous step's checks), so each step is checked on
 * its own: parameters to relative 1e-5 (absolute 1e-6). Lion elements
 * whose interpolation is within 1e-6 of 0 may take either sign. */
static void check_alg(const char *what, const ref_cfg *cfg) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *ps[NP] = {kiln_param(ctx, "a", KILN_F32, 2, (int64_t[]){50, 100}),
                           kiln_param(ctx, "b", KILN_F32, 1, (int64_t[]){NMAX}),
                           kiln_param(ctx, "c", KILN_F32, 1, (int64_t[]){30})};
    const int64_t ns[NP] = {5000, NMAX, 30};
    bool adam = cfg->alg == ADAM || cfg->alg == ADAMW;
    float maps[2][256];
    kiln__dynamic_map(true, maps[0]);
    kiln__dynamic_map(!adam, maps[1]);
    double *p[NP], *g[NP], *s[NP][2], *got = malloc(NMAX * sizeof(double));
    double *mag[2] = {malloc(NMAX * sizeof(double)), malloc(NMAX * sizeof(double))}, *cl = malloc(NMAX * sizeof(double));
    for (int j = 0; j < NP; j++) {
        KT_NOTNULL(ps[j]);
        KT_OK(kiln_tensor_fill_uniform(ps[j], 11 + j, -1.0, 1.0));
        p[j] = malloc(ns[j] * sizeof(double));
        g[j] = malloc(ns[j] * sizeof(double));
        s[j][0] = calloc(ns[j], sizeof(double));
        s[j][1] = calloc(ns[j], sizeof(double));
        KT_OK(kiln_tensor_get_f64(ps[j], p[j], ns[j]));
    }
    kiln_optim *opt = make_opt(ctx, cfg);
    KT_NOTNULL(opt);
    int nst = n_states(cfg->alg);
    KT_CHECK(opt->nodes[2]->op != opt->nodes[0]->op, "%s: the 30-element parameter did not fall back", what);
    int64_t mismatched = 0, ties = 0, loose = 0;
    for (int k = 0; k < STEPS; k++) {
        if (k == 3) KT_OK(kiln_optim_set_lr(opt, kiln_optim_lr(opt) * 0.5f));
        double lr = kiln_optim_lr(opt);
        for (int j = 0; j < NP; j++) {
            kiln_tensor *gt = kiln_tensor_grad(ps[j]);
            KT_OK(kiln_tensor_fill_randn(gt, 100 * (uint64_t)k + j, 0.0, 1.0));
            KT_OK(kiln_tensor_get_f64(gt, g[j], ns[j]));
            for (int64_t i = 0; k == 2 && ns[j] >= 4096 && i < ns[j]; i++) {
                if (i % 97 == 5) g[j][i] = NAN;
                if (i % 97 == 11) g[j][i] = INFINITY;
                if (i % 97 == 12) g[j][i] = -INFINITY;
            }
            KT_OK(kiln_tensor_set_f64(gt, g[j], ns[j]));
        }
        KT_OK(kiln_optim_step(opt));
        for (int j = 0; j < NP; j++) {
            kiln_tensor *node = opt->nodes[j];
            bool q8 = node->op != KILN_OP_ADAM_STEP && node->op != KILN_OP_LION_STEP && node->op != KILN_OP_SGD_STEP;
            for (int64_t i = 0; i < ns[j]; i++) {
                double st[2] = {s[j][0][i], s[j][1][i]}, m2[2];
                ref_elem(cfg, lr, k + 1, &p[j][i], st, g[j][i], m2, &cl[i]);
                s[j][0][i] = st[0];
                s[j][1][i] = st[1];
                mag[0][i] = m2[0];
                mag[1][i] = m2[1];
            }
            KT_OK(kiln_tensor_get_f64(ps[j], got, ns[j]));
            for (int64_t i = 0; i < ns[j]; i++) {
                if (!isfinite(g[j][i]))
                    KT_CHECK(got[i] == p[j][i], "%s step %d: p%d[%lld] = %.9g moved on gradient %g (was %.9g)", what, k,
                             j, (long long)i, got[i], g[j][i], p[j][i]);
                if (fabs(cl[i]) < 1e-6) loose++, p[j][i] = got[i];
            }
            int64_t worst;
            double e = kt_rel_err(got, p[j], ns[j], 1e-6, 1e-5, &worst);
            KT_CHECK(e <= 1, "%s step %d: p%d[%lld] = %.9g, reference %.9g", what, k, j, (long long)worst, got[worst],
                     p[j][worst]);
            memcpy(p[j], got, ns[j] * sizeof(double));
            for (int st = 0; st < nst; st++) {
                if (!q8) { /* 32-bit state: compare and adopt */
                    KT_OK(kiln_tensor_get_f64(node->src[2 + st], got, ns[j]));
                    double e2 = kt_rel_err(got, s[j][st], ns[j], 1e-7, 1e-5, &worst);
                    KT_CHECK(e2 <= 1, "%s step %d: 32-bit state %d [%lld] = %.9g, reference %.9g", what, k, st,
                             (long long)worst, got[worst], s[j][st][worst]);
                    memcpy(s[j][st], got, ns[j] * sizeof(double));
                    continue;
                }
                const uint8_t *q = kiln_tensor_data(node->src[2 + 2 * st]);
                const float *am = kiln_tensor_data(node->src[3 + 2 * st]);
                const float *map = maps[st];
                for (int64_t b = 0; b < kiln__qblocks(ns[j]); b++) {
                    int64_t lo = b * 256, hi = lo + 256 < ns[j] ? lo + 256 : ns[j];
                    double amax = 0;
                    for (int64_t i = lo; i < hi; i++) amax = fmax(amax, fabs(s[j][st][i]));
                    KT_CHECK(fabs(am[b] - amax) <= 1e-5 * amax,
                             "%s step %d: p%d state %d block %lld absmax %.9g, want %.9g", what, k, j, st,
                             (long long)b, am[b], amax);
                    for (int64_t i = lo; i < hi && amax > 0; i++) {
                        double y = s[j][st][i] / amax;
                        int rc = nearest(map, y), kc = q[i];
                        if (kc == rc) continue;
                        mismatched++;
                        double mid = 0.5 * ((double)map[kc] + map[rc]);
                        bool tie = abs(kc - rc) == 1 && fabs(y - mid) <= 2e-6 * (1 + mag[st][i] / amax);
                        ties += tie;
                        KT_CHECK(tie, "%s step %d: p%d state %d [%lld] code %d, reference %d (y %.9g)", what, k, j, st,
                                 (long long)i, kc, rc, y);
                    }
                    /* adopt the kernel's state, dequantized as the kernel does */
                    for (int64_t i = lo; i < hi; i++) s[j][st][i] = (double)(map[q[i]] * am[b]);
                }
            }
        }
    }
    if (getenv("KILN_OPT8_PRINT"))
        printf("%s: %lld codes one apart at a rounding tie, %lld Lion signs near 0\n", what, (long long)ties,
               (long long)loose);
    KT_CHECK(ties == mismatched, "%s: %lld code mismatches, %lld of them ties", what, (long long)mismatched,
             (long long)ties);
    KT_CHECK(loose < 50, "%s: %lld Lion signs within 1e-6 of 0", what, (long long)loose);
    for (int j = 0; j < NP; j++) free(p[j]), free(g[j]), free(s[j][0]), free(s[j][1]);
    free(got), free(mag[0]), free(mag[1]), free(cl);
    kiln_ctx_free(ctx);
}

KT_TEST(opt8bit_adam_reference) {
    kiln_adam_config a = kiln_adam_defaults();
    a.lr = 0.01f;
    a.weight_decay = 0.01f;
    check_alg("adam8bit", &(ref_cfg){.alg = ADAM, .adam = a});
    a.beta1 = 0.8f, a.beta2 = 0.95f, a.eps = 1e-6f;
    check_alg("adam8bit betas", &(ref_cfg){.alg = ADAM, .adam = a});
}

KT_TEST(opt8bit_adamw_reference) {
    kiln_adam_config a = kiln_adamw_defaults();
    a.lr = 0.01f;
    a.weight_decay = 0.1f;
    check_alg("adamw8bit", &(ref_cfg){.alg = ADAMW, .adam = a});
}

KT_TEST(opt8bit_lion_reference) {
    check_alg("lion8bit", &(ref_cfg){.alg = LION, .lion = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.99f, .weight_decay = 0.1f}});
}

KT_TEST(opt8bit_sgd_reference) {
    check_alg("sgd8bit", &(ref_cfg){.alg = SGD, .sgd = {.lr = 0.05f, .momentum = 0.9f, .dampening = 0.1f, .weight_decay = 0.01f}});
    check_alg("sgd8bit nesterov", &(ref_cfg){.alg = SGD, .sgd = {.lr = 0.05f, .momentum = 0.9f, .nesterov = true}});
}

/* 0.5 * sum a_i (p_i - c_i)^2 with a_i in [0.1, 2]: 8-bit and 32-bit Adam
 * (lr 0.01, 8192 elements) from the same start for 200 steps. Measured
 * (KILN_OPT8_PRINT=1): relative L2 distance 0.024 between the two final
 * parameter vectors, largest element difference 0.158, loss 50.99 (8-bit)
 * against 51.12 (32-bit); the bounds leave room above those. */
static void quad_run(bool eightbit, int64_t n, double *out, double *loss) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 1, (int64_t[]){n});
    KT_NOTNULL(w);
    KT_OK(kiln_tensor_fill_uniform(w, 5, -1.0, 1.0));
    double *a = malloc(n * sizeof(double)), *c = malloc(n * sizeof(double)), *g = malloc(n * sizeof(double));
    for (int64_t i = 0; i < n; i++) a[i] = 0.1 + 1.9 * (double)((i * 7919) % 1000) / 1000, c[i] = sin((double)i);
    kiln_adam_config cfg = kiln_adam_defaults();
    cfg.lr = 0.01f;
    kiln_optim *opt = eightbit ? kiln_adam8bit_new(ctx, &cfg) : kiln_adam_new(ctx, &cfg);
    KT_NOTNULL(opt);
    for (int k = 0; k < 200; k++) {
        KT_OK(kiln_tensor_get_f64(w, out, n));
        for (int64_t i = 0; i < n; i++) g[i] = a[i] * (out[i] - c[i]);
        KT_OK(kiln_tensor_set_f64(kiln_tensor_grad(w), g, n));
        KT_OK(kiln_optim_step(opt));
    }
    KT_OK(kiln_tensor_get_f64(w, out, n));
    *loss = 0;
    for (int64_t i = 0; i < n; i++) *loss += 0.5 * a[i] * (out[i] - c[i]) * (out[i] - c[i]);
    free(a), free(c), free(g);
    kiln_ctx_free(ctx);
}

KT_TEST(opt8bit_adam_near_32bit) {
    const int64_t n = 8192;
    double *p8 = malloc(n * sizeof(double)), *p32 = malloc(n * sizeof(double)), l8, l32;
    quad_run(true, n, p8, &l8);
    quad_run(false, n, p32, &l32);
    double d = 0, r = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        d += (p8[i] - p32[i]) * (p8[i] - p32[i]);
        r += p32[i] * p32[i];
        mx = fmax(mx, fabs(p8[i] - p32[i]));
    }
    d = sqrt(d / r);
    if (getenv("KILN_OPT8_PRINT"))
        printf("adam8 vs adam32, 200 steps: rel L2 %.3g, max |dp| %.3g, loss %.6g vs %.6g\n", d, mx, l8, l32);
    KT_CHECK(d < 0.04 && mx < 0.25, "8-bit Adam %.3g (relative L2), %.3g (max) from 32-bit", d, mx);
    KT_CHECK(fabs(l8 - l32) <= 0.02 * l32, "loss 8-bit %g, 32-bit %g", l8, l32);
    free(p8), free(p32);
}

/* Below 4096 elements (and f64) the step is the 32-bit one, bit for bit. */
KT_TEST(opt8bit_small_fallback) {
    double out[2][4095];
    for (int v = 0; v < 2; v++) {
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 1, (int64_t[]){4095});
        KT_OK(kiln_tensor_fill_uniform(w, 3, -1.0, 1.0));
        kiln_adam_config cfg = kiln_adamw_defaults();
        kiln_optim *opt = v ? kiln_adamw8bit_new(ctx, &cfg) : kiln_adamw_new(ctx, &cfg);
        KT_NOTNULL(opt);
        KT_CHECK(kiln_optim_state_bytes(opt) == 2 * 4 * 4095, "state %zu bytes", kiln_optim_state_bytes(opt));
        for (int k = 0; k < 3; k++) {
            KT_OK(kiln_tensor_fill_randn(kiln_tensor_grad(w), 9 + k, 0.0, 1.0));
            KT_OK(kiln_optim_step(opt));
        }
        KT_OK(kiln_tensor_get_f64(w, out[v], 4095));
        kiln_ctx_free(ctx);
    }
    KT_CHECK(memcmp(out[0], out[1], sizeof out[0]) == 0, "4095 elements: 8-bit AdamW differs from 32-bit");
}

KT_TEST(opt8bit_state_bytes) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){1024, 1025}); /* 1049600: 4100 blocks */
    kiln_tensor *b = kiln_param(ctx, "b", KILN_F32, 1, (int64_t[]){100});
    KT_NOTNULL(w);
    KT_NOTNULL(b);
    const size_t n = 1024 * 1025, per_state = n + 4 * ((n + 255) / 256);
    kiln_optim *adam = kiln_adam8bit_new_for(ctx, &w, 1, NULL);
    KT_NOTNULL(adam);
    KT_CHECK(kiln_optim_state_bytes(adam) == 2 * per_state, "adam8bit: %zu bytes, want %zu",
             kiln_optim_state_bytes(adam), 2 * per_state);
    KT_CHECK(kiln_optim_state_bytes(adam) <= 2.1 * n, "adam8bit: %.4f bytes per parameter",
             (double)kiln_optim_state_bytes(adam) / n);
    kiln_optim *lion = kiln_lion8bit_new(ctx, NULL);
    KT_NOTNULL(lion);
    KT_CHECK(kiln_optim_state_bytes(lion) == per_state + 400, "lion8bit: %zu bytes", kiln_optim_state_bytes(lion));
    kiln_optim *sgd = kiln_sgd8bit_new_for(ctx, &w, 1, &(kiln_sgd_config){.lr = 0.1f, .momentum = 0.9f});
    KT_NOTNULL(sgd);
    KT_CHECK(kiln_optim_state_bytes(sgd) == per_state, "sgd8bit: %zu bytes", kiln_optim_state_bytes(sgd));
    kiln_ctx_free(ctx);
}

KT_TEST(opt8bit_config_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_NOTNULL(kiln_param(ctx, "w", KILN_F32, 1, (int64_t[]){5000}));
    kiln_adam_config a = kiln_adam_defaults();
    a.amsgrad = true;
    KT_EXPECT_ERR(kiln_adam8bit_new(ctx, &a), KILN_ERR_ARG, "amsgrad");
    KT_EXPECT_ERR(kiln_adamw8bit_new(ctx, &a), KILN_ERR_ARG, "amsgrad");
    a = kiln_adam_defaults();
    a.beta1 = 1.0f;
    KT_EXPECT_ERR(kiln_adam8bit_new(ctx, &a), KILN_ERR_ARG, "beta parameter at index 0");
    KT_EXPECT_ERR(kiln_sgd8bit_new(ctx, &(kiln_sgd_config){.lr = 0.1f}), KILN_ERR_ARG, "momentum > 0");
    KT_EXPECT_ERR(kiln_sgd8bit_new(ctx, NULL), KILN_ERR_ARG, "config is NULL");
    KT_EXPECT_ERR(kiln_lion8bit_new(ctx, &(kiln_lion_config){.lr = -1.0f}), KILN_ERR_ARG, "learning rate");
    kiln_ctx_free(ctx);
}

/* The vector path (caps as detected) and the scalar path give the same
 * parameters, codes and absmax bit for bit: full and partial blocks, a block
 * of zero gradients over zero state, huge and NaN/Inf gradient elements. */
#define SIMD_N (256 * 33 + 77)
static void simd_run(enum alg a, bool scalar, float *p_out, uint8_t *state_out, size_t *state_len) {
    kiln_cpu_caps saved = *kiln__cpu_caps(), c = *kiln__cpu_caps_detected();
    if (scalar) kiln__cpu_caps_limit(&c, KILN_SIMD_SCALAR);
    kiln__cpu_caps_set(&c);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 1, (int64_t[]){SIMD_N});
    KT_OK(kiln_tensor_fill_uniform(w, 5, -1.0, 1.0));
    ref_cfg cfg = {.alg = a, .adam = a == ADAMW ? kiln_adamw_defaults() : kiln_adam_defaults(),
                   .lion = kiln_lion_defaults(), .sgd = {.lr = 0.01f, .momentum = 0.9f, .weight_decay = 0.01f, .nesterov = true}};
    cfg.adam.weight_decay = 0.05f;
    cfg.lion.weight_decay = 0.1f;
    kiln_optim *opt = make_opt(ctx, &cfg);
    KT_NOTNULL(opt);
    float *g = malloc(SIMD_N * sizeof(float));
    for (int k = 0; k < 4; k++) {
        KT_OK(kiln_tensor_fill_randn(kiln_tensor_grad(w), 40 + (uint64_t)k, 0.0, 1.0));
        KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(w), g, SIMD_N));
        for (int64_t i = 0; i < 256; i++) g[256 * 3 + i] = 0.0f; /* block 3: zero, its state stays zero */
        if (k == 1) g[256 * 5] = 1e30f;
        for (int64_t i = 7; k == 2 && i < SIMD_N; i += 89) g[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
        KT_OK(kiln_tensor_set_f32(kiln_tensor_grad(w), g, SIMD_N));
        KT_OK(kiln_optim_step(opt));
    }
    KT_OK(kiln_tensor_get_f32(w, p_out, SIMD_N));
    size_t len = 0;
    for (kiln__optim_state_entry *e = opt->state; e; e = e->next) {
        memcpy(state_out + len, kiln_tensor_data(e->t), kiln_tensor_nbytes(e->t));
        len += kiln_tensor_nbytes(e->t);
    }
    *state_len = len;
    free(g);
    kiln_ctx_free(ctx);
    kiln__cpu_caps_set(&saved);
}

KT_TEST(opt8bit_simd_matches_scalar) {
    static float p[2][SIMD_N];
    static uint8_t st[2][4 * SIMD_N];
    const char *names[] = {"adam", "adamw", "lion", "sgd"};
    for (int a = ADAM; a <= SGD; a++) {
        size_t len[2];
        simd_run((enum alg)a, true, p[0], st[0], &len[0]);
        simd_run((enum alg)a, false, p[1], st[1], &len[1]);
        KT_CHECK(len[0] == len[1] && len[0] > 0, "%s: state sizes %zu, %zu", names[a], len[0], len[1]);
        KT_CHECK(memcmp(p[0], p[1], sizeof p[0]) == 0, "%s: parameters differ from the scalar path", names[a]);
        KT_CHECK(memcmp(st[0], st[1], len[0]) == 0, "%s: codes or absmax differ from the scalar path", names[a]);
    }
}

/* The packed coder table (kiln__q8_pack) gives kiln__qcoder_code's code at
 * both ends of every key's interval and around its boundary L, both maps. */
KT_TEST(opt8bit_packed_coder) {
    static kiln__qcoder c;
    static uint32_t packed[KILN__Q8_PACKED];
    int64_t bad = 0;
    for (int sgn = 0; sgn < 2; sgn++) {
        float map[256];
        kiln__dynamic_map(sgn == 0, map);
        kiln__qcoder_init(&c, map);
        KT_CHECK(kiln__q8_pack(&c, packed), "dynamic map: extra %d, no packed table", c.extra);
        for (uint32_t s = 0; s < 2; s++)
            for (uint32_t key = 0; key < KILN__QKEYS; key++) {
                uint32_t e = packed[s * KILN__QKEYS + key], L = e >> 8;
                uint32_t lows[] = {0, 1, L - 1, L, L + 1, 0xfffe, 0xffff};
                for (int j = 0; j < 7; j++) {
                    uint32_t lp = lows[j];
                    if (lp > 0xffff) continue;
                    uint32_t u = s << 31 | key << 16 | (s ? 0xffff - lp : lp);
                    float x;
                    memcpy(&x, &u, sizeof x);
                    int want = kiln__qcoder_code(&c, x), got = (int)(e & 0xff) + (lp >= L);
                    bad += want != got;
                }
            }
    }
    KT_CHECK(bad == 0, "%lld values coded differently by the packed table", (long long)bad);
}

/* The vector quantizer (where the CPU has one) at every key's boundary:
 * blocks holding 1.0 (absmax 1, so x / absmax is x) and the floats just
 * below, at and above each key's boundary L, both maps, both signs. */
KT_TEST(opt8bit_vector_quant_boundaries) {
    const kiln__q8_kernels *k = kiln__q8_kernels_avx512();
    if (!k) return; /* no vector kernels on this CPU or build: the scalar path is the only one */
    static kiln__qcoder c;
    static uint32_t packed[KILN__Q8_PACKED];
    float x[KILN__QBLOCK], absmax;
    uint8_t q[KILN__QBLOCK];
    int64_t bad = 0;
    for (int sgn = 0; sgn < 2; sgn++) {
        float map[256];
        kiln__dynamic_map(sgn == 0, map);
        kiln__qcoder_init(&c, map);
        KT_CHECK(kiln__q8_pack(&c, packed), "no packed table");
        for (int use_pack = 0; use_pack < 2; use_pack++) {
            int n = 1;
            x[0] = 1.0f;
            for (uint32_t idx = 0; idx < KILN__Q8_PACKED; idx++) {
                uint32_t s = idx / KILN__QKEYS, key = idx % KILN__QKEYS, L = packed[idx] >> 8;
                for (uint32_t lp = L ? L - 1 : 0; lp <= L + 1 && lp <= 0xffff; lp++) {
                    uint32_t u = s << 31 | key << 16 | (s ? 0xffff - lp : lp);
                    memcpy(&x[n++], &u, sizeof u);
                    if (n < KILN__QBLOCK && !(idx == KILN__Q8_PACKED - 1 && (lp == L + 1 || lp == 0xffff))) continue;
                    for (int i = n; i < KILN__QBLOCK; i++) x[i] = 0.0f;
                    k->quant256(x, &c, use_pack ? packed : NULL, q, &absmax);
                    for (int i = 0; i < n; i++) bad += q[i] != kiln__qcoder_code(&c, x[i] / absmax);
                    n = 1;
                }
            }
        }
    }
    KT_CHECK(bad == 0, "%lld boundary values coded differently by the vector quantizer", (long long)bad);
}
