/* cpu.c — the CPU backend: its vtable, registered with core as the host
 * backend (core/backend.h) from a constructor; its dispatch, one kernel
 * per op, registered by each family file (backends/cpu/<family>.c); and
 * the f16/bf16 path for kernels written for f32: their half-precision
 * operands are widened to f32, the f32 kernel runs, and the result is
 * rounded back (as PyTorch computes most half-precision CPU ops). */
#include "backend.h"
#include "cpu.h"
#include "pool.h"

#include <pthread.h>
#include <stdio.h>

static kiln_cpu_kernel kernels[KILN_OP_COUNT];

typedef struct acc_job {
    void *d;
    const void *s;
    bool f64;
} acc_job;

static void acc_range(void *arg, int64_t i0, int64_t i1, int tid) {
    const acc_job *j = arg;
    (void)tid;
    if (j->f64) {
        double *d = j->d;
        const double *s = j->s;
        for (int64_t i = i0; i < i1; i++) d[i] += s[i];
    } else {
        float *d = j->d;
        const float *s = j->s;
        for (int64_t i = i0; i < i1; i++) d[i] += s[i];
    }
}

/* dst += src, same shape, both contiguous (the destination is a grad leaf). */
static kiln_status acc_grad(kiln_tensor *t, const kiln_exec *ex) {
    kiln_tensor *dst = t->src[0], *src = t->src[1];
    int64_t n = kiln_tensor_numel(dst);
    if (!kiln_tensor_is_contiguous(src) || !kiln__is_compute_float(dst->dtype) || src->dtype != dst->dtype)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "acc_grad: needs contiguous f32/f64 operands of one dtype");
    acc_job j = {dst->data, src->data, dst->dtype == KILN_F64};
    kiln__pool_for(n, 16384, n > 65536 ? ex->n_threads : 1, acc_range, &j);
    return KILN_OK;
}

static void init_once(void) {
    kernels[KILN_OP_ACC_GRAD] = acc_grad;
    kiln__cpu_register_elementwise(kernels);
    kiln__cpu_register_reduce(kernels);
    kiln__cpu_register_movement(kernels);
    kiln__cpu_register_matmul(kernels);
    kiln__cpu_register_rows(kernels);
    kiln__cpu_register_nn(kernels);
    kiln__cpu_register_conv(kernels);
    kiln__cpu_register_conv_tiled(kernels);
    kiln__cpu_register_optim(kernels);
    /* the optimizers' extra kernels register here */
    kiln__cpu_register_optim_galore(kernels);
    kiln__cpu_register_optim_apollo(kernels);
    kiln__cpu_register_optim8bit(kernels);
    kiln__cpu_register_quant(kernels);
    kiln__cpu_register_qmatmul(kernels);
    kiln__cpu_register_dfp(kernels);
}

static bool is_half(kiln_dtype t) { return t == KILN_F16 || t == KILN_BF16; }

/* Ops whose kernels read and write f16/bf16 themselves. */
static bool takes_half(kiln_op op) {
    switch (op) {
    case KILN_OP_CONTIGUOUS: case KILN_OP_CAST: case KILN_OP_CONCAT: case KILN_OP_PAD: case KILN_OP_SLICE_SCATTER:
    case KILN_OP_SLICE_ASSIGN:
    case KILN_OP_GET_ROWS: case KILN_OP_ONE_HOT: case KILN_OP_MATMUL: return true;
    default: return false;
    }
}

/* x's elements, in row-major order of its shape, widened to f32. */
static void widen(const kiln_tensor *x, float *out) {
    const kiln_type_traits *tr = &kiln__types[x->dtype];
    int64_t n = kiln_tensor_numel(x);
    if (kiln_tensor_is_contiguous(x)) {
        tr->to_f32(x->data, out, n);
        return;
    }
    int64_t idx[KILN_MAX_DIMS] = {0}, off = 0;
    for (int64_t i = 0; i < n; i++) {
        out[i] = (float)tr->get(x->data, off);
        for (int d = x->ndim - 1; d >= 0; d--) {
            off += x->stride[d];
            if (++idx[d] < x->shape[d]) break;
            off -= x->stride[d] * x->shape[d];
            idx[d] = 0;
        }
    }
}

/* Run the f32 kernel k on a copy of node whose half-precision sources and
 * result are f32 buffers. */
