/* optim.c — CPU kernels of the optimizers' fused step ops (the op layouts
 * are documented in optim/sgd.c, ...). Each updates a parameter in place,
 * element by element, from its gradient, its state and the hyper leaf. */
#include "internal.h"
#include "pool.h"

#include <math.h>

/* What a step's range function reads: the tensors' data (each kernel
 * knows its element type) and its scalars. */
typedef struct step_job {
    void *p, *m, *v, *vmax;
    const void *grad;
    int64_t n;
    const float *h;
    const void *scalars;
    bool nesterov, first;
} step_job;

#define STEP_CHUNK 16384 /* elements per chunk of the Adam and Lion steps */

/* SGD over n contiguous elements; see optim/sgd.c for the formula. The
 * hyperparameters are converted to T once, as torch applies Python floats
 * to a tensor of T. Momentum, the first step, Nesterov and weight decay are
 * compile-time constants at each call, so every variant is a branch-free
 * simd loop (the loop with its tests inside stayed scalar: 38 ms a ResNet-18
 * step of 11.2M parameters where memory allows ~10); the operations and
 * their order are the same in each. */
#define SGD_VARIANT(NAME, MOM, FIRST, NESTEROV)                                                                 \
    (wd ? NAME##_body(p, grad, buf, lo, hi, h, MOM, FIRST, NESTEROV, true)                                      \
        : NAME##_body(p, grad, buf, lo, hi, h, MOM, FIRST, NESTEROV, false))
#define DEFINE_SGD(T, NAME)                                                                                     \
    static inline __attribute__((always_inline)) void NAME##_body(T *restrict p, const T *restrict grad,      \
                                                                 T *restrict buf, int64_t lo, int64_t hi,      \
                                                                 const float *h, bool MOM, bool FIRST,          \
                                                                 bool NESTEROV, bool WD) {                      \
        const T lr = (T)h[0], mom = (T)h[1], keep = (T)(1.0 - (double)h[2]), wd = (T)h[3];                     \
        _Pragma("omp simd")                                                                                     \
        for (int64_t i = lo; i < hi; i++) {                                                                     \
            T g = grad[i];                                                                                      \
            if (WD) g += wd * p[i];                                                                             \
            if (MOM) {                                                                                          \
                T b = FIRST ? g : mom * buf[i] + keep * g;                                                      \
                buf[i] = b;                                                                                     \
                g = NESTEROV ? g + mom * b : b;                                                                 \
            }                                                                                                   \
            p[i] -= lr * g;                                                                                     \
        }                                                                                                       \
    }                                                                                                           \
    /* the variant of the flags, each a constant in its call */                                              \
    static __attribute__((noinline)) void NAME##_chunk(T *p, const T *grad, T *buf, int64_t lo, int64_t hi,    \
                                                       const float *h, bool mom, bool first, bool nest, bool wd) { \
        if (!mom) SGD_VARIANT(NAME, false, false, false);                                                       \
        else if (first && nest) SGD_VARIANT(NAME, true, true, true);                                            \
        else if (first) SGD_VARIANT(NAME, true, true, false);                                                   \
        else if (nest) SGD_VARIANT(NAME, true, false, true);                                                    \
        else SGD_VARIANT(NAME, true, false, false);                                                             \
    }                                                                                                           \
    static void NAME##_range(void *arg, int64_t i0, int64_t i1, int tid) {                                      \
        const step_job *j = arg;                                                                                \
        (void)tid;                                                                                              \
        NAME##_chunk(j->p, j->grad, j->m, i0, i1, j->h, j->m != NULL, j->first, j->nesterov, (T)j->h[3] != 0);  \
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
    step_job j = {.p = t->data, .m = buf ? buf->data : NULL, .grad = grad->data, .n = n, .h = hyper->data,
                  .nesterov = t->ip[0] != 0, .first = t->ip[2] == 0};
    kiln__pool_for(n, 4096, n > 32768 ? ex->n_threads : 1, p->dtype == KILN_F32 ? sgd_f32_range : sgd_f64_range, &j);
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
    static void NAME(void *arg, int64_t c0, int64_t c1, int tid) {                                              \
        const step_job *j = arg;                                                                                \
        (void)tid;                                                                                              \
        for (int64_t c = c0; c < c1; c++)                                                                       \
            NAME##_chunk(j->p, j->grad, j->m, j->v, j->vmax, c * STEP_CHUNK,                                    \
                         c * STEP_CHUNK + STEP_CHUNK < j->n ? c * STEP_CHUNK + STEP_CHUNK : j->n, j->scalars);  \
    }
