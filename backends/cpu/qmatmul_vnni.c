/* qmatmul_vnni.c — AVX512-VNNI dot products of KILN_OP_QMATMUL
 * (qmatmul.h): vpdpbusd for Q8_0 / Q4_0 (the reference's lanes, as the
 * AVX2 path), Q4_0 four blocks per step where the CPU has AVX512-VBMI and
 * GFNI, and the NF4 dot with the codes decoded by vpermps on zmm. */
#include "qmatmul.h"

#include "cpu_features.h"

#include <string.h>

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define QMM_NAME(x) x##_vnni
#define QMM_DOT32(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (s))
#include "qmatmul_x86.h"
#include "qmatmul_quant_x86.h"

/* The activations' codes, scales and lane sums, a block per step with the
 * scalar quantizer's exact operations (qmatmul_quant_x86.h); the lane
 * sums are vpdpbusd of ones against the codes (exact in int32). */
static void quantize_x_vnni(const float *x, int8_t *xq, float *dx, int32_t *xs, int64_t n, int32_t off) {
    const __m256i ones = _mm256_set1_epi8(1), moff = _mm256_set1_epi32(-off);
    for (int64_t b = 0; b < n / 32; b++) {
        const __m256i q = kiln__qmm_quantize_block(x + 32 * b, dx + b);
        _mm256_storeu_si256((__m256i *)(xq + 32 * b), q);
        if (xs)
            _mm256_storeu_si256((__m256i *)(xs + 8 * b),
                                _mm256_mullo_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, q), moff));
    }
}

/* 16 codes (8 bytes, high nibble first) as table values */
static inline __m512 nf4_16(const uint8_t *c, __m512 table) {
    const __m128i p = _mm_loadl_epi64((const __m128i *)c);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(p, 4), _mm_set1_epi8(0x0f)), lo = _mm_and_si128(p, _mm_set1_epi8(0x0f));
    return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(hi, lo)), table);
}

static float dot_nf4_vnni(const uint8_t *codes, int64_t code_stride, const float *absmax, int64_t absmax_stride,
                          int64_t nb, const float *x) {
    const __m512 table = _mm512_loadu_ps(kiln__nf4_table);
    __m512 tot = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++, codes += code_stride, absmax += absmax_stride, x += 64) {
        _mm_prefetch((const char *)codes + QMM_PREFETCH, _MM_HINT_T0);
        __m512 s = _mm512_mul_ps(_mm512_loadu_ps(x), nf4_16(codes, table));
        s = _mm512_fmadd_ps(_mm512_loadu_ps(x + 16), nf4_16(codes + 8, table), s);
        s = _mm512_fmadd_ps(_mm512_loadu_ps(x + 32), nf4_16(codes + 16, table), s);
        s = _mm512_fmadd_ps(_mm512_loadu_ps(x + 48), nf4_16(codes + 24, table), s);
        tot = _mm512_fmadd_ps(s, _mm512_set1_ps(absmax[0]), tot);
    }
    return _mm512_reduce_add_ps(tot);
}

/* Two blocks per zmm, without the sign trick (no zmm vpsignb): the
 * unsigned side is W's (Q4_0: the nibbles; Q8_0: w + 128), each lane's
 * sum starting from xs (-off times its x codes' sum) comes out exact, and
 * zmm lanes 0-7 / 8-15 are the reference's even / odd block lanes (the
 * nibbles are put in element order by one vpermq). The two scales go to
 * their halves with one vpermps. */
/* dx[0..1] is only float-aligned: loadl_epi64 is an unaligned 8-byte load
 * (load_sd through a double * is a misaligned double load, UB). */
static inline __m512 scale2(uint16_t d0, uint16_t d1, const float *dx) {
    const __m128 d = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)d0 | (uint32_t)d1 << 16)));
    const __m128 s = _mm_mul_ps(d, _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)dx)));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                 _mm512_castps128_ps512(s));
}

