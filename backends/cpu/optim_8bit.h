/* optim_8bit.h — the 8-bit optimizers' CPU block kernels shared between
 * optim_8bit.c (portable scalar, dispatch) and optim_8bit_avx512.c: one
 * block of KILN__QBLOCK (256) elements at a time, the same results bit for
 * bit on every path (same f32 operations in the same order, no FMA). */
#ifndef KILN_CPU_OPTIM_8BIT_H
#define KILN_CPU_OPTIM_8BIT_H

#include "../../quant/dynamic_map.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct kiln__adam8_scalars {
    float decay, wd, b1, b2, one_b1, one_b2, neg_step, bc2s, eps;
    bool l2;
} kiln__adam8_scalars;

typedef struct kiln__lion8_scalars {
    float neg_lr, b1, b2, one_b1, one_b2, decay;
} kiln__lion8_scalars;

typedef struct kiln__sgd8_scalars {
    float lr, mom, keep, wd;
    bool nesterov, first;
} kiln__sgd8_scalars;

/* The vector kernels of one instruction set; NULL members where it has none. */
typedef struct kiln__q8_kernels {
    /* out[0..256) = map[q[i]] * absmax */
    void (*dequant256)(const uint8_t *q, float absmax, const float *map, float *out);
    /* codes and absmax of one full block, as kiln__quantize_blockwise_coder;
     * packed: c's kiln__q8_pack table, or NULL */
    void (*quant256)(const float *x, const kiln__qcoder *c, const uint32_t *packed, uint8_t *q, float *absmax);
    /* Adam's update of 256 elements on dequantized m, v (adam8_block's loop) */
    void (*adam256)(float *p, const float *g, float *m, float *v, const kiln__adam8_scalars *s);
    /* Lion's and SGD's updates of 256 elements on the dequantized state */
    void (*lion256)(float *p, const float *g, float *m, const kiln__lion8_scalars *s);
    void (*sgd256)(float *p, const float *g, float *buf, const kiln__sgd8_scalars *s);
} kiln__q8_kernels;

/* A coder with c->extra == 1 answers start + (x >= thr[start]), and within
 * the floats sharing x's top 16 bits that comparison is one of the low 16
 * bits: x >= thr[start] iff low' >= L, low' the low bits (complemented for
 * negative x, so that low' grows with x). kiln__q8_pack writes, per sign
 * and key, L << 8 | start (L in 0..65536), for one lookup per value instead
 * of two; false (and nothing written) when c->extra != 1. */
#define KILN__Q8_PACKED (2 * KILN__QKEYS)
bool kiln__q8_pack(const kiln__qcoder *c, uint32_t packed[KILN__Q8_PACKED]);

/* The AVX-512 kernels (NULL when the build or the CPU lacks them). */
const kiln__q8_kernels *kiln__q8_kernels_avx512(void);

#endif
