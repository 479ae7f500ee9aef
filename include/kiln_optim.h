/* kiln_optim.h — optimizers as fused step ops: SGD, Adam/AdamW, Lion,
 * 8-bit Adam (block-wise), GaLore and APOLLO, with learning-rate schedules,
 * gradient clipping and parameter groups; and MeZO, which steps from two
 * forward passes. Part of kiln.h.
 *
 * Usage — AdamW over every parameter of ctx:
 *
 *     kiln_adam_config c = kiln_adamw_defaults();
 *     c.lr = 3e-4f;
 *     kiln_optim *opt = kiln_adamw_new(ctx, &c);
 *     for (int step = 0; step < steps; step++) {
 *         kiln_graph_compute(g);   // forward and backward
 *         kiln_optim_step(opt);    // update, then zero the gradients
 *     }
 */
#ifndef KILN_OPTIM_H
#define KILN_OPTIM_H

#include "kiln_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- optimizers ---------------------------------------------------------- */
/* An optimizer updates every parameter of its context (or the list given)
 * through fused step ops. kiln_optim_step() applies one step, then zeroes
 * the gradients. */

typedef struct kiln_optim kiln_optim;

typedef struct kiln_sgd_config {
    float lr;
    float momentum;     /* 0: plain SGD */
    float dampening;
    float weight_decay; /* L2, added to the gradient as torch.optim.SGD */
    bool nesterov;
} kiln_sgd_config;

/* params NULL: all parameters of ctx at the time of the call. */
kiln_optim *kiln_sgd_new(kiln_ctx *ctx, const kiln_sgd_config *cfg);
kiln_optim *kiln_sgd_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_sgd_config *cfg);

/* Adam (torch.optim.Adam: weight_decay is L2 added to the gradient) and
 * AdamW (torch.optim.AdamW: decoupled, p *= 1 - lr * weight_decay), with
 * bias correction and optional AMSGrad. cfg NULL means torch's defaults:
 * kiln_adam_defaults() (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight_decay 0)
 * and kiln_adamw_defaults() (the same with weight_decay 0.01). */
typedef struct kiln_adam_config {
    float lr;
    float beta1, beta2; /* torch's betas */
    float eps;
    float weight_decay;
    bool amsgrad;
} kiln_adam_config;

kiln_adam_config kiln_adam_defaults(void);
kiln_adam_config kiln_adamw_defaults(void);
kiln_optim *kiln_adam_new(kiln_ctx *ctx, const kiln_adam_config *cfg);
kiln_optim *kiln_adam_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_adam_config *cfg);
kiln_optim *kiln_adamw_new(kiln_ctx *ctx, const kiln_adam_config *cfg);
kiln_optim *kiln_adamw_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_adam_config *cfg);

/* Lion (Chen et al. 2023, as lucidrains' lion-pytorch): one f32/f64
 * momentum per parameter; each step p *= 1 - lr * weight_decay, then
 * p -= lr * sign(beta1 * m + (1 - beta1) * g), then
 * m = beta2 * m + (1 - beta2) * g. cfg NULL means kiln_lion_defaults()
 * (lr 1e-4, betas 0.9/0.99, weight_decay 0). */
typedef struct kiln_lion_config {
    float lr;
    float beta1, beta2; /* lion-pytorch's betas, each in [0, 1] */
    float weight_decay; /* decoupled, as AdamW's */
} kiln_lion_config;

kiln_lion_config kiln_lion_defaults(void);
kiln_optim *kiln_lion_new(kiln_ctx *ctx, const kiln_lion_config *cfg);
kiln_optim *kiln_lion_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_lion_config *cfg);

/* ---- 8-bit optimizers ---- */
/* Block-wise 8-bit Adam, AdamW, Lion and SGD with momentum, as bitsandbytes'
 * 8-bit optimizers (Dettmers et al., "8-bit Optimizers via Block-wise
 * Quantization"): each state is one byte per element (a code into
 * bitsandbytes' dynamic map: signed for first moments and momentum,
 * unsigned for Adam's second moment) plus one f32 absmax per block of 256
 * elements. Each step dequantizes a block, updates it in f32 with the same
 * formulas as the 32-bit optimizer above (torch's: Adam's weight decay is L2,
 * AdamW's and Lion's decoupled and applied first), takes a fresh absmax and
 * requantizes to the nearest code. Gradient elements that are NaN or
 * infinite leave their parameter element and its state value untouched
 * (the state is still requantized with its block). Parameters with fewer
 * than 4096 elements, and f64 parameters, keep 32-bit state and take the
 * plain step of the 32-bit optimizer. amsgrad is refused (not in 8 bits);
 * 8-bit SGD needs momentum > 0 (dampening and nesterov as kiln_sgd_new).
 * kiln_optim_state_bytes counts the bytes held: per 8-bit state
 * 4 * ceil(n / 4) bytes of codes and 4 per block of absmax. On Vulkan the
 * 8-bit Adam/AdamW, Lion and SGD steps run on the device (the CPU's
 * parameters, codes and absmax, bit for bit). */
