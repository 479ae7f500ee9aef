/* test_backend_attention_tc.c — CUDA's training attention on tensor cores
 * (k_attention_flash_tc.cu), which kiln_set_matmul_precision's TF32 and
 * BF16 modes select as they do cuBLAS's: forward and gradients against the
 * CPU's exact f32 within the mode's rounding, and the products' inputs
 * rounded as the mode says. On the fake toolkit (backends/cuda/emu/fake)
 * the warp matrix functions are its mma.h. */
#include "backend_ops_util.h"
#include "kt_device.h"

/* Normalized error (backend_ops_util.h) allowed: TF32 keeps 10 bits of
 * each input (2^-11 relative), bf16 7 (2^-8), and P and dS are rounded
 * again as inputs of the next product; the cases below reach 9.5e-4 and
 * 7.8e-3 on the fake toolkit. */
#define TC_TF32 2e-3
#define TC_BF16 2e-2

typedef struct tc_arg {
    int64_t b, hq, hkv, t, s, d, dv;
    bool causal;
} tc_arg;

/* rows and keys not multiples of a tile (32 up to D 64, 16 up to 128),
 * GQA, queries that see no key, a decoding-sized forward (the FMA
 * kernel's) with its backward on tensor cores */
static const tc_arg A_37x45 = {1, 2, 2, 37, 45, 32, 32, false}, A_GQA = {1, 4, 2, 21, 29, 64, 48, true},
                    A_D128 = {1, 2, 1, 19, 23, 128, 112, true}, A_BLIND = {2, 2, 2, 20, 12, 16, 16, true},
                    A_DEC = {1, 1, 1, 3, 40, 80, 96, false};

static kiln_tensor *b_attn(bo_io *io) {
    const tc_arg *a = io->arg;
    kiln_tensor *q = bo_in_range(io, -2, 2, BO_SHAPE(a->b, a->hq, a->t, a->d));
    kiln_tensor *k = bo_in_range(io, -2, 2, BO_SHAPE(a->b, a->hkv, a->s, a->d));
    return kiln_attention(io->ctx, q, k, bo_in(io, BO_SHAPE(a->b, a->hkv, a->s, a->dv)), a->causal, 0);
}

#define TC_CASES(tol)                                                                                                  \
    {{"tc_37x45_d32", b_attn, KILN_F32, tol, 0, &A_37x45},                                                            \
     {"tc_gqa_causal_21x29_d64", b_attn, KILN_F32, tol, 0, &A_GQA},                                                  \
     {"tc_causal_19x23_d128", b_attn, KILN_F32, tol, 0, &A_D128},                                                    \
     {"tc_rows_without_keys", b_attn, KILN_F32, tol, 0, &A_BLIND},                                                   \
     {"tc_3x40_d80", b_attn, KILN_F32, tol, 0, &A_DEC}}

static void run_in(kiln_matmul_precision p, const char *family, const bo_case *cases, int n) {
    kiln_backend *cu = kt_device("cuda");
    if (!cu) return;
    KT_OK(kiln_set_matmul_precision(p));
    bo_run_cases_on(family, cases, n, cu);
    KT_OK(kiln_set_matmul_precision(KILN_MATMUL_F32));
}

KT_TEST(backend_attention_tc_tf32) {
    static const bo_case cases[] = TC_CASES(TC_TF32);
    run_in(KILN_MATMUL_TF32, "attn_tf32", cases, BO_COUNT(cases));
}

KT_TEST(backend_attention_tc_bf16) {
    static const bo_case cases[] = TC_CASES(TC_BF16);
    run_in(KILN_MATMUL_BF16, "attn_bf16", cases, BO_COUNT(cases));
}

/* q = 0 makes every score 0, so P = 1 in the forward and 1/16 (16 keys) in
 * the backward; v and dO are 1 + 2^-12, which f32 keeps and tf32 (10
 * bits) and bf16 (7) round to 1. So O and dv are 1 + 2^-12 (dv: times
 * the group of 2) in exact f32 and exactly 1 (2) on tensor cores. One
 * graph computed under each mode in turn: graph replay's key must change
 * with the mode. Head sizes 16 and 128: both tile shapes. */
