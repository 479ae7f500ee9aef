/* nf4.c — NF4, QLoRA's 4-bit NormalFloat as bitsandbytes stores it
 * (kQuantizeBlockwise / dQuantizeNF4 / dDequantizeNF4 in csrc/kernels.cu):
 * blocks of 64, absmax = max |x| over the block, each x times the f32
 * reciprocal 1 / absmax goes to the nearest table value by the midpoints
 * of the sorted table, a value exactly on a midpoint to the lower code
 * (bitsandbytes' decision tree compares x > midpoint), NaN to code 0. Two
 * codes per byte, the first element in the high nibble. Dequantized:
 * table[code] * absmax.
 *
 * One deviation: an all-zero block (absmax 0) stores code 7 (0.0), so it
 * dequantizes to +0; bitsandbytes computes 0 * (1 / 0) = NaN there, stores
 * code 0 (-1.0) and dequantizes to -1.0 * 0 = -0. Both are zero.
 *
 * NF4's and NF4_DQ's rows of the traits table are registered here, at load. */
#include "quant.h"

#include <math.h>

const float kiln__nf4_table[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
    -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
    0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
    0.7229568362236023f, 1.0f,
};

/* bitsandbytes' thresholds: the midpoints of neighbouring table values. */
const float kiln__nf4_mids[15] = {
    -0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f, -0.33967943489551544f,
    -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,
    0.1202552504837513f, 0.2035212516784668f, 0.2920137718319893f, 0.3893125355243683f,
    0.5016634166240692f, 0.6427869200706482f, 0.8614784181118011f,
};

/* The count of midpoints below x: bitsandbytes' tree flattened (the same
 * code for every x, NaN included, since the tree is monotone). */
uint8_t kiln__nf4_code(float x) {
    uint8_t c = 0;
    for (int k = 0; k < 15; k++) c += x > kiln__nf4_mids[k];
    return c;
}

/* One block of 64: the codes of x with absmax a (already measured). */
static void nf4_block(const float *x, float a, uint8_t *codes) {
    if (a == 0.0f) { /* all zeros (NaNs, which fmaxf skips, too) */
        memset(codes, 0x77, KILN_QKNF4 / 2);
        return;
    }
    const float r = 1.0f / a;
    for (int j = 0; j < KILN_QKNF4 / 2; j++)
        codes[j] = (uint8_t)(kiln__nf4_code(x[2 * j] * r) << 4 | kiln__nf4_code(x[2 * j + 1] * r));
}

static float block_absmax(const float *x) {
    float a = 0.0f;
    for (int j = 0; j < KILN_QKNF4; j++) a = fmaxf(a, fabsf(x[j]));
    return a;
}

void kiln__quantize_nf4_ref(const float *x, void *blocks, int64_t n) {
    kiln_block_nf4 *y = blocks;
    for (int64_t b = 0; b < n / KILN_QKNF4; b++, x += KILN_QKNF4) {
        y[b].absmax = block_absmax(x);
        nf4_block(x, y[b].absmax, y[b].codes);
    }
}

static void nf4_codes_ref(const uint8_t *codes, float a, float *y) {
    for (int j = 0; j < KILN_QKNF4 / 2; j++) {
        y[2 * j] = kiln__nf4_table[codes[j] >> 4] * a;
        y[2 * j + 1] = kiln__nf4_table[codes[j] & 0x0f] * a;
    }
}

void kiln__dequantize_nf4_ref(const void *blocks, float *y, int64_t n) {
    const kiln_block_nf4 *x = blocks;
    for (int64_t b = 0; b < n / KILN_QKNF4; b++, y += KILN_QKNF4) nf4_codes_ref(x[b].codes, x[b].absmax, y);
}

/* ---- double quantization ---- */

#include "dynamic_map.h"

#include <pthread.h>

static float signed_map[256];
static void map_init(void) { kiln__dynamic_map(true, signed_map); }
static const float *dq_map(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, map_init);
    return signed_map;
}

/* bitsandbytes' quantize_4bit(compress_statistics=True): the codes use the
 * exact absmax; the absmax values, minus their mean, are then quantized
 * block-wise (256) with the signed dynamic map. The mean here is over the
 * super-block (bitsandbytes: over the tensor), summed in double. */
