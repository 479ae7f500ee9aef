/* optim.c — CPU kernels of the optimizers' fused step ops (the op layouts
 * are documented in optim/sgd.c, ...). Each updates a parameter in place,
 * element by element, from its gradient, its state and the hyper leaf. */
#include "internal.h"

#include <math.h>

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

/* Adam/AdamW over n contiguous elements in one pass; see optim/adam.c for
 * the formula. The operation order follows torch's (addcdiv computes
 * (value * m) / denom); scalars derived from the step count are computed in
 * double as torch does in Python, then converted to T. L2 and AMS are
 * compile-time constants at each call, so every variant is a branch-free
 * loop. Its one obstacle to vectorizing is sqrt's errno path (the argument
 * is a sum of squares, never negative): builds with -fno-math-errno
 * (__NO_MATH_ERRNO__) get an explicit simd loop; without it the pragma would
 * make clang fail (-Wpass-failed) and gcc leave the loop scalar anyway. */
#if defined(__NO_MATH_ERRNO__)
#define ADAM_SIMD _Pragma("omp simd")
#else
#define ADAM_SIMD
#endif

typedef struct adam_scalars {
    double decay;     /* 1 - lr * weight_decay (AdamW), else 1 */
    double wd;        /* L2 weight decay (Adam) */
    double b1, b2;    /* betas */
    double step_size; /* lr / bc1 */
    double bc2_sqrt;  /* sqrt(bc2) */
    double eps;
} adam_scalars;

/* One chunk [lo, hi) of a variant; threads split the array into chunks. */
#define DEFINE_ADAM(T, NAME, SQRT)                                                                              \
    static inline __attribute__((always_inline)) void NAME##_body(                               \
        T *restrict p, const T *restrict grad, T *restrict m, T *restrict v, T *restrict vmax, int64_t lo,      \
        int64_t hi, const adam_scalars *s, bool L2, bool AMS) {                                                 \
        const T decay = (T)s->decay, wd = (T)s->wd, b1 = (T)s->b1, b2 = (T)s->b2, one_b1 = (T)(1.0 - s->b1),    \
                one_b2 = (T)(1.0 - s->b2), neg_step = (T)(-s->step_size), bc2s = (T)s->bc2_sqrt, eps = (T)s->eps; \
        ADAM_SIMD                                                                                               \
        for (int64_t i = lo; i < hi; i++) {                                                                     \
            T pi = p[i] * decay, g = grad[i];                                                                   \
            if (L2) g += wd * pi;                                                                               \
            T mi = m[i] * b1 + g * one_b1;                                                                      \
            T vi = v[i] * b2 + one_b2 * g * g;                                                                  \
            m[i] = mi;                                                                                          \
            v[i] = vi;                                                                                          \
            if (AMS) {                                                                                          \
                vi = vmax[i] > vi ? vmax[i] : vi;                                                               \
                vmax[i] = vi;                                                                                   \
            }                                                                                                   \
            T denom = SQRT(vi) / bc2s + eps;                                                                    \
            p[i] = pi + neg_step * mi / denom;                                                                  \
        }                                                                                                       \
    }                                                                                                           \
    static __attribute__((noinline)) void NAME##_chunk(T *p, const T *grad, T *m, T *v, T *vmax,  \
                                                                     int64_t lo, int64_t hi,                    \
                                                                     const adam_scalars *s) {                   \
        bool l2 = s->wd != 0;                                                                                   \
        if (vmax)                                                                                               \
            l2 ? NAME##_body(p, grad, m, v, vmax, lo, hi, s, true, true)                                        \
               : NAME##_body(p, grad, m, v, vmax, lo, hi, s, false, true);                                      \
        else                                                                                                    \
            l2 ? NAME##_body(p, grad, m, v, vmax, lo, hi, s, true, false)                                       \
               : NAME##_body(p, grad, m, v, vmax, lo, hi, s, false, false);                                     \
    }                                                                                                           \
    static void NAME(T *p, const T *grad, T *m, T *v, T *vmax, int64_t n, const adam_scalars *s, int nt) {      \
        const int64_t chunk = 16384, nchunks = (n + chunk - 1) / chunk;                                         \
        _Pragma("omp parallel for num_threads(nt) if (nchunks > 2)")                                            \
        for (int64_t c = 0; c < nchunks; c++)                                                                   \
            NAME##_chunk(p, grad, m, v, vmax, c * chunk, c * chunk + chunk < n ? c * chunk + chunk : n, s);     \
    }
DEFINE_ADAM(float, adam_f32, sqrtf)
DEFINE_ADAM(double, adam_f64, sqrt)

