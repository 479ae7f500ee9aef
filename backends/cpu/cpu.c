/* cpu.c — the CPU backend's dispatch: one kernel per op, registered by
 * each family file (backends/cpu/<family>.c). */
#include "internal.h"

#include <pthread.h>

static kiln_cpu_kernel kernels[KILN_OP_COUNT];

/* dst += src, same shape, both contiguous (the destination is a grad leaf). */
static kiln_status acc_grad(kiln_tensor *t, const kiln_exec *ex) {
    kiln_tensor *dst = t->src[0], *src = t->src[1];
    int64_t n = kiln_tensor_numel(dst);
    if (!kiln_tensor_is_contiguous(src) || !kiln__is_compute_float(dst->dtype) || src->dtype != dst->dtype)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "acc_grad: needs contiguous f32/f64 operands of one dtype");
    if (dst->dtype == KILN_F32) {
        float *d = dst->data;
        const float *s = src->data;
#pragma omp parallel for num_threads(ex->n_threads) if (n > 65536)
        for (int64_t i = 0; i < n; i++) d[i] += s[i];
    } else {
        double *d = dst->data;
        const double *s = src->data;
#pragma omp parallel for num_threads(ex->n_threads) if (n > 65536)
        for (int64_t i = 0; i < n; i++) d[i] += s[i];
    }
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
    kiln__cpu_register_optim(kernels);
}

kiln_status kiln__cpu_compute(kiln_tensor *node, const kiln_exec *ex) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_once);
    kiln_cpu_kernel k = kernels[node->op];
    if (!k) return kiln__errs(KILN_ERR_UNSUPPORTED, "cpu backend: no kernel for op %s", kiln__op_table[node->op].name);
    return k(node, ex);
}
