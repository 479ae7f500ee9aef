/* test_qmatmul_kgemm.c — prompts (8 rows and more) of the K types, IQ4_XS
 * and the blocks of 32 (backends/cpu/qmatmul_kgemm.h, qmatmul_q32gemm.h)
 * equal the batch-1 products row by row, bit for bit, on every SIMD level
 * the CPU can emulate where they run (from AVX2 up, IQ4_NL from AVX-VNNI
 * up; NEON and NEON-dotprod): weights of random block bytes
 * (every code, scale and min; f16 scales from subnormal to 65504),
 * quantized rows, zero rows and a row of the largest codes;
 * activations N(0, 1) per row scale, a zero row, a row of +-3e38 and a
 * constant row (the largest codes times the largest x: int16 sums); rows
 * that fill tiles and rows that do not, columns past a whole panel, 2
 * threads; for the blocks of 32, rows of fewer than 8 blocks, of whole
 * groups of 8 and of groups and 7 left over (the reference's lanes). */
#include "kt.h"
#include "kt_simd.h"
#include "../quant/quant.h"
#include "../backends/cpu/qmatmul.h"
#include "../backends/cpu/qmatmul_ggml.h"
#include "../backends/cpu/qmatmul_kgemm.h"

#include <math.h>
#include <stddef.h>

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static float gauss(uint64_t *s) {
    float v = 0;
    for (int i = 0; i < 4; i++) v += (float)(rng(s) & 0xffff) / 65536.0f;
    return (v - 2.0f) * 1.7f;
}

/* the f16 fields of a block of t: offsets, -1 ends */
static const int *f16_fields(kiln_dtype t) {
    static const int q2[] = {offsetof(kiln_block_q2_K, d), offsetof(kiln_block_q2_K, dmin), -1},
                     q3[] = {offsetof(kiln_block_q3_K, d), -1},
                     q45[] = {offsetof(kiln_block_q4_K, d), offsetof(kiln_block_q4_K, dmin), -1},
                     q6[] = {offsetof(kiln_block_q6_K, d), -1}, iq[] = {offsetof(kiln_block_iq4_xs, d), -1},
                     dm32[] = {0, 2, -1}, d32[] = {0, -1}; /* Q4_1 / Q5_1's d, m; Q5_0 / IQ4_NL's d */
    if (t == KILN_Q4_1 || t == KILN_Q5_1) return dm32;
    if (t == KILN_Q5_0 || t == KILN_IQ4_NL || t == KILN_Q8_0 || t == KILN_Q4_0) return d32;
    return t == KILN_Q2_K ? q2 : t == KILN_Q3_K ? q3 : t == KILN_Q6_K ? q6 : t == KILN_IQ4_XS ? iq : q45;
}

/* row r of W: random bytes with finite f16 scales, quantized N(0, 1), or
 * zeros; row 4 every code at its largest (all bits set) */
static void weight_row(kiln_dtype t, int r, int64_t k, uint8_t *w, uint64_t *s) {
    const size_t bs = kiln__types[t].size, nb = (size_t)(k / kiln__types[t].blck);
    if (r % 5 == 1) {
        float x[4 * KILN_QK_K];
        for (int64_t e = 0; e < k; e++) x[e] = gauss(s);
        kiln__types[t].from_f32(x, w, k);
        return;
    }
    for (size_t i = 0; i < nb * bs; i++) w[i] = r % 5 == 3 ? 0 : r == 4 ? 0xff : (uint8_t)rng(s);
    for (size_t b = 0; r % 5 != 3 && b < nb; b++)
        for (const int *f = f16_fields(t); *f >= 0; f++) {
            const uint64_t v = rng(s);
            const uint16_t h = v % 9 == 0 ? 0x7bff : (uint16_t)((v >> 8) & 0xfbff); /* finite, subnormals too */
            memcpy(w + b * bs + *f, &h, 2);
        }
}

static bool same(float a, float b) { return (isnan(a) && isnan(b)) || !memcmp(&a, &b, sizeof a); }

