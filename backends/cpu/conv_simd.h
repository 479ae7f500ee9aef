/* conv_simd.h — SIMD variants of conv.c's kernels (x86-64 AVX-512,
 * conv_avx512.c), chosen at run time by kiln__cpu_caps(); each matches its
 * portable loop in conv.c bit for bit. */
#ifndef KILN_CPU_CONV_SIMD_H
#define KILN_CPU_CONV_SIMD_H

#include <stdbool.h>
#include <stdint.h>

/* One [2 oh (+1), w] plane -> [oh, ow] of 2x2 stride-2 maxima (w >= 2 ow);
 * a NaN wins. */
void kiln__pool2x2_f32_avx512(const float *img, float *out, int64_t oh, int64_t ow, int64_t w);
/* Its backward: each window's gy shared among its taps equal to y; assigns
 * the 2 oh x 2 ow pixels the windows cover (the rest are left alone). */
void kiln__pool2x2_grad_f32_avx512(const float *img, const float *y, const float *gy, float *gimg, int64_t oh,
                                   int64_t ow, int64_t w);

/* The geometry of conv.c's kernels: kernel, stride, padding, dilation, the
 * image H x W and the cols grid OH x OW. */
typedef struct kiln_conv_geom {
    int64_t kh, kw, sh, sw, ph, pw, dh, dw, h, w, oh, ow;
} kiln_conv_geom;

/* The output columns oj in [*lo, *hi) whose tap jj = oj*s - p + off lies
 * inside [0, w): the rest read padding. */
static inline void kiln__conv_in_range(int64_t ow, int64_t s, int64_t p, int64_t off, int64_t w, int64_t *lo,
                                       int64_t *hi) {
    int64_t base = off - p; /* jj = oj*s + base */
    int64_t l = base >= 0 ? 0 : (-base + s - 1) / s;
    int64_t h = w - base <= 0 ? 0 : (w - base + s - 1) / s;
    if (h > ow) h = ow;
    if (l > h) l = h;
    *lo = l, *hi = h;
}

/* conv_tiled.c's tile columns cols[kk len + i] (len = p1 - p0) for rows
 * kk in [r0, r1) of K = c kh kw: output pixel p0 + i's tap kk of x [N,
 * c_img, H, W], 0 where it reads padding; stride 1 or 2 only. */
void kiln__conv_tile_rows_f32_avx512(const float *x, int64_t c_img, const kiln_conv_geom *g, int64_t p0, int64_t p1,
                                     int64_t r0, int64_t r1, float *cols);
/* Its inverse for the input gradient: gx [N, c_img, H, W] += each column's
 * value at its tap, rows kk in [r0, r1) in order (stride 1 or 2). */
void kiln__conv_tile_add_f32_avx512(float *gx, int64_t c_img, const kiln_conv_geom *g, int64_t p0, int64_t p1,
                                    int64_t r0, int64_t r1, const float *cols);

/* col2im of one image plane at stride 1 (g->sh == g->sw == 1): tap (ki,
 * kj)'s OH x OW grid at base + (ki kw + kj) tap_stride; writes every pixel
 * of img (no zeroing needed). */
void kiln__col2im_plane_s1_f32_avx512(const float *base, int64_t tap_stride, float *img, const kiln_conv_geom *g);

#endif
