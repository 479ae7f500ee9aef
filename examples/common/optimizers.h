/* optimizers.h — kiln's ten optimizers by name, for the examples.
 *
 * One table of the optimizers an example can train with: their
 * command-line names ("sgd", "adamw8bit", ...), their display names
 * ("SGD-momentum", "AdamW-8bit", ...), the 32-bit twin of each 8-bit one,
 * and one constructor that makes any of them over every parameter of a
 * context from a few settings. Each method starts from its reference
 * implementation's defaults (kiln_*_defaults); what an example changes
 * (learning rate, weight decay, betas, rank, ...) is in optimizer_settings.
 *
 *     optimizer_id id = optimizer_parse("lion8bit");
 *     kiln_optim *opt = optimizer_new(ctx, id, &(optimizer_settings){.lr = 3e-4f, .weight_decay = 0.01f});
 */
#ifndef EXAMPLES_OPTIMIZERS_H
#define EXAMPLES_OPTIMIZERS_H

#include "kiln.h"

#include <stdbool.h>
#include <stdint.h>

/* The ten optimizers, in this order everywhere (tables, charts). */
typedef enum optimizer_id {
    OPT_SGD = 0, OPT_ADAM, OPT_ADAMW, OPT_ADAMW8, OPT_LION, OPT_LION8,
    OPT_GALORE, OPT_GALORE8, OPT_APOLLO, OPT_APOLLO_MINI, OPT_COUNT
} optimizer_id;

/* The command-line name: "sgd", "adam", "adamw", "adamw8bit", "lion",
 * "lion8bit", "galore", "galore8bit", "apollo", "apollo-mini"; "?" for an
 * id out of range. */
const char *optimizer_name(optimizer_id id);
/* The display name: "SGD-momentum", "Adam", "AdamW", "AdamW-8bit", "Lion",
 * "Lion-8bit", "GaLore", "GaLore-8bit", "APOLLO", "APOLLO-Mini"; "?" out
 * of range. */
const char *optimizer_title(optimizer_id id);
/* The id of a command-line name; -1 when there is none. */
int optimizer_parse(const char *name);
/* All ten command-line names as args.h's ARGS_CHOICE wants them:
 * "sgd|adam|...|apollo-mini". */
const char *optimizer_choices(void);
/* The 32-bit optimizer an 8-bit one quantizes (AdamW-8bit: AdamW,
 * Lion-8bit: Lion, GaLore-8bit: GaLore); -1 for the others. */
int optimizer_twin(optimizer_id id);

/* What an example sets; every field left 0 keeps the method's default. */
typedef struct optimizer_settings {
    float lr; /* > 0 */
    /* Weight decay, in each method's own convention: decoupled
     * (p *= 1 - lr * wd) for AdamW, AdamW-8bit, Lion, Lion-8bit, GaLore,
     * GaLore-8bit, APOLLO and APOLLO-Mini. SGD and Adam take none unless
     * l2 is set: then it is L2 added to the gradient, as torch's. */
    float weight_decay;
    bool l2;
    /* Adam's betas (Lion's two interpolation factors for Lion): 0 keeps
     * the method's (0.9/0.999, Lion 0.9/0.99). SGD's momentum is 0.9. */
    float beta1, beta2;
    float eps; /* the Adam-family's epsilon; 0: the method's (GaLore's from
                  kiln_galore_defaults / kiln_galore8bit_defaults) */
    /* GaLore's and APOLLO's projection rank and the steps between
     * projector refreshes; 0: the method's. APOLLO-Mini keeps rank 1. */
    int rank, update_gap;
    uint64_t seed; /* APOLLO's projector seed */
} optimizer_settings;

/* The optimizer id over every parameter of ctx; NULL with kiln's error set
 * on failure (KILN_ERR_UNSUPPORTED: GaLore in a build without LAPACK). */
kiln_optim *optimizer_new(kiln_ctx *ctx, optimizer_id id, const optimizer_settings *s);
/* The same over params[0..n) (NULL: every parameter of ctx), whose first
 * is parameter first_index of the whole model (APOLLO's projector seeds
 * follow it): a ZeRO shard (kiln_dist_shard). */
kiln_optim *optimizer_new_for(kiln_ctx *ctx, optimizer_id id, kiln_tensor *const *params, int n, int first_index,
                              const optimizer_settings *s);

/* The non-finite guard every training example runs with: a step whose
 * loss or gradients hold a NaN or an infinity is skipped (parameters and
 * state untouched) and counted instead of poisoning the model, as a
 * PyTorch loop with GradScaler or a skip-on-nonfinite check would.
 * optimizer_guard turns it on for opt with its training loss;
 * optimizer_step is kiln_optim_step for which a skipped step is no error
 * (it prints why on stderr); optimizer_print_skips prints the count:
 *
 *     if (optimizer_guard(opt, loss)) ...
 *     for (...) { ...; if (optimizer_step(opt)) die("optimizer step"); }
 *     optimizer_print_skips(opt);   // "non-finite guard: 0 steps skipped" */
kiln_status optimizer_guard(kiln_optim *opt, kiln_tensor *loss);
kiln_status optimizer_step(kiln_optim *opt);
void optimizer_print_skips(const kiln_optim *opt);

#endif
