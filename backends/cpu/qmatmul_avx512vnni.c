/* qmatmul_avx512vnni.c — AVX512-VNNI dot products of KILN_OP_QMATMUL
 * (qmatmul.h): vpdpbusd (EVEX, on ymm and zmm) for Q8_0 / Q4_0 (the
 * reference's lanes, as the AVX2 path), and the NF4 dot with the codes
 * decoded by vpermps on zmm. Q4_0 four blocks per step, where the CPU also
 * has AVX512-VBMI and GFNI: qmatmul_vbmi.c. */
#include "qmatmul.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define QMM_NAME(x) x##_vnni
#define QMM_DOT32(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (s))
#include "qmatmul_x86.h"
#include "qmatmul_quant_zmm.h"

/* The activations' codes, scales and lane sums, a block per step with the
 * scalar quantizer's exact operations (qmatmul_quant_zmm.h); the lane
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

/* Q8_0's w + 128 of blocks b[0], b[1], W read ahead into L2 only
 * (qmatmul.h): two lines a step, since one per 68-byte step would skip a
 * line in 16. The near prefetch into L1 that Q4_0 keeps made this kernel
 * slower once its scales were batched (q8_scales16): on a Zen 5, 1 thread,
 * a token's products (1.1 GB, 4 KiB pages, per CPU-second, variants
 * alternated in one process) far + near 0.82-0.87x far alone, 32 KiB
 * ahead the same as 16 KiB, 8 KiB 0.96x, 4 KiB 0.87x, none 0.87x. */
static inline __m512i q8_pair(const kiln_block_q8_0 *b, __m512i flip) {
    kiln__qmm_prefetch_far(b);
    kiln__qmm_prefetch_far((const char *)b + 64);
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b[0].qs)),
                                         _mm256_loadu_si256((const __m256i *)b[1].qs), 1);
    return _mm512_xor_si512(v, flip);
}

/* d_w d_x of 16 blocks into s[0..15]: the f16 scales by 16 scalar loads
 * (a vpgatherdd was slower), one vcvtph2ps and one multiply, where each
 * pair of blocks took two scalar loads, a shift, an or, a move to a
 * vector, a conversion, a multiply and a vpermps (scale2) */
static inline void q8_scales16(const kiln_block_q8_0 *b, const float *dx, float s[16]) {
    uint16_t d[16];
    for (int j = 0; j < 16; j++) d[j] = b[j].d;
    _mm512_storeu_ps(s, _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)d)), _mm512_loadu_ps(dx)));
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

/* One row at a time (a second row interleaved, sharing x's loads, was
 * faster in cache but 0.8x from memory: two streams 2 KiB apart), 16
 * blocks a step with their scales batched (q8_scales16) and broadcast
 * from memory (a load, not a shuffle). The even blocks' lanes 0-7 go on
 * in ae, the odd ones' 8-15 in ao (the other halves unused): two chains
 * of one FMA per pair, where one accumulator with a masked FMA per half
 * was one chain of two (0.8x in L2). Per CPU-second on a Zen 5, a
 * token's products 1.3x the two-row kernel (32 against 24.5 GB/s, 4 KiB
 * pages; a plain read loop 40). */
static float dot_q8_0s_vnni(const void *w, const int8_t *xq, const int32_t *xs, const float *dx, int64_t nb) {
    const kiln_block_q8_0 *b = w;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    float sc[16];
    __m512 ae = _mm512_setzero_ps(), ao = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= nb; i += 16) {
        q8_scales16(b + i, dx + i, sc);
        for (int j = 0; j < 16; j += 2) {
            const __m512 v = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(
                _mm512_loadu_si512(xs + 8 * (i + j)), q8_pair(b + i + j, flip), _mm512_loadu_si512(xq + 32 * (i + j))));
            ae = _mm512_fmadd_ps(v, _mm512_set1_ps(sc[j]), ae);
            ao = _mm512_fmadd_ps(v, _mm512_set1_ps(sc[j + 1]), ao);
        }
    }
    __m512 acc = _mm512_mask_blend_ps(0xff00, ae, ao);
    for (; i + 1 < nb; i += 2) {
        const __m512i s =
            _mm512_dpbusd_epi32(_mm512_loadu_si512(xs + 8 * i), q8_pair(b + i, flip), _mm512_loadu_si512(xq + 32 * i));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale2(b[i].d, b[i + 1].d, dx + i), acc);
    }
    if (i == nb) return lanes16(acc);
    return odd_tail(acc, _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)b[i].qs), _mm256_set1_epi8((char)0x80)),
                    xq + 32 * i, xs + 8 * i, _cvtsh_ss(b[i].d) * dx[i]);
}

/* Q4_0, two rows: the pair loop above on two accumulators (nb odd: row by
 * row). */
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

/* One row of W against R rows of x (kiln_qmm_dotr_i8s): each pair of W's
 * blocks loaded and its two scales converted once, then each row's
 * arithmetic as dot_q8_0s_vnni's (each block's d * dx, the FMA onto the
 * pair's even or odd lanes, the odd tail), so each out[q] is its bits. */
