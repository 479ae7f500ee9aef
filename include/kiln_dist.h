/* kiln_dist.h — data-parallel training over MPI, with ZeRO stage 1
 * optimizer-state sharding. Built by `make MPI=1` into libkiln_dist.a
 * (link it with the MPI libraries: `mpicc --showme:link`); nothing else in
 * kiln needs MPI.
 *
 * Every rank (one process per rank, started by `mpirun -np N`) builds the
 * same model and graph. kiln_dist_new() broadcasts rank 0's parameters, so
 * all ranks start equal. Each step every rank computes the loss of its own
 * B/N examples of the global batch B (kiln_dist_sampler gives them: one
 * shuffle per epoch from a seed all ranks share, each global batch cut
 * into N consecutive pieces), then kiln_dist_step() averages the gradients
 * over the ranks (MPI all-reduce, sum / N: the mean-loss gradient of the
 * whole batch B), steps the optimizer and leaves the same parameters on
 * every rank. Training at global batch B on N ranks therefore follows
 * single-process training at batch B, up to the order of float sums.
 *
 * Gradients travel in buckets: the parameters are packed into buckets of
 * up to bucket_bytes (a larger tensor has a bucket of its own; a bucket
 * holds one dtype), first in reverse order, then, after the first compute,
 * in the order backward finished them (as PyTorch DDP rebuilds its
 * buckets). With kiln_dist_attach(d, g), g's compute calls a hook as each
 * gradient becomes final (kiln_graph_set_grad_hook); when the last
 * gradient of a bucket is final the bucket is packed and its
 * MPI_Iallreduce started while the compute goes on (each hook also calls
 * MPI_Testall, so that Open MPI, which has no progress thread, moves the
 * reductions in flight along). What overlaps, precisely: kiln's backward
 * graph computes the chain of activation gradients first (the first
 * parameter's gradient needs all of it), then each parameter's own last
 * piece in parameter order: a linear layer's weight-gradient matmul, which
 * adds straight into the gradient, a bias's or a norm's reduction. For the
 * GPT of bench/dist.sh the first gradient is final at about 63% of the
 * forward + backward time and the last at its end, so the buckets'
 * all-reduces overlap the last third or so of the compute (the weight
 * gradients of the later layers), and the last bucket nothing.
 * kiln_dist_step() starts the buckets not started yet (all of them without
 * attach), waits for every one and unpacks the averages. On a device
 * backend the hooks all run after the compute: no overlap.
 *
 * ZeRO-1 (kiln_dist_config.zero): the parameter list is cut into N
 * consecutive runs of whole tensors, balanced by element count; rank r
 * makes its optimizer over its run only (kiln_dist_shard) and so holds
 * optimizer state for about 1/N of the parameters (kiln_optim_state_bytes
 * of that optimizer is this rank's share). Whole tensors, not element
 * ranges, because 8-bit state is blocked per tensor, GaLore projects and
 * APOLLO scales whole matrices: every kiln optimizer then steps its shard
 * exactly as it would step those tensors in the full list (APOLLO takes
 * the run's first index, kiln_apollo_config.first_index, so its projector
 * seeds match). The price is balance: one tensor larger than 1/N of the
 * model makes its rank's share larger. After the optimizer step each rank's
 * updated tensors go to every rank (MPI_Allgatherv of the packed runs).
 * Without zero every rank keeps the full state and steps every parameter
 * (plain data parallelism).
 *
 * Gradient clipping is kiln_dist's (kiln_dist_set_clip_grad_norm), not the
 * shard optimizer's. Not covered: gradient accumulation over several
 * computes with the all-reduce attached (refused; detach for it), and
 * saving or loading a sharded optimizer's state.
 *
 * Usage:
 *
 *     kiln_dist_init(&argc, &argv);                   // MPI_Init
 *     ... build the model (same seed on every rank) and its graph g ...
 *     kiln_dist *d = kiln_dist_new(ctx, NULL, 0, &(kiln_dist_config){.zero = true});
 *     kiln_tensor **mine; int n_mine, first;
 *     kiln_dist_shard(d, &mine, &n_mine, &first);
 *     kiln_optim *opt = n_mine ? kiln_adamw_new_for(ctx, mine, n_mine, &cfg) : NULL;
 *     kiln_dist_set_optim(d, opt);
 *     kiln_dist_attach(d, g);                         // all-reduce during backward
 *     kiln_dist_sampler *s = kiln_dist_sampler_new(n_train, B, seed, true);
 *     int64_t idx[B / size];
 *     for (int64_t b = 0; b < kiln_dist_sampler_batches(s); b++) {
 *         kiln_dist_sampler_batch(s, epoch, b, idx);  // this rank's B/N examples
 *         ... fill the inputs from idx ...
 *         kiln_graph_compute(g);
 *         kiln_dist_step(d);                          // average, step, gather
 *     }
 *     kiln_dist_free(d);
 *     kiln_dist_finalize();                           // MPI_Finalize
 */
