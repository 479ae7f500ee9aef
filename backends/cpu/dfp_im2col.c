/* dfp_im2col.c — im2col on int16 codes (gemm_dfp.h) for kiln_dfp_conv2d:
 * the columns of a convolution gathered from the image's codes, half the
 * bytes of the f32 gather and none of the columns' quantization. Planes
 * (n, c) are independent and walked n fastest, as the f32 kernel does, so
 * consecutive planes write consecutive OH x OW blocks. */
#include "gemm_dfp.h"
#include "pool.h"

#include <string.h>

typedef struct im2col_job {
    const int16_t *x;
    int16_t *cols;
    int64_t n, c, h, w, oh, ow;
    const int64_t *g;
} im2col_job;

static void im2col_planes(void *arg, int64_t q0, int64_t q1, int tid) {
    const im2col_job *j = arg;
    const int16_t *x = j->x;
    int16_t *cols = j->cols;
    const int64_t *g = j->g, n = j->n, c = j->c, h = j->h, w = j->w, oh = j->oh, ow = j->ow;
    const int64_t kh = g[0], kw = g[1], sh = g[2], sw = g[3], ph = g[4], pw = g[5], dh = g[6], dw = g[7];
    const int64_t l = oh * ow, tap_stride = n * l;
    (void)tid;
    for (int64_t q = q0; q < q1; q++) {
        const int64_t ni = q % n, ci = q / n;
        const int16_t *img = x + (ni * c + ci) * h * w;
        int16_t *base = cols + (ci * kh * kw * n + ni) * l;
        for (int64_t ki = 0; ki < kh; ki++)
            for (int64_t kj = 0; kj < kw; kj++) {
                int16_t *out = base + (ki * kw + kj) * tap_stride;
                /* output columns [lo, hi) whose tap lies in the image */
                int64_t off = kj * dw - pw;
                int64_t lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
                int64_t hi = w - off <= 0 ? 0 : (w - off + sw - 1) / sw;
                if (hi > ow) hi = ow;
                if (lo > hi) lo = hi;
                for (int64_t oi = 0; oi < oh; oi++, out += ow) {
                    int64_t ii = oi * sh - ph + ki * dh;
                    if (ii < 0 || ii >= h) {
                        memset(out, 0, (size_t)ow * 2);
                        continue;
                    }
                    const int16_t *src = img + ii * w + off;
                    for (int64_t oj = 0; oj < lo; oj++) out[oj] = 0;
                    if (sw == 1) {
#pragma omp simd
                        for (int64_t oj = lo; oj < hi; oj++) out[oj] = src[oj];
                    } else
                        for (int64_t oj = lo; oj < hi; oj++) out[oj] = src[oj * sw];
                    for (int64_t oj = hi; oj < ow; oj++) out[oj] = 0;
                }
            }
    }
}

void kiln__dfp_im2col_cn(const int16_t *x, int64_t n, int64_t c, int64_t h, int64_t w, const int64_t *g, int64_t oh,
                         int64_t ow, int16_t *cols, int n_threads) {
    im2col_job j = {x, cols, n, c, h, w, oh, ow, g};
    const int64_t planes = n * c;
    kiln__pool_for(planes, 1, planes * g[0] * g[1] * oh * ow > 65536 ? n_threads : 1, im2col_planes, &j);
}
