/* conv_simd.h — SIMD variants of conv.c's kernels (x86-64 AVX-512,
 * conv_avx512.c), chosen at run time by kiln__cpu_caps(); each matches its
 * portable loop in conv.c bit for bit. */
#ifndef KILN_CPU_CONV_SIMD_H
#define KILN_CPU_CONV_SIMD_H

#include <stdint.h>

/* One [2 oh (+1), w] plane -> [oh, ow] of 2x2 stride-2 maxima (w >= 2 ow);
 * a NaN wins. */
void kiln__pool2x2_f32_avx512(const float *img, float *out, int64_t oh, int64_t ow, int64_t w);
/* Its backward: each window's gy shared among its taps equal to y; assigns
 * the 2 oh x 2 ow pixels the windows cover (the rest are left alone). */
void kiln__pool2x2_grad_f32_avx512(const float *img, const float *y, const float *gy, float *gimg, int64_t oh,
                                   int64_t ow, int64_t w);

#endif