/* Q8_0's 16 lanes summed as kiln__qmm_q8_lanes_sum */
static inline float lanes16(__m512 acc) {
    return qmm_lanes(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
}

/* W's unsigned side of blocks b[0], b[1] (prefetching ahead): Q4_0's
 * nibbles; [p0 p1 p0>>4 p1>>4] -> [p0 p0>>4 p1 p1>>4], elements in order */
static inline __m512i q4_pair(const kiln_block_q4_0 *b, __m512i lo4) {
    _mm_prefetch((const char *)b + QMM_PREFETCH, _MM_HINT_T0);
    const __m256i p =
        _mm256_set_m128i(_mm_loadu_si128((const __m128i *)b[1].qs), _mm_loadu_si128((const __m128i *)b[0].qs));
    return _mm512_permutexvar_epi64(
        _mm512_setr_epi64(0, 1, 4, 5, 2, 3, 6, 7),
        _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(p), _mm256_srli_epi16(p, 4), 1), lo4));
}

/* Q8_0's w + 128 */
static inline __m512i q8_pair(const kiln_block_q8_0 *b, __m512i flip) {
    _mm_prefetch((const char *)b + QMM_PREFETCH, _MM_HINT_T0);
    _mm_prefetch((const char *)b + QMM_PREFETCH + 64, _MM_HINT_T0);
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b[0].qs)),
                                         _mm256_loadu_si256((const __m256i *)b[1].qs), 1);
    return _mm512_xor_si512(v, flip);
}

/* An odd last block (unsigned codes u, its lane sums xs, scale d): its 8
 * lanes go onto the even lanes after the pairs, and the 16 lanes are
 * summed as in the reference. */
static float odd_tail(__m512 acc, __m256i u, const int8_t *xq, const int32_t *xs, float d) {
    float a[16];
    _mm512_storeu_ps(a, acc);
    const __m256i s = _mm256_dpbusd_epi32(_mm256_loadu_si256((const __m256i *)xs), u, _mm256_loadu_si256((const __m256i *)xq));
    _mm256_storeu_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d), _mm256_loadu_ps(a)));
    return kiln__qmm_q8_lanes_sum(a);
}

/* Q4_0's scales of a pair of blocks on their 4 + 4 lanes: (d0 x4, d1 x4) */
static inline __m256 q4_scale2(uint16_t d0, uint16_t d1, const float *dx) {
    const __m128 d = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)d0 | (uint32_t)d1 << 16)));
    const __m128 s = _mm_mul_ps(d, _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)dx)));
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(s), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

/* Q4_0 pairs of blocks (i even) as above, their 8 + 8 lanes folded to
 * Q4_0's 4 + 4 (q4_0_fold2) and onto acc[(i >> 1) & 1] (the reference's
 * lanes 0-7, 8-15); an odd last block onto the low 4 lanes of its. */
static inline __m256 q4s_pair(const kiln_block_q4_0 *b, const int8_t *xq, const int32_t *xs, const float *dx,
                              __m512i lo4, __m256 acc) {
    const __m512i s = _mm512_dpbusd_epi32(_mm512_loadu_si512(xs), q4_pair(b, lo4), _mm512_loadu_si512(xq));
    const __m256i f = q4_0_fold2(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(f), q4_scale2(b[0].d, b[1].d, dx), acc);
}

static float q4s_odd_tail(__m256 acc[2], int64_t i, const kiln_block_q4_0 *b, const int8_t *xq, const int32_t *xs,
                          const float *dx) {
    const __m128i p = _mm_loadu_si128((const __m128i *)b[i].qs);
    const __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(p, 4), p), _mm256_set1_epi8(0x0f));
    const __m256i s8 = _mm256_dpbusd_epi32(_mm256_loadu_si256((const __m256i *)(xs + 8 * i)), u,
                                           _mm256_loadu_si256((const __m256i *)(xq + 32 * i)));
    const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    __m256 *a = &acc[(i >> 1) & 1];
    const __m128 lo = _mm_fmadd_ps(_mm_cvtepi32_ps(s), _mm_set1_ps(_cvtsh_ss(b[i].d) * dx[i]), _mm256_castps256_ps128(*a));
    *a = _mm256_insertf128_ps(*a, lo, 0);
    return q4_lanes(acc[0], acc[1]);
}

