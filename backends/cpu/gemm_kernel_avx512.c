/* gemm_kernel_avx512.c — kiln's f32 GEMM micro-kernel for AVX-512: a 14 x 32
 * tile of C in 28 zmm accumulators, each step one broadcast of A per row
 * against two 16-wide vectors of B (FMA-bound: 28 FMAs per 16 loads). */
#if defined(__x86_64__)
#include <immintrin.h>

#define GEMV_SUFFIX avx512
#include "gemm_gemv.h"

#define MR 14
#define NR 32

/* c += a * b in the accumulator's own register: with _mm512_fmadd_ps, gcc 12
 * picked 213 forms that overwrite B's vector, then moved accumulators
 * around and kept one on the stack (a store and a load each step): the
 * kernel ran about 6% below this form (Zen 5, packed 168 x 336 x 2048). */
#define FMA231(c, b, a) __asm__("vfmadd231ps %1, %2, %0" : "+v"(c) : "v"(b), "v"(a))
/* Every vector of the loop in a register of its own: row i's accumulators
 * in zmm 2i and 2i+1, B's two vectors in zmm28-29, A's broadcast in zmm30.
 * Left to itself gcc 12 loaded the next step's B before the last row's
 * FMAs and, one register short, kept an accumulator on the stack (a load
 * and a store every two steps) and moved another between registers. */
#define ZREG0(i) ZREG_##i##_0
#define ZREG1(i) ZREG_##i##_1
#define ZREG_0_0 "zmm0"
#define ZREG_0_1 "zmm1"
#define ZREG_1_0 "zmm2"
#define ZREG_1_1 "zmm3"
#define ZREG_2_0 "zmm4"
#define ZREG_2_1 "zmm5"
#define ZREG_3_0 "zmm6"
#define ZREG_3_1 "zmm7"
#define ZREG_4_0 "zmm8"
#define ZREG_4_1 "zmm9"
#define ZREG_5_0 "zmm10"
#define ZREG_5_1 "zmm11"
#define ZREG_6_0 "zmm12"
#define ZREG_6_1 "zmm13"
#define ZREG_7_0 "zmm14"
#define ZREG_7_1 "zmm15"
#define ZREG_8_0 "zmm16"
#define ZREG_8_1 "zmm17"
#define ZREG_9_0 "zmm18"
#define ZREG_9_1 "zmm19"
#define ZREG_10_0 "zmm20"
#define ZREG_10_1 "zmm21"
#define ZREG_11_0 "zmm22"
#define ZREG_11_1 "zmm23"
#define ZREG_12_0 "zmm24"
#define ZREG_12_1 "zmm25"
#define ZREG_13_0 "zmm26"
#define ZREG_13_1 "zmm27"
#define ROW(i)                                                                                                     \
    register __m512 c##i##0 __asm__(ZREG0(i)) = _mm512_setzero_ps();                                               \
    register __m512 c##i##1 __asm__(ZREG1(i)) = _mm512_setzero_ps();