kiln_optim *kiln_adam8bit_new(kiln_ctx *ctx, const kiln_adam_config *cfg);
kiln_optim *kiln_adam8bit_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_adam_config *cfg);
kiln_optim *kiln_adamw8bit_new(kiln_ctx *ctx, const kiln_adam_config *cfg);
kiln_optim *kiln_adamw8bit_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_adam_config *cfg);
kiln_optim *kiln_lion8bit_new(kiln_ctx *ctx, const kiln_lion_config *cfg);
kiln_optim *kiln_lion8bit_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_lion_config *cfg);
kiln_optim *kiln_sgd8bit_new(kiln_ctx *ctx, const kiln_sgd_config *cfg);
kiln_optim *kiln_sgd8bit_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_sgd_config *cfg);


/* ---- GaLore ---- */
/* GaLore (Zhao et al. 2024, as galore_torch's GaLoreAdamW, projection type
 * 'std'): each 2-D parameter p [m, n] keeps Adam's moments in a rank-r
 * subspace of its gradient G. On step 1 and every update_gap steps after
 * (steps 1, T+1, 2T+1, ...) the projector P is refreshed from an f32 SVD
 * G = U S Vh: P = Vh[:r] [r, n] when m >= n, else P = U[:, :r] [m, r].
 * Each step, with R = G P^T (m >= n) or P^T G, t the step number:
 *   m = beta1 m + (1 - beta1) R;  v = beta2 v + (1 - beta2) R^2
 *   N = m / (sqrt(v) + eps)
 *   p -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * scale * (N P or P N)
 *   p *= 1 - lr * weight_decay                 (decoupled, after the update)
 * as galore_torch does (eps outside the bias correction, decay last). The
 * moments are kept when P changes. Parameters that are not matrices use
 * kiln_adamw exactly (torch.optim.AdamW). r is min(rank, m, n). 2-D
 * parameters must be f32. Needs LAPACK (sgesdd): a BLAS=0 build has none
 * and the constructors fail with KILN_ERR_UNSUPPORTED. kiln_optim_state_bytes
 * counts the projectors and the low-rank moments.
 *
 * 8-bit GaLore (kiln_galore_adamw8bit_*, as galore_torch's GaLoreAdamW8bit):
 * the same projection, with bitsandbytes' block-wise 8-bit Adam on R (the
 * moments stored as kiln_adam8bit stores them, about 2 bytes per element of
 * R plus one f32 absmax per 256) in bitsandbytes' form, no weight decay
 * inside:
 *   N = m / (sqrt(v) + eps * sqrt(1 - beta2^t))
 *   p -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * scale * (N P or P N)
 *   p *= 1 - lr * weight_decay
 * (m / sqrt(v) with torch's eps placement, unlike the 32-bit GaLore's). An
 * element of R whose value is NaN or infinite is skipped (its moments kept,
 * no update from it), as bitsandbytes does. An R of fewer than 4096
 * elements keeps f32 moments (bitsandbytes' min_8bit_size), same formula.
 * In both, a NaN or Inf in G on a refresh step fails the step with
 * KILN_ERR_NUMERIC before p changes (LAPACK's SVD is undefined on it).
 * Parameters that are not matrices use kiln_adamw8bit's step.
 * On Vulkan both GaLore steps run on the device but for the SVD, which
 * stays on the CPU (LAPACK): a refresh step copies G down and P up. */
typedef struct kiln_galore_config {
    kiln_adam_config adamw; /* lr, betas, eps, weight_decay; amsgrad must be false */
    int rank;               /* r >= 1 */
    int update_gap;         /* T >= 1: steps between projector refreshes */
    float scale;            /* alpha, finite */
} kiln_galore_config;

