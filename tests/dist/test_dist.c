/* test_dist.c — kiln_dist under mpirun (scripts/test_dist.sh runs it with
 * -np 2 and -np 3). Each rank also trains the single-process reference in
 * a context of its own, at the global batch, so that no file or second
 * run is needed: data-parallel training (with and without ZeRO-1, with
 * every optimizer) must end with the reference's parameters up to float
 * summation order, and a ZeRO-1 rank must hold about 1/N of the state.
 * Rank 0 prints one line per test and "N passed, N failed" last; a test
 * fails when it fails on any rank. `kiln_dist_tests NAME...` runs the
 * tests whose names contain NAME. */
#include "kiln_dist.h"
#include "optimizers.h"

#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
static char first_msg[512];

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
    if (!failures++) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(first_msg, sizeof first_msg, fmt, ap);
        va_end(ap);
    }
}

#define CHECK(cond, ...)                                                                                            \
    do {                                                                                                            \
        if (!(cond)) fail(__VA_ARGS__);                                                                             \
    } while (0)
#define OK(expr)                                                                                                    \
    do {                                                                                                            \
        kiln_status s_ = (expr);                                                                                    \
        if (s_) {                                                                                                   \
            fail("line %d: %s -> %s: %s", __LINE__, #expr, kiln_status_name(s_), kiln_last_error());                \
            return;                                                                                                 \
        }                                                                                                           \
    } while (0)

/* ---- the model: an MLP of equal hidden layers, on fixed random data ---- */

enum { IN = 64, WIDTH = 64, HIDDEN = 6, CLASSES = 8, ITEMS = 96, BATCH = 12, STEPS = 4 };

typedef struct net {
    kiln_ctx *ctx;
    kiln_tensor *x, *y, *loss;
    kiln_graph *g;
} net;

static bool net_new(net *n, int64_t batch, uint64_t seed) {
    n->ctx = kiln_ctx_new();
    kiln_ctx *c = n->ctx;
    n->x = kiln_new_2d(c, KILN_F32, batch, IN);
    n->y = kiln_new_1d(c, KILN_I32, batch);
    kiln_tensor *h = n->x;
    int64_t fan_in = IN;
    for (int l = 0; l <= HIDDEN; l++) {
        int64_t out = l == HIDDEN ? CLASSES : WIDTH;
        char name[32];
        snprintf(name, sizeof name, "l%d.weight", l);
        kiln_tensor *w = kiln_param(c, name, KILN_F32, 2, (int64_t[]){out, fan_in});
        snprintf(name, sizeof name, "l%d.bias", l);
        kiln_tensor *b = kiln_param(c, name, KILN_F32, 1, (int64_t[]){out});
        if (!w || !b) return false;
        kiln_tensor_init_linear(w, seed * 131 + (uint64_t)l, fan_in);
        kiln_tensor_init_linear(b, seed * 137 + (uint64_t)l, fan_in);
        h = kiln_linear(c, h, w, b);
        if (l < HIDDEN) h = kiln_relu(c, h);
        fan_in = out;
    }
    n->loss = kiln_cross_entropy(c, h, n->y, -100);
    n->g = kiln_graph_new(c);
    return n->loss && !kiln_graph_add(n->g, n->loss) && !kiln_graph_backward(n->g, n->loss);
}

static float data_x(int64_t item, int j) { return (float)sin(0.37 * (double)(item * IN + j) + 0.1 * (double)item); }
static int32_t data_y(int64_t item) { return (int32_t)((item * 7 + 3) % CLASSES); }

static kiln_status net_fill(net *n, const int64_t *idx, int64_t count) {
    float *x = malloc((size_t)count * IN * sizeof *x);
    int32_t *y = malloc((size_t)count * sizeof *y);
    if (!x || !y) return free(x), free(y), KILN_ERR_OOM;
    for (int64_t i = 0; i < count; i++) {
        for (int j = 0; j < IN; j++) x[i * IN + j] = data_x(idx[i], j);
        y[i] = data_y(idx[i]);
    }
    kiln_status s = kiln_tensor_set_f32(n->x, x, count * IN);
    if (!s) s = kiln_tensor_set_i32(n->y, y, count);
    free(x);
    free(y);
    return s;
}

static optimizer_settings settings(optimizer_id id) {
    optimizer_settings s = {.lr = 1e-2f, .weight_decay = 0.01f, .rank = 8, .update_gap = 2, .seed = 7};
    if (id == OPT_SGD || id == OPT_ADAM) s.weight_decay = 0;
    if (id == OPT_LION || id == OPT_LION8) s.lr = 1e-3f;
    /* a larger epsilon keeps these continuous near a zero (projected)
     * gradient: see the tolerances below */
    if (id == OPT_GALORE || id == OPT_GALORE8 || id == OPT_ADAMW8) s.eps = 1e-3f;
    return s;
}

/* Train STEPS steps data-parallel and as one process; the largest
 * difference of any parameter element, and the state bytes of this rank's
 * optimizer and of the reference's. */
typedef struct result {
    double max_diff, max_abs;
    int64_t n, n_off; /* elements, and those more than 1e-5 off */
    bool no_lapack;   /* GaLore in a build without LAPACK: nothing to compare */
    size_t rank_state, full_state;
} result;

/* Every rank's gradient and the reference's set to the same values, small
 * multiples of 2^-10 (so their sum over the ranks is exact): the averaged
 * gradient is then bit for bit the reference's. */
static void fill_same_grads(kiln_ctx *ctx, int step) {
    kiln_tensor *p[64];
    int n = kiln_ctx_params(ctx, p, 64);
    for (int i = 0; i < n; i++) {
        float *g = kiln_tensor_data(kiln_tensor_grad(p[i]));
        int64_t m = kiln_tensor_numel(p[i]);
        for (int64_t j = 0; j < m; j++) {
            uint64_t h = ((uint64_t)step * 1000003u + (uint64_t)i) * 0x9e3779b97f4a7c15ull + (uint64_t)j * 0xbf58476d1ce4e5b9ull;
            h ^= h >> 29;
            g[j] = (float)((int)(h % 201) - 100) / 1024.0f;
        }
    }
}

/* same_grads: no data; fill_same_grads instead of the graphs' gradients. */
static void train_both(optimizer_id id, bool zero, bool attach, size_t bucket_bytes, float clip, bool same_grads,
                       result *r) {
    int rank = kiln_dist_rank(), size = kiln_dist_size();
    net ref = {0}, dp = {0};
    kiln_dist *d = NULL;
    kiln_dist_sampler *smp = NULL;
    memset(r, 0, sizeof *r);
    /* rank r starts from its own weights: the broadcast must replace them */
    if (!net_new(&ref, BATCH, 100) || !net_new(&dp, BATCH / size, 100 + (uint64_t)rank)) {
        fail("building the nets: %s", kiln_last_error());
        goto done;
    }
    optimizer_settings st = settings(id);
    kiln_optim *ref_opt = optimizer_new(ref.ctx, id, &st);
    kiln_status ref_status = ref_opt ? KILN_OK : kiln_last_status();
    d = kiln_dist_new(dp.ctx, NULL, 0, &(kiln_dist_config){.zero = zero, .bucket_bytes = bucket_bytes});
    if (ref_status == KILN_ERR_UNSUPPORTED && (id == OPT_GALORE || id == OPT_GALORE8)) {
        r->no_lapack = true; /* a BLAS=0 build has no SVD */
        goto done;
    }
    if (!ref_opt || !d) {
        fail("%s: %s", optimizer_name(id), kiln_last_error());
        goto done;
    }
    kiln_tensor **mine;
    int n_mine, first;
    kiln_dist_shard(d, &mine, &n_mine, &first);
    kiln_optim *opt = n_mine ? optimizer_new_for(dp.ctx, id, mine, n_mine, first, &st) : NULL;
    if ((n_mine && !opt) || kiln_dist_set_optim(d, opt) || kiln_dist_attach(d, attach ? dp.g : NULL) ||
        kiln_dist_set_clip_grad_norm(d, clip) || kiln_optim_set_clip_grad_norm(ref_opt, clip)) {
        fail("%s: %s", optimizer_name(id), kiln_last_error());
        goto done;
    }
    smp = kiln_dist_sampler_new(ITEMS, BATCH, 5, true);
    if (!smp) {
        fail("sampler: %s", kiln_last_error());
        goto done;
    }
    int64_t local = kiln_dist_sampler_local_batch(smp), idx[BATCH], all[BATCH];
    for (int step = 0; step < STEPS; step++) {
        int64_t epoch = step / kiln_dist_sampler_batches(smp), b = step % kiln_dist_sampler_batches(smp);
        if (kiln_dist_sampler_batch(smp, epoch, b, idx)) {
            fail("sampler batch: %s", kiln_last_error());
            goto done;
        }
        /* the global batch is the ranks' pieces in rank order */
        MPI_Allgather(idx, (int)local, MPI_INT64_T, all, (int)local, MPI_INT64_T, MPI_COMM_WORLD);
        kiln_status s = KILN_OK;
        if (same_grads) {
            fill_same_grads(dp.ctx, step);
            fill_same_grads(ref.ctx, step);
        } else {
            s = net_fill(&dp, idx, local);
            if (!s) s = net_fill(&ref, all, BATCH);
            if (!s) s = kiln_graph_compute(dp.g);
            if (!s) s = kiln_graph_compute(ref.g);
        }
        kiln_status sd = kiln_dist_step(d); /* collective: every rank calls it */
        if (!s) s = sd;
        if (!s) s = kiln_optim_step(ref_opt);
        if (s) {
            fail("%s step %d: %s", optimizer_name(id), step, kiln_last_error());
            goto done;
        }
    }
    kiln_tensor *pr[64], *pd[64];
    int np = kiln_ctx_params(ref.ctx, pr, 64);
    kiln_ctx_params(dp.ctx, pd, 64);
    for (int i = 0; i < np; i++) {
        int64_t m = kiln_tensor_numel(pr[i]);
        const float *a = kiln_tensor_data(pr[i]), *b = kiln_tensor_data(pd[i]);
        for (int64_t j = 0; j < m; j++) {
            double e = fabs((double)a[j] - b[j]);
            if (!(e <= r->max_diff)) r->max_diff = e; /* NaN sticks */
            r->n_off += !(e <= 1e-5);
            r->n++;
            if (fabs(a[j]) > r->max_abs) r->max_abs = fabs(a[j]);
        }
    }
    r->rank_state = opt ? kiln_optim_state_bytes(opt) : 0;
    r->full_state = kiln_optim_state_bytes(ref_opt);
done:
    kiln_dist_sampler_free(smp);
    kiln_dist_free(d);
    kiln_ctx_free(ref.ctx);
    kiln_ctx_free(dp.ctx);
}

/* The largest difference over all ranks (each compares its own copy). */
static double max_over_ranks(double v) {
    double m = v;
    MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

static char note[4096];
static void add_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void add_note(const char *fmt, ...) {
    size_t l = strlen(note);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(note + l, sizeof note - l, fmt, ap);
    va_end(ap);
}

/* Tolerances. The averaged gradient differs from the single-process one
 * by float summation order (the mean over B/N examples, then over N ranks,
 * against the mean over B: about 1e-7 relative). SGD, Lion (a sign) and
 * APOLLO carry that into the parameters almost unchanged (measured <= 3e-7
 * after 4 steps). The Adam family divides by sqrt(v) + eps, so an element
 * whose gradient is a near-cancelling sum moves by a larger relative
 * amount: measured up to 2.7e-5 with lr 1e-2 on 3 ranks, hence 1e-4.
 * 8-bit AdamW amplifies more with its default eps (one element 9.5e-4 off:
 * the sign-like first steps of Adam on a near-zero gradient, then stored in
 * 8 bits), so it runs with eps 1e-3 here, continuous near zero (2.1e-5).
 * GaLore's SVD projector turns when the summation-order noise meets nearly
 * tied singular values (rank 8 of a rank-12 gradient here), and the
 * projected update of whole rows changes: measured 0.24% (32-bit) and up
 * to 10% (8-bit, default eps) of the elements more than 1e-5 off, up to
 * 3.3e-3; its check is that at most 25% are, by at most lr. That GaLore's
 * ZeRO step itself is exact is test_zero_step_exact_every_optimizer's. */
static void check_matches(optimizer_id id, bool zero, bool attach, size_t bucket, float clip, double max_tol,
                          double frac_tol) {
    result r;
    train_both(id, zero, attach, bucket, clip, false, &r);
    if (r.no_lapack) return add_note(" %s: no LAPACK", optimizer_name(id));
    double diff = max_over_ranks(r.max_diff), frac = max_over_ranks(r.n ? (double)r.n_off / (double)r.n : 1.0);
    CHECK(diff <= max_tol, "%s%s: parameters differ from single-process training by %.3g (tolerance %.3g)",
          optimizer_name(id), zero ? " (ZeRO-1)" : "", diff, max_tol);
    CHECK(frac <= frac_tol, "%s%s: %.3g%% of the parameters are more than 1e-5 off (tolerance %.3g%%)",
          optimizer_name(id), zero ? " (ZeRO-1)" : "", 100 * frac, 100 * frac_tol);
    add_note(" %s%s%s %.2g (%.2g%%)", optimizer_name(id), zero ? "" : "(plain)", clip > 0 ? "(clip)" : "", diff,
             100 * frac);
}

static void test_dp_matches_single_adamw(void) {
    check_matches(OPT_ADAMW, true, true, 8192, 0, 1e-4, 1);     /* ZeRO, buckets started in backward */
    check_matches(OPT_ADAMW, false, true, 8192, 0, 1e-4, 1);    /* every rank keeps the full state */
    check_matches(OPT_ADAMW, true, false, 0, 0, 1e-4, 1);       /* one 25 MiB bucket, started by the step */
    check_matches(OPT_ADAMW, true, true, 8192, 0.05f, 1e-4, 1); /* global-norm clipping over the shards */
    check_matches(OPT_ADAMW, false, true, 8192, 0.05f, 1e-4, 1);
}

static void test_dp_matches_single_every_optimizer(void) {
    static const struct {
        optimizer_id id;
        double max_tol, frac_tol;
    } cases[] = {{OPT_SGD, 1e-6, 1},       {OPT_ADAM, 1e-4, 1},         {OPT_LION, 1e-6, 1},
                 {OPT_APOLLO, 1e-5, 1},    {OPT_APOLLO_MINI, 1e-5, 1},  {OPT_GALORE, 1e-2, 0.25},
                 {OPT_ADAMW8, 1e-4, 1},   {OPT_LION8, 1e-6, 1},     {OPT_GALORE8, 1e-2, 0.25}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_matches(cases[i].id, true, true, 8192, 0, cases[i].max_tol, cases[i].frac_tol);
}

/* With the same gradient on every rank (so that the average is exact),
 * ZeRO-1 over N ranks steps every optimizer bit for bit as one process
 * does: sharding, the per-tensor state, APOLLO's seeds, GaLore's SVD and
 * the all-gather change nothing. */
static void test_zero_step_exact_every_optimizer(void) {
    for (int id = 0; id < OPT_COUNT; id++) {
        result r;
        train_both((optimizer_id)id, true, true, 8192, 0, true, &r);
        if (r.no_lapack) {
            add_note(" %s: no LAPACK", optimizer_name(id));
            continue;
        }
        double diff = max_over_ranks(r.max_diff);
        CHECK(diff == 0, "%s: ZeRO-1 on equal gradients differs from one process by %.3g", optimizer_name(id), diff);
        add_note(" %s %.2g", optimizer_name(id), diff);
    }
}

/* ZeRO-1: the ranks' states add up to the full state, and the largest is
 * within 1.3 x full / N (whole tensors: the cut falls on tensor bounds). */
static void test_zero_state_is_a_1_over_n_share(void) {
    int size = kiln_dist_size();
    const optimizer_id ids[] = {OPT_ADAMW, OPT_ADAMW8, OPT_GALORE, OPT_APOLLO, OPT_LION};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        result r;
        train_both(ids[i], true, true, 8192, 0, false, &r);
        if (r.no_lapack) {
            add_note(" %s: no LAPACK", optimizer_name(ids[i]));
            continue;
        }
        double mine = (double)r.rank_state, sum = kiln_dist_sum(mine), most = max_over_ranks(mine);
        CHECK(sum == (double)r.full_state, "%s: the ranks hold %.0f state bytes in all, the single process %zu",
              optimizer_name(ids[i]), sum, r.full_state);
        CHECK(most <= 1.3 * (double)r.full_state / size, "%s: a rank holds %.0f of %zu state bytes on %d ranks",
              optimizer_name(ids[i]), most, r.full_state, size);
        add_note(" %s %.0f/%zu", optimizer_name(ids[i]), most, r.full_state);
    }
}

/* The sampler: per batch the ranks' pieces are disjoint, and over an epoch
 * no item comes twice. */
static void test_sampler_shards(void) {
    int size = kiln_dist_size();
    kiln_dist_sampler *s = kiln_dist_sampler_new(ITEMS, BATCH, 9, true);
    if (!s) return fail("sampler: %s", kiln_last_error());
    int64_t local = kiln_dist_sampler_local_batch(s), idx[BATCH], all[BATCH];
    CHECK(local * size == BATCH, "local batch %lld on %d ranks", (long long)local, size);
    int seen[ITEMS] = {0};
    for (int64_t b = 0; b < kiln_dist_sampler_batches(s); b++) {
        if (kiln_dist_sampler_batch(s, 0, b, idx)) {
            fail("batch: %s", kiln_last_error());
            break;
        }
        MPI_Allgather(idx, (int)local, MPI_INT64_T, all, (int)local, MPI_INT64_T, MPI_COMM_WORLD);
        for (int i = 0; i < BATCH; i++) {
            CHECK(all[i] >= 0 && all[i] < ITEMS, "index %lld", (long long)all[i]);
            if (all[i] >= 0 && all[i] < ITEMS) seen[all[i]]++;
        }
    }
    for (int i = 0; i < ITEMS; i++) CHECK(seen[i] == 1, "item %d seen %d times in an epoch", i, seen[i]);
    /* another epoch, another order; the same epoch, the same order */
    int64_t a[BATCH], b[BATCH];
    kiln_dist_sampler_batch(s, 1, 0, a);
    kiln_dist_sampler_batch(s, 0, 0, b);
    CHECK(memcmp(a, b, (size_t)local * sizeof *a) != 0, "epochs 0 and 1 start with the same piece");
    kiln_dist_sampler_batch(s, 0, 0, a);
    CHECK(memcmp(a, b, (size_t)local * sizeof *a) == 0, "epoch 0 drawn twice differs");
    CHECK(!kiln_dist_sampler_new(ITEMS, BATCH + 1, 9, true) || size == 1 || (BATCH + 1) % size == 0,
          "a batch that is not a multiple of the ranks was accepted");
    kiln_dist_sampler_free(s);
}

/* Computing the attached graph twice before a step is refused on every
 * rank (the buckets in flight would miss the second gradients). */
static void test_accumulation_with_attach_refused(void) {
    net n = {0};
    if (!net_new(&n, BATCH / kiln_dist_size(), 100)) return fail("net: %s", kiln_last_error());
    kiln_dist *d = kiln_dist_new(n.ctx, NULL, 0, &(kiln_dist_config){.zero = true, .bucket_bytes = 4096});
    if (!d) return fail("dist: %s", kiln_last_error());
    kiln_tensor **mine;
    int nm, first;
    kiln_dist_shard(d, &mine, &nm, &first);
    kiln_optim *opt = nm ? kiln_sgd_new_for(n.ctx, mine, nm, &(kiln_sgd_config){.lr = 0.1f}) : NULL;
    OK(kiln_dist_set_optim(d, opt));
    OK(kiln_dist_attach(d, n.g));
    int64_t idx[BATCH];
    for (int i = 0; i < BATCH; i++) idx[i] = i;
    OK(net_fill(&n, idx, BATCH / kiln_dist_size()));
    OK(kiln_graph_compute(n.g));
    OK(kiln_graph_compute(n.g));
    CHECK(kiln_dist_step(d) == KILN_ERR_STATE, "two computes before the step were accepted");
    OK(kiln_graph_compute(n.g)); /* and it recovers */
    OK(kiln_dist_step(d));
    kiln_dist_free(d);
    kiln_ctx_free(n.ctx);
}

/* Attached, every bucket's all-reduce starts inside the compute (from the
 * gradient hook), several buckets with a small cap; detached, none does. */
static void test_buckets_start_during_compute(void) {
    net n = {0};
    if (!net_new(&n, BATCH / kiln_dist_size(), 100)) return fail("net: %s", kiln_last_error());
    kiln_dist *d = kiln_dist_new(n.ctx, NULL, 0, &(kiln_dist_config){.zero = true, .bucket_bytes = 20000});
    if (!d) return fail("dist: %s", kiln_last_error());
    kiln_tensor **mine;
    int nm, first;
    kiln_dist_shard(d, &mine, &nm, &first);
    kiln_optim *opt = nm ? kiln_sgd_new_for(n.ctx, mine, nm, &(kiln_sgd_config){.lr = 0.1f}) : NULL;
    OK(kiln_dist_set_optim(d, opt));
    int64_t idx[BATCH];
    for (int i = 0; i < BATCH; i++) idx[i] = i;
    OK(net_fill(&n, idx, BATCH / kiln_dist_size()));
    OK(kiln_dist_attach(d, n.g));
    for (int rep = 0; rep < 2; rep++) { /* the first compute reorders the buckets */
        OK(kiln_graph_compute(n.g));
        OK(kiln_dist_step(d));
        int started, nb = kiln_dist_buckets(d, &started);
        CHECK(nb >= 3 && started == nb, "compute %d: %d of %d buckets started during the compute", rep, started, nb);
        add_note(" %d/%d", started, nb);
    }
    OK(kiln_dist_attach(d, NULL));
    OK(kiln_graph_compute(n.g));
    OK(kiln_dist_step(d));
    int started;
    kiln_dist_buckets(d, &started);
    CHECK(started == 0, "detached: %d buckets started during the compute", started);
    kiln_dist_free(d);
    kiln_ctx_free(n.ctx);
}

/* Ranks that bring different parameter lists, or a parameter refused on
 * one rank only, all get NULL (none is left waiting in a collective). */
static void test_new_refuses_disagreeing_ranks(void) {
    net n = {0};
    if (!net_new(&n, 2, 100)) return fail("net: %s", kiln_last_error());
    kiln_tensor *p[64];
    int np = kiln_ctx_params(n.ctx, p, 64), rank = kiln_dist_rank();
    kiln_dist *d = kiln_dist_new(n.ctx, p, rank == 0 ? np : np - 1, NULL);
    CHECK(kiln_dist_size() == 1 || !d, "lists of %d and %d tensors were accepted", np, np - 1);
    kiln_dist_free(d);
    kiln_tensor *plain = kiln_new_1d(n.ctx, KILN_F32, 4); /* no gradient */
    kiln_tensor *q[2] = {p[0], rank == kiln_dist_size() - 1 ? plain : p[1]};
    d = kiln_dist_new(n.ctx, q, 2, NULL);
    CHECK(!d, "a list refused on the last rank was accepted");
    kiln_dist_free(d);
    kiln_ctx_free(n.ctx);
}

typedef struct test {
    const char *name;
    void (*fn)(void);
} test;

int main(int argc, char **argv) {
    if (kiln_dist_init(&argc, &argv)) return fprintf(stderr, "%s\n", kiln_last_error()), 1;
    kiln_set_threads(1); /* the ranks share the machine's cores */
    static const test tests[] = {
        {"dist_dp_matches_single_adamw", test_dp_matches_single_adamw},
        {"dist_dp_matches_single_every_optimizer", test_dp_matches_single_every_optimizer},
        {"dist_zero_step_exact_every_optimizer", test_zero_step_exact_every_optimizer},
        {"dist_zero_state_is_a_1_over_n_share", test_zero_state_is_a_1_over_n_share},
        {"dist_sampler_shards", test_sampler_shards},
        {"dist_buckets_start_during_compute", test_buckets_start_during_compute},
        {"dist_accumulation_with_attach_refused", test_accumulation_with_attach_refused},
        {"dist_new_refuses_disagreeing_ranks", test_new_refuses_disagreeing_ranks},
    };
    int rank = kiln_dist_rank(), passed = 0, failed = 0;
    for (size_t t = 0; t < sizeof tests / sizeof *tests; t++) {
        bool want = argc < 2;
        for (int a = 1; a < argc; a++) want |= strstr(tests[t].name, argv[a]) != NULL;
        if (!want) continue;
        failures = 0;
        note[0] = 0;
        tests[t].fn();
        int any = failures, all_fail = 0;
        MPI_Allreduce(&any, &all_fail, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (failures) fprintf(stderr, "rank %d: %s: %s\n", rank, tests[t].name, first_msg);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            if (all_fail) printf("FAIL %s (%d ranks)%s%s\n", tests[t].name, kiln_dist_size(), note[0] ? ":" : "", note);
            else printf("ok %s (%d ranks)%s%s\n", tests[t].name, kiln_dist_size(), note[0] ? ":" : "", note);
            fflush(stdout);
        }
        all_fail ? failed++ : passed++;
    }
    if (rank == 0) printf("%d passed, %d failed\n", passed, failed);
    kiln_dist_finalize();
    return failed ? 1 : 0;
}
