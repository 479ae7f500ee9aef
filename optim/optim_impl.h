/* optim_impl.h — the generic optimizer object shared by optim/optim.c and
 * each optimizer (optim/sgd.c, ...); not installed.
 *
 * An optimizer is a graph: one fused, in-place step op per parameter
 * (KILN_KIND_INPLACE, writing into the parameter's storage) whose sources
 * are the parameter, its gradient, its state leaves (momentum, moments) and
 * one small f32 leaf of hyperparameters shared by all step ops.
 * kiln_optim_step() asks the optimizer to write the hyperparameters for the
 * coming step, writes the step number after them (KILN__HYPER_STEP_SLOTS),
 * computes the graph, zeroes the gradients and counts the step. Changing
 * the learning rate or the step number therefore changes a value in the
 * hyper leaf, never the graph (which a device then replays as recorded).
 *
 * Adding an optimizer: a file beside sgd.c with a kiln_optim_impl (name,
 * number of hyperparameters, prepare), a constructor that validates its
 * config, calls kiln__optim_new() and adds one step node per parameter with
 * kiln__optim_step_node(), and a kiln__<name>_register() for its op row,
 * called when the first optimizer is made (optim.c).
 */
#ifndef KILN_OPTIM_IMPL_H
#define KILN_OPTIM_IMPL_H

#include "internal.h"

#include <math.h>

typedef struct kiln_optim_impl {
    const char *name; /* public constructor's name, for messages */
    int n_hyper;      /* elements of the hyper leaf */
    /* Write hyper[0..n_hyper) for the coming step (opt->lr and opt->steps
     * are current: opt->steps is 0 before the first step) and anything else
     * a step needs to know (e.g. the step count in its nodes' ip[]). */
    void (*prepare)(kiln_optim *opt, float *hyper);
} kiln_optim_impl;

struct kiln_optim {
    kiln_ctx *ctx;
    const kiln_optim_impl *impl;
    void *cfg;            /* the optimizer's own settings, in ctx's arena */
    kiln_tensor **params; /* n_params, in ctx's arena */
    kiln_tensor **nodes;  /* the step node of each parameter (same order) */
    int n_params;
    kiln_graph *graph;    /* the step nodes */
    kiln_tensor *hyper;   /* f32 [impl->n_hyper + KILN__HYPER_STEP_SLOTS] */
    float lr;
    int64_t steps;
    size_t state_bytes;   /* bytes of the state leaves below */
    struct kiln__optim_state_entry *state, *state_last; /* every state leaf, in order made */
    /* schedules, clipping, parameter groups (schedule.c, clip.c, groups.c) */
    kiln_schedule sched;          /* kind CONSTANT with no warmup: factor 1 */
    float clip_max_norm;          /* 0: no clipping */
    float last_grad_norm;         /* -1 until clipping computed one */
    int64_t skipped_steps;
    kiln_graph *norm_graph;       /* sum of squares of each gradient (clip.c) */
    kiln_tensor **grad_sq;        /* its outputs, one per parameter */
    kiln_graph *scale_graph;      /* g += g * (coef - 1), in place (clip.c) */
    kiln_tensor **scale_coef;     /* its leaves [1] holding coef - 1, one per parameter (shared by a dtype) */
    struct kiln__optim_group *groups; /* newest first (groups.c) */
    /* the non-finite guard (guard.c) */
    bool guard;                   /* skip steps with a non-finite gradient or loss */
    kiln_tensor *guard_loss;      /* NULL: gradients only */
    kiln_graph *guard_graph[2];   /* [0] sum(g), [1] sum(g * 0) of each gradient (built when first needed) */
    kiln_tensor **guard_sums[2];  /* their outputs (one [n] vector when all gradients share a dtype) */
    /* Steps from losses, not gradients (MeZO, kiln__optim_new_forward):
     * parameters need no gradient, no step nodes, kiln_optim_step refuses it */
    bool forward_only;
};

/* Two slots of the hyper leaf every optimizer keeps in place, so that
 * schedules and parameter groups work for all of them: hyper[0] is the
 * learning rate and hyper[impl->n_hyper - 1] the weight decay; the hyper
 * leaf is the last source of each step node. */
enum { KILN__HYPER_LR = 0 };

/* The schedule's factor at step s (optim/schedule.c). */
double kiln__schedule_factor(const kiln_schedule *sc, int64_t s);
/* With clipping on: the global gradient norm, the gradients scaled when it
 * is above the maximum; KILN_ERR_NUMERIC (gradients zeroed, step counted as
 * skipped) when it is not finite (optim/clip.c). */
kiln_status kiln__optim_clip(kiln_optim *opt);
/* With the guard on: KILN_ERR_NUMERIC (step skipped through
 * kiln__optim_skip) when the loss or a gradient is not finite (guard.c). */
kiln_status kiln__optim_guard(kiln_optim *opt);
/* Skip this step: gradients zeroed as a step would, parameters, state and
 * step count untouched, the skip counted; returns KILN_ERR_NUMERIC with
 * the message "kiln_optim_step: <why>; step skipped" (guard.c). */