/* galore_torch's defaults: lr 1e-3, betas 0.9/0.999, eps 1e-6,
 * weight_decay 0, rank 128, update_gap 200, scale 0.25. */
kiln_galore_config kiln_galore_defaults(void);
/* cfg NULL means kiln_galore_defaults(). */
kiln_optim *kiln_galore_adamw_new(kiln_ctx *ctx, const kiln_galore_config *cfg);
kiln_optim *kiln_galore_adamw_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n,
                                      const kiln_galore_config *cfg);
/* GaLoreAdamW8bit's defaults: kiln_galore_defaults() with eps 1e-8. */
kiln_galore_config kiln_galore8bit_defaults(void);
/* cfg NULL means kiln_galore8bit_defaults(). */
kiln_optim *kiln_galore_adamw8bit_new(kiln_ctx *ctx, const kiln_galore_config *cfg);
kiln_optim *kiln_galore_adamw8bit_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n,
                                          const kiln_galore_config *cfg);


/* ---- APOLLO ---- */
/* APOLLO and APOLLO-Mini (Zhu et al. 2024, "APOLLO: SGD-like Memory,
 * AdamW-level Performance"), as the reference apollo_torch computes them.
 * Each 2-D parameter G [m, n] keeps Adam moments of a random projection R
 * of its gradient (GaLore's side: m >= n gives R = G P^T [m, rank] with P
 * [rank, n], else R = P^T G [rank, n] with P [m, rank]; P ~ N(0, 1/rank),
 * regenerated every update_gap steps from a seed that advances each time).
 * With Rt = exp_avg / (sqrt(exp_avg_sq) + eps), the update is the raw
 * gradient scaled by s = |Rt| / (|R| + 1e-8): one factor per row of G
 * (m >= n) or per column (m < n), or one for the whole tensor (mini).
 * u = sqrt(scale) * s * G, its norm limited to 1.01 times the previous
 * step's (Fira's norm-growth limiter); then, as AdamW,
 * p *= 1 - lr * weight_decay and p -= lr * sqrt(bc2) / bc1 * u.
 * Every other parameter (not 2-D) steps as kiln_adamw exactly, with
 * adamw's settings (amsgrad unsupported). State: two moments of R's shape
 * and one norm per matrix; P is regenerated from the seed, never stored.
 * f32 matrices only. On Vulkan (a device with shaderFloat64) the step
 * runs on the device, P regenerated there with the CPU's bits. cfg NULL
 * means kiln_apollo_defaults(). */
typedef struct kiln_apollo_config {
    kiln_adam_config adamw; /* lr, betas, eps, weight_decay (decoupled) */
    int rank;               /* rows/columns of the projection, >= 1 */
    int update_gap;         /* steps between projector refreshes, >= 1 */
    float scale;            /* the update is multiplied by sqrt(scale) */
    bool mini;              /* one scaling factor per tensor (APOLLO-Mini) */
    uint64_t seed;          /* projector seeds derive from it */
    int first_index;        /* params[0]'s index in the whole model's list (0): parameter i's
                             * projector seed derives from seed and first_index + i, so that a
                             * ZeRO shard (kiln_dist) draws the projectors the whole list would */
} kiln_apollo_config;

/* apollo_torch's: lr 1e-3, betas 0.9/0.999, eps 1e-6, weight_decay 0,
 * rank 256, update_gap 200, scale 1, channel-wise factors. */
kiln_apollo_config kiln_apollo_defaults(void);
/* APOLLO-Mini: as kiln_apollo_defaults() with rank 1, scale 128, mini. */
kiln_apollo_config kiln_apollo_mini_defaults(void);
kiln_optim *kiln_apollo_new(kiln_ctx *ctx, const kiln_apollo_config *cfg);
kiln_optim *kiln_apollo_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_apollo_config *cfg);


