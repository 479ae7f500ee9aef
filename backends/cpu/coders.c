/* coders.c — the CPU's coders of the formats (coders.h): the dispatch to
 * the AVX-512, AVX2 or NEON dequantizers (dequant_*.c), else the scalar
 * references (every variant equals the reference bit for bit: each value is
 * one f32 product of the same two factors); the DFP loops' dispatch and
 * the threaded one-exponent quantizer; and, when the library loads, these
 * registered as the dtypes' preferred row coders. */
#include "coders.h"
#include "cpu_features.h"
#include "pool.h"
#include "qmatmul_kq.h"

#include <math.h>
#include <string.h>

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

const kiln__dfp_kernels *kiln__dfp_kernels_best(void) {
    const kiln_cpu_caps *c = kiln__cpu_caps();
    if (kiln__cpu_avx512(c) && kiln__dfp_kernels_avx512()) return kiln__dfp_kernels_avx512();
    if (kiln__cpu_avx2(c) && kiln__dfp_kernels_avx2()) return kiln__dfp_kernels_avx2();
    return kiln__dfp_kernels_scalar();
}

#define DFP_CHUNK (1 << 16) /* values per chunk of kiln__dfp_quantize */

/* One operand of kiln__dfp_quantize: the maximum's pass, then the codes'. */
typedef struct quantize_job {
    const kiln__dfp_kernels *k;
    const float *x;
    int64_t n;
    int16_t *q;
    uint32_t ab, mix; /* the maximum's bits (updated atomically) */
    float s;
    int lim;
    bool sr;
} quantize_job;

static void amax_chunks(void *arg, int64_t c0, int64_t c1, int tid) {
    quantize_job *j = arg;
    uint32_t ab = 0;
    (void)tid;
    for (int64_t c = c0; c < c1; c++) {
        uint32_t m = j->k->amax_bits(j->x + c * DFP_CHUNK, j->n - c * DFP_CHUNK < DFP_CHUNK ? j->n - c * DFP_CHUNK
                                                                                           : DFP_CHUNK);
        ab = m > ab ? m : ab;
    }
    /* a maximum: the same whatever the order */
    uint32_t cur = __atomic_load_n(&j->ab, __ATOMIC_RELAXED);
    while (ab > cur && !__atomic_compare_exchange_n(&j->ab, &cur, ab, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

static void round_chunks(void *arg, int64_t c0, int64_t c1, int tid) {
    const quantize_job *j = arg;
    (void)tid;
    for (int64_t c = c0; c < c1; c++)
        j->k->round(j->x + c * DFP_CHUNK, j->n - c * DFP_CHUNK < DFP_CHUNK ? j->n - c * DFP_CHUNK : DFP_CHUNK, j->s,
                    j->lim, j->q + c * DFP_CHUNK, j->sr, j->mix, (uint32_t)(c * DFP_CHUNK));
}

void kiln__dfp_quantize(const float *x, int64_t n, int bits, int16_t *q, int *e, int *qmax, bool sr,
                        uint64_t seed) {
    /* chunks of 64 Ki values, threaded when there are several: each value's
     * code depends only on it, the exponent and its index */
    const int64_t nc = (n + DFP_CHUNK - 1) / DFP_CHUNK;
    const int nt = nc > 1 ? kiln__threads() : 1; /* kiln_set_threads() */
    const int lim = (1 << (bits - 1)) - 1;
    quantize_job j = {kiln__dfp_kernels_best(), x, n, q, 0, kiln__dfp_seed_mix(seed), 1.0f, lim, sr};
    kiln__pool_for(nc, 1, nt, amax_chunks, &j);
    const int ex = kiln__dfp_exponent(j.ab, bits);
    j.s = kiln__dfp_pow2(-ex);
    kiln__pool_for(nc, 1, nt, round_chunks, &j);
    const float s = j.s;
    const uint32_t ab = j.ab;
    float amax;
    memcpy(&amax, &ab, 4);
    /* |q| <= ceil(|x| 2^-e) for either rounding: a bound without a pass */
    float cb = ceilf(amax * s);
    *e = ex;
    if (qmax) *qmax = cb == cb && cb < (float)lim ? (int)cb : lim;
}

/* ---- the dtypes' preferred coders ---- */

/* Only dtypes kiln__dequantize_row decodes itself: its default case goes
 * through the table, which would lead back here. */
#define ROW_DECODER(T, t) \
    static void to_f32_##t(const void *blocks, float *y, int64_t n) { kiln__dequantize_row(T, blocks, y, n); }
#define QUANT_DTYPES(X)                                                                                        \
    X(KILN_Q8_0, q8_0) X(KILN_Q4_0, q4_0) X(KILN_NF4, nf4) X(KILN_NF4_DQ, nf4_dq) X(KILN_GQ4_32, gq4_32)        \
    X(KILN_GQ4_64, gq4_64) X(KILN_GQ4_128, gq4_128) X(KILN_GQ3_32, gq3_32) X(KILN_GQ3_64, gq3_64)              \
    X(KILN_GQ3_128, gq3_128) X(KILN_GQ2_32, gq2_32) X(KILN_GQ2_64, gq2_64) X(KILN_GQ2_128, gq2_128)
QUANT_DTYPES(ROW_DECODER)

static void quantize_dfp16(const float *x, void *blocks, int64_t n) {
    kiln__quantize_dfp16_with(kiln__dfp_kernels_best(), x, blocks, n, false, 0);
}

/* Q8_0's and Q8_1's quantizers (the blocks of 32's activations): NEON's
 * where the caps in force have it, else the reference. */
#define NEON_QUANTIZER(t)                                                                      \
    static void quantize_##t(const float *x, void *blocks, int64_t n) {                        \
        kiln_from_f32_fn *q = kiln__cpu_neon(kiln__cpu_caps()) ? kiln__quantize_##t##_neon() : NULL; \
        (q ? q : kiln__quantize_##t##_ref)(x, blocks, n);                                      \
    }
NEON_QUANTIZER(q8_0)
NEON_QUANTIZER(q8_1)

/* DFP16's decoder is its reference: a loop the compiler vectorizes. */
__attribute__((constructor)) static void prefer_cpu_coders(void) {
#define PREFER_DECODER(T, t) kiln__dtype_prefer_coders(T, to_f32_##t, NULL);
    QUANT_DTYPES(PREFER_DECODER)
    kiln__dtype_prefer_coders(KILN_DFP16, NULL, quantize_dfp16);
    kiln__dtype_prefer_coders(KILN_Q8_K, NULL, kiln__quantize_q8_K); /* the K products' activations */
    if (kiln__quantize_q8_0_neon()) kiln__dtype_prefer_coders(KILN_Q8_0, NULL, quantize_q8_0);
    if (kiln__quantize_q8_1_neon()) kiln__dtype_prefer_coders(KILN_Q8_1, NULL, quantize_q8_1);
}