static float dot_q4_0s_vnni(const void *w, const int8_t *xq, const int32_t *xs, const float *dx, int64_t nb) {
    const kiln_block_q4_0 *b = w;
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 1 < nb; i += 2)
        acc[(i >> 1) & 1] = q4s_pair(b + i, xq + 32 * i, xs + 8 * i, dx + i, lo4, acc[(i >> 1) & 1]);
    return i == nb ? q4_lanes(acc[0], acc[1]) : q4s_odd_tail(acc, i, b, xq, xs, dx);
}

static float dot_q8_0s_vnni(const void *w, const int8_t *xq, const int32_t *xs, const float *dx, int64_t nb) {
    const kiln_block_q8_0 *b = w;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m512i s =
            _mm512_dpbusd_epi32(_mm512_loadu_si512(xs + 8 * i), q8_pair(b + i, flip), _mm512_loadu_si512(xq + 32 * i));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale2(b[i].d, b[i + 1].d, dx + i), acc);
    }
    if (i == nb) return lanes16(acc);
    return odd_tail(acc, _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)b[i].qs), _mm256_set1_epi8((char)0x80)),
                    xq + 32 * i, xs + 8 * i, _cvtsh_ss(b[i].d) * dx[i]);
}

/* Two rows: the pair loops above on two accumulators (nb odd: row by row). */
static void dot2_q4_0s_vnni(const void *w0, const void *w1, const int8_t *xq, const int32_t *xs, const float *dx,
                            int64_t nb, float out[2]) {
    if (nb & 1) {
        out[0] = dot_q4_0s_vnni(w0, xq, xs, dx, nb), out[1] = dot_q4_0s_vnni(w1, xq, xs, dx, nb);
        return;
    }
    const kiln_block_q4_0 *b0 = w0, *b1 = w1;
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    __m256 a0[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, a1[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < nb; i += 2) {
        const int h = (int)((i >> 1) & 1);
        a0[h] = q4s_pair(b0 + i, xq + 32 * i, xs + 8 * i, dx + i, lo4, a0[h]);
        a1[h] = q4s_pair(b1 + i, xq + 32 * i, xs + 8 * i, dx + i, lo4, a1[h]);
    }
    out[0] = q4_lanes(a0[0], a0[1]), out[1] = q4_lanes(a1[0], a1[1]);
}

static void dot2_q8_0s_vnni(const void *w0, const void *w1, const int8_t *xq, const int32_t *xs, const float *dx,
                            int64_t nb, float out[2]) {
    if (nb & 1) {
        out[0] = dot_q8_0s_vnni(w0, xq, xs, dx, nb), out[1] = dot_q8_0s_vnni(w1, xq, xs, dx, nb);
        return;
    }
    const kiln_block_q8_0 *b0 = w0, *b1 = w1;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i += 2) {
        const __m512i x = _mm512_loadu_si512(xq + 32 * i), s = _mm512_loadu_si512(xs + 8 * i);
        a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(s, q8_pair(b0 + i, flip), x)),
                             scale2(b0[i].d, b0[i + 1].d, dx + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(s, q8_pair(b1 + i, flip), x)),
                             scale2(b1[i].d, b1[i + 1].d, dx + i), a1);
    }
    out[0] = lanes16(a0), out[1] = lanes16(a1);
}

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
#define QMM_VBMI __attribute__((target("avx512vbmi,avx512vnni,avx512bw,avx512vl,avx512dq,avx512f,f16c,fma,gfni")))

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

static QMM_VBMI inline q4v_consts q4v_consts_new(void) {
    q4v_consts c;
    c.pk = _mm512_loadu_si512(q4v_pk), c.sc = _mm512_loadu_si512(q4v_sc);
    c.lo4 = _mm512_set1_epi8(0x0f), c.shr4 = _mm512_set1_epi64(Q4V_SHR4);
    return c;
}

