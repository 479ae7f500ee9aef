/* dynamic_map.c — the dynamic quantization maps of bitsandbytes' 8-bit
 * optimizers, nearest-code search and block-wise (256) quantization; see
 * dynamic_map.h for the format and the rules followed.
 */
#include "dynamic_map.h"

#include <math.h>
#include <stdlib.h>

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Midpoints of torch.linspace(0.1, 1, steps) in f32: torch computes the step
 * in f32 and fills the first half from the start, the second from the end. */
static void linspace_means(int64_t steps, float *means) {
    const float start = 0.1f, end = 1.0f;
    const float step = (end - start) / (float)(steps - 1);
    float prev = 0.0f;
    for (int64_t k = 0; k < steps; k++) {
        float b = k < steps / 2 ? start + step * (float)k : end - step * (float)(steps - 1 - k);
        if (k > 0) means[k - 1] = (prev + b) / 2.0f;
        prev = b;
    }
}

void kiln__dynamic_map(bool is_signed, float out[256]) {
    /* 10^(i-6) as Python computes 10 ** (i - 6), then rounded to f32 as torch
     * does when it multiplies an f32 tensor by a Python scalar. */
    static const double decade[7] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0};
    float means[128];
    int n = 0;
    for (int i = 0; i < 7; i++) {
        int count = is_signed ? 1 << i : 1 << (i + 1);
        linspace_means(count + 1, means);
        float scale = (float)decade[i];
        for (int k = 0; k < count; k++) {
            out[n++] = scale * means[k];
            if (is_signed) out[n++] = -scale * means[k];
        }
    }
    out[n++] = 0.0f;
    out[n++] = 1.0f;
    /* n == 256 for both maps */
    qsort(out, (size_t)n, sizeof(float), cmp_float);
}

/* bitsandbytes' search (csrc/kernels.cu, dQuantize / quantize_2D): seven
 * halving steps from index 127 always end on an even index p; then the f32
 * midpoint with the neighbour on x's side decides, a tie keeping p. */
static inline int nearest_code(const float *map, float x) {
    int p = 127;
    for (int step = 64; step > 0; step >>= 1) p += x > map[p] ? step : -step;
    if (x > map[p]) return x > (map[p + 1] + map[p]) * 0.5f ? p + 1 : p;
    if (p == 0) return 0;
    return x < (map[p - 1] + map[p]) * 0.5f ? p - 1 : p;
}

uint8_t kiln__dynamic_code(const float map[256], float x) { return (uint8_t)nearest_code(map, x); }

void kiln__quantize_blockwise(const float *x, int64_t n, const float map[256], uint8_t *codes, float *absmax) {
    if (n <= 0) return;
    const uint8_t zero_code = (uint8_t)nearest_code(map, 0.0f);
    for (int64_t b0 = 0, blk = 0; b0 < n; b0 += KILN__QBLOCK, blk++) {
        int64_t len = n - b0 < KILN__QBLOCK ? n - b0 : KILN__QBLOCK;
        const float *xb = x + b0;
        uint8_t *qb = codes + b0;
        float amax = 0.0f;
        for (int64_t i = 0; i < len; i++) amax = fmaxf(amax, fabsf(xb[i]));
        absmax[blk] = amax;
        if (amax == 0.0f) {
            for (int64_t i = 0; i < len; i++) qb[i] = zero_code;
            continue;
        }
        for (int64_t i = 0; i < len; i++) qb[i] = (uint8_t)nearest_code(map, xb[i] / amax);
    }
}

void kiln__dequantize_blockwise(const uint8_t *codes, const float *absmax, int64_t n, const float map[256],
                                float *out) {
    for (int64_t b0 = 0, blk = 0; b0 < n; b0 += KILN__QBLOCK, blk++) {
        int64_t len = n - b0 < KILN__QBLOCK ? n - b0 : KILN__QBLOCK;
        float a = absmax[blk];
        for (int64_t i = 0; i < len; i++) out[b0 + i] = map[codes[b0 + i]] * a;
    }
}