/* ---- MeZO ---- */
/* MeZO (Malladi et al. 2023, "Fine-Tuning Language Models with Just
 * Forward Passes", Algorithm 1, as princeton-nlp/MeZO's zo_step and
 * zo_update): a step from two losses, no gradients. With z ~ N(0, 1)
 * shaped like the parameters and regenerated from the step's seed each
 * time it is needed (never stored):
 *   theta += eps z;  l+ = loss;  theta -= 2 eps z;  l- = loss;
 *   theta += eps z   (restored: within the rounding of the three f32
 *                     additions, as the reference's own tensor ops)
 *   g = (l+ - l-) / (2 eps);  theta -= lr (g z + weight_decay theta)
 * Parameter i's z at step t (0 on the first) is kiln_tensor_fill_randn's
 * with seed kiln_mezo_noise_seed(cfg.seed, t, i), mean 0, std 1 (f32 or
 * f64 as the parameter); each operation rounds to the parameter's dtype
 * as the reference's tensor ops do (d = z * eps, p + d, p + (-2 z) * eps,
 * then p - lr * (g z + wd p) with g rounded to the dtype). Weight decay
 * applies to every parameter given (the reference skips biases and layer
 * norms: leave them out, or use two optimizers).
 * Memory: no gradients needed (parameters need not require grad), no
 * state (kiln_optim_state_bytes is 0): that of inference. f32 and f64
 * contiguous parameters; a device copy is synchronised through the host.
 * Either pass the forward as a function:
 *
 *     kiln_optim *opt = kiln_mezo_new(ctx, l->params, l->n_params, &c);
 *     kiln_mezo_step(opt, forward_loss, &batch);   // two forwards, one update
 *
 * or drive it: kiln_mezo_plus, loss+, kiln_mezo_minus, loss-,
 * kiln_mezo_update(opt, loss+, loss-); a call out of this order is
 * KILN_ERR_STATE. kiln_optim_step refuses MeZO; the lr, the schedule, the
 * step count and kiln_optim_save/load are the other optimizers' (the seed
 * derives from the step count, so a resumed run is bit for bit the same;
 * save between steps, not while the parameters are perturbed);
 * parameter groups, clipping and the guard are refused (a non-finite
 * projected gradient restores the parameters, skips the step, counts it
 * and returns KILN_ERR_NUMERIC). */
typedef struct kiln_mezo_config {
    float lr;           /* >= 0 */
    float eps;          /* the perturbation's scale, > 0 */
    float weight_decay; /* >= 0 */
    uint64_t seed;      /* the steps' noise seeds derive from it */
} kiln_mezo_config;

/* lr 1e-6 (the paper's full-parameter OPT runs), eps 1e-3, weight_decay 0, seed 0. */
kiln_mezo_config kiln_mezo_defaults(void);
/* params NULL: every parameter of ctx; cfg NULL: kiln_mezo_defaults(). */
kiln_optim *kiln_mezo_new(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_mezo_config *cfg);
/* The forward pass: the loss at the current parameters into *loss. A
 * status other than KILN_OK abandons the step (parameters restored) and is
 * returned by kiln_mezo_step. */
typedef kiln_status kiln_mezo_loss_fn(void *user, double *loss);
kiln_status kiln_mezo_step(kiln_optim *opt, kiln_mezo_loss_fn *loss, void *user);
kiln_status kiln_mezo_plus(kiln_optim *opt);
kiln_status kiln_mezo_minus(kiln_optim *opt);
kiln_status kiln_mezo_update(kiln_optim *opt, double loss_plus, double loss_minus);
/* The projected gradient g of the last update (rounded to f32); NaN before one. */
float kiln_mezo_projected_grad(const kiln_optim *opt);
/* The seed of parameter i's z at step t. */
uint64_t kiln_mezo_noise_seed(uint64_t seed, int64_t step, int index);


/* ---- schedules, clipping, parameter groups ---- */
/* Learning-rate schedules, as transformers' get_*_schedule_with_warmup
 * (LambdaLR stepped after each optimizer step): step s (0 on the first
 * kiln_optim_step) uses lr = base lr (kiln_optim_lr) * f(s), with
 * W = warmup_steps, T = total_steps, r = min_lr_ratio:
 *   s < W:     f = s / max(1, W)                        (every kind)
 *   CONSTANT:  f = 1
 *   COSINE:    q = min(1, (s - W) / max(1, T - W)),
 *              f = r + (1 - r) * 0.5 * (1 + cos(pi * q))
 *   LINEAR:    q as COSINE, f = r + (1 - r) * (1 - q)
 * With r = 0 these are get_constant_schedule_with_warmup,
 * get_cosine_schedule_with_warmup (num_cycles 0.5) and
 * get_linear_schedule_with_warmup for s <= T; COSINE with r > 0 is
 * get_cosine_with_min_lr_schedule_with_warmup(min_lr_rate = r). Past T the
 * lr stays at r * base (transformers' cosine would rise again). Skipped
 * steps (clipping, below) do not advance s. */
