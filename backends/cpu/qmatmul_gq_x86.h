/* qmatmul_gq_x86.h — the GQ dot product of qmatmul_gq.h on x86, shared by
 * qmatmul_gq_avx2.c, _avxvnni.c and _avx512vnni.c, which define
 * GQ_DOT32(u, s) (8 int32 lanes, lane l = sum of u[4l+j] s[4l+j], u
 * unsigned, s signed) and GQ_NAME(x), the function suffix. */
#include "qmatmul_gq.h"

#include "gq_x86.h"

/* bytes of W read ahead (see qmatmul_x86.h: W streams from DRAM) */
#define GQ_PREFETCH 4096

/* chunk c of block b (codes at c, chunk i of the row): |q - zero| against
 * sign(x8, q - zero), fma into acc */
static inline __attribute__((always_inline)) __m256 GQ_NAME(chunk)(const uint8_t *c, const int bits,
                                                                             __m256i z, float s, const int8_t *xq,
                                                                             const float *dx, int64_t i, __m256 acc) {
    const __m256i q = _mm256_sub_epi8(kiln__gq_decode(c, bits), z);
    const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + 32 * i));
    const __m256i d = GQ_DOT32(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(s * dx[i]), acc);
}

static inline __attribute__((always_inline)) float GQ_NAME(scale)(const uint8_t *b) {
    uint16_t h;
    memcpy(&h, b, 2);
    return _cvtsh_ss(h);
}

/* block by block; chunk i goes to accumulator i & 1 (pairs of chunks in a
 * block, or pairs of blocks of one chunk) */
static inline __attribute__((always_inline)) float GQ_NAME(row)(const uint8_t *w, const int bits,
                                                                          const int group, const int8_t *xq,
                                                                          const float *dx, int64_t nc) {
    const int cpb = group / KILN_GQ_CHUNK, cb = KILN_GQ_CHUNK_BYTES(bits);
    const size_t bsz = (size_t)KILN_GQ_BLOCK_BYTES(bits, group);
    const int64_t nb = nc / cpb;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    if (cpb == 1) {
        for (; b + 1 < nb; b += 2, w += 2 * bsz) {
            _mm_prefetch((const char *)w + GQ_PREFETCH, _MM_HINT_T0);
            acc0 = GQ_NAME(chunk)(w + KILN_GQ_HEAD, bits, _mm256_set1_epi8((char)w[2]), GQ_NAME(scale)(w), xq, dx, b,
                                  acc0);
            acc1 = GQ_NAME(chunk)(w + bsz + KILN_GQ_HEAD, bits, _mm256_set1_epi8((char)w[bsz + 2]),
                                  GQ_NAME(scale)(w + bsz), xq, dx, b + 1, acc1);
        }
    }
    for (; b < nb; b++, w += bsz) {
        _mm_prefetch((const char *)w + GQ_PREFETCH, _MM_HINT_T0);
        const __m256i z = _mm256_set1_epi8((char)w[2]);
        const float s = GQ_NAME(scale)(w);
        const uint8_t *c = w + KILN_GQ_HEAD;
        if (cpb == 1) {
            acc0 = GQ_NAME(chunk)(c, bits, z, s, xq, dx, b, acc0);
            break;
        }
        for (int j = 0; j < cpb; j += 2) {
            acc0 = GQ_NAME(chunk)(c + j * cb, bits, z, s, xq, dx, b * cpb + j, acc0);
            acc1 = GQ_NAME(chunk)(c + (j + 1) * cb, bits, z, s, xq, dx, b * cpb + j + 1, acc1);
        }
    }
    float a[16], r = 0.0f;
    _mm256_storeu_ps(a, acc0);
    _mm256_storeu_ps(a + 8, acc1);
    for (int l = 0; l < 16; l++) r += a[l];
    return r;
}

/* one copy per (bits, group), so that the decode and the block arithmetic
 * are constants */
static float GQ_NAME(dot)(const uint8_t *w, int bits, int group, const int8_t *xq, const float *dx,
                                    int64_t nc) {
#define GQ_CASE(b, g) \
    if (bits == b && group == g) return GQ_NAME(row)(w, b, g, xq, dx, nc);
    GQ_CASE(4, 32) GQ_CASE(4, 64) GQ_CASE(4, 128)
    GQ_CASE(3, 32) GQ_CASE(3, 64) GQ_CASE(3, 128)
    GQ_CASE(2, 32) GQ_CASE(2, 64) GQ_CASE(2, 128)
#undef GQ_CASE
    return kiln__gq_dot_ref(w, bits, group, xq, dx, nc);
}