kiln_status kiln__optim_skip(kiln_optim *opt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The checks a setter and a load share, so that a file holds only what
 * the calls accept: `bad` is the status to fail with (KILN_ERR_ARG for a
 * setter, KILN_ERR_FORMAT for a file), who names the call (and the file).
 * The most steps an optimizer takes: each backend's step op holds the step
 * number (steps + 1) in 32 bits (the Vulkan push constants). */
#define KILN__MAX_STEPS ((int64_t)UINT32_MAX - 1)
kiln_status kiln__optim_check_steps(int64_t steps, kiln_status bad, const char *who);
kiln_status kiln__optim_check_lr(float lr, kiln_status bad, const char *who);
kiln_status kiln__optim_check_clip(float max_norm, kiln_status bad, const char *who);
kiln_status kiln__schedule_check(const kiln_schedule *s, kiln_status bad, const char *who);
/* The optimizer's gradients share one dtype: their per-parameter sums can
 * be concatenated into one vector and read back at once (clip.c). */
bool kiln__optim_one_dtype(const kiln_optim *opt);
/* Copy the freshly prepared hyper values into each group's leaf with the
 * group's lr scale and weight decay (optim/groups.c). */
kiln_status kiln__optim_write_groups(kiln_optim *opt, const float *hyper);

/* Validate the parameters (params NULL: every parameter of ctx; each must
 * be a float leaf of ctx with a gradient, none twice) and make the
 * optimizer with its hyper leaf and an empty step graph. 'who' names the
 * public constructor in messages. NULL with the error set on failure. */
kiln_optim *kiln__optim_new(kiln_ctx *ctx, const char *who, const kiln_optim_impl *impl, kiln_tensor *const *params,
                            int n, float lr);
/* The same for an optimizer that steps from losses (forward_only). */
kiln_optim *kiln__optim_new_forward(kiln_ctx *ctx, const char *who, const kiln_optim_impl *impl,
                                    kiln_tensor *const *params, int n, float lr);
/* One state leaf: parameter p's state called suffix ("exp_avg", ...);
 * saved and loaded as "state.<p's index>.<suffix>". */
typedef struct kiln__optim_state_entry {
    kiln_tensor *t, *param;
    char suffix[24];
    struct kiln__optim_state_entry *next;
} kiln__optim_state_entry;

/* A zero-filled state leaf of p named "<p>.<suffix>", shaped like p
 * (kiln__optim_state) or as given, recorded in opt->state and counted in
 * kiln_optim_state_bytes. Every state an optimizer keeps is made here, so
 * that the byte count and save/load see all of it. */
kiln_tensor *kiln__optim_state(kiln_optim *opt, kiln_tensor *p, const char *suffix);
kiln_tensor *kiln__optim_state_shaped(kiln_optim *opt, kiln_tensor *p, kiln_dtype dt, int ndim, const int64_t *shape,
                                      const char *suffix);
/* Record parameter i's step node: op over srcs (srcs[0] must be the
 * parameter), writing in place into the parameter, and add it to the step
 * graph. Returns the node (its ip/fp are the caller's to fill) or NULL. */
kiln_tensor *kiln__optim_step_node(kiln_optim *opt, int i, kiln_op op, int nsrc, kiln_tensor *const *srcs);

/* Op-table rows of each optimizer's step op (called when the first optimizer is made, optim.c). */
void kiln__sgd_register(kiln_op_info *tab);
void kiln__adam_register(kiln_op_info *tab);
void kiln__lion_register(kiln_op_info *tab);

/* Finite and >= 0 (false for NaN): learning rates, weight decay, eps. */
static inline bool kiln__finite_nonneg(float v) { return v >= 0.0f && !isinf(v); }
/* torch.optim.Adam/AdamW's checks of lr, eps, betas and weight_decay, with
 * their wording (amsgrad is left to the caller); the optimizers built on
 * Adam's moments (8-bit, GaLore, APOLLO) share them. */
kiln_status kiln__adam_check_config(const char *who, const kiln_adam_config *c);
void kiln__galore_register(kiln_op_info *tab);

/* Parameter i's Adam step node (KILN_OP_ADAM_STEP, as kiln_adam_new /
 * kiln_adamw_new make it): the optimizers built on Adam give it to the
 * parameters they do not handle themselves. */
kiln_tensor *kiln__adam_node(kiln_optim *opt, int i, bool amsgrad, bool decoupled);
/* bitsandbytes' min_8bit_size: smaller parameters keep 32-bit state. */
#define KILN__MIN_8BIT_NUMEL 4096
/* The dynamic maps leaf the 8-bit kernels read (f32 [512]: signed, then
 * unsigned), a constant like hyper, not a state (optim/opt8bit.c). */
kiln_tensor *kiln__opt8bit_maps(kiln_optim *opt);
/* Parameter i's step as kiln_adam8bit / kiln_adamw8bit make it: 8-bit
 * state from KILN__MIN_8BIT_NUMEL f32 elements, else kiln__adam_node. */
kiln_tensor *kiln__adam8_node(kiln_optim *opt, int i, kiln_tensor *maps, bool decoupled);
void kiln__apollo_register(kiln_op_info *tab);
void kiln__opt8bit_register(kiln_op_info *tab);

#endif
