/* qmatmul_kgemm_avx512vnni.c — the tile of the K types' integer GEMM
 * (qmatmul_kgemm.h) with AVX512-VNNI: 16 columns of W in the lanes of one
 * zmm, up to 8 rows of x, each row's P, its group sums and its f32 sums in
 * registers; x's quads and pairs come broadcast from its Q8_K blocks as
 * they are (no packing). */
#include "qmatmul_kgemm.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
#include "../../quant/quant.h"

#include <immintrin.h>
#include <string.h>

#define NC KILN_KGEMM_NC
#define UNROLL _Pragma("GCC unroll 8")

static inline int32_t load32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* R rows (a constant once inlined) against the panel */
static inline __attribute__((always_inline)) void tile_rows(const int R, const char *xa, size_t xrow,
                                                            const char *panel, int64_t nb, bool has_min, float *y,
                                                            int64_t ldy, int cols) {
    __m512 acc[KILN_KGEMM_MR];
    UNROLL
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *p = panel + b * KILN_KGEMM_BLOCK;
        const int32_t *sc = (const int32_t *)(p + NC * 256), *cp = sc + 16 * NC;
        const float *d = (const float *)(cp + 8 * NC);
        const kiln_block_q8_K *xb[KILN_KGEMM_MR];
        __m512i P[KILN_KGEMM_MR], C[KILN_KGEMM_MR];
        UNROLL
        for (int r = 0; r < R; r++) {
            xb[r] = (const kiln_block_q8_K *)(xa + (size_t)r * xrow) + b;
            P[r] = _mm512_setzero_si512();
        }
        for (int g = 0; g < 16; g++) {
            __m512i T[KILN_KGEMM_MR];
            UNROLL
            for (int r = 0; r < R; r++) T[r] = _mm512_setzero_si512();
            UNROLL
            for (int qd = 0; qd < 4; qd++) {
                const __m512i u = _mm512_load_si512(p + (4 * g + qd) * 64);
                UNROLL
                for (int r = 0; r < R; r++)
                    T[r] = _mm512_dpbusd_epi32(T[r], u, _mm512_set1_epi32(load32(xb[r]->qs + 16 * g + 4 * qd)));
            }
            const __m512i s = _mm512_load_si512(sc + g * NC);
            UNROLL
            for (int r = 0; r < R; r++) P[r] = _mm512_add_epi32(P[r], _mm512_mullo_epi32(T[r], s));
        }
        UNROLL
        for (int r = 0; r < R; r++) C[r] = _mm512_setzero_si512();
        UNROLL
        for (int t = 0; t < 8; t++) {
            const __m512i c = _mm512_load_si512(cp + t * NC);
            UNROLL
            for (int r = 0; r < R; r++)
                C[r] = _mm512_dpwssd_epi32(C[r], c, _mm512_set1_epi32(load32(xb[r]->bsums + 2 * t)));
        }
        const __m512 dw = _mm512_load_ps(d), dmw = _mm512_load_ps(d + NC);
        UNROLL
        for (int r = 0; r < R; r++) {
            const __m512 da = _mm512_set1_ps(xb[r]->d);
            const __m512 v =
                has_min ? _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(da, dw), _mm512_cvtepi32_ps(P[r])),
                                        _mm512_mul_ps(_mm512_mul_ps(da, dmw), _mm512_cvtepi32_ps(C[r])))
                        : _mm512_mul_ps(_mm512_mul_ps(da, dw), _mm512_cvtepi32_ps(_mm512_sub_epi32(P[r], C[r])));
            acc[r] = _mm512_add_ps(acc[r], v);
        }
    }
    const __mmask16 keep = (__mmask16)((1u << cols) - 1);
    UNROLL
    for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(y + r * ldy, keep, acc[r]);
}

static void tile(int rows, const void *xa, size_t xrow, const void *panel, int64_t nb, bool has_min, float *y,
                 int64_t ldy, int cols) {
    switch (rows) {
#define ROWS(R) \
    case R: tile_rows(R, xa, xrow, panel, nb, has_min, y, ldy, cols); break;
        ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5) ROWS(6) ROWS(7) ROWS(8)
#undef ROWS
    default: break;
    }
}

/* A block's codes made unsigned, u = q + off (qmatmul_kgemm.h), in
 * element order: loops the compiler vectorizes with this file's flags,
 * IQ4_XS's table by pshufb. */
static void codes(kiln_dtype t, const void *blk, uint8_t *u) {
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

/* the offset of codes() (qmatmul_kgemm.h) */
static int code_offset(kiln_dtype t) { return t == KILN_Q6_K ? 32 : t == KILN_Q3_K ? 4 : t == KILN_IQ4_XS ? 128 : 0; }

static void pack(kiln_dtype t, const char *w, size_t wrow, int cols, int64_t nb, char *panel) {
    const int off = code_offset(t);
    const size_t bs = kiln__types[t].size;
    memset(panel, 0, (size_t)nb * KILN_KGEMM_BLOCK);
    for (int c = 0; c < cols; c++)
        for (int64_t b = 0; b < nb; b++) {
            char *p = panel + b * KILN_KGEMM_BLOCK;
            int32_t *sc = (int32_t *)(p + NC * 256), *cp = sc + 16 * NC;
            float *d = (float *)(cp + 8 * NC), *dm = d + NC;
            const char *blk = w + (size_t)c * wrow + (size_t)b * bs;
            uint8_t u[256];
            codes(t, blk, u);
            for (int q = 0; q < 64; q++) memcpy(p + (q * NC + c) * 4, u + 4 * q, 4); /* quad q of column c */
            kiln_qints k;
            kiln__qints_scales(t, blk, 0, &k);
            int16_t cg[16];
            for (int g = 0; g < 16; g++) {
                const int s = g * 16 / k.sub;
                sc[g * NC + c] = k.sc[s];
                cg[g] = (int16_t)(k.has_min ? k.mn[s] : off * k.sc[s]);
            }
            for (int pr = 0; pr < 8; pr++)
                cp[pr * NC + c] = (int32_t)((uint32_t)(uint16_t)cg[2 * pr] | (uint32_t)(uint16_t)cg[2 * pr + 1] << 16);
            d[c] = k.d, dm[c] = k.dm;
        }
}

static const kiln_kgemm_kernels kernels = {pack, tile};

const kiln_kgemm_kernels *kiln__kgemm_kernels_avx512vnni(void) { return &kernels; }
#else
const kiln_kgemm_kernels *kiln__kgemm_kernels_avx512vnni(void) { return NULL; }
#endif
