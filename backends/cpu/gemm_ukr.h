/* gemm_ukr.h — the micro-kernel body the x86 f32 GEMM kernels share
 * (gemm_kernel_avx2.c, gemm_kernel_avx512.c): the tile's accumulators
 * (ROW), C prefetched into L2 then L1 while the k loop runs its last
 * C_AHEAD steps (STEPS), the odd last step, then alpha and beta into C
 * (STORE). The including file defines those for its level, with UKR_VEC
 * (its vector type) and UKR_SET1 (its broadcast), and is compiled with
 * that level's flags. */

/* The kernel for the first `rows` rows of the tile (A panels keep their MR stride). */
#define UKR(name, ALL)                                                                                             \
    static void name(int64_t kc, const float *a, int64_t as, const float *b, int64_t bs, float *c, int64_t ldc,    \
                     float alpha, float beta) {                                                                    \
        ALL(ROW)                                                                                                   \
        ALL(PREFETCH_C_L2)                                                                                         \
        int64_t p = 0;                                                                                             \
        STEPS(ALL, kc - C_AHEAD)                                                                                   \
        ALL(PREFETCH_C_L1)                                                                                         \
        STEPS(ALL, kc)                                                                                             \
        if (p < kc) {                                                                                              \
            STEP(ALL, 0)                                                                                           \
        }                                                                                                          \
        UKR_VEC va = UKR_SET1(alpha), vb = UKR_SET1(beta);                                                         \
        ALL(STORE)                                                                                                 \
    }
