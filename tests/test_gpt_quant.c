/* test_gpt_quant.c — GPTQ and RTN over a small GPT (models/gpt_quant.h):
 * the taps capture each linear layer's input with its shape; the first
 * layer's codes equal GPTQ on inputs computed by hand (LayerNorm of the
 * embeddings); every weight ends as its result's dequantized values; and
 * on held-out text the quantized model's logits stay closer to the f32
 * model's with GPTQ than with RTN (figures printed at 4 and 3 bits). */
#include "kt.h"
#include "gpt_quant.h"

#include <stdlib.h>

static const char text[] =
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it "
    "was the season of Darkness, it was the spring of hope, it was the winter of despair, we had everything "
    "before us, we had nothing before us, we were all going direct to Heaven, we were all going direct the "
    "other way - in short, the period was so far like the present period, that some of its noisiest "
    "authorities insisted on its being received, for good or for evil, in the superlative degree of "
    "comparison only. There were a king with a large jaw and a queen with a plain face, on the throne of "
    "England; there were a king with a large jaw and a queen with a fair face, on the throne of France.";

enum { SEQ = 32, NSEQ = 16, BATCH = 8 };

static gpt_config small(void) {
    return (gpt_config){.vocab = 256, .context = SEQ, .layers = 2, .heads = 2, .width = 64};
}

/* n sequences of SEQ bytes of text starting at offset + 13 i */
static void sequences(int32_t *t, int n, int offset) {
    const int len = (int)sizeof text - 1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < SEQ; j++) t[i * SEQ + j] = (unsigned char)text[(offset + 13 * i + j) % len];
}

KT_TEST(gpt_quant_taps) {
    kiln_ctx *ctx = kiln_ctx_new();
    gpt_config c = small();
    gpt *m = gpt_new(ctx, &c, 3);
    KT_NOTNULL(m);
    kiln_tensor *taps[8] = {0};
    kiln_tensor *idx = kiln_new_2d(ctx, KILN_I32, 2, 5);
    m->taps = taps;
    KT_NOTNULL(gpt_forward(m, idx));
    m->taps = NULL;
    const int64_t in[4] = {64, 64, 64, 256};
    for (int k = 0; k < 8; k++) {
        KT_NOTNULL(taps[k]);
        KT_CHECK(kiln_tensor_ndim(taps[k]) == 3 && kiln_tensor_dim(taps[k], 0) == 2 && kiln_tensor_dim(taps[k], 1) == 5 &&
                     kiln_tensor_dim(taps[k], 2) == in[k % 4],
                 "tap %d: shape [%lld, %lld, %lld]", k, (long long)kiln_tensor_dim(taps[k], 0),
                 (long long)kiln_tensor_dim(taps[k], 1), (long long)kiln_tensor_dim(taps[k], -1));
    }
    gpt_free(m);
    kiln_ctx_free(ctx);
}

/* RTN runs everywhere and needs no calibration; GPTQ without LAPACK fails
 * cleanly, and with it refuses bad calibration shapes */
KT_TEST(gpt_quant_rtn_and_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    gpt_config c = small();
    gpt *m = gpt_new(ctx, &c, 3);
    KT_NOTNULL(m);
    float w0[64 * 64];
    KT_OK(kiln_tensor_get_f32(m->blocks[1].proj_w, w0, 64 * 64));
    kiln_gptq_config q = kiln_gptq_defaults();
    q.bits = 8;
    kiln_gptq_result *res[8];
    KT_OK(gpt_quantize(m, GPT_QUANT_RTN, &q, NULL, 0, 0, 0, res));
    kiln_gptq_result *want = kiln_rtn_quantize(w0, 64, 64, &q);
    KT_NOTNULL(want);
    KT_CHECK(memcmp(want->codes, res[5]->codes, 64 * 64) == 0, "block 1 c_proj: RTN codes differ");
    kiln_gptq_result_free(want);
    for (int k = 0; k < 8; k++) kiln_gptq_result_free(res[k]);
    int32_t calib[NSEQ * SEQ];
    sequences(calib, NSEQ, 0);
    kiln_clear_error();
#ifdef KILN_BLAS
    KT_CHECK(gpt_quantize(m, GPT_QUANT_GPTQ, &q, calib, NSEQ, SEQ, 3, NULL) == KILN_ERR_ARG, "batch 3 of 16 accepted");
    KT_CHECK(gpt_quantize(m, GPT_QUANT_GPTQ, &q, calib, NSEQ, SEQ + 1, BATCH, NULL) == KILN_ERR_ARG,
             "seq past context accepted");
#else
    KT_CHECK(gpt_quantize(m, GPT_QUANT_GPTQ, &q, calib, NSEQ, SEQ, BATCH, NULL) == KILN_ERR_UNSUPPORTED &&
                 strstr(kiln_last_error(), "BLAS=0"),
             "BLAS=0: %s", kiln_last_error());
#endif
    gpt_free(m);
    kiln_ctx_free(ctx);
}

#ifdef KILN_BLAS

/* logits of the eval graph on tokens t [BATCH, SEQ] */
static kiln_status logits_of(model_graph *g, const int32_t *t, float *out) {
    kiln_status s = kiln_tensor_set_i32(g->input, t, BATCH * SEQ);
    if (!s) s = kiln_tensor_set_i32(g->labels, t, BATCH * SEQ);
    if (!s) s = kiln_graph_compute(g->graph);
    return s ? s : kiln_tensor_get_f32(g->logits, out, BATCH * SEQ * 256);
}

