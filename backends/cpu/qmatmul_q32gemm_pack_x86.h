/* qmatmul_q32gemm_pack_x86.h — the panel packer of the blocks of 32's
 * integer GEMM (qmatmul_q32gemm.h), shared by qmatmul_kgemm_avx2.c,
 * _avxvnni.c and _avx512vnni.c: included once per file, so that its loops
 * are built with that file's flags. */
#include "qmatmul_q32gemm.h"

#include "../../quant/quant.h"

#include <string.h>

/* A block's codes made unsigned, u = q + off (qmatmul_q32gemm.h), in
 * element order: element j in qs[j]'s low nibble, j + 16 in its high one,
 * Q5's fifth bit j in bit j of qh; IQ4_NL's value + 128. */
static void q32gemm_codes(kiln_dtype t, const void *blk, uint8_t u[KILN_QK]) {
    const uint8_t *qs = t == KILN_Q4_1 ? ((const kiln_block_q4_1 *)blk)->qs
                      : t == KILN_Q5_0 ? ((const kiln_block_q5_0 *)blk)->qs
                      : t == KILN_Q5_1 ? ((const kiln_block_q5_1 *)blk)->qs
                                       : ((const kiln_block_iq4_nl *)blk)->qs;
    for (int j = 0; j < KILN_QK / 2; j++) u[j] = qs[j] & 0x0f, u[j + 16] = qs[j] >> 4;
    if (t == KILN_IQ4_NL) {
        for (int j = 0; j < KILN_QK; j++) u[j] = (uint8_t)(kiln__iq4nl_values[u[j]] + 128);
        return;
    }
    if (t == KILN_Q4_1) return;
    uint32_t h;
    memcpy(&h, t == KILN_Q5_0 ? ((const kiln_block_q5_0 *)blk)->qh : ((const kiln_block_q5_1 *)blk)->qh, 4);
    for (int j = 0; j < KILN_QK; j++) u[j] |= (uint8_t)(((h >> j) & 1) << 4);
}

static void q32gemm_pack(kiln_dtype t, const char *w, size_t wrow, int cols, int64_t nb, char *panel) {
    const int nc = KILN_KGEMM_NC;
    const size_t bs = kiln__types[t].size;
    const bool has_min = t == KILN_Q4_1 || t == KILN_Q5_1; /* d, m: the block's first two f16 */
    memset(panel, 0, (size_t)nb * KILN_Q32GEMM_BLOCK);
    for (int c = 0; c < cols; c++)
        for (int64_t b = 0; b < nb; b++) {
            char *p = panel + b * KILN_Q32GEMM_BLOCK;
            float *d = (float *)(p + 8 * nc * 4), *m = d + nc;
            const char *blk = w + (size_t)c * wrow + (size_t)b * bs;
            uint8_t u[KILN_QK];
            uint16_t h[2];
            q32gemm_codes(t, blk, u);
            for (int q = 0; q < 8; q++) memcpy(p + (q * nc + c) * 4, u + 4 * q, 4); /* quad q of column c */
            memcpy(h, blk, has_min ? 4 : 2);
            d[c] = kiln__f16_to_f32(h[0]), m[c] = has_min ? kiln__f16_to_f32(h[1]) : 0.0f;
        }
}
