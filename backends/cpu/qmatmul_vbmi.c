/* qmatmul_vbmi.c — KILN_OP_QMATMUL's Q4_0 dot products on AVX512-VBMI +
 * GFNI (qmatmul.h), with AVX512-VNNI's vpdpbusd; the other products are
 * AVX512-VNNI's (qmatmul_avx512vnni.c), a lower level this file may call. */
#include "qmatmul.h"

#if defined(__x86_64__) && defined(__AVX512VBMI__) && defined(__GFNI__) && defined(__AVX512VNNI__)
#include "qmatmul_quant_zmm.h"

#include <immintrin.h>
#include <pthread.h>
#include <string.h>

/* Q4_0 on AVX512-VBMI + GFNI, four blocks (72 bytes) per step, exact
 * against the reference's lanes (qmatmul.h). One vpermt2b over the step's
 * bytes 0..63 and 64..71 (an 8-byte load: it never splits a line, where a
 * second 64-byte load mostly would) gathers the 64 packed bytes so that zmm lane
 * 4 l + b holds block b's packed bytes 4 l .. 4 l + 3 (its reference lane
 * l); an and leaves their low nibbles, a vgf2p8affineqb (a bit matrix:
 * each byte shifted right by 4) their high ones, and two vpdpbusd (W's
 * side unsigned, xs undoing the offset 8) against x in the same layout
 * give the 16 exact lanes of four blocks. Their scales, block b's on lanes
 * b, b + 4, b + 8, b + 12: one vpermt2b gathers two rows' four f16 scales,
 * one vcvtph2ps and one multiply by dx make both rows' d_w d_x, and each
 * row's four go to its lanes by a 128-bit broadcast from memory (a load,
 * not a shuffle: the shuffle port is the busy one). Per core, in cache,
 * about 1.5x the kernel it replaced (two vpermb and a 16-times trick for
 * the high nibbles, a conversion and an FMA per pair of blocks, a store
 * and 16 scalar adds per row), 1.15x from memory.
 *
 * x's layout, written by quantize_x_vbmi: blocks in groups of 4 (the last
 * one of r = nb % 4 blocks when that is not 0), group g (first block 4 g)
 * at xq + 128 g: byte 4 r l + 4 b + t = element 4 l + t of the group's
 * block b, byte 16 r + 4 r l + 4 b + t its element 16 + 4 l + t;
 * xs[16 g + r l + b] = -8 times the sum of that lane's 8 codes. */

/* vpermt2b indices: the packed bytes (block b's qs[4 l + t] to byte
 * 16 l + 4 b + t, from the first load or, 64 on, the second); two rows' scales (words
 * a0 a1 a2 a3 b0 b1 b2 b3) */
static const uint8_t q4v_pk[64] = {2, 3, 4, 5, 20, 21, 22, 23, 38, 39, 40, 41, 56, 57, 58, 59, 6, 7, 8, 9, 24, 25, 26, 27, 42, 43, 44, 45, 60, 61, 62, 63, 10, 11, 12, 13, 28, 29, 30, 31, 46, 47, 48, 49, 64, 65, 66, 67, 14, 15, 16, 17, 32, 33, 34, 35, 50, 51, 52, 53, 68, 69, 70, 71};
static const uint8_t q4v_sc[64] = {0, 1, 18, 19, 36, 37, 54, 55, 64, 65, 82, 83, 100, 101, 118, 119, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
/* vgf2p8affineqb's matrix for x >> 4 (result bit i = source bit i + 4) */
#define Q4V_SHR4 0x1020408000000000LL

typedef struct q4v_consts {
    __m512i pk, sc, lo4, shr4;
} q4v_consts;

static inline q4v_consts q4v_consts_new(void) {
    q4v_consts c;
    c.pk = _mm512_loadu_si512(q4v_pk), c.sc = _mm512_loadu_si512(q4v_sc);
    c.lo4 = _mm512_set1_epi8(0x0f), c.shr4 = _mm512_set1_epi64(Q4V_SHR4);
    return c;
}

/* W read ahead far and near (qmatmul.h; the 72 bytes of a step touch two
 * lines at most). The split, 4096 ahead, gave the 1.1B llama's Q4_0
 * generation 2-5% more tokens/s on 2 threads (medians of 16 interleaved
 * runs), none on 1; QMM_FAR's 16384 ahead 1.2x more on 1 thread. */
static inline void q4v_prefetch(const uint8_t *b) {
    kiln__qmm_prefetch_far_near(b);
    kiln__qmm_prefetch_far_near(b + 64);
}

/* A loaded W step kept in its register: the compiler would otherwise load
 * it again for each of its two uses (vpermt2b overwrites an operand), two
 * more line-splitting loads per row and step, measurably slower. */
static inline void q4v_keep(__m512i *z) { __asm__("" : "+v"(*z)); }

/* The 16 lanes of one row's step at b (z1: its first 64 bytes) as f32. */
static inline __m512 q4v_lanes(const uint8_t *b, __m512i z1, __m512i xlo, __m512i xhi, __m512i xs,
                                        q4v_consts c) {
    const __m512i q = _mm512_permutex2var_epi8(z1, c.pk, _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(b + 64))));
    const __m512i hi = _mm512_gf2p8affine_epi64_epi8(q, c.shr4, 0);
    return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_dpbusd_epi32(xs, _mm512_and_si512(q, c.lo4), xlo), hi, xhi));
}

