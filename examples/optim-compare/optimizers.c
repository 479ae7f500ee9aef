/* optimizers.c — the comparison's settings of the ten optimizers
 * (examples/common/optimizers.c makes them).
 *
 * Each uses its reference implementation's defaults (torch.optim,
 * bitsandbytes, lion-pytorch, galore_torch, apollo_torch) except for:
 *   - the learning rate, swept around the method's usual value;
 *   - weight decay 0.01 (decoupled) for AdamW and the methods built on it,
 *     0.1 for Lion (its lr is ~10x smaller, so lr * decay is alike), none
 *     for SGD and Adam;
 *   - GaLore's and APOLLO's rank: a quarter of the smaller side of the
 *     model's hidden matrices (task.rank), and their update_gap scaled to
 *     the run (optim_update_gap), since the defaults (rank 128/256, gap
 *     200) are sized for LLaMA-scale matrices and thousands of steps.
 */
#include "compare.h"

/* Adam's usual 1e-3 (2e-3 for the small GPT); SGD with momentum 0.9 about
 * 50x that; Lion 3x smaller than Adam (Chen et al.: 3-10x); GaLore and
 * APOLLO 3x larger (their papers train with 10x AdamW's rate: GaLore's
 * scale 0.25 and APOLLO's gradient scaling shrink each update). */
double optim_center_lr(optimizer_id id, task_kind kind) {
    double adam = kind == TASK_CNN ? 1e-3 : 2e-3;
    switch (id) {
    case OPT_SGD: return kind == TASK_CNN ? 0.05 : 0.1;
    case OPT_LION:
    case OPT_LION8: return adam / 3;
    case OPT_GALORE:
    case OPT_GALORE8:
    case OPT_APOLLO:
    case OPT_APOLLO_MINI: return adam * 3;
    default: return adam;
    }
}

/* Refresh the projections about 5 times a run, between every 20 and 200
 * steps (galore_torch's and apollo_torch's default is 200). */
int optim_update_gap(int64_t steps) {
    int64_t g = steps / 5;
    return (int)(g < 20 ? 20 : g > 200 ? 200 : g);
}

kiln_optim *optim_make(kiln_ctx *ctx, optimizer_id id, double lr, const task *t, int64_t steps) {
    optimizer_settings s = {
        .lr = (float)lr,
        .weight_decay = id == OPT_LION || id == OPT_LION8 ? 0.1f : 0.01f, /* none for SGD and Adam */
        .rank = t->rank, /* GaLore and APOLLO; APOLLO-Mini stays rank 1 */
        .update_gap = optim_update_gap(steps),
    };
    return optimizer_new(ctx, id, &s);
}
