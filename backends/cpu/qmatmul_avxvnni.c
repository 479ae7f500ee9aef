/* qmatmul_avxvnni.c — Q8_0 / Q4_0 dot products of KILN_OP_QMATMUL
 * (qmatmul.h) with AVX-VNNI's VEX vpdpbusd on ymm, for CPUs that have it
 * with or without AVX-512 (Alder Lake has no AVX-512): AVX2's kernels
 * (qmatmul_x86.h, the reference's lanes) with one
 * vpdpbusd where AVX2 takes maddubs + madd, and their rows kernels
 * (qmatmul_rows_x86.h). NF4 and the quantizer of x are AVX2's (no byte
 * products in them). */
#include "qmatmul.h"

#if defined(__x86_64__) && defined(__AVXVNNI__)
#define QMM_NAME(x) x##_avxvnni
#define QMM_DOT32(u, s) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), (u), (s))
#define QMM_Q4_DOT(ul, xl, uh, xh)                                                                   \
    _mm256_sub_epi32(_mm256_dpbusd_avx_epi32(QMM_DOT32(ul, xl), (uh), (xh)),                          \
                     _mm256_dpbusd_avx_epi32(QMM_DOT32(_mm256_set1_epi8(8), xl), _mm256_set1_epi8(8), (xh)))
#include "qmatmul_x86.h"
#include "qmatmul_rows_x86.h"

#include <pthread.h>

static kiln_qmm_kernels avxvnni;

static void avxvnni_init(void) {
    const kiln_qmm_kernels *k = kiln__qmm_kernels_avx2();
    if (!k) return;
    avxvnni = (kiln_qmm_kernels){.q8_0 = dot_q8_0_avxvnni, .q4_0 = dot_q4_0_avxvnni, .nf4 = k->nf4,
                                 .quantize_x = k->quantize_x, .q8_0sr = dotr_q8_0_avxvnni,
                                 .q4_0sr = dotr_q4_0_avxvnni};
}

const kiln_qmm_kernels *kiln__qmm_kernels_avxvnni(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, avxvnni_init);
    return avxvnni.q8_0 ? &avxvnni : NULL;
}
#else
const kiln_qmm_kernels *kiln__qmm_kernels_avxvnni(void) { return NULL; }
#endif