KT_TEST(backend_attention_tc_rounds_inputs) {
    kiln_backend *cu = kt_device("cuda");
    if (!cu) return;
    const float x = 1.0f + 0x1p-12f;
    const kiln_matmul_precision modes[] = {KILN_MATMUL_F32, KILN_MATMUL_TF32, KILN_MATMUL_F32, KILN_MATMUL_BF16,
                                           KILN_MATMUL_F32};
    for (int64_t d = 16; d <= 128; d += 112) {
        kiln_ctx *ctx = kiln_ctx_new();
        KT_REQUIRE(ctx, "context");
        KT_OK(kiln_ctx_set_backend(ctx, cu));
        kiln_tensor *q = kiln_new_4d(ctx, KILN_F32, 1, 2, 16, d), *k = kiln_new_4d(ctx, KILN_F32, 1, 1, 16, d);
        kiln_tensor *v = kiln_param(ctx, "v", KILN_F32, 4, (int64_t[]){1, 1, 16, d});
        kiln_tensor *w = kiln_new_4d(ctx, KILN_F32, 1, 2, 16, d);
        KT_REQUIRE(q && k && v && w, "tensors: %s", kiln_last_error());
        float *buf = malloc(sizeof(float) * 32 * (size_t)d);
        KT_REQUIRE(buf, "memory");
        for (int64_t i = 0; i < 32 * d; i++) buf[i] = 0.0f;
        KT_OK(kiln_tensor_set_f32(q, buf, 32 * d));
        for (int64_t i = 0; i < 16 * d; i++) buf[i] = (float)(i % 7) * 0.25f - 0.75f;
        KT_OK(kiln_tensor_set_f32(k, buf, 16 * d));
        for (int64_t i = 0; i < 32 * d; i++) buf[i] = x;
        KT_OK(kiln_tensor_set_f32(v, buf, 16 * d));
        KT_OK(kiln_tensor_set_f32(w, buf, 32 * d));
        kiln_tensor *o = kiln_attention(ctx, q, k, v, false, 0);
        kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, o, w));
        kiln_graph *g = kiln_graph_new(ctx);
        KT_REQUIRE(o && loss && g, "graph: %s", kiln_last_error());
        KT_OK(kiln_graph_add(g, o));
        KT_OK(kiln_graph_add(g, loss));
        KT_OK(kiln_graph_backward(g, loss));
        for (int m = 0; m < 5; m++) {
            KT_OK(kiln_set_matmul_precision(modes[m]));
            KT_OK(kiln_graph_compute(g));
            KT_OK(kiln_set_matmul_precision(KILN_MATMUL_F32));
            bool exact = modes[m] == KILN_MATMUL_F32;
            KT_OK(kiln_tensor_get_f32(o, buf, 32 * d));
            int bad = 0;
            for (int64_t i = 0; i < 32 * d; i++) bad += buf[i] != (exact ? x : 1.0f);
            KT_CHECK(!bad, "d %lld, mode %d: %d of O's values are not %.9g (O[0] %.9g)", (long long)d, (int)modes[m],
                     bad, exact ? x : 1.0f, buf[0]);
            KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(v), buf, 16 * d));
            for (int64_t i = 0; i < 16 * d; i++) bad += exact ? fabsf(buf[i] - 2 * x) > 0x1p-16f : buf[i] != 2.0f;
            KT_CHECK(!bad, "d %lld, mode %d: %d of dv's values are not %.9g (dv[0] %.9g)", (long long)d,
                     (int)modes[m], bad, exact ? 2 * x : 2.0f, buf[0]);
            kiln_zero_grad(ctx);
        }
        free(buf);
        kiln_ctx_free(ctx);
    }
}
