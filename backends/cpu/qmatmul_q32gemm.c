/* qmatmul_q32gemm.c — the activations of the blocks of 32's integer GEMM
 * (qmatmul_q32gemm.h), quantized by the partner's reference coder as the
 * batch-1 driver (qmatmul_ggml.c) quantizes them. */
#include "qmatmul_q32gemm.h"

#include "../../quant/quant.h"

#include <string.h>

bool kiln__q32gemm_type(kiln_dtype t) {
    return t == KILN_Q4_1 || t == KILN_Q5_0 || t == KILN_Q5_1 || t == KILN_IQ4_NL;
}

void kiln__q32gemm_quantize(kiln_dtype t, const float *x, kiln_q32x *xa, int64_t k) {
    const kiln_dtype p = kiln__types[t].dot_type;
    const int32_t off = t == KILN_Q5_0 ? 16 : t == KILN_IQ4_NL ? 128 : 0;
    for (int64_t b = 0; b < k / KILN_QK; b++) {
        kiln_q32x *o = xa + b;
        if (p == KILN_Q8_1) {
            kiln_block_q8_1 a;
            kiln__types[p].from_f32(x + b * KILN_QK, &a, KILN_QK);
            memcpy(o->qs, a.qs, KILN_QK);
            o->d = kiln__f16_to_f32(a.d), o->s = kiln__f16_to_f32(a.s);
        } else {
            kiln_block_q8_0 a;
            kiln__types[p].from_f32(x + b * KILN_QK, &a, KILN_QK);
            memcpy(o->qs, a.qs, KILN_QK);
            o->d = kiln__f16_to_f32(a.d), o->s = 0.0f;
        }
        int32_t sum = 0;
        for (int e = 0; e < KILN_QK; e++) sum += o->qs[e];
        o->off = off * sum, o->pad = 0;
    }
}
