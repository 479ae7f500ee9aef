/* test_backend_cached.c — kiln_attention_cached in the cross-backend op
 * table (harness: backend_ops_util.h): rows each in its own sequence of a
 * KV cache, written in place then attended over up to their positions, on
 * every device backend against the CPU: decoding steps at 40, 300 and
 * 3,000 keys (GQA, MQA, a window; two rows of two sequences, whose keys a
 * device splits over blocks), prompt runs of one to three sequences (GQA
 * ratios 1, 3, 4 and 8, a window, one over a 300-key cache), head sizes 8
 * to 256 (160 and 192 in tiles 256 wide, a 600-key split decode at 256),
 * f64; soft-capped scores (Gemma 2's) on the decoding tiles, the split
 * keys, a windowed prompt, f64 and the per-row kernels. */
#include "backend_ops_util.h"
#include "kt_device.h"

/* N rows at (seq, pos) over caches [B, Hkv, S, D/Dv], random where no row writes */
typedef struct cached_arg {
    int64_t b, hq, hkv, s, d, dv, window, n;
    const int32_t *seq, *pos;
    double softcap; /* scores (|s| up to ~4 here) mostly within the cap, some bent flat */
} cached_arg;
static const int32_t C_SEQ2[] = {0, 1}, C_POS2[] = {37, 5}, C_SEQ1[] = {0}, C_POS1[] = {299}, C_POS1W[] = {2999};
static const int32_t C_SEQP[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0},
                     C_POSP[] = {20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 0, 1, 2};
static const int32_t C_SEQB[] = {1, 0}, C_POSB[] = {2999, 700}, C_POSB6[] = {599, 300};
static const int32_t C_SEQL[40] = {0},
                     C_POSL[40] = {260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271, 272, 273,
                                   274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287,
                                   288, 289, 290, 291, 292, 293, 294, 295, 296, 297, 298, 299};