static inline __attribute__((always_inline)) void q8s_rows(int R, const kiln_block_q8_0 *b, const int8_t *xq,
                                                           const int32_t *xs, const float *dx, int64_t nb,
                                                           float *out) {
    const __m512i flip = _mm512_set1_epi8((char)0x80),
                  halves = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m512 acc[KILN_QMM_ROWS_MAX];
    int64_t i = 0;
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (; i + 1 < nb; i += 2) {
        const __m512i u = q8_pair(b + i, flip);
        const __m128 d = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)b[i].d | (uint32_t)b[i + 1].d << 16)));
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) {
            const __m512i s = _mm512_dpbusd_epi32(_mm512_loadu_si512(xs + 8 * nb * r + 8 * i), u,
                                                  _mm512_loadu_si512(xq + 32 * nb * r + 32 * i));
            const __m128 sc = _mm_mul_ps(d, _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(dx + nb * r + i))));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_permutexvar_ps(halves, _mm512_castps128_ps512(sc)),
                                     acc[r]);
        }
    }
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++) {
        const int8_t *x = xq + 32 * nb * r;
        out[r] = i == nb ? lanes16(acc[r])
                         : odd_tail(acc[r],
                                    _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)b[i].qs),
                                                     _mm256_set1_epi8((char)0x80)),
                                    x + 32 * i, xs + 8 * nb * r + 8 * i, _cvtsh_ss(b[i].d) * dx[nb * r + i]);
    }
}

/* Q4_0, one row of W against R rows of x: blocks i, i + 1 (i even)
 * decoded and their scales converted once, then each row's operations as
 * q4s_pair's onto acc h = (i >> 1) & 1 of its; the odd tail as
 * dot_q4_0s_vnni's, so each out[q] is its bits. */
static inline __attribute__((always_inline)) void q4s_pair_rows(int R, const kiln_block_q4_0 *b, const int8_t *xq,
                                                                const int32_t *xs, const float *dx, int64_t nb,
                                                                int64_t i, __m512i lo4, __m256 *acc) {
    const __m512i u = q4_pair(b + i, lo4);
    const __m128 d = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)b[i].d | (uint32_t)b[i + 1].d << 16)));
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++) {
        const __m512i s = _mm512_dpbusd_epi32(_mm512_loadu_si512(xs + 8 * nb * r + 8 * i), u,
                                              _mm512_loadu_si512(xq + 32 * nb * r + 32 * i));
        const __m256i f = q4_0_fold2(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
        const __m128 sc = _mm_mul_ps(d, _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(dx + nb * r + i))));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(f),
                                 _mm256_permutevar8x32_ps(_mm256_castps128_ps256(sc), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1)),
                                 acc[r]);
    }
}

static inline __attribute__((always_inline)) void q4s_rows(int R, const kiln_block_q4_0 *b, const int8_t *xq,
                                                           const int32_t *xs, const float *dx, int64_t nb,
                                                           float *out) {
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    __m256 a0[KILN_QMM_ROWS_MAX], a1[KILN_QMM_ROWS_MAX];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++) a0[r] = a1[r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 3 < nb; i += 4) {
        q4s_pair_rows(R, b, xq, xs, dx, nb, i, lo4, a0);
        q4s_pair_rows(R, b, xq, xs, dx, nb, i + 2, lo4, a1);
    }
    if (i + 1 < nb) q4s_pair_rows(R, b, xq, xs, dx, nb, i, lo4, a0), i += 2;
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++) {
        __m256 acc[2] = {a0[r], a1[r]};
        out[r] = i == nb ? q4_lanes(a0[r], a1[r])
                         : q4s_odd_tail(acc, i, b, xq + 32 * nb * r, xs + 8 * nb * r, dx + nb * r);
    }
}

/* The rows kernels (kiln_qmm_dotr_i8s), R a constant in each case */
#define VNNI_ROWS_KERNEL(name, f)                                                                              \
    static void name(const void *w, const int8_t *xq, const int32_t *xs, const float *dx, int64_t nb, int rows, \
                     float *out) {                                                                             \
        switch (rows) {                                                                                        \
        case 1: f(1, w, xq, xs, dx, nb, out); break;                                                           \
        case 2: f(2, w, xq, xs, dx, nb, out); break;                                                           \
        case 3: f(3, w, xq, xs, dx, nb, out); break;                                                           \
        default: f(4, w, xq, xs, dx, nb, out); break;                                                          \
        }                                                                                                      \
    }
_Static_assert(KILN_QMM_ROWS_MAX == 4, "VNNI_ROWS_KERNEL's cases");
VNNI_ROWS_KERNEL(dotr_q8_0s_vnni, q8s_rows)
VNNI_ROWS_KERNEL(dotr_q4_0s_vnni, q4s_rows)

const kiln_qmm_kernels *kiln__qmm_kernels_avx512vnni(void) {
    static const kiln_qmm_kernels k = {dot_q8_0_vnni, dot_q4_0_vnni, dot_nf4_vnni, dot_q8_0s_vnni, dot_q4_0s_vnni,
                                       quantize_x_vnni, NULL, dot2_q4_0s_vnni, dotr_q8_0s_vnni, dotr_q4_0s_vnni};
    return &k;
}
#else
const kiln_qmm_kernels *kiln__qmm_kernels_avx512vnni(void) { return NULL; }
#endif
