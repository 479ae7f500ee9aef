/* qmatmul_gq_x86.h — the GQ dot product of qmatmul_gq.h on x86, shared by
 * qmatmul_gq_avx2.c and qmatmul_gq_vnni.c, which define GQ_DOT32(u, s)
 * (8 int32 lanes, lane l = sum of u[4l+j] s[4l+j], u unsigned, s signed)
 * GQ_NAME(x), the function suffix, and GQ_TARGET, attributes (a target). */
#include "qmatmul_gq.h"

#include "../../quant/gq_x86.h"

/* bytes of W read ahead (see qmatmul_x86.h: W streams from DRAM) */
#define GQ_PREFETCH 4096

/* chunk i of the row: |q - zero| against sign(x8, q - zero), fma into acc */
static inline GQ_TARGET __m256 GQ_NAME(chunk)(const uint8_t *w, const int bits, const int group, const int8_t *xq,
                                    const float *dx, int64_t i, __m256 acc) {
    const int cpb = group / KILN_GQ_CHUNK;
    const uint8_t *b = w + (size_t)(i / cpb) * KILN_GQ_BLOCK_BYTES(bits, group);
    uint16_t h;
    memcpy(&h, b, 2);
    const __m256i q = _mm256_sub_epi8(kiln__gq_decode(b + KILN_GQ_HEAD + (i % cpb) * KILN_GQ_CHUNK_BYTES(bits), bits),
                                      _mm256_set1_epi8((char)b[2]));
    const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + 32 * i));
    const __m256i s = GQ_DOT32(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(_cvtsh_ss(h) * dx[i]), acc);
}

static inline GQ_TARGET float GQ_NAME(row)(const uint8_t *w, const int bits, const int group, const int8_t *xq,
                                 const float *dx, int64_t nc) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    const size_t pair_bytes = (size_t)2 * KILN_GQ_CHUNK_BYTES(bits);
    int64_t i = 0;
    for (; i + 1 < nc; i += 2) {
        _mm_prefetch((const char *)w + (size_t)i / 2 * pair_bytes + GQ_PREFETCH, _MM_HINT_T0);
        acc0 = GQ_NAME(chunk)(w, bits, group, xq, dx, i, acc0);
        acc1 = GQ_NAME(chunk)(w, bits, group, xq, dx, i + 1, acc1);
    }
    if (i < nc) acc0 = GQ_NAME(chunk)(w, bits, group, xq, dx, i, acc0);
    float a[16], s = 0.0f;
    _mm256_storeu_ps(a, acc0);
    _mm256_storeu_ps(a + 8, acc1);
    for (int l = 0; l < 16; l++) s += a[l];
    return s;
}

/* one copy per (bits, group), so that the decode and the block arithmetic
 * are constants */
static GQ_TARGET float GQ_NAME(dot)(const uint8_t *w, int bits, int group, const int8_t *xq, const float *dx, int64_t nc) {
#define GQ_CASE(b, g) \
    if (bits == b && group == g) return GQ_NAME(row)(w, b, g, xq, dx, nc);
    GQ_CASE(4, 32) GQ_CASE(4, 64) GQ_CASE(4, 128)
    GQ_CASE(3, 32) GQ_CASE(3, 64) GQ_CASE(3, 128)
    GQ_CASE(2, 32) GQ_CASE(2, 64) GQ_CASE(2, 128)
#undef GQ_CASE
    return kiln__gq_dot_ref(w, bits, group, xq, dx, nc);
}
