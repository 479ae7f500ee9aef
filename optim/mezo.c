/* mezo.c — MeZO (Malladi et al. 2023, "Fine-Tuning Language Models with
 * Just Forward Passes", Algorithm 1, as princeton-nlp/MeZO's trainer's
 * zo_step / zo_update compute it): two forward passes at theta + eps z and
 * theta - eps z, z ~ N(0, 1) regenerated from the step's seed for each
 * pass and for the update instead of being stored.
 *
 * The optimizer is a kiln_optim without step nodes, gradients or state
 * leaves: the perturbations and the update are host loops over the
 * parameters' storage (kiln__host_write syncs a device copy), each element
 * a function of (seed, step, parameter index, element index) only, so any
 * thread count gives the same bits. Every operation rounds to the
 * parameter's dtype as the reference's f32 tensor ops do (the build has no
 * FP contraction, -std=c11):
 *   d = z * eps;  plus: p += d;  minus: p += (-2 z) * eps  (= p - 2d, exact)
 *   restore: p += d;  update: p -= lr * (g * z + wd * p)   (wd != 0)
 * with g the projected gradient rounded to the dtype. The restore and the
 * update run in one pass (the same z). */
#include "optim_impl.h"
#include "backend.h"
#include "pool.h"

#include <math.h>

enum { MEZO_LR, MEZO_WEIGHT_DECAY, MEZO_N_HYPER };

/* The perturbation phase: what the next call must be. */
enum { PHASE_PLUS, PHASE_MINUS, PHASE_UPDATE };

typedef struct mezo_state {
    kiln_mezo_config cfg;
    int phase;
    float last_grad; /* the projected gradient of the last update; NAN before */
} mezo_state;

static void mezo_prepare(kiln_optim *opt, float *hyper) {
    const mezo_state *m = opt->cfg;
    hyper[MEZO_LR] = opt->lr;
    hyper[MEZO_WEIGHT_DECAY] = m->cfg.weight_decay;
}

static const kiln_optim_impl mezo_impl = {"kiln_mezo", MEZO_N_HYPER, mezo_prepare};

kiln_mezo_config kiln_mezo_defaults(void) {
    return (kiln_mezo_config){.lr = 1e-6f, .eps = 1e-3f, .weight_decay = 0.0f, .seed = 0};
}

uint64_t kiln_mezo_noise_seed(uint64_t seed, int64_t step, int index) {
    uint64_t s = kiln__hash64(kiln__hash64(seed) ^ kiln__hash64((uint64_t)step));
    return kiln__hash64(s ^ ((uint64_t)index * 0x9e3779b97f4a7c15ull));
}

kiln_optim *kiln_mezo_new(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_mezo_config *cfg) {
    const char *who = "kiln_mezo_new";
    kiln_mezo_config c = cfg ? *cfg : kiln_mezo_defaults();
    if (!kiln__finite_nonneg(c.lr))
        return kiln__err(KILN_ERR_ARG, "%s: invalid learning rate: %g (must be >= 0)", who, (double)c.lr);
    if (!(c.eps > 0.0f) || isinf(c.eps))
        return kiln__err(KILN_ERR_ARG, "%s: invalid eps: %g (must be > 0 and finite)", who, (double)c.eps);
    if (!kiln__finite_nonneg(c.weight_decay))
        return kiln__err(KILN_ERR_ARG, "%s: invalid weight_decay value: %g (must be >= 0)", who,
                         (double)c.weight_decay);
    kiln_optim *opt = kiln__optim_new_forward(ctx, who, &mezo_impl, params, n, c.lr);
    if (!opt) return NULL;
    for (int i = 0; i < opt->n_params; i++)
        if (!kiln_tensor_is_contiguous(opt->params[i]))
            return kiln__err(KILN_ERR_ARG, "%s: parameter %d '%s' is not contiguous", who, i, opt->params[i]->name);
    mezo_state *m = kiln__arena_alloc(ctx, sizeof *m);
    if (!m) return NULL;
    *m = (mezo_state){.cfg = c, .phase = PHASE_PLUS, .last_grad = NAN};
    opt->cfg = m;
    return opt;
}

/* One pass over parameter p's elements: p += scale * z * eps, then (update)
 * p -= lr * (g * z + wd * p). */
typedef struct pass_job {
    void *data;
    bool f64, update;
    uint64_t seed;
    double scale, eps, lr, g, wd;
} pass_job;

static void pass_f32(const pass_job *j, int64_t i0, int64_t i1) {
    float *p = j->data, scale = (float)j->scale, eps = (float)j->eps, lr = (float)j->lr, g = (float)j->g,
          wd = (float)j->wd;
    for (int64_t i = i0; i < i1; i++) {
        float z = (float)kiln__normal(j->seed, (uint64_t)i);
        float v = p[i] + (scale * z) * eps;
        if (j->update) {
            float u = g * z;
            if (wd != 0.0f) u = u + wd * v;
            v = v - lr * u;
        }
        p[i] = v;
    }
}