#ifndef KILN_DIST_H
#define KILN_DIST_H

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether this process was started by mpirun (Open MPI's or a PMI
 * launcher's variables are set): programs that also run alone call
 * kiln_dist_init only then. */
bool kiln_dist_launched(void);
/* MPI_Init (unless MPI is already initialized); argc/argv may be NULL. */
kiln_status kiln_dist_init(int *argc, char ***argv);
/* MPI_Finalize (if kiln_dist_init initialized MPI). */
void kiln_dist_finalize(void);
/* This process's rank in MPI_COMM_WORLD and the number of ranks (0 and 1
 * before kiln_dist_init). */
int kiln_dist_rank(void);
int kiln_dist_size(void);
/* Sum a double over the ranks (for losses and counts to print). */
double kiln_dist_sum(double v);
/* MPI_Barrier. */
void kiln_dist_barrier(void);

typedef struct kiln_dist_config {
    size_t bucket_bytes; /* gradient bucket cap; 0: 1 MiB (PyTorch DDP's first bucket; its later ones
                          * are 25 MiB, too coarse for the models kiln trains on CPUs) */
    bool zero;           /* ZeRO-1: each rank keeps the optimizer state of its shard only */
} kiln_dist_config;

typedef struct kiln_dist kiln_dist;

/* Data parallelism over params (NULL: every parameter of ctx; each a
 * contiguous f32 or f64 parameter with a gradient), all ranks in the same
 * order. Broadcasts rank 0's values into every rank's parameters. cfg NULL
 * means {0}. Collective: every rank calls it. */
kiln_dist *kiln_dist_new(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_dist_config *cfg);
void kiln_dist_free(kiln_dist *d);
/* The parameters this rank's optimizer must step: with zero, its run of
 * the list (possibly empty when there are more ranks than tensors), and
 * first_index the run's index in the whole list; without zero, the whole
 * list and 0. Any out-pointer may be NULL. */
void kiln_dist_shard(const kiln_dist *d, kiln_tensor ***params, int *n, int *first_index);
/* The optimizer kiln_dist_step steps: made over exactly kiln_dist_shard's
 * parameters (NULL only when that run is empty). Not owned by d. */
kiln_status kiln_dist_set_optim(kiln_dist *d, kiln_optim *opt);
/* Start each bucket's all-reduce during g's backward (g NULL detaches). */
kiln_status kiln_dist_attach(kiln_dist *d, kiln_graph *g);
/* Average the gradients over the ranks (waiting for the buckets in flight,
 * starting the others), step the optimizer, zero every gradient, and with
 * zero all-gather the updated parameters. Collective. A failed optimizer
 * step (e.g. KILN_ERR_NUMERIC) still takes part in the gather, so ranks
 * stay in step; the first error is returned. */
kiln_status kiln_dist_step(kiln_dist *d);
/* Global-norm gradient clipping (torch.nn.utils.clip_grad_norm_) of the
 * averaged gradients, by kiln_dist_step before the optimizer step: the norm
 * over every rank's shard together (kiln_optim_set_clip_grad_norm on a
 * ZeRO shard's optimizer would see only the shard). Above max_norm every
 * gradient is multiplied by max_norm / (norm + 1e-6); a non-finite norm
 * skips the step on every rank (gradients zeroed, KILN_ERR_NUMERIC, the
 * skip counted). 0 turns it off. */
kiln_status kiln_dist_set_clip_grad_norm(kiln_dist *d, float max_norm);
float kiln_dist_last_grad_norm(const kiln_dist *d); /* -1 before the first */
int64_t kiln_dist_skipped_steps(const kiln_dist *d);
/* The number of gradient buckets, and how many of them the last
 * kiln_dist_step found already started during the compute (the rest it
 * started itself): all of them when attached, 0 when not. */
int kiln_dist_buckets(const kiln_dist *d, int *started_in_compute);
/* Only the gradient average (no step): what kiln_dist_step does first. */
kiln_status kiln_dist_reduce_grads(kiln_dist *d);

/* ---- distributed sampler ---- */
/* Each epoch the indices 0..n_items-1 in an order drawn from (seed, epoch)
 * (identity order without shuffle), the same on every rank; global batch b
 * is positions [b * B, (b + 1) * B), and rank r takes its piece
 * [b * B + r * B / N, b * B + (r + 1) * B / N). The ranks' pieces of a batch
 * are disjoint and together are exactly the batch a single process would
 * take at batch B from the same order; an epoch has floor(n_items / B)
 * batches (the remainder is dropped). B must be a multiple of N. */
typedef struct kiln_dist_sampler kiln_dist_sampler;
kiln_dist_sampler *kiln_dist_sampler_new(int64_t n_items, int64_t global_batch, uint64_t seed, bool shuffle);
void kiln_dist_sampler_free(kiln_dist_sampler *s);
int64_t kiln_dist_sampler_batches(const kiln_dist_sampler *s);
/* B / N: the examples per rank per batch. */
int64_t kiln_dist_sampler_local_batch(const kiln_dist_sampler *s);
/* This rank's local-batch indices of batch b of epoch e into idx. */
kiln_status kiln_dist_sampler_batch(kiln_dist_sampler *s, int64_t epoch, int64_t b, int64_t *idx);

#ifdef __cplusplus
}
#endif
#endif
