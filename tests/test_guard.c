/* test_guard.c — the non-finite guard (kiln_optim_set_skip_nonfinite) for
 * all ten optimizers: two identical models, one guarded, step together on
 * finite gradients (bit for bit equal: the guard changes nothing then);
 * a NaN or infinity injected into one gradient of the guarded model skips
 * its step (KILN_ERR_NUMERIC naming the parameter, parameters and every
 * state byte unchanged, step count kept, skip counted), after which both
 * models again step in lockstep to equal bytes. Also: a non-finite loss,
 * mixed dtypes, argument errors, and the guard on Vulkan. */
#include "kt.h"
#include "kt_device.h"
#include "optimizers.h"
#include "../optim/optim_impl.h"

#include <math.h>
#include <stdlib.h>

#define ROWS 64
#define COLS 80 /* weight [64, 80]: 5120 elements, enough for 8-bit state */

typedef struct model {
    kiln_ctx *ctx;
    kiln_tensor *w, *b;
    kiln_optim *opt;
} model;

static float init_w(int64_t i) { return 0.05f * sinf(0.37f * (float)i); }
static float grad_at(int step, int64_t i) { return 0.01f * cosf(0.11f * (float)i + 0.7f * (float)step); }

/* NULL (with the error set) when the optimizer is not in this build. */
static bool make(model *m, optimizer_id id, kiln_backend *be) {
    m->ctx = kiln_ctx_new();
    if (!m->ctx || (be && kiln_ctx_set_backend(m->ctx, be))) return false;
    m->w = kiln_param(m->ctx, "fc.weight", KILN_F32, 2, (int64_t[]){ROWS, COLS});
    m->b = kiln_param(m->ctx, "fc.bias", KILN_F32, 1, (int64_t[]){ROWS});
    if (!m->w || !m->b) return false;
    float *w = kiln_tensor_data(m->w), *b = kiln_tensor_data(m->b);
    for (int64_t i = 0; i < ROWS * COLS; i++) w[i] = init_w(i);
    for (int64_t i = 0; i < ROWS; i++) b[i] = init_w(i + 7);
    m->opt = optimizer_new(m->ctx, id, &(optimizer_settings){.lr = 1e-2f, .rank = 4, .update_gap = 2, .seed = 3});
    return m->opt != NULL;
}

static kiln_status set_grads(model *m, int step) {
    float gw[ROWS * COLS], gb[ROWS];
    for (int64_t i = 0; i < ROWS * COLS; i++) gw[i] = grad_at(step, i);
    for (int64_t i = 0; i < ROWS; i++) gb[i] = grad_at(step, i + 9);
    kiln_status s = kiln_tensor_set_f32(kiln_tensor_grad(m->w), gw, ROWS * COLS);
    return s ? s : kiln_tensor_set_f32(kiln_tensor_grad(m->b), gb, ROWS);
}

/* Every byte a step may change: the parameters and each state leaf. */
typedef struct snap {
    unsigned char *p;
    size_t n;
} snap;

static void snap_add(snap *s, const kiln_tensor *t) {
    const void *d = kiln_tensor_data(t);
    size_t k = kiln_tensor_nbytes(t);
    s->p = realloc(s->p, s->n + k);
    memcpy(s->p + s->n, d, k);
    s->n += k;
}

static snap take(const model *m) {
    snap s = {0};
    snap_add(&s, m->w);
    snap_add(&s, m->b);
    for (const kiln__optim_state_entry *e = m->opt->state; e; e = e->next) snap_add(&s, e->t);
    return s;
}

static bool same(snap a, snap b) {
    bool eq = a.n == b.n && !memcmp(a.p, b.p, a.n);
    free(a.p);
    free(b.p);
    return eq;
}

