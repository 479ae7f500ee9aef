/* dequant.c — dequantize rows with the best kernel the CPU caps allow:
 * the AVX-512, AVX2 or NEON variants (dequant_avx512.c, dequant_avx2.c,
 * dequant_neon.c), else
 * the scalar references. Every variant equals the reference bit for bit
 * (each value is one f32 product of the same two factors). */
#include "quant.h"

#include "../backends/cpu/cpu_features.h"

static const kiln__dequant_kernels *kernels(void) {
    const kiln_cpu_caps *c = kiln__cpu_caps();
    if (kiln__cpu_avx512(c) && kiln__dequant_kernels_avx512()) return kiln__dequant_kernels_avx512();
    if (kiln__cpu_avx2(c) && kiln__dequant_kernels_avx2()) return kiln__dequant_kernels_avx2();
    if (kiln__cpu_neon(c) && kiln__dequant_kernels_neon()) return kiln__dequant_kernels_neon();
    return NULL;
}

static kiln__gq_dequant_fn *gq_kernel(void) {
    const kiln_cpu_caps *c = kiln__cpu_caps();
    if (kiln__cpu_avx512(c) && kiln__gq_dequant_avx512()) return kiln__gq_dequant_avx512();
    if (kiln__cpu_avx2(c) && kiln__gq_dequant_avx2()) return kiln__gq_dequant_avx2();
    if (kiln__cpu_neon(c) && kiln__gq_dequant_neon()) return kiln__gq_dequant_neon();
    return NULL;
}

void kiln__dequantize_row(kiln_dtype t, const void *blocks, float *y, int64_t n) {
    const kiln__dequant_kernels *k = kernels();
    switch (t) {
    case KILN_Q8_0:
        (k ? k->q8_0 : kiln__dequantize_q8_0_ref)(blocks, y, n);
        return;
    case KILN_Q4_0:
        (k ? k->q4_0 : kiln__dequantize_q4_0_ref)(blocks, y, n);
        return;
    case KILN_NF4:
        if (!k) {
            kiln__dequantize_nf4_ref(blocks, y, n);
            return;
        }
        for (int64_t b = 0; b < n / KILN_QKNF4; b++) {
            const kiln_block_nf4 *x = (const kiln_block_nf4 *)blocks + b;
            k->nf4_codes(x->codes, &x->absmax, 1, y + b * KILN_QKNF4);
        }
        return;
    case KILN_NF4_DQ:
        if (!k) {
            kiln__dequantize_nf4_dq_ref(blocks, y, n);
            return;
        }
        for (int64_t s = 0; s < n / KILN_QKNF4_DQ; s++) {
            const kiln_block_nf4_dq *x = (const kiln_block_nf4_dq *)blocks + s;
            float absmax[KILN_NF4_DQ_GROUP];
            kiln__nf4_dq_absmax(x, absmax);
            k->nf4_codes(x->codes, absmax, KILN_NF4_DQ_GROUP, y + s * KILN_QKNF4_DQ);
        }
        return;
    default:
        if (kiln__is_gq(t)) {
            kiln__gq_dequant_fn *f = gq_kernel();
            if (f) f(blocks, kiln__gq_bits(t), kiln__gq_group(t), y, n / kiln__gq_group(t));
            else kiln__dequantize_gq_ref(t, blocks, y, n);
            return;
        }
        kiln__types[t].to_f32(blocks, y, n); /* plain types */
    }
}
