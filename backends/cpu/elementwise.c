/* elementwise.c — CPU kernels for unary, binary, comparison and where ops.
 * f32 runs whose last axis is contiguous or broadcast (same shape, scalar,
 * row [N,D] op [D], column [N,D] op [N,1], views with a unit inner stride)
 * go to the SIMD tables of vecmath.h, split into chunks across threads;
 * everything else, and f64 / i32, takes the portable path: any strides,
 * math in double (vecmath.h's reference formulas). */
#include "bcast.h"
#include "vecmath.h"

#define PAR_MIN 32768 /* elements below which threads cost more than they give */
#define CHUNK 16384   /* elements per task when a run is split across threads */
/* Outputs this large bypass the cache (non-temporal stores): they cannot
 * stay cached for the next op anyway, and streaming saves the read-for-ownership. */
#define NT_MIN_BYTES ((int64_t)64 << 20)

/* ---- portable path ---- */

/* One body for every element-wise kernel and dtype: the switch on the op
 * sits inside the loop but is the same every iteration, so it predicts. */
#define ELEMENTWISE(T, VALUE)                                                                  \
    do {                                                                                       \
        T *y = t->data;                                                                        \
        _Pragma("omp parallel for num_threads(ex->n_threads) if (it.rows * it.cols > PAR_MIN)") \
        for (int64_t r = 0; r < it.rows; r++) {                                                \
            int64_t off[KILN_BCAST_MAX];                                                     \
            kiln_bcast_row(&it, r, off);                                                     \
            T *yr = y + r * it.cols;                                                           \
            for (int64_t j = 0; j < it.cols; j++) yr[j] = (T)(VALUE);                          \
        }                                                                                      \
    } while (0)

#define SRC(k, T) (((const T *)t->src[k]->data)[off[k] + j * it.st[k][it.nd - 1]])

/* where(cond, a, b); cond may be f32, f64 or i32. */
static double cond_at(const kiln_tensor *c, int64_t i) { return kiln__types[c->dtype].get(c->data, i); }

/* ---- f32 fast path ---- */

enum { RUN_UNARY, RUN_BINARY, RUN_WHERE };

/* The iterator suits the SIMD tables when every source's last stride is 0 or 1. */
static bool runs_ok(const kiln_bcast *it) {
    for (int k = 0; k < it->nsrc; k++)
        if (it->st[k][it->nd - 1] != 0 && it->st[k][it->nd - 1] != 1) return false;
    return true;
}

static void run_f32(int kind, const kiln_tensor *t, const kiln_bcast *it, const kiln_exec *ex) {
    const kiln_vm *vm = kiln__vm();
    int64_t cols = it->cols, pieces = (cols + CHUNK - 1) / CHUNK, tasks = it->rows * pieces;
    int64_t total = it->rows * cols;
    bool nt = total * (int64_t)sizeof(float) >= NT_MIN_BYTES;
    int s[KILN_BCAST_MAX] = {0};
    for (int k = 0; k < it->nsrc; k++) s[k] = (int)it->st[k][it->nd - 1];
    float *out = t->data;
    kiln_op op = t->op;
    float p = (float)t->fp[0];
    int cmp = (int)t->ip[0];
    bool c_i32 = kind == RUN_WHERE && t->src[0]->dtype == KILN_I32;
#define RUN_TASK(task)                                                                                         \
    do {                                                                                                       \
        int64_t r = (task) / pieces, j0 = (task) % pieces * CHUNK, len = cols - j0 < CHUNK ? cols - j0 : CHUNK; \
        int64_t off[KILN_BCAST_MAX];                                                                           \
        kiln_bcast_row(it, r, off);                                                                            \
        const float *src[KILN_BCAST_MAX];                                                                      \
        for (int k = 0; k < it->nsrc; k++) src[k] = (const float *)t->src[k]->data + off[k] + j0 * s[k];       \
        float *y = out + r * cols + j0;                                                                        \
        if (kind == RUN_UNARY) vm->unary(op, p, src[0], y, len, nt);                                           \
        else if (kind == RUN_BINARY) vm->binary(op, cmp, src[0], s[0], src[1], s[1], y, len, nt);              \
        else vm->where(src[0], c_i32, s[0], src[1], s[1], src[2], s[2], y, len, nt);                           \
    } while (0)
    /* no parallel construct at all when it would run one thread: inside a
     * fused chain's tile loop (already a parallel region) each one was a
     * nested team, allocated and freed per node per tile */
    if (ex->n_threads < 2 || total <= PAR_MIN) {
        for (int64_t task = 0; task < tasks; task++) RUN_TASK(task);
        return;
    }
#pragma omp parallel for num_threads(ex->n_threads) schedule(static)
    for (int64_t task = 0; task < tasks; task++) RUN_TASK(task);
#undef RUN_TASK
}

