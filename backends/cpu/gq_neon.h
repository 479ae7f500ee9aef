/* gq_neon.h — one 32-element chunk of a GQ block (quant/quant.h) decoded on
 * ARM64 Advanced SIMD: decode16(c, bits, h) gives the codes of elements
 * 16 h .. 16 h + 15 as bytes (shared by the dequantizer and the fused
 * matmul). */
#ifndef KILN_GQ_NEON_H
#define KILN_GQ_NEON_H

#include "../../quant/quant.h"

#include <arm_neon.h>

static inline uint8x16_t kiln__gq_decode16(const uint8_t *c, int bits, int h) {
    if (bits == 4) {
        const uint8x16_t v = vld1q_u8(c);
        return h ? vshrq_n_u8(v, 4) : vandq_u8(v, vdupq_n_u8(0x0f));
    }
    const uint8x8_t p = vld1_u8(c), m3 = vdup_n_u8(3);
    uint8x16_t q = h ? vcombine_u8(vand_u8(vshr_n_u8(p, 4), m3), vshr_n_u8(p, 6))
                     : vcombine_u8(vand_u8(p, m3), vand_u8(vshr_n_u8(p, 2), m3));
    if (bits == 3) { /* bit 2: bit j % 8 of byte 8 + j / 8 */
        static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
        const uint8x16_t b = vcombine_u8(vdup_n_u8(c[8 + 2 * h]), vdup_n_u8(c[9 + 2 * h]));
        q = vorrq_u8(q, vandq_u8(vtstq_u8(b, vld1q_u8(bit)), vdupq_n_u8(4)));
    }
    return q;
}

#endif
