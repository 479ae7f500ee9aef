/* dist.c — ranks, the parameter broadcast, bucketed gradient all-reduce
 * overlapped with backward, and the ZeRO-1 step (kiln_dist.h). Uses kiln's
 * public API only. */
#include "kiln_dist.h"

#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

static bool we_initialized;

bool kiln_dist_launched(void) {
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (!n) n = getenv("PMI_SIZE");
    if (!n) n = getenv("PMIX_SIZE");
    return n != NULL;
}

kiln_status kiln_dist_init(int *argc, char ***argv) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) return KILN_OK;
    if (MPI_Init(argc, argv) != MPI_SUCCESS) return kiln_set_error(KILN_ERR_STATE, "kiln_dist_init: MPI_Init failed");
    we_initialized = true;
    return KILN_OK;
}

void kiln_dist_finalize(void) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (we_initialized && !fin) MPI_Finalize();
    we_initialized = false;
}

static bool mpi_up(void) {
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    return inited && !fin;
}

int kiln_dist_rank(void) {
    int r = 0;
    if (mpi_up()) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

int kiln_dist_size(void) {
    int n = 1;
    if (mpi_up()) MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

double kiln_dist_sum(double v) {
    double s = v;
    if (mpi_up()) MPI_Allreduce(&v, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return s;
}

void kiln_dist_barrier(void) {
    if (mpi_up()) MPI_Barrier(MPI_COMM_WORLD);
}

/* One gradient bucket: parameters order[first .. first + n) (order is the
 * reverse of the parameter list), one dtype, packed back to back. */
typedef struct bucket {
    int first, n;
    int64_t elems;
    kiln_dtype dtype;
    void *buf;
    int pending;   /* gradients of this bucket not final yet in this compute */
    bool started;  /* its all-reduce is in flight */
    MPI_Request req;
} bucket;

struct kiln_dist {
    kiln_ctx *ctx;
    int n_params, rank, size;
    kiln_tensor **params;
    int *order;       /* bucket order: parameter indices, last first */
    int *bucket_of;   /* parameter index -> bucket */
    bucket *buckets;
    int n_buckets;
    MPI_Request *reqs; /* scratch for MPI_Testall */
    bool zero;
    int shard_first, shard_n; /* this rank's run (zero) */
    int *run_first;           /* [size + 1]: rank r's run is run_first[r] .. run_first[r + 1] */
    int *gather_counts, *gather_displs; /* bytes per rank */
    unsigned char *gather_buf;
    kiln_optim *opt;
    size_t bucket_bytes;
    int *seen;   /* parameters in the order the hook reported them (first attached compute) */
    int n_seen;
    bool reordered; /* buckets rebuilt in that order */
    kiln_graph *attached;
    bool twice; /* a bucket became final twice between steps */
    int started_in_compute; /* buckets the hook started since the last step */
    int last_started_in_compute;
    float clip_max_norm; /* 0: off */
    float last_norm;     /* -1 until clipping measured one */
    int64_t skipped;
};

static MPI_Datatype mpi_type(kiln_dtype t) { return t == KILN_F64 ? MPI_DOUBLE : MPI_FLOAT; }

static kiln_status dist_fail(kiln_dist *d, kiln_status s, const char *what) {
    kiln_set_error(s, "kiln_dist_new: %s", what);
    kiln_dist_free(d);
    return s;
}

/* Cut the list into size consecutive runs balanced by elements: rank r's
 * run ends at the first tensor boundary at or past (r + 1) / size of the
 * total, or before it when that is nearer; every run gets at least one
 * tensor while there are enough (a first tensor larger than a share must
 * not leave rank 0 empty). */
static void partition(kiln_dist *d) {
    int64_t total = 0, acc = 0;
    int n = d->n_params, i = 0;
    for (int k = 0; k < n; k++) total += kiln_tensor_numel(d->params[k]);
    d->run_first[0] = 0;
    for (int r = 0; r < d->size; r++) {
        if (r == d->size - 1) {
            i = n;
        } else {
            int64_t target = total * (r + 1) / d->size;
            for (int taken = 0; i < n; taken++) {
                if (taken && n - (i + 1) < d->size - 1 - r) break; /* one left for each later rank */
                int64_t next = acc + kiln_tensor_numel(d->params[i]);
                if (taken && next > target && next - target > target - acc) break; /* stopping here is nearer */
                acc = next;
                i++;
                if (acc >= target) break;
            }
        }
        d->run_first[r + 1] = i;
    }
}

/* Pack d->order into buckets of up to bucket_bytes, one dtype each. */
static kiln_status build_buckets(kiln_dist *d) {
    for (int b = 0; b < d->n_buckets; b++) free(d->buckets[b].buf);
    memset(d->buckets, 0, (size_t)d->n_params * sizeof *d->buckets);
    d->n_buckets = 0;
    int n = d->n_params;
    for (int k = 0; k < n;) {
        bucket *b = &d->buckets[d->n_buckets];
        b->first = k;
        b->dtype = kiln_tensor_dtype(d->params[d->order[k]]);
        size_t bytes = 0;
        while (k < n) {
            kiln_tensor *p = d->params[d->order[k]];
            if (kiln_tensor_dtype(p) != b->dtype || (b->n && bytes + kiln_tensor_nbytes(p) > d->bucket_bytes)) break;
            bytes += kiln_tensor_nbytes(p);
            b->elems += kiln_tensor_numel(p);
            d->bucket_of[d->order[k]] = d->n_buckets;
            b->n++;
            k++;
        }
        b->pending = b->n;
        b->req = MPI_REQUEST_NULL;
        d->n_buckets++;
        if (!(b->buf = malloc(bytes))) return kiln_set_error(KILN_ERR_OOM, "kiln_dist: out of memory");
    }
    return KILN_OK;
}

kiln_dist *kiln_dist_new(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_dist_config *cfg) {
    if (!ctx) return kiln_set_error(KILN_ERR_ARG, "kiln_dist_new: ctx is NULL"), NULL;
    if (!mpi_up()) return kiln_set_error(KILN_ERR_STATE, "kiln_dist_new: call kiln_dist_init first"), NULL;
    kiln_dist_config c = cfg ? *cfg : (kiln_dist_config){0};
    if (!c.bucket_bytes) c.bucket_bytes = (size_t)1 << 20;
    kiln_dist *d = calloc(1, sizeof *d);
    if (!d) return kiln_set_error(KILN_ERR_OOM, "kiln_dist_new: out of memory"), NULL;
    d->ctx = ctx;
    d->zero = c.zero;
    d->last_norm = -1;
    d->rank = kiln_dist_rank();
    d->size = kiln_dist_size();
    if (!params) {
        n = kiln_ctx_params(ctx, NULL, 0);
        d->params = calloc((size_t)(n ? n : 1), sizeof *d->params);
        if (d->params) kiln_ctx_params(ctx, d->params, n);
    } else {
        d->params = calloc((size_t)(n > 0 ? n : 1), sizeof *d->params);
        if (d->params && n > 0) memcpy(d->params, params, (size_t)n * sizeof *params);
    }
    d->n_params = n;
    if (!d->params) return dist_fail(d, KILN_ERR_OOM, "out of memory"), NULL;
    if (n <= 0) return dist_fail(d, KILN_ERR_ARG, "no parameters"), NULL;
    /* checked on every rank, then agreed on, so that no rank is left
     * waiting in a collective that another one has given up on */
    uint64_t bad = 0;
    for (int i = 0; i < n && !bad; i++) {
        kiln_tensor *p = d->params[i];
        kiln_dtype t = p ? kiln_tensor_dtype(p) : KILN_F32;
        if (!p || !kiln_tensor_grad(p) || (t != KILN_F32 && t != KILN_F64) || !kiln_tensor_is_contiguous(p) ||
            kiln_tensor_numel(p) > INT32_MAX) {
            kiln_set_error(KILN_ERR_ARG,
                           "kiln_dist_new: parameter %d '%s' is not a contiguous f32/f64 tensor with a gradient "
                           "(of at most 2^31 - 1 elements)",
                           i, p ? kiln_tensor_name(p) : "(null)");
            bad = 1;
        }
    }
    /* every rank must bring the same list: compare counts and sizes */
    uint64_t sig[3] = {(uint64_t)n, 0, bad}, sig_max[3], sig_min[3];
    for (int i = 0; i < n && !bad; i++)
        sig[1] = sig[1] * 1000003u + (uint64_t)kiln_tensor_numel(d->params[i]) * 2u + (uint64_t)kiln_tensor_dtype(d->params[i]);
    MPI_Allreduce(sig, sig_max, 3, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(sig, sig_min, 3, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    if (bad) {
        kiln_dist_free(d);
        return NULL;
    }
    if (sig_max[2]) return dist_fail(d, KILN_ERR_ARG, "another rank's parameters were refused"), NULL;
    if (sig_max[0] != sig_min[0] || sig_max[1] != sig_min[1])
        return dist_fail(d, KILN_ERR_ARG, "the ranks' parameter lists differ (count, sizes or dtypes)"), NULL;
    for (int i = 0; i < n; i++) {
        kiln_tensor *p = d->params[i];
        void *data = kiln_tensor_data(p);
        if (!data) return dist_fail(d, KILN_ERR_STATE, "a parameter has no host data"), NULL;
        MPI_Bcast(data, (int)kiln_tensor_numel(p), mpi_type(kiln_tensor_dtype(p)), 0, MPI_COMM_WORLD);
    }

    /* buckets over the reversed list until the hook shows the real order */
    d->order = malloc((size_t)n * sizeof *d->order);
    d->seen = malloc((size_t)n * sizeof *d->seen);
    d->bucket_of = malloc((size_t)n * sizeof *d->bucket_of);
    d->buckets = calloc((size_t)n, sizeof *d->buckets);
    d->reqs = malloc((size_t)n * sizeof *d->reqs);
    d->run_first = calloc((size_t)d->size + 1, sizeof *d->run_first);
    d->gather_counts = calloc((size_t)d->size, sizeof *d->gather_counts);
    d->gather_displs = calloc((size_t)d->size, sizeof *d->gather_displs);
    if (!d->order || !d->seen || !d->bucket_of || !d->buckets || !d->reqs || !d->run_first || !d->gather_counts ||
        !d->gather_displs)
        return dist_fail(d, KILN_ERR_OOM, "out of memory"), NULL;
    d->bucket_bytes = c.bucket_bytes;
    for (int i = 0; i < n; i++) d->order[i] = n - 1 - i;
    if (build_buckets(d)) return dist_fail(d, KILN_ERR_OOM, "out of memory"), NULL;

    /* the ZeRO runs and the gather's layout: rank r's run packed in order */
    if (d->zero) {
        partition(d);
    } else {
        for (int r = 0; r <= d->size; r++) d->run_first[r] = r == 0 ? 0 : n;
    }
    size_t total = 0;
    for (int r = 0; r < d->size; r++) {
        size_t bytes = 0;
        for (int i = d->run_first[r]; i < d->run_first[r + 1]; i++) bytes += kiln_tensor_nbytes(d->params[i]);
        if (bytes > (size_t)INT32_MAX) return dist_fail(d, KILN_ERR_UNSUPPORTED, "a shard over 2 GiB"), NULL;
        d->gather_counts[r] = (int)bytes;
        d->gather_displs[r] = (int)total;
        total += bytes;
    }
    if (d->zero && !(d->gather_buf = malloc(total ? total : 1))) return dist_fail(d, KILN_ERR_OOM, "out of memory"), NULL;
    d->shard_first = d->zero ? d->run_first[d->rank] : 0;
    d->shard_n = d->zero ? d->run_first[d->rank + 1] - d->run_first[d->rank] : n;
    return d;
}

void kiln_dist_free(kiln_dist *d) {
    if (!d) return;
    if (d->attached) kiln_graph_set_grad_hook(d->attached, NULL, NULL);
    for (int b = 0; b < d->n_buckets; b++) {
        if (d->buckets[b].started) MPI_Wait(&d->buckets[b].req, MPI_STATUS_IGNORE);
        free(d->buckets[b].buf);
    }
    free(d->buckets);
    free(d->params);
    free(d->order);
    free(d->seen);
    free(d->bucket_of);
    free(d->reqs);
    free(d->run_first);
    free(d->gather_counts);
    free(d->gather_displs);
    free(d->gather_buf);
    free(d);
}

void kiln_dist_shard(const kiln_dist *d, kiln_tensor ***params, int *n, int *first_index) {
    if (params) *params = d->params + d->shard_first;
    if (n) *n = d->shard_n;
    if (first_index) *first_index = d->shard_first;
}

kiln_status kiln_dist_set_optim(kiln_dist *d, kiln_optim *opt) {
    if (!d) return kiln_set_error(KILN_ERR_ARG, "kiln_dist_set_optim: d is NULL");
    if (!opt && d->shard_n)
        return kiln_set_error(KILN_ERR_ARG, "kiln_dist_set_optim: this rank's shard has %d parameters and no optimizer",
                              d->shard_n);
    d->opt = opt;
    return KILN_OK;
}

/* Pack bucket b's gradients and start its all-reduce. */
static void start_bucket(kiln_dist *d, int bi) {
    bucket *b = &d->buckets[bi];
    size_t off = 0;
    for (int k = b->first; k < b->first + b->n; k++) {
        kiln_tensor *g = kiln_tensor_grad(d->params[d->order[k]]);
        size_t bytes = kiln_tensor_nbytes(g);
        memcpy((char *)b->buf + off, kiln_tensor_data(g), bytes);
        off += bytes;
    }
    MPI_Iallreduce(MPI_IN_PLACE, b->buf, (int)b->elems, mpi_type(b->dtype), MPI_SUM, MPI_COMM_WORLD, &b->req);
    b->started = true;
}

/* Let the reductions in flight progress (Open MPI moves non-blocking
 * collectives only inside MPI calls). */
static void progress(kiln_dist *d) {
    int m = 0, done = 0;
    for (int b = 0; b < d->n_buckets; b++)
        if (d->buckets[b].started) d->reqs[m++] = d->buckets[b].req;
    if (m) MPI_Testall(m, d->reqs, &done, MPI_STATUSES_IGNORE);
    /* MPI_Testall may free completed requests: copy the handles back */
    m = 0;
    for (int b = 0; b < d->n_buckets; b++)
        if (d->buckets[b].started) d->buckets[b].req = d->reqs[m++];
}

static void grad_ready(void *user, kiln_tensor *grad) {
    kiln_dist *d = user;
    for (int i = 0; i < d->n_params; i++) {
        if (kiln_tensor_grad(d->params[i]) != grad) continue;
        if (!d->reordered && d->n_seen < d->n_params) d->seen[d->n_seen++] = i;
        bucket *b = &d->buckets[d->bucket_of[i]];
        if (b->started) {
            d->twice = true; /* computed again before the step */
        } else if (--b->pending == 0) {
            start_bucket(d, d->bucket_of[i]);
            d->started_in_compute++;
        }
        break;
    }
    progress(d);
}

kiln_status kiln_dist_attach(kiln_dist *d, kiln_graph *g) {
    if (!d) return kiln_set_error(KILN_ERR_ARG, "kiln_dist_attach: d is NULL");
    if (d->attached) kiln_graph_set_grad_hook(d->attached, NULL, NULL);
    d->attached = g;
    return g ? kiln_graph_set_grad_hook(g, grad_ready, d) : KILN_OK;
}

kiln_status kiln_dist_reduce_grads(kiln_dist *d) {
    if (!d) return kiln_set_error(KILN_ERR_ARG, "kiln_dist_reduce_grads: d is NULL");
    d->last_started_in_compute = d->started_in_compute;
    d->started_in_compute = 0;
    /* every rank starts the rest in bucket order: the same order everywhere */
    for (int b = 0; b < d->n_buckets; b++)
        if (!d->buckets[b].started) start_bucket(d, b);
    bool twice = d->twice;
    int any_twice = twice;
    for (int bi = 0; bi < d->n_buckets; bi++) {
        bucket *b = &d->buckets[bi];
        MPI_Wait(&b->req, MPI_STATUS_IGNORE);
        b->started = false;
        b->pending = b->n;
        size_t off = 0;
        double n = d->size;
        for (int k = b->first; k < b->first + b->n; k++) {
            kiln_tensor *g = kiln_tensor_grad(d->params[d->order[k]]);
            int64_t m = kiln_tensor_numel(g);
            /* sum / N, rounded once (f32 sums divided in double): N equal
             * gradients average to exactly that gradient */
            if (b->dtype == KILN_F64) {
                double *dst = kiln_tensor_data(g), *src = (double *)((char *)b->buf + off);
                for (int64_t j = 0; j < m; j++) dst[j] = src[j] / n;
            } else {
                float *dst = kiln_tensor_data(g), *src = (float *)((char *)b->buf + off);
                for (int64_t j = 0; j < m; j++) dst[j] = (float)((double)src[j] / n);
            }
            off += kiln_tensor_nbytes(g);
        }
    }
    d->twice = false;
    MPI_Allreduce(MPI_IN_PLACE, &any_twice, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    /* After the first attached compute, as PyTorch DDP does: buckets in the
     * order backward finished the gradients (the same graph on every rank,
     * so the same order), those it never reported last. */
    if (any_twice) d->n_seen = 0;
    if (!d->reordered && d->n_seen && !any_twice) {
        int n = d->n_params, m = d->n_seen;
        unsigned char *in = calloc((size_t)n, 1);
        if (!in) return kiln_set_error(KILN_ERR_OOM, "kiln_dist_step: out of memory");
        for (int k = 0; k < m; k++) d->order[k] = d->seen[k], in[d->seen[k]] = 1;
        for (int i = n - 1; i >= 0; i--)
            if (!in[i]) d->order[m++] = i;
        free(in);
        d->reordered = true;
        kiln_status s = build_buckets(d);
        if (s) return s;
    }
    if (any_twice)
        return kiln_set_error(KILN_ERR_STATE, "kiln_dist_step: the attached graph was computed more than once since "
                                              "the last step (gradient accumulation: detach it, kiln_dist_attach(d, NULL))");
    return KILN_OK;
}

kiln_status kiln_dist_set_clip_grad_norm(kiln_dist *d, float max_norm) {
    if (!d || !(max_norm >= 0.0f) || max_norm > 3.4e38f)
        return kiln_set_error(KILN_ERR_ARG, "kiln_dist_set_clip_grad_norm: invalid max_norm %g (must be finite and >= 0)",
                              (double)max_norm);
    d->clip_max_norm = max_norm;
    return KILN_OK;
}

int kiln_dist_buckets(const kiln_dist *d, int *started_in_compute) {
    if (started_in_compute) *started_in_compute = d ? d->last_started_in_compute : 0;
    return d ? d->n_buckets : 0;
}

float kiln_dist_last_grad_norm(const kiln_dist *d) { return d ? d->last_norm : -1.0f; }
int64_t kiln_dist_skipped_steps(const kiln_dist *d) { return d ? d->skipped : 0; }

/* torch.nn.utils.clip_grad_norm_ over the averaged gradients: the sum of
 * squares of this rank's shard (all of them without zero) in double, summed
 * over the ranks; every rank scales its shard by max / (norm + 1e-6) when
 * the norm is above max. A non-finite norm (the same on every rank) skips
 * the step. */
static kiln_status clip(kiln_dist *d) {
    double sq = 0;
    for (int i = d->shard_first; i < d->shard_first + d->shard_n; i++) {
        kiln_tensor *g = kiln_tensor_grad(d->params[i]);
        int64_t m = kiln_tensor_numel(g);
        if (kiln_tensor_dtype(g) == KILN_F64) {
            const double *v = kiln_tensor_data(g);
            for (int64_t j = 0; j < m; j++) sq += v[j] * v[j];
        } else {
            const float *v = kiln_tensor_data(g);
            for (int64_t j = 0; j < m; j++) sq += (double)v[j] * v[j];
        }
    }
    if (d->zero) MPI_Allreduce(MPI_IN_PLACE, &sq, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double norm = sqrt(sq);
    d->last_norm = (float)norm;
    if (!isfinite(norm)) {
        d->skipped++;
        return kiln_set_error(KILN_ERR_NUMERIC, "kiln_dist_step: the gradient norm is %g: step skipped", norm);
    }
    if (norm <= d->clip_max_norm) return KILN_OK;
    double coef = d->clip_max_norm / (norm + 1e-6);
    for (int i = d->shard_first; i < d->shard_first + d->shard_n; i++) {
        kiln_tensor *g = kiln_tensor_grad(d->params[i]);
        int64_t m = kiln_tensor_numel(g);
        if (kiln_tensor_dtype(g) == KILN_F64) {
            double *v = kiln_tensor_data(g);
            for (int64_t j = 0; j < m; j++) v[j] *= coef;
        } else {
            float *v = kiln_tensor_data(g);
            float c = (float)coef;
            for (int64_t j = 0; j < m; j++) v[j] *= c;
        }
    }
    return KILN_OK;
}

kiln_status kiln_dist_step(kiln_dist *d) {
    if (!d) return kiln_set_error(KILN_ERR_ARG, "kiln_dist_step: d is NULL");
    if (d->shard_n && !d->opt) return kiln_set_error(KILN_ERR_STATE, "kiln_dist_step: no optimizer (kiln_dist_set_optim)");
    kiln_status s = kiln_dist_reduce_grads(d);
    if (!s && d->clip_max_norm > 0) s = clip(d);
    if (s) {
        for (int i = 0; i < d->n_params; i++) kiln_tensor_fill(kiln_tensor_grad(d->params[i]), 0.0);
        return s;
    }
    if (d->opt) s = kiln_optim_step(d->opt);
    /* the optimizer zeroed its own; the others are zeroed here */
    for (int i = 0; i < d->n_params; i++)
        if (i < d->shard_first || i >= d->shard_first + d->shard_n)
            kiln_tensor_fill(kiln_tensor_grad(d->params[i]), 0.0);
    if (!d->zero) return s;
    kiln_status first = s;
    unsigned char *mine = d->gather_buf + d->gather_displs[d->rank];
    size_t off = 0;
    for (int i = d->shard_first; i < d->shard_first + d->shard_n; i++) {
        size_t bytes = kiln_tensor_nbytes(d->params[i]);
        memcpy(mine + off, kiln_tensor_data(d->params[i]), bytes);
        off += bytes;
    }
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, d->gather_buf, d->gather_counts, d->gather_displs, MPI_BYTE,
                   MPI_COMM_WORLD);
    off = 0;
    for (int i = 0; i < d->n_params; i++) {
        size_t bytes = kiln_tensor_nbytes(d->params[i]);
        if (i < d->shard_first || i >= d->shard_first + d->shard_n)
            memcpy(kiln_tensor_data(d->params[i]), d->gather_buf + off, bytes);
        off += bytes;
    }
    return first;
}