/* d_w d_x of two rows' steps (first 64 bytes za, zb; dx4 the step's four
 * dx) into s[0..3], s[4..7], read back as broadcasts (loads) */
static inline void q4v_scales(__m512i za, __m512i zb, const float *dx4, q4v_consts c, float s[8]) {
    const __m128i d = _mm512_castsi512_si128(_mm512_permutex2var_epi8(za, c.sc, zb));
    _mm256_store_ps(s, _mm256_mul_ps(_mm256_cvtph_ps(d), _mm256_broadcast_ps((const __m128 *)dx4)));
    /* s as if changed here: keeps the compiler from turning the store +
     * broadcast loads into shuffles (only s, so the constants stay in
     * registers) */
    __asm__ volatile("" : "+m"(*(float(*)[8])s));
}

/* The 16 lanes summed as kiln__qmm_q4_lanes_sum does (block b's lane l is
 * zmm lane 4 l + b): halves added (l + 2 onto l), quarters (the block's
 * lanes 1, 3 onto 0, 2: B_b in lane b), then (B0 + B2) + (B1 + B3). */
static inline float q4v_sum(__m512 acc) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 p = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)));
}

/* The last r = nb - i (1..3) blocks of rows w[0..nr-1] (nr 1 or 2), from
 * zero-padded copies in a full group's layout, their lanes masked. */
static void q4v_tail(const uint8_t *const *w, int nr, int64_t i, int64_t nb, const int8_t *xq,
                              const int32_t *xs, const float *dx, q4v_consts c, __m512 *acc) {
    const int r = (int)(nb - i);
    uint8_t wb[2][72] = {{0}};
    int8_t xb[128] = {0};
    int32_t sb[16] = {0};
    float db[4] = {0}, sc[8] __attribute__((aligned(32)));
    for (int b = 0; b < r; b++)
        for (int l = 0; l < 4; l++) {
            memcpy(xb + 16 * l + 4 * b, xq + 32 * i + 4 * r * l + 4 * b, 4);
            memcpy(xb + 64 + 16 * l + 4 * b, xq + 32 * i + 16 * r + 4 * r * l + 4 * b, 4);
            sb[4 * l + b] = xs[4 * i + r * l + b];
        }
    memcpy(db, dx + i, (size_t)(4 * r));
    const __m512i xlo = _mm512_loadu_si512(xb), xhi = _mm512_loadu_si512(xb + 64), s = _mm512_loadu_si512(sb);
    const __mmask16 k = (__mmask16)(0x1111 * ((1 << r) - 1));
    for (int j = 0; j < nr; j++) memcpy(wb[j], w[j] + 18 * i, (size_t)(18 * r));
    const __m512i z0 = _mm512_loadu_si512(wb[0]), z1 = _mm512_loadu_si512(wb[nr - 1]);
    q4v_scales(z0, z1, db, c, sc);
    for (int j = 0; j < nr; j++)
        acc[j] = _mm512_mask3_fmadd_ps(q4v_lanes(wb[j], j ? z1 : z0, xlo, xhi, s, c),
                                       _mm512_broadcast_f32x4(_mm_load_ps(sc + 4 * j)), acc[j], k);
}

static float dot_q4_0v_vbmi(const void *w, const int8_t *xq, const int32_t *xs, const float *dx, int64_t nb) {
    const q4v_consts c = q4v_consts_new();
    const uint8_t *b = w;
    float sc[8] __attribute__((aligned(32)));
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        q4v_prefetch(b + 18 * i);
        __m512i z = _mm512_loadu_si512(b + 18 * i);
        q4v_keep(&z);
        q4v_scales(z, z, dx + i, c, sc);
        acc = _mm512_fmadd_ps(q4v_lanes(b + 18 * i, z, _mm512_loadu_si512(xq + 32 * i),
                                        _mm512_loadu_si512(xq + 32 * i + 64), _mm512_loadu_si512(xs + 4 * i), c),
                              _mm512_broadcast_f32x4(_mm_load_ps(sc)), acc);
    }
    if (i < nb) {
        __m512 a[1] = {acc};
        q4v_tail(&b, 1, i, nb, xq, xs, dx, c, a);
        acc = a[0];
    }
    return q4v_sum(acc);
}

