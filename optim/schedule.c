/* schedule.c — learning-rate schedules (formulas in include/kiln.h, the
 * schedules section): each kiln_optim_step asks kiln_optim_lr_at() for its
 * lr, computed in double as transformers' LambdaLR does in Python, and the
 * optimizer's prepare writes it into the hyper leaf; the graph never
 * changes. */
#include "optim_impl.h"

#include <math.h>

double kiln__schedule_factor(const kiln_schedule *sc, int64_t s) {
    int64_t w = sc->warmup_steps, t = sc->total_steps;
    if (s < w) return (double)s / (double)(w > 1 ? w : 1);
    if (sc->kind == KILN_SCHEDULE_CONSTANT) return 1.0;
    double q = (double)(s - w) / (double)(t - w > 1 ? t - w : 1);
    if (q > 1.0) q = 1.0;
    double r = sc->min_lr_ratio;
    double f = sc->kind == KILN_SCHEDULE_COSINE ? 0.5 * (1.0 + cos(M_PI * q)) : 1.0 - q;
    return r + (1.0 - r) * f;
}

kiln_status kiln__schedule_check(const kiln_schedule *s, kiln_status bad, const char *who) {
    if (s->kind != KILN_SCHEDULE_CONSTANT && s->kind != KILN_SCHEDULE_COSINE && s->kind != KILN_SCHEDULE_LINEAR)
        return kiln__errs(bad, "%s: unknown schedule kind %d", who, (int)s->kind);
    if (s->warmup_steps < 0)
        return kiln__errs(bad, "%s: warmup_steps %lld < 0", who, (long long)s->warmup_steps);
    if (s->kind != KILN_SCHEDULE_CONSTANT && s->total_steps < s->warmup_steps)
        return kiln__errs(bad, "%s: total_steps %lld < warmup_steps %lld", who, (long long)s->total_steps,
                          (long long)s->warmup_steps);
    if (!(s->min_lr_ratio >= 0.0f && s->min_lr_ratio <= 1.0f))
        return kiln__errs(bad, "%s: min_lr_ratio %g not in [0, 1]", who, (double)s->min_lr_ratio);
    return KILN_OK;
}

kiln_status kiln_optim_set_schedule(kiln_optim *opt, const kiln_schedule *s) {
    if (!opt) return kiln__errs(KILN_ERR_ARG, "kiln_optim_set_schedule: optimizer is NULL");
    kiln_status st = s ? kiln__schedule_check(s, KILN_ERR_ARG, "kiln_optim_set_schedule") : KILN_OK;
    if (!st) opt->sched = s ? *s : (kiln_schedule){0};
    return st;
}

float kiln_optim_lr_at(const kiln_optim *opt, int64_t step) {
    if (!opt) return 0.0f;
    if (step < 0) step = 0;
    double f = kiln__schedule_factor(&opt->sched, step);
    /* no schedule: the base lr's own bits (existing results unchanged) */
    return f == 1.0 ? opt->lr : (float)((double)opt->lr * f);
}