/* ---- kernels ---- */

static kiln_status unary_kernel(kiln_tensor *t, const kiln_exec *ex) {
    kiln_bcast it;
    kiln_bcast_init(&it, t, 1, t->src);
    kiln_bcast_coalesce(&it);
    kiln_op op = t->op;
    double p = t->fp[0];
    /* the unary table reads its input contiguously: a broadcast (stride 0)
     * last axis takes the portable path */
    if (t->dtype == KILN_F32 && it.st[0][it.nd - 1] == 1) run_f32(RUN_UNARY, t, &it, ex);
    else if (t->dtype == KILN_F32) ELEMENTWISE(float, kiln__unary_ref(op, SRC(0, float), p));
    else ELEMENTWISE(double, kiln__unary_ref(op, SRC(0, double), p));
    return KILN_OK;
}

static kiln_status binary_kernel(kiln_tensor *t, const kiln_exec *ex) {
    kiln_bcast it;
    kiln_bcast_init(&it, t, 2, t->src);
    kiln_bcast_coalesce(&it);
    kiln_op op = t->op;
    int cmp = (int)t->ip[0];
    switch (t->dtype) {
    case KILN_F32:
        if (runs_ok(&it)) run_f32(RUN_BINARY, t, &it, ex);
        else ELEMENTWISE(float, kiln__binary_ref(op, cmp, SRC(0, float), SRC(1, float)));
        break;
    case KILN_F64: ELEMENTWISE(double, kiln__binary_ref(op, cmp, SRC(0, double), SRC(1, double))); break;
    default: ELEMENTWISE(int32_t, kiln__binary_ref(op, cmp, SRC(0, int32_t), SRC(1, int32_t))); break;
    }
    return KILN_OK;
}

static kiln_status where_kernel(kiln_tensor *t, const kiln_exec *ex) {
    kiln_bcast it;
    kiln_bcast_init(&it, t, 3, t->src);
    kiln_bcast_coalesce(&it);
    const kiln_tensor *cond = t->src[0];
#define WHERE_VALUE(T) (cond_at(cond, off[0] + j * it.st[0][it.nd - 1]) != 0 ? SRC(1, T) : SRC(2, T))
    if (t->dtype == KILN_F32 && cond->dtype != KILN_F64 && runs_ok(&it)) run_f32(RUN_WHERE, t, &it, ex);
    else if (t->dtype == KILN_F32) ELEMENTWISE(float, WHERE_VALUE(float));
    else ELEMENTWISE(double, WHERE_VALUE(double));
#undef WHERE_VALUE
    return KILN_OK;
}

void kiln__cpu_register_elementwise(kiln_cpu_kernel *tab) {
    for (int op = KILN_OP_NEG; op <= KILN_OP_GELU_TANH_GRAD; op++) tab[op] = unary_kernel;
    for (int op = KILN_OP_ADD; op <= KILN_OP_CMP; op++) tab[op] = binary_kernel;
    tab[KILN_OP_WHERE] = where_kernel;
}
