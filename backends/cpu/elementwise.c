/* elementwise.c — CPU kernels for unary, binary, comparison and where ops.
 * f32 runs whose last axis is contiguous or broadcast (same shape, scalar,
 * row [N,D] op [D], column [N,D] op [N,1], views with a unit inner stride)
 * go to the SIMD tables of vecmath.h, split into chunks across threads;
 * everything else, and f64 / i32, takes the portable path: any strides,
 * math in double (vecmath.h's reference formulas). */
#include "bcast.h"
#include "vecmath.h"
#include "pool.h"

#define PAR_MIN 32768 /* elements below which threads cost more than they give */
#define CHUNK 16384   /* elements per task when a run is split across threads */
/* Outputs this large bypass the cache (non-temporal stores): they cannot
 * stay cached for the next op anyway, and streaming saves the read-for-ownership. */
#define NT_MIN_BYTES ((int64_t)64 << 20)

/* ---- portable path ---- */

typedef struct ew_job {
    const kiln_tensor *t;
    const kiln_bcast *it;
} ew_job;

/* One body for every element-wise kernel and dtype, over rows [r0, r1) of
 * the iterator: the switch on the op sits inside the loop but is the same
 * every iteration, so it predicts. VALUE reads op, p, cmp, cond, it, off, j. */
#define EW_FN(name, T, VALUE)                                                  \
    static void name(void *arg, int64_t r0, int64_t r1, int tid) {              \
        const ew_job *a = arg;                                                  \
        const kiln_tensor *t = a->t, *cond = t->src[0];                         \
        const kiln_bcast it = *a->it;                                           \
        const kiln_op op = t->op;                                               \
        const double p = t->fp[0];                                              \
        const int cmp = (int)t->ip[0];                                          \
        T *y = t->data;                                                         \
        (void)tid, (void)cond, (void)op, (void)p, (void)cmp;                    \
        for (int64_t r = r0; r < r1; r++) {                                     \
            int64_t off[KILN_BCAST_MAX];                                        \
            kiln_bcast_row(&it, r, off);                                        \
            T *yr = y + r * it.cols;                                            \
            for (int64_t j = 0; j < it.cols; j++) yr[j] = (T)(VALUE);           \
        }                                                                       \
    }
#define ELEMENTWISE(fn) \
    kiln__pool_for(it.rows, 1, it.rows * it.cols > PAR_MIN ? ex->n_threads : 1, fn, &(ew_job){t, &it})

#define SRC(k, T) (((const T *)t->src[k]->data)[off[k] + j * it.st[k][it.nd - 1]])

/* where(cond, a, b); cond may be f32, f64 or i32. */
static double cond_at(const kiln_tensor *c, int64_t i) { return kiln__types[c->dtype].get(c->data, i); }
#define WHERE_VALUE(T) (cond_at(cond, off[0] + j * it.st[0][it.nd - 1]) != 0 ? SRC(1, T) : SRC(2, T))

EW_FN(ew_unary_f32, float, kiln__unary_ref(op, SRC(0, float), p))
EW_FN(ew_unary_f64, double, kiln__unary_ref(op, SRC(0, double), p))
EW_FN(ew_binary_f32, float, kiln__binary_ref(op, cmp, SRC(0, float), SRC(1, float)))
EW_FN(ew_binary_f64, double, kiln__binary_ref(op, cmp, SRC(0, double), SRC(1, double)))
EW_FN(ew_binary_i32, int32_t, kiln__binary_ref(op, cmp, SRC(0, int32_t), SRC(1, int32_t)))
EW_FN(ew_where_f32, float, WHERE_VALUE(float))
EW_FN(ew_where_f64, double, WHERE_VALUE(double))
#undef WHERE_VALUE

/* ---- f32 fast path ---- */

enum { RUN_UNARY, RUN_BINARY, RUN_WHERE };

/* The iterator suits the SIMD tables when every source's last stride is 0 or 1. */
static bool runs_ok(const kiln_bcast *it) {
    for (int k = 0; k < it->nsrc; k++)
        if (it->st[k][it->nd - 1] != 0 && it->st[k][it->nd - 1] != 1) return false;
    return true;
}

typedef struct run_job {
    int kind;
    const kiln_tensor *t;
    const kiln_bcast *it;
    int64_t pieces;
    bool nt; /* non-temporal stores */
    int s[KILN_BCAST_MAX];
} run_job;