static kiln_status adam_step(kiln_tensor *t, const kiln_exec *ex) {
    bool ams = t->ip[0] != 0, decoupled = t->ip[1] != 0;
    kiln_tensor *p = t->src[0], *grad = t->src[1], *m = t->src[2], *v = t->src[3];
    kiln_tensor *vmax = ams ? t->src[4] : NULL, *hyper = t->src[ams ? 5 : 4];
    if (!kiln__is_compute_float(p->dtype) || grad->dtype != p->dtype || m->dtype != p->dtype ||
        v->dtype != p->dtype || (vmax && vmax->dtype != p->dtype) || hyper->dtype != KILN_F32)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "adam_step: needs f32/f64 parameter, gradient and moments of one dtype");
    if (t->ip[2] < 1) return kiln__errs(KILN_ERR_STATE, "adam_step: step number %lld (must be >= 1)", (long long)t->ip[2]);
    const float *h = hyper->data;
    double lr = h[0], b1 = h[1], b2 = h[2], wd = h[4], step = (double)t->ip[2];
    adam_scalars s = {
        .decay = decoupled ? 1.0 - lr * wd : 1.0,
        .wd = decoupled ? 0.0 : wd,
        .b1 = b1,
        .b2 = b2,
        .step_size = lr / (1.0 - pow(b1, step)),
        .bc2_sqrt = sqrt(1.0 - pow(b2, step)),
        .eps = h[3],
    };
    int64_t n = kiln_tensor_numel(p);
    void *vm = vmax ? vmax->data : NULL;
    if (p->dtype == KILN_F32)
        adam_f32(t->data, grad->data, m->data, v->data, vm, n, &s, ex->n_threads);
    else
        adam_f64(t->data, grad->data, m->data, v->data, vm, n, &s, ex->n_threads);
    return KILN_OK;
}

/* Lion over n contiguous elements; see optim/lion.c for the formula and
 * torch.sign's sign(NaN) = 0. The scalars are converted to T once, as torch
 * applies Python floats to a tensor of T; 1 - lr * weight_decay is computed
 * in double, as lion-pytorch does in Python. sign is the difference of two
 * comparisons, as torch's, taken as int and converted: gcc -O2 vectorizes
 * that form under `omp simd` for f32 (not float ?:; f64 stays scalar there,
 * x86-64's baseline lacking a vector int-to-double), clang both. Threads
 * take chunks as Adam's. */
#define DEFINE_LION(T, NAME)                                                                                     \
    static __attribute__((noinline)) void NAME##_chunk(T *restrict p, const T *restrict grad, T *restrict m,    \
                                                       int64_t lo, int64_t hi, const float *h) {                \
        const T neg_lr = (T)(-(double)h[0]), b1 = (T)h[1], b2 = (T)h[2], one_b1 = (T)(1.0 - (double)h[1]),      \
                one_b2 = (T)(1.0 - (double)h[2]), decay = (T)(1.0 - (double)h[0] * (double)h[3]);               \
        _Pragma("omp simd")                                                                                     \
        for (int64_t i = lo; i < hi; i++) {                                                                     \
            T pi = p[i] * decay, g = grad[i], mi = m[i];                                                        \
            T c = mi * b1 + g * one_b1;                                                                         \
            T sgn = (T)((c > 0) - (c < 0));                                                                     \
            p[i] = pi + neg_lr * sgn;                                                                           \
            m[i] = mi * b2 + g * one_b2;                                                                        \
        }                                                                                                       \
    }                                                                                                           \
    static void NAME(T *p, const T *grad, T *m, int64_t n, const float *h, int nt) {                            \
        const int64_t chunk = 16384, nchunks = (n + chunk - 1) / chunk;                                         \
        _Pragma("omp parallel for num_threads(nt) if (nchunks > 2)")                                            \
        for (int64_t c = 0; c < nchunks; c++)                                                                   \
            NAME##_chunk(p, grad, m, c * chunk, c * chunk + chunk < n ? c * chunk + chunk : n, h);              \
    }
DEFINE_LION(float, lion_f32)
DEFINE_LION(double, lion_f64)

static kiln_status lion_step(kiln_tensor *t, const kiln_exec *ex) {
    kiln_tensor *p = t->src[0], *grad = t->src[1], *m = t->src[2], *hyper = t->src[3];
    if (!kiln__is_compute_float(p->dtype) || grad->dtype != p->dtype || m->dtype != p->dtype ||
        hyper->dtype != KILN_F32)
        return kiln__errs(KILN_ERR_UNSUPPORTED,
                          "lion_step: needs f32/f64 parameter, gradient and momentum of one dtype");
    int64_t n = kiln_tensor_numel(p);
    if (p->dtype == KILN_F32)
        lion_f32(t->data, grad->data, m->data, n, hyper->data, ex->n_threads);
    else
        lion_f64(t->data, grad->data, m->data, n, hyper->data, ex->n_threads);
    return KILN_OK;
}

void kiln__cpu_register_optim(kiln_cpu_kernel *tab) {
    tab[KILN_OP_SGD_STEP] = sgd_step;
    tab[KILN_OP_ADAM_STEP] = adam_step;
    tab[KILN_OP_LION_STEP] = lion_step;
}