static void check_optimizer(optimizer_id id, kiln_backend *be, float bad, bool in_bias) {
    const char *name = optimizer_name(id);
    model a = {0}, b = {0};
    bool ok_a = make(&a, id, be), ok_b = ok_a && make(&b, id, be);
    if (!ok_a && kiln_last_status() == KILN_ERR_UNSUPPORTED) { /* GaLore without LAPACK */
        kiln_ctx_free(a.ctx);
        return;
    }
    KT_REQUIRE(ok_a && ok_b, "%s: %s", name, kiln_last_error());
    KT_OK(kiln_optim_set_skip_nonfinite(a.opt, true, NULL));
    int step = 0;
    for (; step < 3; step++) { /* finite: the guard is invisible */
        KT_OK(set_grads(&a, step));
        KT_OK(set_grads(&b, step));
        KT_OK(kiln_optim_step(a.opt));
        KT_OK(kiln_optim_step(b.opt));
        KT_CHECK(same(take(&a), take(&b)), "%s: guarded step %d differs from the unguarded one", name, step);
    }
    /* a bad gradient: the guarded model skips, the other one sits it out */
    KT_OK(set_grads(&a, step));
    kiln_tensor *victim = in_bias ? a.b : a.w;
    float *g = kiln_tensor_data(kiln_tensor_grad(victim));
    g[in_bias ? ROWS - 1 : 1234] = bad;
    snap before = take(&a);
    kiln_clear_error();
    kiln_status s = kiln_optim_step(a.opt);
    KT_CHECK(s == KILN_ERR_NUMERIC, "%s: status %s", name, kiln_status_name(s));
    const char *want = in_bias ? "'fc.bias'" : "'fc.weight'";
    KT_CHECK(strstr(kiln_last_error(), want) != NULL, "%s: message '%s' lacks %s", name, kiln_last_error(), want);
    KT_CHECK(same(before, take(&a)), "%s: the skipped step changed a parameter or the state", name);
    KT_CHECK(kiln_optim_skipped_steps(a.opt) == 1, "%s: skipped %lld", name, (long long)kiln_optim_skipped_steps(a.opt));
    KT_CHECK(kiln_optim_steps(a.opt) == 3, "%s: steps %lld", name, (long long)kiln_optim_steps(a.opt));
    float gb[ROWS];
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(a.b), gb, ROWS));
    KT_CHECK(gb[0] == 0 && gb[ROWS - 1] == 0, "%s: gradients not zeroed after the skip", name);
    /* then both go on in lockstep: the skip left nothing behind */
    for (; step < 6; step++) {
        KT_OK(set_grads(&a, step));
        KT_OK(set_grads(&b, step));
        KT_OK(kiln_optim_step(a.opt));
        KT_OK(kiln_optim_step(b.opt));
        KT_CHECK(same(take(&a), take(&b)), "%s: step %d after the skip differs", name, step);
    }
    KT_CHECK(kiln_optim_skipped_steps(b.opt) == 0 && kiln_optim_steps(b.opt) == 6, "%s: unguarded counts", name);
    kiln_ctx_free(a.ctx);
    kiln_ctx_free(b.ctx);
}

KT_TEST(guard_skips_every_optimizer_cpu) {
    for (int id = 0; id < OPT_COUNT; id++) {
        check_optimizer((optimizer_id)id, NULL, NAN, id % 2);
        check_optimizer((optimizer_id)id, NULL, id % 2 ? INFINITY : -INFINITY, !(id % 2));
    }
}

#ifdef KILN_VULKAN
KT_TEST(guard_skips_vulkan) {
    kiln_backend *vk = kt_device("vulkan");
    check_optimizer(OPT_ADAMW, vk, NAN, true);
    check_optimizer(OPT_SGD, vk, INFINITY, false);
}
#endif

/* Large but finite gradients whose sum overflows f32 are no skip (the
 * exact check clears them); with a NaN elsewhere, that one is named. */
KT_TEST(guard_large_finite_gradient) {
    model m = {0};
    KT_REQUIRE(make(&m, OPT_SGD, NULL), "%s", kiln_last_error());
    KT_OK(kiln_optim_set_skip_nonfinite(m.opt, true, NULL));
    KT_OK(set_grads(&m, 0));
    float *gw = kiln_tensor_data(kiln_tensor_grad(m.w));
    gw[5] = gw[6] = 3e38f;
    KT_OK(kiln_optim_step(m.opt));
    KT_CHECK(kiln_optim_steps(m.opt) == 1 && kiln_optim_skipped_steps(m.opt) == 0, "counts");
    KT_OK(set_grads(&m, 1));
    gw[5] = gw[6] = 3e38f;
    ((float *)kiln_tensor_data(kiln_tensor_grad(m.b)))[3] = NAN;
    kiln_status s = kiln_optim_step(m.opt);
    KT_CHECK(s == KILN_ERR_NUMERIC && strstr(kiln_last_error(), "'fc.bias'"), "%s", kiln_last_error());
    KT_CHECK(kiln_optim_steps(m.opt) == 1 && kiln_optim_skipped_steps(m.opt) == 1, "counts after the NaN");
    kiln_ctx_free(m.ctx);
}