/* tasks [k0, k1): a task is a piece of CHUNK elements of one row */
static void run_tasks(void *arg, int64_t k0, int64_t k1, int tid) {
    const run_job *j = arg;
    const kiln_tensor *t = j->t;
    const kiln_bcast *it = j->it;
    const kiln_vm *vm = kiln__vm();
    const int64_t cols = it->cols;
    float *out = t->data;
    const kiln_op op = t->op;
    const float p = (float)t->fp[0];
    const int cmp = (int)t->ip[0];
    const bool c_i32 = j->kind == RUN_WHERE && t->src[0]->dtype == KILN_I32;
    (void)tid;
    for (int64_t task = k0; task < k1; task++) {
        int64_t r = task / j->pieces, j0 = task % j->pieces * CHUNK, len = cols - j0 < CHUNK ? cols - j0 : CHUNK;
        int64_t off[KILN_BCAST_MAX];
        kiln_bcast_row(it, r, off);
        const float *src[KILN_BCAST_MAX];
        const int *s = j->s;
        for (int k = 0; k < it->nsrc; k++) src[k] = (const float *)t->src[k]->data + off[k] + j0 * s[k];
        float *y = out + r * cols + j0;
        if (j->kind == RUN_UNARY) vm->unary(op, p, src[0], y, len, j->nt);
        else if (j->kind == RUN_BINARY) vm->binary(op, cmp, src[0], s[0], src[1], s[1], y, len, j->nt);
        else vm->where(src[0], c_i32, s[0], src[1], s[1], src[2], s[2], y, len, j->nt);
    }
}

static void run_f32(int kind, const kiln_tensor *t, const kiln_bcast *it, const kiln_exec *ex) {
    const int64_t total = it->rows * it->cols;
    run_job j = {kind, t, it, (it->cols + CHUNK - 1) / CHUNK, total * (int64_t)sizeof(float) >= NT_MIN_BYTES, {0}};
    for (int k = 0; k < it->nsrc; k++) j.s[k] = (int)it->st[k][it->nd - 1];
    kiln__pool_for(it->rows * j.pieces, 1, total > PAR_MIN ? ex->n_threads : 1, run_tasks, &j);
}

/* ---- kernels ---- */

static kiln_status unary_kernel(kiln_tensor *t, const kiln_exec *ex) {
    kiln_bcast it;
    kiln_bcast_init(&it, t, 1, t->src);
    kiln_bcast_coalesce(&it);
    /* the unary table reads its input contiguously: a broadcast (stride 0)
     * last axis takes the portable path */
    if (t->dtype == KILN_F32 && it.st[0][it.nd - 1] == 1) run_f32(RUN_UNARY, t, &it, ex);
    else if (t->dtype == KILN_F32) ELEMENTWISE(ew_unary_f32);
    else ELEMENTWISE(ew_unary_f64);
    return KILN_OK;
}

static kiln_status binary_kernel(kiln_tensor *t, const kiln_exec *ex) {
    kiln_bcast it;
    kiln_bcast_init(&it, t, 2, t->src);
    kiln_bcast_coalesce(&it);
    switch (t->dtype) {
    case KILN_F32:
        if (runs_ok(&it)) run_f32(RUN_BINARY, t, &it, ex);
        else ELEMENTWISE(ew_binary_f32);
        break;
    case KILN_F64: ELEMENTWISE(ew_binary_f64); break;
    default: ELEMENTWISE(ew_binary_i32); break;
    }
    return KILN_OK;
}

static kiln_status where_kernel(kiln_tensor *t, const kiln_exec *ex) {
    kiln_bcast it;
    kiln_bcast_init(&it, t, 3, t->src);
    kiln_bcast_coalesce(&it);
    const kiln_tensor *cond = t->src[0];
    if (t->dtype == KILN_F32 && cond->dtype != KILN_F64 && runs_ok(&it)) run_f32(RUN_WHERE, t, &it, ex);
    else if (t->dtype == KILN_F32) ELEMENTWISE(ew_where_f32);
    else ELEMENTWISE(ew_where_f64);
    return KILN_OK;
}

void kiln__cpu_register_elementwise(kiln_cpu_kernel *tab) {
    for (int op = KILN_OP_NEG; op <= KILN_OP_GELU_TANH_GRAD; op++) tab[op] = unary_kernel;
    for (int op = KILN_OP_ADD; op <= KILN_OP_CMP; op++) tab[op] = binary_kernel;
    tab[KILN_OP_WHERE] = where_kernel;
}
