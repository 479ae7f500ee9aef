/* qmatmul_vnni.c — AVX512-VNNI / AVX-VNNI dot products of KILN_OP_QMATMUL
 * (qmatmul.h): vpdpbusd on ymm for Q8_0 / Q4_0 (the same lanes as the AVX2
 * path), and the NF4 dot with the codes decoded by vpermps on zmm. */
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

static inline float lanes16(__m512 acc) {
    float a[16], s = 0.0f;
    _mm512_storeu_ps(a, acc);
    for (int l = 0; l < 16; l++) s += a[l];
    return s;
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
 * summed in order, as in the reference. */
static float odd_tail(__m512 acc, __m256i u, const int8_t *xq, const int32_t *xs, float d) {
    float a[16];
    _mm512_storeu_ps(a, acc);
    const __m256i s = _mm256_dpbusd_epi32(_mm256_loadu_si256((const __m256i *)xs), u, _mm256_loadu_si256((const __m256i *)xq));
    _mm256_storeu_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d), _mm256_loadu_ps(a)));
    float r = 0.0f;
    for (int l = 0; l < 16; l++) r += a[l];
    return r;
}

static float dot_q4_0s_vnni(const void *w, const int8_t *xq, const int32_t *xs, const float *dx, int64_t nb) {
    const kiln_block_q4_0 *b = w;
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m512i s =
            _mm512_dpbusd_epi32(_mm512_loadu_si512(xs + 8 * i), q4_pair(b + i, lo4), _mm512_loadu_si512(xq + 32 * i));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale2(b[i].d, b[i + 1].d, dx + i), acc);
    }
    if (i == nb) return lanes16(acc);
    const __m128i p = _mm_loadu_si128((const __m128i *)b[i].qs);
    return odd_tail(acc, _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(p, 4), p), _mm256_set1_epi8(0x0f)),
                    xq + 32 * i, xs + 8 * i, _cvtsh_ss(b[i].d) * dx[i]);
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
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i += 2) {
        const __m512i x = _mm512_loadu_si512(xq + 32 * i), s = _mm512_loadu_si512(xs + 8 * i);
        a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(s, q4_pair(b0 + i, lo4), x)),
                             scale2(b0[i].d, b0[i + 1].d, dx + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(s, q4_pair(b1 + i, lo4), x)),
                             scale2(b1[i].d, b1[i + 1].d, dx + i), a1);
    }
    out[0] = lanes16(a0), out[1] = lanes16(a1);
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

/* Q4_0 on AVX512-VBMI, four blocks (72 bytes) per step, the same lanes
 * and the same f32 operations as the pair kernel above, with fewer
 * shuffles. One vpermb per two blocks puts each block's 16 packed bytes
 * twice in a row (bytes 0-15 and 16-31 of its 32-byte half); an and with
 * 0x0f / 0xf0 leaves the low nibbles (elements 0-15, lanes 0-3) and 16
 * times the high ones (elements 16-31, lanes 4-7). Those lanes' sums come
 * out 16 times the reference's, so their xs is 16 times too (the driver
 * scales it, q4_0_xs_hi16) and their scale d_w d_x / 16: both powers of
 * two, so the product and the fused multiply-add are the reference's bit
 * for bit (|16 s| < 2^24, d_w d_x / 16 >= 2^-52 stays normal). The four
 * scales are one vpermb + one vcvtph2ps (d0..d3 twice), one multiply by
 * (dx, dx / 16) and a vpermps per pair of blocks to their lanes. */
#define QMM_VBMI __attribute__((target("avx512vbmi,avx512vnni,avx512bw,avx512vl,avx512dq,avx512f,f16c,fma")))

/* vpermb indices: Z1 (bytes 0..63 of four blocks) to blocks 0, 1, each
 * block's 16 packed bytes twice; Z2 (bytes 8..71) to blocks 2, 3; the
 * nibble masks; the f16 scales as words d0 d1 d2 d3 d0 d1 d2 d3 */