static const int32_t C_SEQ3[] = {2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
                     C_POS3[] = {0, 1, 2, 3, 4, 30, 31, 32, 33, 34, 35, 36, 37, 38, 9};
static const cached_arg C_DECODE = {2, 4, 2, 40, 16, 16, 0, 2, C_SEQ2, C_POS2, 0},
                        C_MQA = {1, 8, 1, 300, 64, 64, 0, 1, C_SEQ1, C_POS1, 0},
                        C_WINDOW = {1, 6, 3, 3000, 32, 24, 100, 1, C_SEQ1, C_POS1W, 0},
                        C_PROMPT = {2, 6, 2, 33, 32, 24, 0, 15, C_SEQP, C_POSP, 0},
                        C_PROMPT_WINDOW = {2, 4, 4, 33, 8, 8, 7, 15, C_SEQP, C_POSP, 0},
                        C_SPLIT = {2, 8, 2, 3000, 128, 128, 0, 2, C_SEQB, C_POSB, 0},
                        C_PROMPT_LONG = {1, 8, 2, 300, 128, 128, 0, 40, C_SEQL, C_POSL, 0},
                        C_PROMPT3 = {3, 8, 1, 40, 64, 48, 4, 15, C_SEQ3, C_POS3, 0},
                        C_D256 = {1, 4, 2, 40, 256, 256, 0, 1, C_SEQ1, C_POS2, 0},
                        C_PROMPT_D160 = {2, 8, 2, 33, 160, 160, 7, 15, C_SEQP, C_POSP, 0},
                        C_PROMPT_D256 = {2, 2, 2, 33, 256, 256, 0, 15, C_SEQP, C_POSP, 0},
                        C_SPLIT_D256 = {2, 8, 2, 600, 256, 256, 0, 2, C_SEQB, C_POSB6, 0},
                        C_DECODE_D192 = {1, 8, 1, 300, 192, 160, 100, 1, C_SEQ1, C_POS1, 0},
                        C_DECODE_CAP = {2, 4, 2, 40, 16, 16, 0, 2, C_SEQ2, C_POS2, 1.5},
                        C_SPLIT_CAP = {2, 8, 2, 3000, 128, 128, 0, 2, C_SEQB, C_POSB, 1.5},
                        C_PROMPT_LONG_CAP = {1, 8, 2, 300, 128, 128, 0, 40, C_SEQL, C_POSL, 2},
                        C_PROMPT3_CAP = {3, 8, 1, 40, 64, 48, 4, 15, C_SEQ3, C_POS3, 2},
                        C_PROMPT_WINDOW_CAP = {2, 4, 4, 33, 8, 8, 7, 15, C_SEQP, C_POSP, 1};

static kiln_tensor *rows_i32(bo_io *io, int64_t n, const int32_t *v) {
    kiln_tensor *t = kiln_tensor_new(io->ctx, KILN_I32, 1, &n);
    return t && !kiln_tensor_set_i32(t, v, n) ? t : NULL;
}
static kiln_tensor *b_attn_cached(bo_io *io) {
    const cached_arg *a = io->arg;
    kiln_tensor *kc = bo_const(io, io->dt, -2, 2, BO_SHAPE(a->b, a->hkv, a->s, a->d));
    kiln_tensor *vc = bo_const(io, io->dt, -1, 1, BO_SHAPE(a->b, a->hkv, a->s, a->dv));
    kiln_tensor *q = bo_in_range(io, -2, 2, BO_SHAPE(a->n, a->hq, a->d));
    kiln_tensor *k = bo_in_range(io, -2, 2, BO_SHAPE(a->n, a->hkv, a->d));
    return kiln_attention_cached_softcap(io->ctx, q, k, bo_in(io, BO_SHAPE(a->n, a->hkv, a->dv)), kc, vc,
                                         rows_i32(io, a->n, a->seq), rows_i32(io, a->n, a->pos), a->window, 0,
                                         a->softcap);
}

static const bo_case attention_cached_cases[] = {
    {"attention_cached_decode_gqa", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_DECODE},
    {"attention_cached_decode_mqa_300keys_d64", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_MQA},
    {"attention_cached_decode_window_3000keys", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_WINDOW},
    {"attention_cached_prompt_gqa", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_PROMPT},
    {"attention_cached_prompt_window", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_PROMPT_WINDOW},
    {"attention_cached_decode_split_3000keys_d128", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_SPLIT},
    {"attention_cached_prompt_40rows_300keys_d128", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_PROMPT_LONG},
    {"attention_cached_prompt_3seqs_mqa_window", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_PROMPT3},
    {"attention_cached_decode_d256", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_D256},
    {"attention_cached_prompt_gqa4_window_d160", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_PROMPT_D160},
    {"attention_cached_prompt_gqa1_d256", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_PROMPT_D256},
    {"attention_cached_decode_split_600keys_d256", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_SPLIT_D256},
    {"attention_cached_decode_mqa_window_d192_dv160", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD,
     &C_DECODE_D192},
    {"attention_cached_prompt_gqa", b_attn_cached, KILN_F64, BO_TRANS, BO_NO_GRAD | BO_MAY_FALL_BACK, &C_PROMPT},
    {"attention_cached_prompt_40rows_300keys_d128", b_attn_cached, KILN_F64, BO_TRANS,
     BO_NO_GRAD | BO_MAY_FALL_BACK, &C_PROMPT_LONG},
    {"attention_cached_decode_mqa_300keys_d64", b_attn_cached, KILN_F64, BO_TRANS, BO_NO_GRAD | BO_MAY_FALL_BACK,
     &C_MQA},
    {"attention_cached_decode_split_3000keys_d128", b_attn_cached, KILN_F64, BO_TRANS, BO_NO_GRAD | BO_MAY_FALL_BACK,
     &C_SPLIT},
    {"attention_cached_decode_gqa_softcap", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_DECODE_CAP},
    {"attention_cached_decode_split_softcap", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_SPLIT_CAP},
    {"attention_cached_prompt_3seqs_window_softcap", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_PROMPT3_CAP},
    {"attention_cached_prompt_40rows_softcap", b_attn_cached, KILN_F64, BO_TRANS, BO_NO_GRAD | BO_MAY_FALL_BACK,
     &C_PROMPT_LONG_CAP},
};
KT_TEST(backend_ops_attention_cached) {
    bo_run_cases("attention_cached", attention_cached_cases, BO_COUNT(attention_cached_cases));
}

/* The per-row kernels the devices keep for larger heads (and under tight
 * limits), forced on shapes the tiles would take. */
static const bo_case attention_cached_row_cases[] = {
    {"attention_cached_decode_gqa", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_DECODE},
    {"attention_cached_prompt_window", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_PROMPT_WINDOW},
    {"attention_cached_prompt_gqa", b_attn_cached, KILN_F64, BO_TRANS, BO_NO_GRAD | BO_MAY_FALL_BACK, &C_PROMPT},
    {"attention_cached_decode_d256", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_D256},
    {"attention_cached_prompt_gqa4_window_d160", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_PROMPT_D160},
    {"attention_cached_decode_gqa_softcap", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_DECODE_CAP},
    {"attention_cached_prompt_window_softcap", b_attn_cached, KILN_F32, BO_TRANS, BO_NO_GRAD, &C_PROMPT_WINDOW_CAP},
};
KT_TEST(backend_ops_attention_cached_rows) {
    setenv("KILN_ATTN_CACHED", "rows", 1);
    bo_run_cases("attention_cached_rows", attention_cached_row_cases, BO_COUNT(attention_cached_row_cases));
}

#ifdef KILN_VULKAN
#include "../backends/vulkan/vk.h"

/* f64 on Vulkan, where the device has shaderFloat64 (lavapipe has): each
 * f64 tile variant (decoding and prompt at D 64, D 128), split and merged,
 * GQA 1 to 8 and a window, all on the device and to double precision
 * (math_f64.glsl's exp and log). */
#define F64_TOL 1e-12
static const bo_case attention_cached_f64_cases[] = {
    {"attention_cached_decode_gqa", b_attn_cached, KILN_F64, F64_TOL, BO_NO_GRAD, &C_DECODE},
    {"attention_cached_decode_mqa_300keys_d64", b_attn_cached, KILN_F64, F64_TOL, BO_NO_GRAD, &C_MQA},
    {"attention_cached_prompt_gqa", b_attn_cached, KILN_F64, F64_TOL, BO_NO_GRAD, &C_PROMPT},
    {"attention_cached_prompt_3seqs_mqa_window", b_attn_cached, KILN_F64, F64_TOL, BO_NO_GRAD, &C_PROMPT3},
    {"attention_cached_prompt_40rows_300keys_d128", b_attn_cached, KILN_F64, F64_TOL, BO_NO_GRAD, &C_PROMPT_LONG},
    {"attention_cached_prompt_3seqs_window_softcap", b_attn_cached, KILN_F64, F64_TOL, BO_NO_GRAD, &C_PROMPT3_CAP},
    {"attention_cached_prompt_40rows_softcap", b_attn_cached, KILN_F64, F64_TOL, BO_NO_GRAD, &C_PROMPT_LONG_CAP},
};
KT_TEST(vk_attention_cached_f64) {
    setenv("KILN_VULKAN_VALIDATE", "1", 1); /* as bo_backends, before the device starts */
    kiln_backend *b = kt_device("vulkan");
    if (!b) return;
    if (!kiln__vk_caps(b->impl)->f64) kt_skip("the Vulkan device has no shaderFloat64");
    setenv("KILN_TEST_BACKENDS", "vulkan", 1);
    bo_run_cases("attention_cached_f64", attention_cached_f64_cases, BO_COUNT(attention_cached_f64_cases));
}
#endif

/* A row outside the cache: on a device, whose kernels skip it, the
 * compute fails after its end with the CPU's message (a row's sequence,
 * then its position, out of range), at a node-by-node compute and at a
 * replayed one, and the next good compute succeeds (the device's word was
 * cleared). One row over caches [1, 2, 8, 4]. */
enum { OUT_COMPUTES = 7 };
static const int32_t OUT_SEQ[OUT_COMPUTES] = {0, 3, 0, 0, 0, 0, 0}, OUT_POS[OUT_COMPUTES] = {1, 2, 3, 4, 8, 5, 6};

/* Each compute's status and message (empty when it succeeded); the stats. */
static void out_of_cache(kiln_backend *be, kiln_status *st, char (*msg)[256], kiln_graph_stats *stats) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, be));
    kiln_tensor *kc = kiln_new_4d(ctx, KILN_F32, 1, 2, 8, 4), *vc = kiln_new_4d(ctx, KILN_F32, 1, 2, 8, 4);
    kiln_tensor *q = kiln_new_3d(ctx, KILN_F32, 1, 2, 4), *k = kiln_new_3d(ctx, KILN_F32, 1, 2, 4);
    kiln_tensor *v = kiln_new_3d(ctx, KILN_F32, 1, 2, 4), *seq = kiln_new_1d(ctx, KILN_I32, 1);
    kiln_tensor *pos = kiln_new_1d(ctx, KILN_I32, 1);
    KT_NOTNULL(pos);
    KT_OK(kiln_tensor_fill(q, 0.5));
    KT_OK(kiln_tensor_fill(k, 0.25));
    KT_OK(kiln_tensor_fill(v, 2.0));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, kiln_attention_cached(ctx, q, k, v, kc, vc, seq, pos, 0, 0)));
    for (int i = 0; i < OUT_COMPUTES; i++) {
        KT_OK(kiln_tensor_set_i32(seq, &OUT_SEQ[i], 1));
        KT_OK(kiln_tensor_set_i32(pos, &OUT_POS[i], 1));
        st[i] = kiln_graph_compute(g);
        snprintf(msg[i], sizeof msg[i], "%s", st[i] ? kiln_last_error() : "");
        kiln_clear_error();
    }
    *stats = kiln_graph_get_stats(g);
    kiln_ctx_free(ctx);
}