/* A non-finite loss skips the step even when the gradients are finite. */
KT_TEST(guard_loss) {
    model m = {0};
    KT_REQUIRE(make(&m, OPT_ADAM, NULL), "%s", kiln_last_error());
    kiln_tensor *loss = kiln_new_1d(m.ctx, KILN_F32, 1);
    KT_NOTNULL(loss);
    KT_OK(kiln_optim_set_skip_nonfinite(m.opt, true, loss));
    KT_OK(kiln_tensor_set_f32(loss, (float[]){0.5f}, 1));
    KT_OK(set_grads(&m, 0));
    KT_OK(kiln_optim_step(m.opt));
    KT_OK(kiln_tensor_set_f32(loss, (float[]){NAN}, 1));
    KT_OK(set_grads(&m, 1));
    snap before = take(&m);
    kiln_status s = kiln_optim_step(m.opt);
    KT_CHECK(s == KILN_ERR_NUMERIC && strstr(kiln_last_error(), "loss is not finite"), "%s: %s",
             kiln_status_name(s), kiln_last_error());
    KT_CHECK(same(before, take(&m)), "the skipped step changed something");
    KT_CHECK(kiln_optim_steps(m.opt) == 1 && kiln_optim_skipped_steps(m.opt) == 1, "counts");
    /* the guard off: the same step goes through */
    KT_OK(kiln_optim_set_skip_nonfinite(m.opt, false, NULL));
    KT_OK(set_grads(&m, 1));
    ((float *)kiln_tensor_data(kiln_tensor_grad(m.b)))[0] = NAN;
    KT_OK(kiln_optim_step(m.opt));
    KT_CHECK(kiln_optim_steps(m.opt) == 2, "unguarded step not taken");
    kiln_ctx_free(m.ctx);
}

/* f32 and f64 parameters: one sum per gradient, each read back. */
KT_TEST(guard_mixed_dtypes) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_param(ctx, "a32", KILN_F32, 1, (int64_t[]){3});
    kiln_tensor *b = kiln_param(ctx, "b64", KILN_F64, 1, (int64_t[]){2});
    KT_NOTNULL(a);
    KT_NOTNULL(b);
    kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.5f});
    KT_NOTNULL(opt);
    KT_OK(kiln_optim_set_skip_nonfinite(opt, true, NULL));
    KT_OK(kiln_tensor_set_f32(kiln_tensor_grad(a), (float[]){1, 2, 3}, 3));
    double *gb = kiln_tensor_data(kiln_tensor_grad(b));
    gb[0] = 1;
    gb[1] = INFINITY;
    kiln_status s = kiln_optim_step(opt);
    KT_CHECK(s == KILN_ERR_NUMERIC && strstr(kiln_last_error(), "'b64'"), "%s", kiln_last_error());
    KT_OK(kiln_tensor_set_f32(kiln_tensor_grad(a), (float[]){1, 2, 3}, 3));
    KT_OK(kiln_optim_step(opt));
    float pa[3];
    KT_OK(kiln_tensor_get_f32(a, pa, 3));
    KT_CHECK(pa[0] == -0.5f && pa[2] == -1.5f, "a after the step: %g %g", (double)pa[0], (double)pa[2]);
    KT_CHECK(kiln_optim_steps(opt) == 1 && kiln_optim_skipped_steps(opt) == 1, "counts");
    kiln_ctx_free(ctx);
}

KT_TEST(guard_errors) {
    kiln_ctx *ctx = kiln_ctx_new(), *other = kiln_ctx_new();
    KT_NOTNULL(kiln_param(ctx, "w", KILN_F32, 1, (int64_t[]){2}));
    kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.1f});
    KT_NOTNULL(opt);
    kiln_tensor *foreign = kiln_new_1d(other, KILN_F32, 1), *ints = kiln_new_1d(ctx, KILN_I32, 1);
    KT_CHECK(kiln_optim_set_skip_nonfinite(NULL, true, NULL) == KILN_ERR_ARG, "NULL optimizer");
    KT_CHECK(kiln_optim_set_skip_nonfinite(opt, true, foreign) == KILN_ERR_ARG, "loss of another context");
    KT_CHECK(kiln_optim_set_skip_nonfinite(opt, true, ints) == KILN_ERR_DTYPE, "integer loss");
    kiln_ctx_free(ctx);
    kiln_ctx_free(other);
}
