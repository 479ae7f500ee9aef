/* test_qmatmul_kq.c — the x86 kernels of the K types' and IQ4_XS's batch-1
 * products (backends/cpu/qmatmul_kq.h) against the scalar reference
 * kiln__qmm_dot_ggml_ref, bit for bit, at every SIMD level this CPU can
 * emulate: quantized N(0, 1) rows, rows of random bytes (every code,
 * scale and min, Q6_K's scale -128), zero blocks, the largest codes and
 * scales with f16 65504 and huge activations, and 1 to 17 blocks; and the
 * SIMD quantizer of x to Q8_K against its reference, byte for byte
 * (ties, the sign of max, NaN, infinities, subnormals). */
#include "kt.h"
#include "kt_simd.h"
#include "../quant/quant.h"
#include "../backends/cpu/qmatmul_kq.h"

#include <math.h>
#include <stdint.h>

static const kiln_dtype kq_types[] = {KILN_Q4_K, KILN_Q5_K, KILN_Q6_K, KILN_IQ4_XS, KILN_Q2_K, KILN_Q3_K};
#define N_KQ (int)(sizeof kq_types / sizeof kq_types[0])
#define MAX_NB 17

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint32_t next_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
/* roughly N(0, 1): a sum of four uniforms, centred and scaled */
static float gauss(void) {
    float s = 0;
    for (int i = 0; i < 4; i++)
        s += (float)(next_u32() & 0xffff) / 65536.0f;
    return (s - 2.0f) * 1.7f;
}

/* The f16 fields of a block (d, and dmin where it has one): offsets. */
static void f16_fields(kiln_dtype t, int off[2], int *n) {
    switch (t) {
    case KILN_Q4_K: off[0] = offsetof(kiln_block_q4_K, d), off[1] = offsetof(kiln_block_q4_K, dmin), *n = 2; break;
    case KILN_Q5_K: off[0] = offsetof(kiln_block_q5_K, d), off[1] = offsetof(kiln_block_q5_K, dmin), *n = 2; break;
    case KILN_Q6_K: off[0] = offsetof(kiln_block_q6_K, d), *n = 1; break;
    case KILN_Q2_K: off[0] = offsetof(kiln_block_q2_K, d), off[1] = offsetof(kiln_block_q2_K, dmin), *n = 2; break;
    case KILN_Q3_K: off[0] = offsetof(kiln_block_q3_K, d), *n = 1; break;
    default: off[0] = offsetof(kiln_block_iq4_xs, d), *n = 1; break;
    }
}

enum { ROW_QUANT, ROW_BYTES, ROW_ZERO, ROW_MAX, ROW_KINDS };

/* nb blocks of dtype t of one kind (block 1 of ROW_QUANT rows zero) */
static void weight_row(kiln_dtype t, int kind, int nb, uint8_t *w) {
    const size_t bs = kiln__types[t].size;
    if (kind == ROW_QUANT) {
        float x[MAX_NB * KILN_QK_K];
        for (int e = 0; e < nb * KILN_QK_K; e++)
            x[e] = e / KILN_QK_K == 1 ? 0.0f : gauss() * (float)(1 + e % 7);
        kiln__types[t].from_f32(x, w, (int64_t)nb * KILN_QK_K);
        return;
    }
    for (size_t i = 0; i < bs * (size_t)nb; i++)
        w[i] = kind == ROW_ZERO ? 0 : kind == ROW_MAX ? 0xff : (uint8_t)next_u32();
    if (kind == ROW_ZERO) return;
    int off[2], nf;
    f16_fields(t, off, &nf);
    for (int b = 0; b < nb; b++)
        for (int f = 0; f < nf; f++) {
            /* finite halves: random exponents (subnormals too), or the largest */
            const uint16_t h = kind == ROW_MAX ? 0x7bff : (uint16_t)(next_u32() & 0xfbff);
            memcpy(w + b * bs + off[f], &h, 2);
        }
}

/* nb blocks of Q8_K: N(0, 1) scaled per block, one block zero, or huge
 * values that saturate the codes and the f32 products */
static void act_row(int kind, int nb, kiln_block_q8_K *a) {
    float x[MAX_NB * KILN_QK_K];
    for (int e = 0; e < nb * KILN_QK_K; e++) {
        const int b = e / KILN_QK_K;
        x[e] = kind == ROW_MAX ? (e & 1 ? 3e38f : -3e38f) : b == nb - 1 && nb > 2 ? 0.0f : gauss() * (float)(b + 1);
    }
    kiln__quantize_q8_K_ref(x, a, (int64_t)nb * KILN_QK_K);
}

static bool same(float a, float b) { return (isnan(a) && isnan(b)) || !memcmp(&a, &b, sizeof a); }