KT_TEST(qmatmul_kgemm_prompts_equal_the_batch_1_products) {
    static const kiln_dtype ts[] = {KILN_Q4_K, KILN_Q5_K, KILN_Q6_K, KILN_IQ4_XS, KILN_Q2_K, KILN_Q3_K,
                                    KILN_Q4_1, KILN_Q5_0, KILN_Q5_1, KILN_IQ4_NL};
    enum { KMAX = 3 * KILN_QK_K, N = 45, MMAX = 40 };
    /* the K types' rows of 3 blocks; the blocks of 32's of 23 (16 in the
     * lanes, 7 after), 5 (none in them) and 16 (all) */
    static const int64_t kk[] = {KMAX, KMAX, KMAX}, k32[] = {23 * 32, 5 * 32, 16 * 32};
    static const int ms[] = {8, 13, 21, MMAX}, ns[] = {37, N}; /* the last panel 5 columns, or 8 + 5 (ymm halves) */
    static uint8_t w[N * KMAX]; /* more than N rows of any of the types */
    static float x[MMAX * KMAX], y[MMAX * N], y1[N];
    uint64_t s = 0x2545f4914f6cdd1du;
    for (int ti = 0; ti < (int)(sizeof ts / sizeof ts[0]); ti++) {
        const kiln_dtype t = ts[ti];
        const int64_t *ks = kiln__types[t].blck == KILN_QK ? k32 : kk;
        for (int c = 0; c < 8; c++) {
            const int m = ms[c % 4], n = ns[c / 4 % 2];
            const int64_t K = ks[c % 3];
            const size_t wrow = kiln__elems_bytes(t, K);
            for (int r = 0; r < N; r++) weight_row(t, r, K, w + r * wrow, &s);
            for (int i = 0; i < MMAX; i++)
                for (int e = 0; e < K; e++)
                    x[i * K + e] = i == 2   ? 0.0f
                                   : i == 5 ? (e & 1 ? 3e38f : -3e38f)
                                   : i == 6 ? 1.0f
                                            : gauss(&s) * (float)(1 + i % 4);
            KT_FOR_EACH_SIMD(v) {
                if (!kiln__qmm_kgemm_handles(t)) { /* the panels here (qmatmul_kgemm.h) */
                    KT_CHECK(!kiln__cpu_avx512vnni(&v.caps) && !kiln__cpu_neon(&v.caps),
                             "%s: no integer prompts at %s", kiln_dtype_name(t), v.name);
                    continue;
                }
                KT_CHECK(kiln__qmatmul_cpu(t, m, n, K, x, w, y, 2) == KILN_OK, "%s: %s", kiln_dtype_name(t),
                         kiln_last_error());
                for (int i = 0; i < m; i++) {
                    KT_CHECK(kiln__qmatmul_cpu(t, 1, n, K, x + i * K, w, y1, 1) == KILN_OK, "%s", kiln_last_error());
                    for (int j = 0; j < n; j++)
                        KT_CHECK(same(y[i * n + j], y1[j]), "%s, %s, m %d k %d, row %d col %d: %.9g, batch-1 %.9g",
                                 kiln_dtype_name(t), v.name, m, (int)K, i, j, y[i * n + j], y1[j]);
                }
            }
        }
    }
}

/* AVX-512 without VNNI (Skylake-X) runs zmm tiles (qmatmul_kgemm_avx512.c)
 * for the types whose codes fit vpmaddubsw, not AVX2's on ymm. */
KT_TEST(qmatmul_kgemm_avx512_has_its_own_tiles) {
    static const kiln_dtype ts[] = {KILN_Q4_K, KILN_Q5_K, KILN_Q6_K, KILN_Q2_K, KILN_Q3_K,
                                    KILN_Q4_1, KILN_Q5_0, KILN_Q5_1};
    enum { NT = (int)(sizeof ts / sizeof ts[0]) };
    const kiln_kgemm_kernels *avx2[NT] = {0};
    KT_FOR_EACH_SIMD(v) {
        for (int i = 0; i < NT; i++) {
            const kiln_kgemm_kernels *kk = kiln__qmm_kgemm_kernels(ts[i]);
            if (!strcmp(v.name, "avx2")) avx2[i] = kk;
            if (!strcmp(v.name, "avx512"))
                KT_CHECK(kk && kk != avx2[i] && kiln__qmm_kgemm_handles(ts[i]), "%s: AVX2's tiles at avx512",
                         kiln_dtype_name(ts[i]));
        }
    }
}

