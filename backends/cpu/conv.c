/* conv.c — CPU kernels of the two convolution primitives, IM2COL and
 * COL2IM (layout and ip[] in ops/conv.c). Sources are contiguous (the
 * constructors make them so). Each (n, c) image plane is independent, so
 * the threads split N*C and col2im's overlapping sums need no atomics. */
#include "internal.h"

/* The geometry both kernels share: kernel, stride, padding, dilation, the
 * image size H x W and the cols grid OH x OW. */
typedef struct geom {
    int64_t kh, kw, sh, sw, ph, pw, dh, dw, h, w, oh, ow;
} geom;

static geom geom_of(const kiln_tensor *node, const kiln_tensor *cols) {
    const int64_t *ip = node->ip;
    return (geom){ip[0], ip[1], ip[2], ip[3], ip[4], ip[5], ip[6], ip[7], ip[8], ip[9], cols->shape[4], cols->shape[5]};
}

/* x [N, C, H, W] -> cols [N, C, kh, kw, OH, OW]; out-of-image taps get pad. */
#define IM2COL_BODY(T)                                                                                   \
    do {                                                                                                 \
        const T *x = node->src[0]->data;                                                                 \
        T *cols = node->data;                                                                            \
        const T pad = (T)node->fp[0];                                                                    \
        int64_t planes = node->shape[0] * node->shape[1], plane = g.kh * g.kw * g.oh * g.ow;             \
        _Pragma("omp parallel for num_threads(ex->n_threads) if (planes * plane > 32768)")               \
        for (int64_t p = 0; p < planes; p++) {                                                           \
            const T *img = x + p * g.h * g.w;                                                            \
            T *out = cols + p * plane;                                                                   \
            for (int64_t ki = 0; ki < g.kh; ki++)                                                        \
                for (int64_t kj = 0; kj < g.kw; kj++)                                                    \
                    for (int64_t oi = 0; oi < g.oh; oi++) {                                              \
                        int64_t ii = oi * g.sh - g.ph + ki * g.dh;                                       \
                        bool row_in = ii >= 0 && ii < g.h;                                               \
                        for (int64_t oj = 0; oj < g.ow; oj++) {                                          \
                            int64_t jj = oj * g.sw - g.pw + kj * g.dw;                                   \
                            *out++ = row_in && jj >= 0 && jj < g.w ? img[ii * g.w + jj] : pad;           \
                        }                                                                                \
                    }                                                                                    \
        }                                                                                                \
    } while (0)

/* cols [N, C, kh, kw, OH, OW] -> img [N, C, H, W], summing overlapping taps
 * and dropping the ones that fall outside the image. */
#define COL2IM_BODY(T)                                                                                   \
    do {                                                                                                 \
        const T *cols = node->src[0]->data;                                                              \
        T *y = node->data;                                                                               \
        int64_t planes = node->shape[0] * node->shape[1], plane = g.kh * g.kw * g.oh * g.ow;             \
        _Pragma("omp parallel for num_threads(ex->n_threads) if (planes * plane > 32768)")               \
        for (int64_t p = 0; p < planes; p++) {                                                           \
            T *img = y + p * g.h * g.w;                                                                  \
            const T *in = cols + p * plane;                                                              \
            for (int64_t i = 0; i < g.h * g.w; i++) img[i] = 0;                                          \
            for (int64_t ki = 0; ki < g.kh; ki++)                                                        \
                for (int64_t kj = 0; kj < g.kw; kj++)                                                    \
                    for (int64_t oi = 0; oi < g.oh; oi++, in += g.ow) {                                  \
                        int64_t ii = oi * g.sh - g.ph + ki * g.dh;                                       \
                        if (ii < 0 || ii >= g.h) continue;                                               \
                        for (int64_t oj = 0; oj < g.ow; oj++) {                                          \
                            int64_t jj = oj * g.sw - g.pw + kj * g.dw;                                   \
                            if (jj >= 0 && jj < g.w) img[ii * g.w + jj] += in[oj];                       \
                        }                                                                                \
                    }                                                                                    \
        }                                                                                                \
    } while (0)

static kiln_status im2col(kiln_tensor *node, const kiln_exec *ex) {
    geom g = geom_of(node, node);
    if (node->dtype == KILN_F32) IM2COL_BODY(float);
    else if (node->dtype == KILN_F64) IM2COL_BODY(double);
    else return kiln__errs(KILN_ERR_UNSUPPORTED, "im2col: no %s kernel", kiln_dtype_name(node->dtype));
    return KILN_OK;
}

static kiln_status col2im(kiln_tensor *node, const kiln_exec *ex) {
    geom g = geom_of(node, node->src[0]);
    if (node->dtype == KILN_F32) COL2IM_BODY(float);
    else if (node->dtype == KILN_F64) COL2IM_BODY(double);
    else return kiln__errs(KILN_ERR_UNSUPPORTED, "col2im: no %s kernel", kiln_dtype_name(node->dtype));
    return KILN_OK;
}

void kiln__cpu_register_conv(kiln_cpu_kernel *tab) {
    tab[KILN_OP_IM2COL] = im2col;
    tab[KILN_OP_COL2IM] = col2im;
}