static const uint8_t q4v_i01[64] = {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35};
static const uint8_t q4v_i23[64] = {30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};
static const uint8_t q4v_nib[64] = {0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0};
static const uint8_t q4v_id[64] = {0, 1, 18, 19, 36, 37, 54, 55, 0, 1, 18, 19, 36, 37, 54, 55, 0, 1, 18, 19, 36, 37, 54, 55, 0, 1, 18, 19, 36, 37, 54, 55, 0, 1, 18, 19, 36, 37, 54, 55, 0, 1, 18, 19, 36, 37, 54, 55, 0, 1, 18, 19, 36, 37, 54, 55, 0, 1, 18, 19, 36, 37, 54, 55};

typedef struct q4v_consts {
    __m512i i01, i23, nib, id;
    __m512i p01, p23;
    __m256 c16;
} q4v_consts;

static QMM_VBMI inline q4v_consts q4v_consts_new(void) {
    q4v_consts c;
    c.i01 = _mm512_loadu_si512(q4v_i01), c.i23 = _mm512_loadu_si512(q4v_i23), c.nib = _mm512_loadu_si512(q4v_nib);
    c.id = _mm512_loadu_si512(q4v_id);
    c.p01 = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 1, 1, 1, 1, 5, 5, 5, 5);
    c.p23 = _mm512_setr_epi32(2, 2, 2, 2, 6, 6, 6, 6, 3, 3, 3, 3, 7, 7, 7, 7);
    c.c16 = _mm256_setr_ps(1, 1, 1, 1, 1.0f / 16, 1.0f / 16, 1.0f / 16, 1.0f / 16);
    return c;
}

/* (dx_i .. dx_i+3, the same / 16), shared by the rows of a step */
static QMM_VBMI inline __m256 q4v_dx(const float *dx, const q4v_consts *c) {
    return _mm256_mul_ps(_mm256_broadcast_ps((const __m128 *)dx), c->c16);
}

/* W read ahead (the 72 bytes of a step touch two lines at most) */
static inline void q4v_prefetch(const uint8_t *b) {
    _mm_prefetch((const char *)b + QMM_PREFETCH, _MM_HINT_T0);
    _mm_prefetch((const char *)b + QMM_PREFETCH + 64, _MM_HINT_T0);
}

/* One row's four blocks at b (72 bytes) onto acc; k01 / k23: the lanes of
 * blocks 0-1 / 2-3 that exist (the tail's masks; 0xffff otherwise). */
static QMM_VBMI inline __m512 q4v_step(const uint8_t *b, __m512i x01, __m512i x23, __m512i s01, __m512i s23, __m256 dx8,
                                       const q4v_consts *c, __m512 acc, __mmask16 k01, __mmask16 k23) {
    const __m512i z1 = _mm512_loadu_si512(b), z2 = _mm512_loadu_si512(b + 8);
    const __m256 d8 = _mm256_mul_ps(_mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi8(c->id, z1))), dx8);
    const __m512 d = _mm512_castps256_ps512(d8);
    const __m512i u01 = _mm512_and_si512(_mm512_permutexvar_epi8(c->i01, z1), c->nib);
    const __m512i u23 = _mm512_and_si512(_mm512_permutexvar_epi8(c->i23, z2), c->nib);
    acc = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(s01, u01, x01)),
                                _mm512_permutexvar_ps(c->p01, d), acc, k01);
    return _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(s23, u23, x23)),
                                 _mm512_permutexvar_ps(c->p23, d), acc, k23);
}

/* The last nb % 4 blocks of rows w[0..nr-1], from zero-padded copies (so
 * nothing past the row is read), their missing lanes masked off. */
