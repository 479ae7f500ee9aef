/* qmatmul_kq.c — the choice of the K types' and IQ4_XS's x86 kernels
 * (qmatmul_kq.h), and of the Q8_K quantizer (x86's or NEON's), by the
 * CPU's caps in force, highest level first. */
#include "qmatmul_kq.h"

#include "../../quant/quant.h"
#include "cpu_features.h"

static const kiln_kq_kernels *kernels(void) {
    const kiln_cpu_caps *c = kiln__cpu_caps();
    const kiln_kq_kernels *k = NULL;
    if (kiln__cpu_avx512vnni(c)) k = kiln__kq_kernels_avx512vnni();
    if (!k && kiln__cpu_avxvnni(c)) k = kiln__kq_kernels_avxvnni();
    if (!k && kiln__cpu_avx512(c)) k = kiln__kq_kernels_avx512();
    if (!k && kiln__cpu_avx2(c)) k = kiln__kq_kernels_avx2();
    return k;
}

kiln_from_f32_fn *kiln__quantize_q8_K_kernel(void) {
    const kiln_kq_kernels *k = kernels();
    if (k) return k->quantize_q8_K;
    return kiln__cpu_neon(kiln__cpu_caps()) ? kiln__quantize_q8_K_neon() : NULL;
}

void kiln__quantize_q8_K(const float *x, void *blocks, int64_t n) {
    kiln_from_f32_fn *q = kiln__quantize_q8_K_kernel();
    (q ? q : kiln__quantize_q8_K_ref)(x, blocks, n);
}

kiln_qmm_dot_ggml *kiln__qmm_kq_kernel(kiln_dtype t) {
    const kiln_kq_kernels *k = kernels();
    if (!k) return NULL;
    switch (t) {
    case KILN_Q4_K: return k->q4_K;
    case KILN_Q5_K: return k->q5_K;
    case KILN_Q6_K: return k->q6_K;
    case KILN_IQ4_XS: return k->iq4_xs;
    case KILN_Q2_K: return k->q2_K;
    case KILN_Q3_K: return k->q3_K;
    default: return NULL;
    }
}

kiln_qmm_dot_ggml_rows *kiln__qmm_kq_rows_kernel(kiln_dtype t) {
    const kiln_kq_kernels *k = kernels();
    if (!k) return NULL;
    switch (t) {
    case KILN_Q4_K: return k->q4_K_rows;
    case KILN_Q5_K: return k->q5_K_rows;
    case KILN_Q6_K: return k->q6_K_rows;
    case KILN_IQ4_XS: return k->iq4_xs_rows;
    case KILN_Q2_K: return k->q2_K_rows;
    case KILN_Q3_K: return k->q3_K_rows;
    default: return NULL;
    }
}