#define FMA(i)                                                                                                     \
    {                                                                                                              \
        register __m512 ai __asm__("zmm30") = _mm512_set1_ps(ak[i]);                                               \
        FMA231(c##i##0, b0, ai);                                                                                   \
        FMA231(c##i##1, b1, ai);                                                                                   \
    }
#define STORE(i)                                                                                                   \
    {                                                                                                              \
        float *ci = c + (i) * ldc;                                                                                 \
        if (beta == 0) {                                                                                           \
            _mm512_storeu_ps(ci, _mm512_mul_ps(va, c##i##0));                                                      \
            _mm512_storeu_ps(ci + 16, _mm512_mul_ps(va, c##i##1));                                                 \
        } else {                                                                                                   \
            _mm512_storeu_ps(ci, _mm512_fmadd_ps(vb, _mm512_loadu_ps(ci), _mm512_mul_ps(va, c##i##0)));            \
            _mm512_storeu_ps(ci + 16, _mm512_fmadd_ps(vb, _mm512_loadu_ps(ci + 16), _mm512_mul_ps(va, c##i##1)));  \
        }                                                                                                          \
    }
#define L1(X) X(0)
#define L2(X) X(0) X(1)
#define L3(X) X(0) X(1) X(2)
#define L4(X) X(0) X(1) X(2) X(3)
#define L5(X) X(0) X(1) X(2) X(3) X(4)
#define L6(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define L7(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6)
#define L8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define L9(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8)
#define L10(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9)
#define L11(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10)
#define L12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define L13(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12)
#define L14(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
/* C's rows to L2 when the tile starts and to L1 for its last C_AHEAD
 * steps: C rows 8 KiB apart (n = 2048) share one L1 set, so the 28 lines
 * fetched to L1 at the start were evicted by the panels before the end
 * (10% of the kernel's time at 2048^2 was its loads and stores of C). */
#define C_AHEAD 32
/* B's panel fills L1 beside the A and C lines that pass through it, so
 * some of its lines are gone when a tile reaches them: each step's lines
 * are fetched again B_AHEAD steps ahead (Zen 5, CPU time, 1 thread, on
 * a loaded machine: +3% at 512^2 to 4096^2, +8% at 2048^2 where C's rows
 * are not 64-byte aligned; 4 and 16 steps ahead both lost 2%) */
#define B_AHEAD 8
#define PREFETCH_C(i, hint) _mm_prefetch((const char *)(c + (i) * ldc), hint), _mm_prefetch((const char *)(c + (i) * ldc + 31), hint);
#define PREFETCH_C_L2(i) PREFETCH_C(i, _MM_HINT_T1)
#define PREFETCH_C_L1(i) PREFETCH_C(i, _MM_HINT_T0)
#define STEP(ALL, off)                                                                                             \
    {                                                                                                              \
        register __m512 b0 __asm__("zmm28") = _mm512_loadu_ps(b + (off) * bs);                                     \
        register __m512 b1 __asm__("zmm29") = _mm512_loadu_ps(b + (off) * bs + 16);                                \
        const float *ak = a + (off) * as;                                                                          \
        ALL(FMA)                                                                                                   \
    }
#define STEPS(ALL, end)                                                                                            \
    for (; p + 2 <= (end); p += 2) {                                                                               \
        _mm_prefetch((const char *)(a + 12 * as), _MM_HINT_T0); /* A streams from L2 */                           \
        _mm_prefetch((const char *)(a + 12 * as + 16), _MM_HINT_T0);                                               \
        _mm_prefetch((const char *)(b + B_AHEAD * bs), _MM_HINT_T0);                                               \
        _mm_prefetch((const char *)(b + B_AHEAD * bs + 16), _MM_HINT_T0);                                          \
        _mm_prefetch((const char *)(b + (B_AHEAD + 1) * bs), _MM_HINT_T0);                                         \
        _mm_prefetch((const char *)(b + (B_AHEAD + 1) * bs + 16), _MM_HINT_T0);                                    \
        STEP(ALL, 0)                                                                                               \
        STEP(ALL, 1)                                                                                               \
        a += 2 * as;                                                                                               \
        b += 2 * bs;                                                                                               \
    }

#define UKR_VEC __m512
#define UKR_SET1 _mm512_set1_ps
#include "gemm_ukr.h"

UKR(ukr, L14)
UKR(ukr1, L1)
UKR(ukr2, L2)
UKR(ukr3, L3)
UKR(ukr4, L4)
UKR(ukr5, L5)
UKR(ukr6, L6)
UKR(ukr7, L7)
UKR(ukr8, L8)
UKR(ukr9, L9)
UKR(ukr10, L10)
UKR(ukr11, L11)
UKR(ukr12, L12)
UKR(ukr13, L13)

/* Edge tiles of fewer rows compute only those rows (m = 128 would
 * otherwise waste 12 of the last tile's 14). */
static void ukr_rows(int rows, int64_t kc, const float *a, int64_t as, const float *b, int64_t bs, float *c,
                     int64_t ldc, float alpha, float beta) {
    static const kiln__sgemm_ukr by_rows[MR + 1] = {NULL, ukr1, ukr2, ukr3, ukr4, ukr5, ukr6, ukr7,
                                                    ukr8, ukr9, ukr10, ukr11, ukr12, ukr13, ukr};
    by_rows[rows](kc, a, as, b, bs, c, ldc, alpha, beta);
}

const kiln__sgemm_kernel kiln__sgemm_kernel_avx512 = {
    "avx512", MR, NR, ukr, kiln__sgemv_axpy_avx512, kiln__sgemv_dot_avx512, kiln__sgemm_pack_t_avx2, ukr_rows,
};
#endif