/* The few rows of batched decoding (1 .. 10, 13, 16, 19 and 20 about the
 * types' crossovers, kiln__qmm_batched_min: qmatmul.h's and
 * qmatmul_ggml.h's rows kernels, the tiles from the type's crossover where
 * they run it) equal the batch-1 products row by row, bit for bit, on
 * every level (every ggml type has a rows kernel from AVX2 up and on
 * NEON); odd n (one thread, and enough columns for two), rows of 1, 3
 * and 4 blocks for the K types, 23, 5, 16 and 14 for the blocks of 32
 * (groups of 8 and 7, 0 or 6 left over; Q4_0's pairs of pairs with 3, 1,
 * 0 and 2 blocks after). */
KT_TEST(qmatmul_few_rows_equal_the_batch_1_products) {
    static const kiln_dtype ts[] = {KILN_Q4_K, KILN_Q5_K, KILN_Q6_K, KILN_IQ4_XS, KILN_Q2_K, KILN_Q3_K, KILN_Q4_1,
                                    KILN_Q5_0, KILN_Q5_1, KILN_IQ4_NL, KILN_Q8_0,  KILN_Q4_0};
    enum { KMAX = 4 * KILN_QK_K, N = 101, MMAX = KILN_QMM_ROWS_TILES_MIN };
    static const int64_t kk[] = {KILN_QK_K, 3 * KILN_QK_K, KMAX, 2 * KILN_QK_K},
                         k32[] = {23 * 32, 5 * 32, 16 * 32, 14 * 32};
    static const int ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 13, 16, MMAX - 1, MMAX};
    static uint8_t w[N * KMAX];
    static float x[MMAX * KMAX], y[MMAX * N], y1[MMAX * N];
    uint64_t s = 0x9e3779b97f4a7c15u;
    for (int ti = 0; ti < (int)(sizeof ts / sizeof ts[0]); ti++) {
        const kiln_dtype t = ts[ti];
        const int64_t *ks = kiln__types[t].blck == KILN_QK ? k32 : kk;
        for (int c = 0; c < 4; c++) {
            const int n = c == 1 ? N : c == 3 ? 3 : 37;
            const int64_t K = ks[c];
            const size_t wrow = kiln__elems_bytes(t, K);
            for (int r = 0; r < n; r++) weight_row(t, r, K, w + r * wrow, &s);
            for (int i = 0; i < MMAX; i++)
                for (int e = 0; e < K; e++)
                    x[i * K + e] = i == 2   ? 0.0f
                                   : i == 5 ? (e & 1 ? 3e38f : -3e38f)
                                   : i == 6 ? 1.0f
                                            : gauss(&s) * (float)(1 + i % 4);
            KT_FOR_EACH_SIMD(v) {
                const bool i8 = t == KILN_Q8_0 || t == KILN_Q4_0; /* qmatmul.h's rows kernels */
                KT_CHECK(i8 || !(kiln__cpu_avx2(&v.caps) || kiln__cpu_neon(&v.caps)) || kiln__qmm_ggml_rows_kernel(t),
                         "%s: no rows kernel at %s", kiln_dtype_name(t), v.name);
                const int batched = (int)kiln__qmm_batched_min(t);
                for (int i = 0; i < MMAX; i++)
                    KT_CHECK(kiln__qmatmul_cpu(t, 1, n, K, x + i * K, w, y1 + i * n, 1) == KILN_OK, "%s",
                             kiln_last_error());
                for (int mi = 0; mi < (int)(sizeof ms / sizeof ms[0]); mi++) {
                    const int m = ms[mi];
                    if (m >= batched && !kiln__qmm_kgemm_handles(t)) continue; /* f32 panels, or Q8_0's GEMM */
                    KT_CHECK(kiln__qmatmul_cpu(t, m, n, K, x, w, y, 2) == KILN_OK, "%s", kiln_last_error());
                    for (int i = 0; i < m * n; i++)
                        KT_CHECK(same(y[i], y1[i]), "%s, %s, m %d k %d, row %d col %d: %.9g, batch-1 %.9g",
                                 kiln_dtype_name(t), v.name, m, (int)K, i / n, i % n, y[i], y1[i]);
                }
            }
        }
    }
}
