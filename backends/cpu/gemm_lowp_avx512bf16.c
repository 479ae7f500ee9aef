/* gemm_lowp_avx512bf16.c — bf16 GEMM with vdpbf16ps, for AVX-512 CPUs
 * without AMX. Reads the same packed operands as the AMX kernel (gemm_lowp.h):
 * an 8x32 micro-kernel keeps 16 accumulators in zmm registers, each step
 * broadcasting one bf16 pair of A against 16 VNNI pairs of B. */
#if defined(__x86_64__)
#include "gemm_lowp_x86.h"
#include "pool.h"

#include <stdalign.h>
#include <string.h>

static inline __m512 dp(__m512 acc, __m512i a, __m512i b) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }

static inline __m512i pair(const uint16_t *p) {
    int32_t x;
    memcpy(&x, p, 4);
    return _mm512_set1_epi32(x);
}

/* out (8 x 32, row stride 32) = rows r0..r0+7 of 16-row group a x panels b0, b1 */
static void micro(const uint16_t *a, const uint16_t *b0, const uint16_t *b1, int64_t chunks, float *out) {
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define DECL(i) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = _mm512_setzero_ps();
    ROWS(DECL)
    for (int64_t c = 0; c < chunks; c++) {
        const uint16_t *ac = a + c * 512, *bc0 = b0 + c * 512, *bc1 = b1 + c * 512;
        for (int q = 0; q < 16; q++) {
            __m512i v0 = _mm512_loadu_si512(bc0 + q * 32), v1 = _mm512_loadu_si512(bc1 + q * 32);
#define STEP(i)                                  \
    {                                            \
        __m512i av = pair(ac + (i) * 32 + 2 * q); \
        c##i##0 = dp(c##i##0, av, v0);           \
        c##i##1 = dp(c##i##1, av, v1);           \
    }
            ROWS(STEP)
        }
    }
#define STORE(i)                                 \
    _mm512_store_ps(out + (i) * 32, c##i##0);     \
    _mm512_store_ps(out + (i) * 32 + 16, c##i##1);
    ROWS(STORE)
#undef ROWS
#undef DECL
#undef STEP
#undef STORE
}

typedef struct kernel_job {
    const kiln_lowp_packed *p;
    kiln_dtype c_dt;
    void *c;
    int64_t ldc;
} kernel_job;

/* 32 x 32 blocks [t0, t1) of C */
static void blocks(void *arg, int64_t t0, int64_t t1, int tid) {
    const kernel_job *j = arg;
    const kiln_lowp_packed *p = j->p;
    const kiln_dtype c_dt = j->c_dt;
    void *c = j->c;
    const int64_t ldc = j->ldc, mb = p->mp / 32, chunks = p->kp / 32;
    size_t es = c_dt == KILN_F32 ? 4 : 2;
    (void)tid;
    for (int64_t t = t0; t < t1; t++) {
        alignas(64) float out[8 * 32];
        int64_t ib = t % mb, jb = t / mb, j0 = jb * 32;
        const uint16_t *b0 = p->b + (2 * jb) * (p->kp / 2) * 32, *b1 = b0 + (p->kp / 2) * 32;
        int64_t cols = p->n - j0 < 32 ? p->n - j0 : 32;
        for (int64_t r = 0; r < 32; r += 8) {
            int64_t i0 = ib * 32 + r;
            if (i0 >= p->m) break;
            const uint16_t *a = p->a + (i0 / 16) * chunks * 512 + (i0 % 16) * 32;
            micro(a, b0, b1, chunks, out);
            int64_t rows = p->m - i0 < 8 ? p->m - i0 : 8;
            lowp_store_block(c_dt, out, 32, rows, cols, (char *)c + (size_t)(i0 * ldc + j0) * es, ldc);
        }
    }
}

void kiln__lowp_kernel_avx512bf16(const kiln_lowp_packed *p, kiln_dtype c_dt, void *c, int64_t ldc, int n_threads) {
    kernel_job j = {p, c_dt, c, ldc};
    kiln__pool_for(p->mp / 32 * (p->np / 32), 1, n_threads, blocks, &j);
}
#endif