typedef enum kiln_schedule_kind {
    KILN_SCHEDULE_CONSTANT = 0,
    KILN_SCHEDULE_COSINE,
    KILN_SCHEDULE_LINEAR
} kiln_schedule_kind;
typedef struct kiln_schedule {
    kiln_schedule_kind kind;
    int64_t warmup_steps, total_steps; /* total_steps >= warmup_steps for COSINE and LINEAR */
    float min_lr_ratio;                /* in [0, 1] */
} kiln_schedule;
/* NULL: back to the constant lr. The graph is not rebuilt: each step
 * writes its lr into the optimizer's hyperparameters. */
kiln_status kiln_optim_set_schedule(kiln_optim *opt, const kiln_schedule *s);
/* The lr step s uses (base lr times the schedule's factor). */
float kiln_optim_lr_at(const kiln_optim *opt, int64_t step);
/* Global-norm gradient clipping, as torch.nn.utils.clip_grad_norm_: before
 * each step the L2 norm of all the optimizer's gradients together; above
 * max_norm every gradient is multiplied by max_norm / (norm + 1e-6).
 * max_norm 0 turns it off (the default). A non-finite norm skips the step:
 * parameters and state untouched, gradients zeroed, the skip counted, and
 * kiln_optim_step returns KILN_ERR_NUMERIC naming the first parameter whose
 * gradient is not finite. */
kiln_status kiln_optim_set_clip_grad_norm(kiln_optim *opt, float max_norm);
/* The norm the last step measured (before clipping); -1 if none yet. */
float kiln_optim_last_grad_norm(const kiln_optim *opt);
/* Steps skipped for a non-finite norm, gradient or loss (clipping above,
 * the guard below); saved and loaded with the optimizer's state. */
int64_t kiln_optim_skipped_steps(const kiln_optim *opt);
/* The non-finite guard, torch.cuda.amp.GradScaler's skip without the
 * scaling (off by default): with it on, each kiln_optim_step first checks
 * the loss (when given: every element) and every gradient for NaN and
 * infinities (a reduction that runs where the optimizer runs, so the
 * gradients stay on a device). A bad one skips the step entirely: no
 * parameter, state or step count changes (the schedule does not advance),
 * gradients are zeroed as after a step, kiln_optim_skipped_steps counts it,
 * and kiln_optim_step returns KILN_ERR_NUMERIC with a message naming the
 * first bad parameter ("gradient of 'fc1.weight' is not finite") or the
 * loss. A step with finite values is bit for bit the unguarded one.
 *
 *     kiln_optim_set_skip_nonfinite(opt, true, loss);
 *     kiln_status s = kiln_optim_step(opt);
 *     if (s == KILN_ERR_NUMERIC) fprintf(stderr, "%s\n", kiln_last_error());  // skipped: go on
 *     else if (s) ...                                                            // a real error
 *
 * loss NULL checks the gradients only; it must be a float tensor of opt's
 * context, computed before each step (its value is read then). */
kiln_status kiln_optim_set_skip_nonfinite(kiln_optim *opt, bool on, kiln_tensor *loss);
/* Parameter groups: these parameters (all of the optimizer's) step with
 * lr * lr_scale and this weight decay (its meaning the optimizer's: L2 for
 * SGD and Adam, decoupled for AdamW and Lion), e.g. weight_decay 0 for
 * norms and biases. A parameter in an earlier group moves to this one.
 * The graph is not rebuilt: the group has its own hyperparameters. */
kiln_status kiln_optim_set_group(kiln_optim *opt, kiln_tensor *const *params, int n, float lr_scale,
                                 float weight_decay);


/* One step. An optimizer takes at most 2^32 - 2 (each backend's step op
 * holds the step number in 32 bits); the next is KILN_ERR_STATE. */
kiln_status kiln_optim_step(kiln_optim *opt);
/* A bad lr (negative, NaN, infinite) is an error and keeps the old one. */
kiln_status kiln_optim_set_lr(kiln_optim *opt, float lr);
float kiln_optim_lr(const kiln_optim *opt);
int64_t kiln_optim_steps(const kiln_optim *opt);
/* Bytes of optimizer state (momentum buffers, moments, ...). */
size_t kiln_optim_state_bytes(const kiln_optim *opt);

#ifdef __cplusplus
}
#endif
#endif /* KILN_OPTIM_H */