static QMM_VBMI void q4v_tail(const uint8_t *const *w, int nr, int64_t i, int64_t nb, const int8_t *xq,
                              const int32_t *xs, const float *dx, const q4v_consts *c, __m512 *acc) {
    const int r = (int)(nb - i);
    uint8_t wb[72] = {0};
    int8_t xb[128] = {0};
    int32_t sb[32] = {0};
    float db[4] = {0};
    memcpy(xb, xq + 32 * i, (size_t)(32 * r)), memcpy(sb, xs + 8 * i, (size_t)(32 * r));
    memcpy(db, dx + i, (size_t)(4 * r));
    const __m512i x01 = _mm512_loadu_si512(xb), x23 = _mm512_loadu_si512(xb + 64);
    const __m512i s01 = _mm512_loadu_si512(sb), s23 = _mm512_loadu_si512(sb + 16);
    const __m256 dx8 = q4v_dx(db, c);
    const __mmask16 k01 = r >= 2 ? 0xffff : 0x00ff, k23 = r == 3 ? 0x00ff : 0;
    for (int j = 0; j < nr; j++) {
        memcpy(wb, w[j] + 18 * i, (size_t)(18 * r));
        acc[j] = q4v_step(wb, x01, x23, s01, s23, dx8, c, acc[j], k01, k23);
    }
}

static QMM_VBMI float dot_q4_0v_vbmi(const void *w, const int8_t *xq, const int32_t *xs, const float *dx, int64_t nb) {
    const q4v_consts c = q4v_consts_new();
    const uint8_t *b = w;
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        q4v_prefetch(b + 18 * i);
        acc = q4v_step(b + 18 * i, _mm512_loadu_si512(xq + 32 * i), _mm512_loadu_si512(xq + 32 * i + 64),
                       _mm512_loadu_si512(xs + 8 * i), _mm512_loadu_si512(xs + 8 * i + 16), q4v_dx(dx + i, &c), &c,
                       acc, 0xffff, 0xffff);
    }
    if (i < nb) {
        __m512 a[1] = {acc};
        q4v_tail(&b, 1, i, nb, xq, xs, dx, &c, a);
        acc = a[0];
    }
    return lanes16(acc);
}

static QMM_VBMI void dot2_q4_0v_vbmi(const void *w0, const void *w1, const int8_t *xq, const int32_t *xs,
                                      const float *dx, int64_t nb, float out[2]) {
    const q4v_consts c = q4v_consts_new();
    const uint8_t *b0 = w0, *b1 = w1;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(); /* locals: kept in registers */
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        const __m512i x01 = _mm512_loadu_si512(xq + 32 * i), x23 = _mm512_loadu_si512(xq + 32 * i + 64);
        const __m512i s01 = _mm512_loadu_si512(xs + 8 * i), s23 = _mm512_loadu_si512(xs + 8 * i + 16);
        const __m256 dx8 = q4v_dx(dx + i, &c);
        q4v_prefetch(b0 + 18 * i), q4v_prefetch(b1 + 18 * i);
        a0 = q4v_step(b0 + 18 * i, x01, x23, s01, s23, dx8, &c, a0, 0xffff, 0xffff);
        a1 = q4v_step(b1 + 18 * i, x01, x23, s01, s23, dx8, &c, a1, 0xffff, 0xffff);
    }
    if (i < nb) {
        const uint8_t *b[2] = {b0, b1};
        __m512 acc[2] = {a0, a1};
        q4v_tail(b, 2, i, nb, xq, xs, dx, &c, acc);
        a0 = acc[0], a1 = acc[1];
    }
    out[0] = lanes16(a0), out[1] = lanes16(a1);
}

const kiln_qmm_kernels *kiln__qmm_kernels_vnni(void) {
    static const kiln_qmm_kernels k = {dot_q8_0_vnni, dot_q4_0_vnni, dot_nf4_vnni, dot_q8_0s_vnni, dot_q4_0s_vnni,
                                       quantize_x_vnni, dot2_q8_0s_vnni, dot2_q4_0s_vnni, false};
    static const kiln_qmm_kernels kv = {dot_q8_0_vnni, dot_q4_0_vnni, dot_nf4_vnni, dot_q8_0s_vnni, dot_q4_0v_vbmi,
                                        quantize_x_vnni, dot2_q8_0s_vnni, dot2_q4_0v_vbmi, true};
    return kiln__cpu_caps()->avx512vbmi ? &kv : &k;
}
#else
const kiln_qmm_kernels *kiln__qmm_kernels_vnni(void) { return NULL; }
#endif
