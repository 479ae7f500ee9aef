/* gptq.h — inside kiln: the GPTQ layout's quantizer (GPTQ's reference
 * Quantizer, see include/kiln.h), shared by RTN, GPTQ and the GQ dtypes
 * that hold their output (quant/gq.c, quant/gq_pack.c). */
#ifndef KILN_QUANT_GPTQ_H
#define KILN_QUANT_GPTQ_H

#include "internal.h"

#include <math.h>

/* Check cfg for a [rows, cols] layer (who names the caller in errors). */
kiln_status kiln__gptq_check(const char *who, int64_t rows, int64_t cols, const kiln_gptq_config *cfg);

/* A result with every array allocated, g_idx = k / group_size and perm the
 * identity; NULL (KILN_ERR_OOM) on failure. */
kiln_gptq_result *kiln__gptq_result_new(int64_t rows, int64_t cols, const kiln_gptq_config *cfg);

/* Scale and zero of one group of n values x[0], x[stride], ...: the
 * reference's Quantizer.find_params on one row. */
void kiln__gptq_fit(const float *x, int64_t n, int64_t stride, int bits, bool sym, float *scale, uint8_t *zero);

/* q = clamp(round(x / scale) + zero, 0, maxq), ties to even */
static inline uint8_t kiln__gptq_code(float x, float scale, uint8_t zero, int maxq) {
    float q = nearbyintf(x / scale) + (float)zero;
    return (uint8_t)(q < 0.0f ? 0.0f : q > (float)maxq ? (float)maxq : q);
}

static inline float kiln__gptq_dequant(uint8_t q, float scale, uint8_t zero) {
    return scale * (float)((int)q - (int)zero);
}

#endif