static void pass_f64(const pass_job *j, int64_t i0, int64_t i1) {
    double *p = j->data;
    for (int64_t i = i0; i < i1; i++) {
        double z = kiln__normal(j->seed, (uint64_t)i);
        double v = p[i] + (j->scale * z) * j->eps;
        if (j->update) {
            double u = j->g * z;
            if (j->wd != 0.0) u = u + j->wd * v;
            v = v - j->lr * u;
        }
        p[i] = v;
    }
}

static void pass_range(void *arg, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const pass_job *j = arg;
    if (j->f64) pass_f64(j, i0, i1);
    else pass_f32(j, i0, i1);
}

/* Every parameter: scale * eps * z of step opt->steps, then the update
 * with projected gradient g when update is set. */
static kiln_status pass(kiln_optim *opt, double scale, bool update, double g) {
    const mezo_state *m = opt->cfg;
    double lr = kiln_optim_lr_at(opt, opt->steps);
    for (int i = 0; i < opt->n_params; i++) {
        kiln_tensor *p = opt->params[i];
        kiln_status s = kiln__host_write(p);
        if (s) return s;
        pass_job j = {.data = p->data,
                      .f64 = p->dtype == KILN_F64,
                      .update = update,
                      .seed = kiln_mezo_noise_seed(m->cfg.seed, opt->steps, i),
                      .scale = scale,
                      .eps = m->cfg.eps,
                      .lr = lr,
                      .g = g,
                      .wd = m->cfg.weight_decay};
        kiln__pool_for(kiln_tensor_numel(p), 16384, kiln__threads(), pass_range, &j);
    }
    return KILN_OK;
}

static kiln_status check(kiln_optim *opt, const char *who, int phase) {
    static const char *const calls[] = {"kiln_mezo_plus", "kiln_mezo_minus", "kiln_mezo_update"};
    if (!opt) return kiln__errs(KILN_ERR_ARG, "%s: optimizer is NULL", who);
    if (opt->impl != &mezo_impl)
        return kiln__errs(KILN_ERR_ARG, "%s: the optimizer is %s, not kiln_mezo", who, opt->impl->name);
    const mezo_state *m = opt->cfg;
    if (m->phase != phase)
        return kiln__errs(KILN_ERR_STATE, "%s: out of order: the next call of this step is %s", who, calls[m->phase]);
    return kiln__optim_check_steps(opt->steps + 1, KILN_ERR_STATE, who);
}

kiln_status kiln_mezo_plus(kiln_optim *opt) {
    kiln_status s = check(opt, "kiln_mezo_plus", PHASE_PLUS);
    if (!s) s = pass(opt, 1.0, false, 0.0);
    if (!s) ((mezo_state *)opt->cfg)->phase = PHASE_MINUS;
    return s;
}

kiln_status kiln_mezo_minus(kiln_optim *opt) {
    kiln_status s = check(opt, "kiln_mezo_minus", PHASE_MINUS);
    if (!s) s = pass(opt, -2.0, false, 0.0);
    if (!s) ((mezo_state *)opt->cfg)->phase = PHASE_UPDATE;
    return s;
}

/* A step abandoned: back to theta from whichever perturbation it had
 * reached, without an update. */
static kiln_status abandon(kiln_optim *opt) {
    mezo_state *m = opt->cfg;
    kiln_status s = m->phase == PHASE_MINUS    ? pass(opt, -1.0, false, 0.0)
                    : m->phase == PHASE_UPDATE ? pass(opt, 1.0, false, 0.0)
                                               : KILN_OK;
    m->phase = PHASE_PLUS;
    return s;
}

kiln_status kiln_mezo_update(kiln_optim *opt, double loss_plus, double loss_minus) {
    const char *who = "kiln_mezo_update";
    kiln_status s = check(opt, who, PHASE_UPDATE);
    if (s) return s;
    mezo_state *m = opt->cfg;
    double g = (loss_plus - loss_minus) / (2.0 * (double)m->cfg.eps);
    if (!isfinite(g)) {
        if ((s = abandon(opt))) return s;
        opt->skipped_steps++;
        return kiln__errs(KILN_ERR_NUMERIC,
                          "%s: loss+ %g, loss- %g give a projected gradient that is not finite; parameters restored, "
                          "step skipped",
                          who, loss_plus, loss_minus);
    }
    if ((s = pass(opt, 1.0, true, g))) return s;
    m->phase = PHASE_PLUS;
    m->last_grad = (float)g;
    opt->steps++;
    return KILN_OK;
}

kiln_status kiln_mezo_step(kiln_optim *opt, kiln_mezo_loss_fn *loss, void *user) {
    kiln_status s = check(opt, "kiln_mezo_step", PHASE_PLUS);
    if (s) return s;
    if (!loss) return kiln__errs(KILN_ERR_ARG, "kiln_mezo_step: loss function is NULL");
    double lp = NAN, lm = NAN;
    if ((s = kiln_mezo_plus(opt)) || (s = loss(user, &lp)) || (s = kiln_mezo_minus(opt)) || (s = loss(user, &lm))) {
        /* keep the loss's message: restoring the parameters sets none */
        abandon(opt);
        return s;
    }
    return kiln_mezo_update(opt, lp, lm);
}

float kiln_mezo_projected_grad(const kiln_optim *opt) {
    if (!opt || opt->impl != &mezo_impl) return NAN;
    return ((const mezo_state *)opt->cfg)->last_grad;
}
