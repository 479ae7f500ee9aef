/* dynamic_map.c — the dynamic quantization maps of bitsandbytes' 8-bit
 * optimizers, nearest-code search and block-wise (256) quantization; see
 * dynamic_map.h for the format and the rules followed.
 */
#include "dynamic_map.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
uint8_t kiln__dynamic_code(const float map[256], float x) {
    int p = 127;
    for (int step = 64; step > 0; step >>= 1) p += x > map[p] ? step : -step;
    if (x > map[p]) return (uint8_t)(x > (map[p + 1] + map[p]) * 0.5f ? p + 1 : p);
    if (p == 0) return 0;
    return (uint8_t)(x < (map[p - 1] + map[p]) * 0.5f ? p - 1 : p);
}

/* The same answer as a count: code(x) = #{k : x >= t[k]} over 255 thresholds,
 * t[k] the f32 midpoint of map[k], map[k+1] where a tie goes up (odd k, the
 * even index being k+1) and the next float above it where a tie stays
 * (even k). Counting with eight branch-free halving steps is several times
 * faster than bitsandbytes' data-dependent branches. NaN compares false:
 * code 0. */
static void code_thresholds(const float *map, float t[255]) {
    for (int k = 0; k < 255; k++) {
        float mid = (map[k + 1] + map[k]) * 0.5f;
        t[k] = k % 2 ? mid : nextafterf(mid, INFINITY);
    }
}

static inline int code_by_count(const float *t, float x) {
    int p = 0;
    for (int step = 128; step > 0; step >>= 1) p += (x >= t[p + step - 1]) * step;
    return p;
}

/* absmax of one block; fmaxf skips NaN */
static float block_absmax(const float *x, int64_t len) {
    float amax = 0.0f;
    for (int64_t i = 0; i < len; i++) amax = fmaxf(amax, fabsf(x[i]));
    return amax;
}

void kiln__quantize_blockwise(const float *x, int64_t n, const float map[256], uint8_t *codes, float *absmax) {
    if (n <= 0) return;
    float t[255];
    code_thresholds(map, t);
    const uint8_t zero_code = (uint8_t)code_by_count(t, 0.0f);
    for (int64_t b0 = 0, blk = 0; b0 < n; b0 += KILN__QBLOCK, blk++) {
        int64_t len = n - b0 < KILN__QBLOCK ? n - b0 : KILN__QBLOCK;
        const float *xb = x + b0;
        uint8_t *qb = codes + b0;
        float amax = absmax[blk] = block_absmax(xb, len);
        if (amax == 0.0f) {
            memset(qb, zero_code, (size_t)len);
            continue;
        }
        for (int64_t i = 0; i < len; i++) qb[i] = (uint8_t)code_by_count(t, xb[i] / amax);
    }
}

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The floats sharing the top 16 bits (sign, exponent, 7 mantissa bits) form
 * an interval; start[sign][key] counts the thresholds at or below its low
 * end, and `extra` is the most thresholds any interval holds past that. */
void kiln__qcoder_init(kiln__qcoder *c, const float map[256]) {
    memcpy(c->map, map, sizeof c->map);
    code_thresholds(map, c->thr);
    c->thr[255] = INFINITY; /* the extra steps may look one past the last */
    int extra = 0;
    for (int sign = 0; sign < 2; sign++)
        for (uint32_t key = 0; key < KILN__QKEYS; key++) {
            float a = bits_float((uint32_t)sign << 31 | key << 16);
            float b = bits_float((uint32_t)sign << 31 | key << 16 | 0xffff);
            float lo = sign ? b : a, hi = sign ? a : b;
            int c_lo = code_by_count(c->thr, lo), c_hi = code_by_count(c->thr, hi);
            c->start[sign][key] = (uint8_t)c_lo;
            if (c_hi - c_lo > extra) extra = c_hi - c_lo;
        }
    c->extra = extra;
    c->zero_code = (uint8_t)code_by_count(c->thr, 0.0f);
}

static inline int code_by_table(const kiln__qcoder *c, float x) {
    uint32_t u = float_bits(x), key = (u & 0x7fffffffu) >> 16;
    if (key >= KILN__QKEYS) return code_by_count(c->thr, x); /* |x| > 1, Inf, NaN */
    int p = c->start[u >> 31][key];
    for (int j = 0; j < c->extra; j++) p += x >= c->thr[p];
    return p;
}

uint8_t kiln__qcoder_code(const kiln__qcoder *c, float x) { return (uint8_t)code_by_table(c, x); }

void kiln__quantize_blockwise_coder(const float *x, int64_t n, const kiln__qcoder *c, uint8_t *codes,
                                    float *absmax) {
    for (int64_t b0 = 0, blk = 0; b0 < n; b0 += KILN__QBLOCK, blk++) {
        int64_t len = n - b0 < KILN__QBLOCK ? n - b0 : KILN__QBLOCK;
        const float *xb = x + b0;
        uint8_t *qb = codes + b0;
        float amax = absmax[blk] = block_absmax(xb, len);
        if (amax == 0.0f) {
            memset(qb, c->zero_code, (size_t)len);
            continue;
        }
        for (int64_t i = 0; i < len; i++) qb[i] = (uint8_t)code_by_table(c, xb[i] / amax);
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