static void dot2_q4_0v_vbmi(const void *w0, const void *w1, const int8_t *xq, const int32_t *xs,
                                      const float *dx, int64_t nb, float out[2]) {
    const q4v_consts c = q4v_consts_new();
    const uint8_t *b0 = w0, *b1 = w1;
    float sc[8] __attribute__((aligned(32)));
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(); /* locals: kept in registers */
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        const __m512i xlo = _mm512_loadu_si512(xq + 32 * i), xhi = _mm512_loadu_si512(xq + 32 * i + 64);
        const __m512i s = _mm512_loadu_si512(xs + 4 * i);
        q4v_prefetch(b0 + 18 * i), q4v_prefetch(b1 + 18 * i);
        __m512i z0 = _mm512_loadu_si512(b0 + 18 * i), z1 = _mm512_loadu_si512(b1 + 18 * i);
        q4v_keep(&z0), q4v_keep(&z1);
        q4v_scales(z0, z1, dx + i, c, sc);
        a0 = _mm512_fmadd_ps(q4v_lanes(b0 + 18 * i, z0, xlo, xhi, s, c), _mm512_broadcast_f32x4(_mm_load_ps(sc)), a0);
        a1 = _mm512_fmadd_ps(q4v_lanes(b1 + 18 * i, z1, xlo, xhi, s, c), _mm512_broadcast_f32x4(_mm_load_ps(sc + 4)),
                             a1);
    }
    if (i < nb) {
        const uint8_t *b[2] = {b0, b1};
        __m512 acc[2] = {a0, a1};
        q4v_tail(b, 2, i, nb, xq, xs, dx, c, acc);
        a0 = acc[0], a1 = acc[1];
    }
    out[0] = q4v_sum(a0), out[1] = q4v_sum(a1);
}

/* AVX512-VNNI's quantizer of x (set once by vbmi_init) */
static void (*quantize_x_vnni)(const float *x, int8_t *xq, float *dx, int32_t *xs, int64_t n, int32_t off);

/* quantize_x_vnni, and for Q4_0 (off 8) x's codes and lane sums in the
 * layout above */
static void quantize_x_vbmi(const float *x, int8_t *xq, float *dx, int32_t *xs, int64_t n, int32_t off) {
    if (off != 8) {
        quantize_x_vnni(x, xq, dx, xs, n, off);
        return;
    }
    const int64_t nb = n / 32;
    for (int64_t g = 0; g < nb; g += 4) {
        const int r = nb - g < 4 ? (int)(nb - g) : 4;
        for (int b = 0; b < r; b++) {
            int8_t q[32];
            int32_t ls[8];
            const __m256i v = kiln__qmm_quantize_block(x + 32 * (g + b), dx + g + b);
            _mm256_storeu_si256((__m256i *)q, v);
            _mm256_storeu_si256((__m256i *)ls, _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), v));
            for (int l = 0; l < 4; l++) {
                memcpy(xq + 32 * g + 4 * r * l + 4 * b, q + 4 * l, 4);
                memcpy(xq + 32 * g + 16 * r + 4 * r * l + 4 * b, q + 16 + 4 * l, 4);
                if (xs) xs[4 * g + r * l + b] = -8 * (ls[l] + ls[l + 4]);
            }
        }
    }
}

static kiln_qmm_kernels vbmi;

/* AVX512-VNNI's set with Q4_0's products and x's quantizer replaced */
static void vbmi_init(void) {
    const kiln_qmm_kernels *k = kiln__qmm_kernels_avx512vnni();
    if (!k) return;
    vbmi = *k;
    quantize_x_vnni = k->quantize_x;
    vbmi.q4_0s = dot_q4_0v_vbmi, vbmi.q4_0s2 = dot2_q4_0v_vbmi, vbmi.quantize_x = quantize_x_vbmi;
    vbmi.q4_0sr = NULL; /* AVX512-VNNI's reads x in the other layout */
}

const kiln_qmm_kernels *kiln__qmm_kernels_vbmi(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, vbmi_init);
    return vbmi.q8_0 ? &vbmi : NULL;
}
#else
const kiln_qmm_kernels *kiln__qmm_kernels_vbmi(void) { return NULL; }
#endif