void kiln__quantize_nf4_dq_ref(const float *x, void *blocks, int64_t n) {
    kiln_block_nf4_dq *y = blocks;
    const float *map = dq_map();
    for (int64_t s = 0; s < n / KILN_QKNF4_DQ; s++) {
        float absmax[KILN_NF4_DQ_GROUP];
        double sum = 0;
        for (int b = 0; b < KILN_NF4_DQ_GROUP; b++, x += KILN_QKNF4) {
            absmax[b] = block_absmax(x);
            nf4_block(x, absmax[b], y[s].codes + b * (KILN_QKNF4 / 2));
            sum += absmax[b];
        }
        y[s].offset = (float)(sum / KILN_NF4_DQ_GROUP);
        for (int b = 0; b < KILN_NF4_DQ_GROUP; b++) absmax[b] -= y[s].offset;
        kiln__quantize_blockwise(absmax, KILN_NF4_DQ_GROUP, map, y[s].qabsmax, &y[s].absmax2);
    }
}

void kiln__nf4_dq_absmax(const kiln_block_nf4_dq *b, float absmax[KILN_NF4_DQ_GROUP]) {
    const float *map = dq_map();
    for (int k = 0; k < KILN_NF4_DQ_GROUP; k++) absmax[k] = map[b->qabsmax[k]] * b->absmax2 + b->offset;
}

void kiln__dequantize_nf4_dq_ref(const void *blocks, float *y, int64_t n) {
    const kiln_block_nf4_dq *x = blocks;
    for (int64_t s = 0; s < n / KILN_QKNF4_DQ; s++) {
        float absmax[KILN_NF4_DQ_GROUP];
        kiln__nf4_dq_absmax(&x[s], absmax);
        for (int b = 0; b < KILN_NF4_DQ_GROUP; b++, y += KILN_QKNF4)
            nf4_codes_ref(x[s].codes + b * (KILN_QKNF4 / 2), absmax[b], y);
    }
}

float kiln__nf4_dq_block_absmax(const kiln_block_nf4_dq *b, int k) {
    return dq_map()[b->qabsmax[k]] * b->absmax2 + b->offset;
}

/* ---- the dtypes ---- */

/* Element i of a block's codes: 2j in the high nibble of byte j. */
static int nibble(const uint8_t *codes, int i) { return i % 2 ? codes[i / 2] & 0x0f : codes[i / 2] >> 4; }

static double get_nf4(const void *b, int64_t i) {
    const kiln_block_nf4 *x = (const kiln_block_nf4 *)b + i / KILN_QKNF4;
    return kiln__nf4_table[nibble(x->codes, (int)(i % KILN_QKNF4))] * x->absmax;
}

static double get_nf4_dq(const void *b, int64_t i) {
    const kiln_block_nf4_dq *x = (const kiln_block_nf4_dq *)b + i / KILN_QKNF4_DQ;
    int j = (int)(i % KILN_QKNF4_DQ);
    return kiln__nf4_table[nibble(x->codes, j)] * kiln__nf4_dq_block_absmax(x, j / KILN_QKNF4);
}

__attribute__((constructor)) static void register_nf4(void) {
    kiln__dtype_register(KILN_NF4, &(kiln_type_traits){.name = "nf4", .size = sizeof(kiln_block_nf4),
                                                       .blck = KILN_QKNF4, .row_blck = KILN_QKNF4, .get = get_nf4,
                                                       .to_f32 = kiln__dequantize_nf4_ref,
                                                       .from_f32 = kiln__quantize_nf4_ref});
    /* a super-block may span rows: rows need only whole NF4 blocks */
    kiln__dtype_register(KILN_NF4_DQ, &(kiln_type_traits){.name = "nf4_dq", .size = sizeof(kiln_block_nf4_dq),
                                                          .blck = KILN_QKNF4_DQ, .row_blck = KILN_QKNF4,
                                                          .get = get_nf4_dq, .to_f32 = kiln__dequantize_nf4_dq_ref,
                                                          .from_f32 = kiln__quantize_nf4_dq_ref});
}