KT_TEST(qmatmul_kq_kernels_match_the_reference) {
    static uint8_t w[MAX_NB * sizeof(kiln_block_q6_K)];
    static kiln_block_q8_K a[MAX_NB];
    const int nbs[] = {1, 2, 3, 8, MAX_NB};
    for (int ti = 0; ti < N_KQ; ti++) {
        const kiln_dtype t = kq_types[ti];
        for (int ni = 0; ni < (int)(sizeof nbs / sizeof nbs[0]); ni++)
            for (int kind = 0; kind < ROW_KINDS; kind++)
                for (int xk = 0; xk < 2; xk++) {
                    const int nb = nbs[ni];
                    weight_row(t, kind, nb, w);
                    act_row(xk ? ROW_MAX : ROW_QUANT, nb, a);
                    const float want = kiln__qmm_dot_ggml_ref(t, w, a, nb);
                    KT_FOR_EACH_SIMD(v) {
                        kiln_qmm_dot_ggml *dot = kiln__qmm_ggml_kernel(t);
                        /* every x86 level from AVX2 up runs a kernel of its own */
                        KT_CHECK(!kiln__cpu_avx2(&v.caps) || kiln__qmm_kq_kernel(t) == dot,
                                 "%s: no SIMD kernel at this level", kiln_dtype_name(t));
                        const float got = dot(w, a, nb);
                        KT_CHECK(same(got, want), "%s, %d blocks, weights %d, x %d: %.9g vs the reference's %.9g",
                                 kiln_dtype_name(t), nb, kind, xk, got, want);
                    }
                }
    }
}

/* AVX-512 without VNNI (Skylake-X) runs zmm kernels of Q4_K, Q5_K and
 * Q6_K (qmatmul_kq_avx512.c), not AVX2's on ymm. */
KT_TEST(qmatmul_kq_avx512_has_its_own_kernels) {
    static const kiln_dtype zmm[] = {KILN_Q4_K, KILN_Q5_K, KILN_Q6_K};
    kiln_qmm_dot_ggml *avx2[3] = {0};
    kiln_qmm_dot_ggml_rows *rows2[3] = {0};
    KT_FOR_EACH_SIMD(v) {
        const bool is_avx2 = !strcmp(v.name, "avx2"), is_avx512 = !strcmp(v.name, "avx512");
        for (int i = 0; i < 3; i++) {
            kiln_qmm_dot_ggml *k = kiln__qmm_kq_kernel(zmm[i]);
            kiln_qmm_dot_ggml_rows *r = kiln__qmm_kq_rows_kernel(zmm[i]);
            if (is_avx2) avx2[i] = k, rows2[i] = r;
            if (is_avx512)
                KT_CHECK(k && r && k != avx2[i] && r != rows2[i], "%s: AVX2's kernels at avx512",
                         kiln_dtype_name(zmm[i]));
        }
    }
}

/* 256 values of one kind for the Q8_K quantizer */
static void q8k_block(int kind, float *x) {
    for (int e = 0; e < KILN_QK_K; e++)
        x[e] = gauss() * 3.0f;
    switch (kind) {
    case 1: memset(x, 0, KILN_QK_K * sizeof *x); break;
    case 2: /* max = -127: iscale 1, so every x + 0.5 is a tie (to even) */
        for (int e = 0; e < KILN_QK_K; e++)
            x[e] = (float)(e % 200 - 100) + 0.5f;
        x[7] = -127.0f;
        break;
    case 3: x[5] = 9.0f, x[9] = -9.0f; break; /* the first of +-amax gives the sign */
    case 4: x[5] = -9.0f, x[9] = 9.0f; break;
    case 5: x[11] = NAN; break;
    case 6: x[200] = -INFINITY; break;
    case 7:
        for (int e = 0; e < KILN_QK_K; e++)
            x[e] *= 1e-42f;
        break; /* subnormal */
    case 8: x[0] = 3e38f; break;
    }
}

KT_TEST(qmatmul_kq_quantize_q8_K_matches_the_reference) {
    enum { KINDS = 9, NB = KINDS + 2 };
    static float x[NB * KILN_QK_K];
    static kiln_block_q8_K want[NB], got[NB];
    for (int b = 0; b < NB; b++)
        q8k_block(b % KINDS, x + b * KILN_QK_K);
    kiln__quantize_q8_K_ref(x, want, NB * KILN_QK_K);
    KT_CHECK(kiln__types[KILN_Q8_K].from_f32 == kiln__quantize_q8_K, "Q8_K's coder is not the CPU's quantizer");
    KT_FOR_EACH_SIMD(v) {
        KT_CHECK(!(kiln__cpu_avx2(&v.caps) || kiln__cpu_neon(&v.caps)) || kiln__quantize_q8_K_kernel(),
                 "no SIMD Q8_K quantizer at %s", v.name);
        memset(got, 0xa5, sizeof got);
        kiln__types[KILN_Q8_K].from_f32(x, got, NB * KILN_QK_K); /* the registered coder */
        for (int b = 0; b < NB; b++)
            KT_CHECK(!memcmp(&got[b], &want[b], sizeof got[b]), "block %d (kind %d) differs from the reference's", b,
                     b % KINDS);
    }
}