KT_TEST(gpt_quant_gptq_beats_rtn) {
    int32_t calib[NSEQ * SEQ], held[BATCH * SEQ];
    sequences(calib, NSEQ, 0);
    sequences(held, BATCH, 400);
    float *ref = malloc(sizeof(float) * BATCH * SEQ * 256), *got = malloc(sizeof(float) * BATCH * SEQ * 256);
    for (int bits = 4; bits >= 3; bits--) {
        double err[2];
        for (int method = 0; method < 2; method++) {
            kiln_ctx *ctx = kiln_ctx_new();
            gpt_config c = small();
            gpt *m = gpt_new(ctx, &c, 3);
            KT_NOTNULL(m);
            model_graph g;
            KT_OK(gpt_eval_graph(m, BATCH, SEQ, &g));
            KT_OK(logits_of(&g, held, ref));
            kiln_gptq_config q = kiln_gptq_defaults();
            q.bits = bits;
            q.group_size = 32;
            kiln_gptq_result *res[8];
            KT_OK(gpt_quantize(m, method ? GPT_QUANT_GPTQ : GPT_QUANT_RTN, &q, calib, NSEQ, SEQ, BATCH, res));
            /* the weights hold the results' values */
            for (int k = 0; k < 8; k++) {
                const gpt_block *b = &m->blocks[k / 4];
                kiln_tensor *w = (kiln_tensor *[]){b->attn_w, b->proj_w, b->fc_w, b->mlp_proj_w}[k % 4];
                const int64_t nw = kiln_tensor_numel(w);
                float *a = malloc(sizeof(float) * nw), *d = malloc(sizeof(float) * nw);
                KT_CHECK(res[k] && res[k]->rows * res[k]->cols == nw, "result %d", k);
                KT_OK(kiln_tensor_get_f32(w, a, nw));
                KT_OK(kiln_gptq_dequantize(res[k], d));
                KT_CHECK(memcmp(a, d, sizeof(float) * nw) == 0, "weight %d differs from its dequantized result", k);
                free(a);
                free(d);
                kiln_gptq_result_free(res[k]);
            }
            KT_OK(logits_of(&g, held, got));
            double e = 0, n = 0;
            for (int i = 0; i < BATCH * SEQ * 256; i++) {
                e += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
                n += (double)ref[i] * ref[i];
            }
            err[method] = e / n;
            gpt_free(m);
            kiln_ctx_free(ctx);
        }
        printf("  %d-bit g32: held-out logits relative squared error RTN %.3e, GPTQ %.3e (ratio %.3f)\n", bits,
               err[0], err[1], err[1] / err[0]);
        KT_CHECK(err[1] < err[0], "%d bits: GPTQ %g not below RTN %g", bits, err[1], err[0]);
    }
    free(ref);
    free(got);
}

/* The first layer's inputs by hand: LayerNorm (weight 1, bias 0, eps 1e-5)
 * of wte[token] + wpe[position]; GPTQ on them gives c_attn's codes. */
KT_TEST(gpt_quant_first_layer_inputs) {
    int32_t calib[NSEQ * SEQ];
    sequences(calib, NSEQ, 0);
    kiln_ctx *ctx = kiln_ctx_new();
    gpt_config c = small();
    gpt *m = gpt_new(ctx, &c, 3);
    KT_NOTNULL(m);
    const int64_t D = 64;
    float *wte = malloc(sizeof(float) * 256 * D), *wpe = malloc(sizeof(float) * SEQ * D);
    float *x = malloc(sizeof(float) * NSEQ * SEQ * D), *w = malloc(sizeof(float) * 3 * D * D);
    KT_OK(kiln_tensor_get_f32(m->wte, wte, 256 * D));
    KT_OK(kiln_tensor_get_f32(m->wpe, wpe, SEQ * D));
    KT_OK(kiln_tensor_get_f32(m->blocks[0].attn_w, w, 3 * D * D));
    for (int i = 0; i < NSEQ * SEQ; i++) {
        double v[64], mean = 0, var = 0;
        for (int j = 0; j < D; j++) mean += (v[j] = (double)wte[calib[i] * D + j] + wpe[(i % SEQ) * D + j]) / D;
        for (int j = 0; j < D; j++) var += (v[j] - mean) * (v[j] - mean) / D;
        for (int j = 0; j < D; j++) x[i * D + j] = (float)((v[j] - mean) / sqrt(var + 1e-5));
    }
    kiln_gptq_config q = kiln_gptq_defaults();
    q.group_size = 32;
    kiln_gptq *h = kiln_gptq_new(D);
    KT_OK(kiln_gptq_add_batch(h, x, NSEQ * SEQ));
    kiln_gptq_result *want = kiln_gptq_quantize(h, w, 3 * D, &q);
    KT_NOTNULL(want);
    kiln_gptq_result *res[8];
    KT_OK(gpt_quantize(m, GPT_QUANT_GPTQ, &q, calib, NSEQ, SEQ, BATCH, res));
    int64_t diff = 0;
    for (int64_t i = 0; i < 3 * D * D; i++) diff += res[0]->codes[i] != want->codes[i];
    /* the same algorithm on inputs equal to f32 rounding, batched otherwise */
    KT_CHECK(diff <= 3 * D * D / 500, "%lld of %lld codes differ", (long long)diff, (long long)(3 * D * D));
    printf("  c_attn of block 0: %lld of %lld codes differ from GPTQ on inputs by hand\n", (long long)diff,
           (long long)(3 * D * D));
    for (int k = 0; k < 8; k++) kiln_gptq_result_free(res[k]);
    kiln_gptq_result_free(want);
    kiln_gptq_free(h);
    free(wte);
    free(wpe);
    free(x);
    free(w);
    gpt_free(m);
    kiln_ctx_free(ctx);
}

#endif