DEFINE_ADAM(float, adam_f32, sqrtf)
DEFINE_ADAM(double, adam_f64, sqrt)

/* A step's chunks of STEP_CHUNK elements, threaded from three chunks up. */
static void run_chunks(step_job *j, const kiln_exec *ex, kiln_pool_fn *fn) {
    const int64_t nchunks = (j->n + STEP_CHUNK - 1) / STEP_CHUNK;
    kiln__pool_for(nchunks, 1, nchunks > 2 ? ex->n_threads : 1, fn, j);
}

static kiln_status adam_step(kiln_tensor *t, const kiln_exec *ex) {
    bool ams = t->ip[0] != 0, decoupled = t->ip[1] != 0;
    kiln_tensor *p = t->src[0], *grad = t->src[1], *m = t->src[2], *v = t->src[3];
    kiln_tensor *vmax = ams ? t->src[4] : NULL, *hyper = t->src[ams ? 5 : 4];
    if (!kiln__is_compute_float(p->dtype) || grad->dtype != p->dtype || m->dtype != p->dtype ||
        v->dtype != p->dtype || (vmax && vmax->dtype != p->dtype) || hyper->dtype != KILN_F32)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "adam_step: needs f32/f64 parameter, gradient and moments of one dtype");
    double step = 0;
    kiln_status st = kiln__hyper_step_of("adam_step", hyper, 5, &step);
    if (st) return st;
    const float *h = hyper->data;
    double lr = h[0], b1 = h[1], b2 = h[2], wd = h[4];
    adam_scalars s = {
        .decay = decoupled ? 1.0 - lr * wd : 1.0,
        .wd = decoupled ? 0.0 : wd,
        .b1 = b1,
        .b2 = b2,
        .step_size = lr / (1.0 - pow(b1, step)),
        .bc2_sqrt = sqrt(1.0 - pow(b2, step)),
        .eps = h[3],
    };
    step_job j = {.p = t->data, .m = m->data, .v = v->data, .vmax = vmax ? vmax->data : NULL, .grad = grad->data,
                  .n = kiln_tensor_numel(p), .scalars = &s};
    run_chunks(&j, ex, p->dtype == KILN_F32 ? adam_f32 : adam_f64);
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
    static void NAME(void *arg, int64_t c0, int64_t c1, int tid) {                                              \
        const step_job *j = arg;                                                                                \
        (void)tid;                                                                                              \
        for (int64_t c = c0; c < c1; c++)                                                                       \
            NAME##_chunk(j->p, j->grad, j->m, c * STEP_CHUNK,                                                   \
                         c * STEP_CHUNK + STEP_CHUNK < j->n ? c * STEP_CHUNK + STEP_CHUNK : j->n, j->h);        \
    }
DEFINE_LION(float, lion_f32)
DEFINE_LION(double, lion_f64)

static kiln_status lion_step(kiln_tensor *t, const kiln_exec *ex) {
    kiln_tensor *p = t->src[0], *grad = t->src[1], *m = t->src[2], *hyper = t->src[3];
    if (!kiln__is_compute_float(p->dtype) || grad->dtype != p->dtype || m->dtype != p->dtype ||
        hyper->dtype != KILN_F32)
        return kiln__errs(KILN_ERR_UNSUPPORTED,
                          "lion_step: needs f32/f64 parameter, gradient and momentum of one dtype");
    step_job j = {.p = t->data, .m = m->data, .grad = grad->data, .n = kiln_tensor_numel(p), .h = hyper->data};
    run_chunks(&j, ex, p->dtype == KILN_F32 ? lion_f32 : lion_f64);
    return KILN_OK;
}

void kiln__cpu_register_optim(kiln_cpu_kernel *tab) {
    tab[KILN_OP_SGD_STEP] = sgd_step;
    tab[KILN_OP_ADAM_STEP] = adam_step;
    tab[KILN_OP_LION_STEP] = lion_step;
}
