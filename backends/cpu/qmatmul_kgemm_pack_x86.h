/* qmatmul_kgemm_pack_x86.h — the panel packer of the K types' integer
 * GEMM (qmatmul_kgemm.h), shared by qmatmul_kgemm_avx2.c, _avxvnni.c and
 * _avx512vnni.c: included once per file, so that its loops are built
 * (and vectorized) with that file's flags. */
#include "qmatmul_kgemm.h"

#include "../../quant/quant.h"

#include <immintrin.h>
#include <string.h>

/* A block's codes made unsigned, u = q + off (qmatmul_kgemm.h), in
 * element order: loops the compiler vectorizes with this file's flags,
 * IQ4_XS's table by pshufb. */
static void kgemm_codes(kiln_dtype t, const void *blk, uint8_t *u) {
    switch (t) {
    case KILN_Q4_K: case KILN_Q5_K: { /* runs of 64: low nibbles, high ones; Q5_K's bit e / 32 of qh[e % 32] */
        const uint8_t *qs = t == KILN_Q4_K ? ((const kiln_block_q4_K *)blk)->qs : ((const kiln_block_q5_K *)blk)->qs;
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++)
                u[64 * j + l] = qs[32 * j + l] & 0x0f, u[64 * j + 32 + l] = qs[32 * j + l] >> 4;
        if (t == KILN_Q4_K) return;
        const uint8_t *qh = ((const kiln_block_q5_K *)blk)->qh;
        for (int j = 0; j < 8; j++)
            for (int l = 0; l < 32; l++) u[32 * j + l] |= (uint8_t)(((qh[l] >> j) & 1) << 4);
        return;
    }
    case KILN_Q6_K: { /* q + 32: element 128 h + 32 r + l from ql's nibble and qh's bits 2r */
        const kiln_block_q6_K *b = blk;
        for (int h = 0; h < 2; h++)
            for (int r = 0; r < 4; r++)
                for (int l = 0; l < 32; l++)
                    u[128 * h + 32 * r + l] = (uint8_t)(((b->ql[64 * h + l + 32 * (r & 1)] >> (4 * (r / 2))) & 0x0f) |
                                                        ((b->qh[32 * h + l] >> (2 * r)) & 3) << 4);
        return;
    }
    case KILN_Q2_K: case KILN_Q3_K: { /* two bits; Q3_K: + 4 where hmask's bit e / 32 is set */
        const uint8_t *qs = t == KILN_Q2_K ? ((const kiln_block_q2_K *)blk)->qs : ((const kiln_block_q3_K *)blk)->qs;
        for (int h = 0; h < 2; h++)
            for (int r = 0; r < 4; r++)
                for (int l = 0; l < 32; l++) u[128 * h + 32 * r + l] = (qs[32 * h + l] >> (2 * r)) & 3;
        if (t == KILN_Q2_K) return;
        const uint8_t *hm = ((const kiln_block_q3_K *)blk)->hmask;
        for (int j = 0; j < 8; j++)
            for (int l = 0; l < 32; l++) u[32 * j + l] += (uint8_t)(((hm[l] >> j) & 1) << 2);
        return;
    }
    default: { /* IQ4_XS: the table's value + 128 */
        const kiln_block_iq4_xs *b = blk;
        const __m128i m4 = _mm_set1_epi8(0x0f), v = _mm_loadu_si128((const __m128i *)kiln__iq4nl_values),
                      tab = _mm_xor_si128(v, _mm_set1_epi8((char)0x80));
        for (int s = 0; s < 8; s++) {
            const __m128i q = _mm_loadu_si128((const __m128i *)(b->qs + 16 * s)),
                          hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
            _mm_storeu_si128((__m128i *)(u + 32 * s), _mm_shuffle_epi8(tab, _mm_and_si128(q, m4)));
            _mm_storeu_si128((__m128i *)(u + 32 * s + 16), _mm_shuffle_epi8(tab, hi));
        }
        return;
    }
    }
}

/* the offset of kgemm_codes() (qmatmul_kgemm.h) */
static int kgemm_code_offset(kiln_dtype t) {
    return t == KILN_Q6_K ? 32 : t == KILN_Q3_K ? 4 : t == KILN_IQ4_XS ? 128 : 0;
}

static void kgemm_pack(kiln_dtype t, const char *w, size_t wrow, int cols, int64_t nb, char *panel) {
    const int off = kgemm_code_offset(t), nc = KILN_KGEMM_NC;
    const size_t bs = kiln__types[t].size;
    memset(panel, 0, (size_t)nb * KILN_KGEMM_BLOCK);
    for (int c = 0; c < cols; c++)
        for (int64_t b = 0; b < nb; b++) {
            char *p = panel + b * KILN_KGEMM_BLOCK;
            int32_t *sc = (int32_t *)(p + nc * 256), *cp = sc + 16 * nc;
            float *d = (float *)(cp + 8 * nc), *dm = d + nc;
            const char *blk = w + (size_t)c * wrow + (size_t)b * bs;
            uint8_t u[256];
            kgemm_codes(t, blk, u);
            for (int q = 0; q < 64; q++) memcpy(p + (q * nc + c) * 4, u + 4 * q, 4); /* quad q of column c */
            kiln_qints k;
            kiln__qints_scales(t, blk, 0, &k);
            int16_t cg[16];
            const int sh = k.sub == 32; /* sub-blocks of 16 or 32: a shift, not a division per group */
            for (int g = 0; g < 16; g++) {
                const int s = g >> sh;
                sc[g * nc + c] = k.sc[s];
                cg[g] = (int16_t)(k.has_min ? k.mn[s] : off * k.sc[s]);
            }
            for (int pr = 0; pr < 8; pr++)
                cp[pr * nc + c] = (int32_t)((uint32_t)(uint16_t)cg[2 * pr] | (uint32_t)(uint16_t)cg[2 * pr + 1] << 16);
            d[c] = k.d, dm[c] = k.dm;
        }
}