static kiln_status via_f32(kiln_tensor *node, const kiln_exec *ex, kiln_cpu_kernel k) {
    kiln_tensor shadow = *node, srcs[KILN_MAX_SRC];
    float *bufs[KILN_MAX_SRC + 1] = {0};
    kiln_status s = KILN_OK;
    for (int i = 0; i < node->nsrc; i++) {
        if (!is_half(node->src[i]->dtype)) continue;
        srcs[i] = *node->src[i];
        srcs[i].dtype = KILN_F32;
        kiln__set_contiguous_strides(&srcs[i]);
        if (!(bufs[i] = kiln__malloc((size_t)kiln_tensor_numel(&srcs[i]) * sizeof(float) + 1))) goto oom;
        widen(node->src[i], bufs[i]);
        srcs[i].data = bufs[i];
        shadow.src[i] = &srcs[i];
    }
    bool inplace = kiln__op_table[node->op].kind == KILN_KIND_INPLACE;
    if (is_half(node->dtype)) {
        shadow.dtype = KILN_F32;
        if (inplace) shadow.data = shadow.src[0]->data;
        else if (!(shadow.data = bufs[KILN_MAX_SRC] = kiln__malloc((size_t)kiln_tensor_numel(node) * sizeof(float) + 1)))
            goto oom;
    }
    s = k(&shadow, ex);
    if (!s && is_half(node->dtype)) kiln__types[node->dtype].from_f32(shadow.data, node->data, kiln_tensor_numel(node));
    goto done;
oom:
    s = kiln__errs(KILN_ERR_OOM, "%s: out of memory widening f16/bf16 operands to f32", kiln__op_table[node->op].name);
done:
    for (int i = 0; i <= KILN_MAX_SRC; i++) free(bufs[i]);
    return s;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

kiln_status kiln__cpu_compute(kiln_tensor *node, const kiln_exec *ex) {
    pthread_once(&once, init_once);
    kiln_cpu_kernel k = kernels[node->op];
    if (!k) return kiln__errs(KILN_ERR_UNSUPPORTED, "cpu backend: no kernel for op %s", kiln__op_table[node->op].name);
    if (!kiln_tensor_numel(node)) return KILN_OK; /* an empty result (or in-place target): nothing to write */
    if (!takes_half(node->op)) {
        bool half = is_half(node->dtype);
        for (int i = 0; i < node->nsrc && !half; i++) half = is_half(node->src[i]->dtype);
        if (half) return via_f32(node, ex, k);
    }
    return k(node, ex);
}

/* ---- the vtable ---- */

static bool cpu_supports(kiln_backend *b, const kiln_tensor *node) {
    (void)b;
    pthread_once(&once, init_once);
    return kernels[node->op] != NULL;
}

static kiln_status cpu_compute(kiln_backend *b, kiln_tensor *node, const kiln_exec *ex) {
    (void)b;
    return kiln__cpu_compute(node, ex);
}

static kiln_status cpu_compute_chain(kiln_backend *b, kiln_tensor *const *nodes, int n, const kiln_exec *ex) {
    (void)b;
    return kiln__cpu_compute_chain(nodes, n, ex);
}

static kiln_status cpu_ready(kiln_backend *b, const char *who) {
    (void)b;
    return kiln__cpu_simd_check(who);
}

/* the caps in force now (a test may change them) */
static const char *cpu_describe(const kiln_backend *b) {
    static _Thread_local char buf[sizeof b->device];
    snprintf(buf, sizeof buf, "host CPU (%s)", kiln_cpu_describe());
    return buf;
}

/* host memory: no memory functions, nothing deferred */
static const kiln_backend_vt cpu_vt = {
    .supports = cpu_supports,
    .compute = cpu_compute,
    .fuses = KILN_FUSE_CHAIN | KILN_FUSE_ACC | KILN_FUSE_NORM_RELU | KILN_FUSE_SIDE,
    .compute_chain = cpu_compute_chain,
    .ready = cpu_ready,
    .describe = cpu_describe,
};

static kiln_backend cpu_backend = {.name = "cpu", .vt = &cpu_vt, .device = "host CPU"};

static kiln_backend *cpu_open(void) { return &cpu_backend; }

__attribute__((constructor)) static void cpu_register(void) { kiln__backend_register("cpu", cpu_open, true); }
