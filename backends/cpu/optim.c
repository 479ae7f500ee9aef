/* optim.c — CPU kernels of the optimizers' fused step ops (the op layouts
 * are documented in optim/sgd.c, ...). Each updates a parameter in place,
 * element by element, from its gradient, its state and the hyper leaf. */
#include "internal.h"

/* SGD over n contiguous elements; see optim/sgd.c for the formula. The
 * hyperparameters are converted to T once, as torch applies Python floats
 * to a tensor of T. */
#define DEFINE_SGD(T, NAME)                                                                                     \
    static void NAME(T *p, const T *grad, T *buf, int64_t n, const float *h, bool nesterov, bool first, int nt) { \
        const T lr = (T)h[0], mom = (T)h[1], keep = (T)(1.0 - (double)h[2]), wd = (T)h[3];                    \
        _Pragma("omp parallel for num_threads(nt) if (n > 32768)")                                              \
        for (int64_t i = 0; i < n; i++) {                                                                       \
            T g = grad[i];                                                                                      \
            if (wd != 0) g += wd * p[i];                                                                        \
            if (buf) {                                                                                          \
                T b = first ? g : mom * buf[i] + keep * g;                                                      \
                buf[i] = b;                                                                                     \
                g = nesterov ? g + mom * b : b;                                                                 \
            }                                                                                                   \
            p[i] -= lr * g;                                                                                     \
        }                                                                                                       \
    }
DEFINE_SGD(float, sgd_f32)
DEFINE_SGD(double, sgd_f64)

static kiln_status sgd_step(kiln_tensor *t, const kiln_exec *ex) {
    bool has_momentum = t->ip[1] != 0;
    kiln_tensor *p = t->src[0], *grad = t->src[1], *buf = has_momentum ? t->src[2] : NULL;
    kiln_tensor *hyper = t->src[has_momentum ? 3 : 2];
    if (!kiln__is_compute_float(p->dtype) || grad->dtype != p->dtype || (buf && buf->dtype != p->dtype) ||
        hyper->dtype != KILN_F32)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "sgd_step: needs f32/f64 parameter, gradient and buffer of one dtype");
    int64_t n = kiln_tensor_numel(p);
    bool nesterov = t->ip[0] != 0, first = t->ip[2] == 0;
    if (p->dtype == KILN_F32)
        sgd_f32(t->data, grad->data, buf ? buf->data : NULL, n, hyper->data, nesterov, first, ex->n_threads);
    else
        sgd_f64(t->data, grad->data, buf ? buf->data : NULL, n, hyper->data, nesterov, first, ex->n_threads);
    return KILN_OK;
}

void kiln__cpu_register_optim(kiln_cpu_kernel *tab) { tab[KILN_OP_SGD_STEP] = sgd_step; }