/* W read ahead (the 72 bytes of a step touch two lines at most): from
 * memory into L2 far ahead, from L2 into L1 near. Far prefetches into L1
 * hold one of its few fill buffers for a whole memory latency each; the
 * split gave the 1.1B llama's Q4_0 generation 2-5% more tokens/s on 2
 * threads (medians of 16 interleaved runs), none on 1. */
static inline void q4v_prefetch(const uint8_t *b) {
    _mm_prefetch((const char *)b + 512, _MM_HINT_T0);
    _mm_prefetch((const char *)b + 512 + 64, _MM_HINT_T0);
    _mm_prefetch((const char *)b + QMM_PREFETCH, _MM_HINT_T1);
    _mm_prefetch((const char *)b + QMM_PREFETCH + 64, _MM_HINT_T1);
}

/* A loaded W step kept in its register: the compiler would otherwise load
 * it again for each of its two uses (vpermt2b overwrites an operand), two
 * more line-splitting loads per row and step, measurably slower. */
static QMM_VBMI inline void q4v_keep(__m512i *z) { __asm__("" : "+v"(*z)); }

/* The 16 lanes of one row's step at b (z1: its first 64 bytes) as f32. */
static QMM_VBMI inline __m512 q4v_lanes(const uint8_t *b, __m512i z1, __m512i xlo, __m512i xhi, __m512i xs,
                                        q4v_consts c) {
    const __m512i q = _mm512_permutex2var_epi8(z1, c.pk, _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(b + 64))));
    const __m512i hi = _mm512_gf2p8affine_epi64_epi8(q, c.shr4, 0);
    return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_dpbusd_epi32(xs, _mm512_and_si512(q, c.lo4), xlo), hi, xhi));
}

/* d_w d_x of two rows' steps (first 64 bytes za, zb; dx4 the step's four
 * dx) into s[0..3], s[4..7], read back as broadcasts (loads) */
static QMM_VBMI inline void q4v_scales(__m512i za, __m512i zb, const float *dx4, q4v_consts c, float s[8]) {
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
static QMM_VBMI inline float q4v_sum(__m512 acc) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 p = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)));
}

/* The last r = nb - i (1..3) blocks of rows w[0..nr-1] (nr 1 or 2), from
 * zero-padded copies in a full group's layout, their lanes masked. */
static QMM_VBMI void q4v_tail(const uint8_t *const *w, int nr, int64_t i, int64_t nb, const int8_t *xq,
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

static QMM_VBMI float dot_q4_0v_vbmi(const void *w, const int8_t *xq, const int32_t *xs, const float *dx, int64_t nb) {
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

static QMM_VBMI void dot2_q4_0v_vbmi(const void *w0, const void *w1, const int8_t *xq, const int32_t *xs,
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

/* quantize_x_vnni, and for Q4_0 (off 8) x's codes and lane sums in the
 * layout above */
static QMM_VBMI void quantize_x_vbmi(const float *x, int8_t *xq, float *dx, int32_t *xs, int64_t n, int32_t off) {
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

const kiln_qmm_kernels *kiln__qmm_kernels_vnni(void) {
    static const kiln_qmm_kernels k = {dot_q8_0_vnni, dot_q4_0_vnni, dot_nf4_vnni, dot_q8_0s_vnni, dot_q4_0s_vnni,
                                       quantize_x_vnni, dot2_q8_0s_vnni, dot2_q4_0s_vnni};
    static const kiln_qmm_kernels kv = {dot_q8_0_vnni, dot_q4_0_vnni, dot_nf4_vnni, dot_q8_0s_vnni, dot_q4_0v_vbmi,
                                        quantize_x_vbmi, dot2_q8_0s_vnni, dot2_q4_0v_vbmi};
    /* GFNI has come with VBMI on every such CPU so far (Ice Lake,
     * Sapphire Rapids, Zen 4), but it is a cpuid bit of its own */
    return kiln__cpu_caps()->avx512vbmi && __builtin_cpu_supports("gfni") ? &kv : &k;
}
#else
const kiln_qmm_kernels *kiln__qmm_kernels_vnni(void) { return NULL; }
#endif