static void check_out_of_cache(const char *name) {
    kiln_backend *be = kt_device(name);
    if (!be) return;
    kiln_status sc[OUT_COMPUTES], sd[OUT_COMPUTES];
    char mc[OUT_COMPUTES][256], md[OUT_COMPUTES][256];
    kiln_graph_stats stc, std;
    out_of_cache(NULL, sc, mc, &stc);
    out_of_cache(be, sd, md, &std);
    KT_CHECK(sc[1] == KILN_ERR_ARG && strstr(mc[1], "row 0's sequence 3, position 2 is outside the cache's 1 sequences of 8"),
             "cpu: %d %s", sc[1], mc[1]);
    KT_CHECK(sc[4] == KILN_ERR_ARG && strstr(mc[4], "row 0's sequence 0, position 8"), "cpu: %d %s", sc[4], mc[4]);
    for (int i = 0; i < OUT_COMPUTES; i++)
        KT_CHECK(sd[i] == sc[i] && !strcmp(md[i], mc[i]), "%s, compute %d: %d '%s', the cpu %d '%s'", name, i, sd[i],
                 md[i], sc[i], mc[i]);
    KT_CHECK(std.recordings == 1 && std.replays >= 3 && std.nodes_fallback == 0,
             "%s: %lld recordings, %lld replays, %lld nodes on the cpu", name, (long long)std.recordings,
             (long long)std.replays, (long long)std.nodes_fallback);
}

KT_TEST(attention_cached_row_outside_cache_cuda) { check_out_of_cache("cuda"); }
KT_TEST(attention_cached_row_outside_cache_vulkan) { check_out_of_cache("vulkan"); }
