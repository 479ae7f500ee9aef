/* gemm_kernel_avx2.c — kiln's f32 GEMM micro-kernel for AVX2 + FMA: a 6 x 16
 * tile of C in 12 ymm accumulators (one broadcast of A per row against two
 * 8-wide vectors of B each step). */
#if defined(__x86_64__)
#include <immintrin.h>

#define GEMV_SUFFIX avx2
#include "gemm_gemv.h"

#define MR 6
#define NR 16

/* c += a * b in the accumulator's own register (as the AVX-512 kernel:
 * gcc may otherwise pick forms that move accumulators around) */
#define FMA231(c, b, a) __asm__("vfmadd231ps %1, %2, %0" : "+v"(c) : "v"(b), "v"(a))
#define ROW(i) __m256 c##i##0 = _mm256_setzero_ps(), c##i##1 = _mm256_setzero_ps();
#define FMA(i)                                                                                                     \
    {                                                                                                              \
        __m256 ai = _mm256_broadcast_ss(ak + (i));                                                                 \
        FMA231(c##i##0, b0, ai);                                                                                   \
        FMA231(c##i##1, b1, ai);                                                                                   \
    }
#define STORE(i)                                                                                                   \
    {                                                                                                              \
        float *ci = c + (i) * ldc;                                                                                 \
        if (beta == 0) {                                                                                           \
            _mm256_storeu_ps(ci, _mm256_mul_ps(va, c##i##0));                                                      \
            _mm256_storeu_ps(ci + 8, _mm256_mul_ps(va, c##i##1));                                                  \
        } else {                                                                                                   \
            _mm256_storeu_ps(ci, _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci), _mm256_mul_ps(va, c##i##0)));            \
            _mm256_storeu_ps(ci + 8, _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci + 8), _mm256_mul_ps(va, c##i##1)));    \
        }                                                                                                          \
    }
/* the first n rows of the tile */
#define L1(X) X(0)
#define L2(X) X(0) X(1)
#define L3(X) X(0) X(1) X(2)
#define L4(X) X(0) X(1) X(2) X(3)
#define L5(X) X(0) X(1) X(2) X(3) X(4)
#define L6(X) X(0) X(1) X(2) X(3) X(4) X(5)
/* As the AVX-512 kernel: C's rows to L2 when the tile starts and to L1
 * for its last C_AHEAD steps, B's lines to L1 again B_AHEAD steps ahead,
 * A's from L2 ahead of use (with the pinned FMAs, Zen 5 at KILN_SIMD=avx2,
 * CPU time, 1 thread: +4% at 2048^2, +5% at 4096^2, 512^2 and 1024^2 as
 * before; 0.99-1.01x OpenBLAS's Haswell kernels) */
#define C_AHEAD 32
#define B_AHEAD 8
#define PREFETCH_C(i, hint) _mm_prefetch((const char *)(c + (i) * ldc), hint), _mm_prefetch((const char *)(c + (i) * ldc + 15), hint);
#define PREFETCH_C_L2(i) PREFETCH_C(i, _MM_HINT_T1)
#define PREFETCH_C_L1(i) PREFETCH_C(i, _MM_HINT_T0)
#define STEP(ALL, off)                                                                                             \
    {                                                                                                              \
        __m256 b0 = _mm256_loadu_ps(b + (off) * bs), b1 = _mm256_loadu_ps(b + (off) * bs + 8);                     \
        const float *ak = a + (off) * as;                                                                          \
        ALL(FMA)                                                                                                   \
    }
#define STEPS(ALL, end)                                                                                            \
    for (; p + 2 <= (end); p += 2) {                                                                               \
        _mm_prefetch((const char *)(a + 16 * as), _MM_HINT_T0);                                                    \
        _mm_prefetch((const char *)(b + B_AHEAD * bs), _MM_HINT_T0);                                               \
        _mm_prefetch((const char *)(b + (B_AHEAD + 1) * bs), _MM_HINT_T0);                                         \
        STEP(ALL, 0)                                                                                               \
        STEP(ALL, 1)                                                                                               \
        a += 2 * as;                                                                                               \
        b += 2 * bs;                                                                                               \
    }

#define UKR_VEC __m256
#define UKR_SET1 _mm256_set1_ps
#include "gemm_ukr.h"

UKR(ukr, L6)
UKR(ukr1, L1)
UKR(ukr2, L2)
UKR(ukr3, L3)
UKR(ukr4, L4)
UKR(ukr5, L5)

/* Edge tiles of fewer rows compute only those rows, in place (the full
 * kernel into a scratch tile and a copy out wasted 2 of the last tile's
 * 6 rows at m = 64, the first layers' channels in the ResNets). */
static void ukr_rows(int rows, int64_t kc, const float *a, int64_t as, const float *b, int64_t bs, float *c,
                     int64_t ldc, float alpha, float beta) {
    static const kiln__sgemm_ukr by_rows[MR + 1] = {NULL, ukr1, ukr2, ukr3, ukr4, ukr5, ukr};
    by_rows[rows](kc, a, as, b, bs, c, ldc, alpha, beta);
}

/* 8 x 8 blocks transposed in registers (the packing of an untransposed
 * A or a transposed B would otherwise be one strided store per element);
 * rows past `rows` read as zeros, lanes past w are masked off. */
#define ROW_OR_0(q) ((q) < real ? _mm256_loadu_ps(s + (q) * ld + p) : _mm256_setzero_ps())

void kiln__sgemm_pack_t_avx2(const float *src, int64_t ld, int rows, int64_t kc, int w, float *dst) {
    for (int i0 = 0; i0 < w; i0 += 8) {
        int real = rows - i0 < 0 ? 0 : rows - i0 > 8 ? 8 : rows - i0, lanes = w - i0 > 8 ? 8 : w - i0;
        __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const float *s = src + i0 * ld;
        float *d0 = dst + i0;
        int64_t p = 0;
        for (; p + 8 <= kc; p += 8) {
            __m256 r0 = ROW_OR_0(0), r1 = ROW_OR_0(1), r2 = ROW_OR_0(2), r3 = ROW_OR_0(3), r4 = ROW_OR_0(4),
                   r5 = ROW_OR_0(5), r6 = ROW_OR_0(6), r7 = ROW_OR_0(7);
            __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
                   t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
                   t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
            __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
                   u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
                   u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
                   u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
            float *d = d0 + p * w;
            if (lanes == 8) {
                _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
                _mm256_storeu_ps(d + w, _mm256_permute2f128_ps(u1, u5, 0x20));
                _mm256_storeu_ps(d + 2 * w, _mm256_permute2f128_ps(u2, u6, 0x20));
                _mm256_storeu_ps(d + 3 * w, _mm256_permute2f128_ps(u3, u7, 0x20));
                _mm256_storeu_ps(d + 4 * w, _mm256_permute2f128_ps(u0, u4, 0x31));
                _mm256_storeu_ps(d + 5 * w, _mm256_permute2f128_ps(u1, u5, 0x31));
                _mm256_storeu_ps(d + 6 * w, _mm256_permute2f128_ps(u2, u6, 0x31));
                _mm256_storeu_ps(d + 7 * w, _mm256_permute2f128_ps(u3, u7, 0x31));
            } else {
                _mm256_maskstore_ps(d, mask, _mm256_permute2f128_ps(u0, u4, 0x20));
                _mm256_maskstore_ps(d + w, mask, _mm256_permute2f128_ps(u1, u5, 0x20));
                _mm256_maskstore_ps(d + 2 * w, mask, _mm256_permute2f128_ps(u2, u6, 0x20));
                _mm256_maskstore_ps(d + 3 * w, mask, _mm256_permute2f128_ps(u3, u7, 0x20));
                _mm256_maskstore_ps(d + 4 * w, mask, _mm256_permute2f128_ps(u0, u4, 0x31));
                _mm256_maskstore_ps(d + 5 * w, mask, _mm256_permute2f128_ps(u1, u5, 0x31));
                _mm256_maskstore_ps(d + 6 * w, mask, _mm256_permute2f128_ps(u2, u6, 0x31));
                _mm256_maskstore_ps(d + 7 * w, mask, _mm256_permute2f128_ps(u3, u7, 0x31));
            }
        }
        for (; p < kc; p++)
            for (int q = 0; q < lanes; q++) d0[p * w + q] = q < real ? s[q * ld + p] : 0;
    }
}

const kiln__sgemm_kernel kiln__sgemm_kernel_avx2 = {
    "avx2", MR, NR, ukr, kiln__sgemv_axpy_avx2, kiln__sgemv_dot_avx2, kiln__sgemm_pack_t_avx2, ukr_rows,
};
#endif
