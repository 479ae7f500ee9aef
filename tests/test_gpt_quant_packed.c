/* test_gpt_quant_packed.c — a small GPT whose RTN / GPTQ results are
 * packed into GQ dtypes (kiln_gptq_pack) and run through the fused
 * quantized matmul, act-order weights with their column permutation
 * (models/model.h's model_linear): the packed weights and perms round-trip
 * through a safetensors file byte for byte; with 8 rows or more (W
 * dequantized by panels) the logits equal, to f32 rounding, those of the
 * f32 model holding the same values (the results dequantized with their
 * scales rounded to f16, as stored); with 4 rows (batch 1: x quantized to
 * int8 per 32) they stay within the int8-activation error; and the packed
 * model's logits stay within the f16 scale rounding of the fake-quantized
 * f32 model's (the results' f32 scales). And model_linear's perm, forward
 * and backward, on an f32 weight. */
#include "kt.h"
#include "gpt_quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char text[] =
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it "
    "was the season of Darkness, it was the spring of hope, it was the winter of despair, we had everything "
    "before us, we had nothing before us, we were all going direct to Heaven, we were all going direct the "
    "other way - in short, the period was so far like the present period.";

enum { SEQ = 32, NSEQ = 16, BATCH = 8, SHORT = 4, V = 256 };

static void sequences(int32_t *t, int n, int len_seq, int offset) {
    const int len = (int)sizeof text - 1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < len_seq; j++) t[i * len_seq + j] = (unsigned char)text[(offset + 13 * i + j) % len];
}

static kiln_status logits_of(model_graph *g, const int32_t *t, int64_t n, float *out) {
    kiln_status s = kiln_tensor_set_i32(g->input, t, n);
    if (!s) s = kiln_tensor_set_i32(g->labels, t, n);
    if (!s) s = kiln_graph_compute(g->graph);
    return s ? s : kiln_tensor_get_f32(g->logits, out, n * V);
}

/* max |a - b| / max |b| */
static double rel_max(const float *a, const float *b, int64_t n) {
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / m;
}

static kiln_tensor **weight_slot(gpt *m, int k, kiln_tensor ***perm) {
    gpt_block *b = &m->blocks[k / 4];
    kiln_tensor **w[4] = {&b->attn_w, &b->proj_w, &b->fc_w, &b->mlp_proj_w},
                **p[4] = {&b->attn_perm, &b->proj_perm, &b->fc_perm, &b->mlp_proj_perm};
    *perm = p[k % 4];
    return w[k % 4];
}

/* GCC 12's aarch64 vectorizer dies on this function (internal compiler
 * error in vect_transform_reduction); the test needs no vector code. */
#if defined(__aarch64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-vectorize")))
#endif
static void packed_case(gpt_quant_method method, int bits, bool act_order, kiln_dtype dtype) {
    int32_t calib[NSEQ * SEQ], held[BATCH * SEQ], one[SHORT];
    sequences(calib, NSEQ, SEQ, 0);
    sequences(held, BATCH, SEQ, 300);
    sequences(one, 1, SHORT, 77);
    const int64_t n_big = BATCH * SEQ * V;
    float *fake = malloc(sizeof(float) * n_big), *ref = malloc(sizeof(float) * n_big),
          *got = malloc(sizeof(float) * n_big), ref1[SHORT * V], got1[SHORT * V];
    kiln_ctx *ctx = kiln_ctx_new();
    gpt_config c = {.vocab = V, .context = SEQ, .layers = 2, .heads = 2, .width = 64};
    gpt *m = gpt_new(ctx, &c, 3);
    KT_NOTNULL(m);
    kiln_gptq_config q = kiln_gptq_defaults();
    q.bits = bits, q.group_size = 32, q.act_order = act_order;
    kiln_gptq_result *res[8];
    KT_OK(gpt_quantize(m, method, &q, calib, NSEQ, SEQ, BATCH, res));
    model_graph g, g1;
    KT_OK(gpt_eval_graph(m, BATCH, SEQ, &g));
    KT_OK(gpt_eval_graph(m, 1, SHORT, &g1));
    KT_OK(logits_of(&g, held, BATCH * SEQ, fake));

    /* pack, write, read back */
    char dir[] = "/tmp/kiln_gqp_XXXXXX", path[64];
    KT_NOTNULL(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/p.safetensors", dir);
    kiln_tensor *packed[8], *perm[8], *ts[16];
    const char *names[16];
    char pname[8][64];
    int n = 0, n_perm = 0;
    for (int k = 0; k < 8; k++) {
        kiln_tensor **pslot, **w = weight_slot(m, k, &pslot);
        KT_NOTNULL(packed[k] = kiln_gptq_pack(ctx, res[k], dtype, &perm[k]));
        KT_CHECK((perm[k] != NULL) == act_order, "weight %d: perm %p with act order %d", k, (void *)perm[k],
                 act_order);
        ts[n] = packed[k], names[n++] = kiln_tensor_name(*w);
        snprintf(pname[k], sizeof pname[k], "%s.perm", kiln_tensor_name(*w));
        if (perm[k]) ts[n] = perm[k], names[n++] = pname[k], n_perm++;
    }
    KT_OK(kiln_safetensors_save(path, ts, names, n, NULL, 0));
    kiln_safetensors *st = kiln_safetensors_open(path);
    KT_NOTNULL(st);
    for (int k = 0; k < 8; k++) {
        kiln_tensor **pslot, **w = weight_slot(m, k, &pslot);
        kiln_tensor *l = kiln_safetensors_load(st, ctx, kiln_tensor_name(*w));
        KT_NOTNULL(l);
        KT_CHECK(kiln_tensor_dtype(l) == dtype && kiln_tensor_nbytes(l) == kiln_tensor_nbytes(packed[k]) &&
                     !memcmp(kiln_tensor_data(l), kiln_tensor_data(packed[k]), kiln_tensor_nbytes(l)),
                 "weight %d: the file's tensor differs", k);
        kiln_tensor *lp = perm[k] ? kiln_safetensors_load(st, ctx, pname[k]) : NULL;
        KT_CHECK(!perm[k] || (lp && kiln_tensor_dtype(lp) == KILN_I32 &&
                              !memcmp(kiln_tensor_data(lp), res[k]->perm, sizeof(int32_t) * res[k]->cols)),
                 "weight %d: the file's perm differs", k);
        packed[k] = l, perm[k] = lp;
    }
    kiln_safetensors_close(st);
    unlink(path);
    rmdir(dir);

    /* the f32 model on the stored values: the packed weight dequantized,
     * its columns put back in the original order */
    for (int k = 0; k < 8; k++) {
        kiln_tensor **pslot, **w = weight_slot(m, k, &pslot);
        const int64_t rows = res[k]->rows, cols = res[k]->cols;
        float *d = malloc(sizeof(float) * rows * cols), *o = malloc(sizeof(float) * rows * cols);
        KT_OK(kiln_tensor_get_f32(packed[k], d, rows * cols));
        const int32_t *p = perm[k] ? kiln_tensor_data(perm[k]) : NULL;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < cols; j++) o[r * cols + (p ? p[j] : j)] = d[r * cols + j];
        KT_OK(kiln_tensor_set_f32(*w, o, rows * cols));
        free(d);
        free(o);
    }
    KT_OK(logits_of(&g, held, BATCH * SEQ, ref));
    KT_OK(logits_of(&g1, one, SHORT, ref1));

    /* the packed model */
    for (int k = 0; k < 8; k++) {
        kiln_tensor **pslot, **w = weight_slot(m, k, &pslot);
        *w = packed[k], *pslot = perm[k];
    }
    model_graph h, h1;
    KT_OK(gpt_eval_graph(m, BATCH, SEQ, &h));
    KT_OK(gpt_eval_graph(m, 1, SHORT, &h1));
    KT_OK(logits_of(&h, held, BATCH * SEQ, got));
    KT_OK(logits_of(&h1, one, SHORT, got1));
    const double e_panel = rel_max(got, ref, n_big), e_int8 = rel_max(got1, ref1, SHORT * V),
                 e_fake = rel_max(got, fake, n_big);
    printf("  %s %d-bit g32%s in %s: logits vs the same values in f32: %.1e (8 x 32 rows), %.1e (batch 1, "
           "int8 x); vs f32 scales %.1e\n",
           method == GPT_QUANT_GPTQ ? "GPTQ" : "RTN", bits, act_order ? " act-order" : "", kiln_dtype_name(dtype),
           e_panel, e_int8, e_fake);
    KT_CHECK(e_panel < 1e-5, "dequantized panels: %g", e_panel);
    KT_CHECK(e_int8 < 2e-2, "batch 1, int8 activations: %g", e_int8);
    KT_CHECK(e_fake < 2e-3, "f16 scales: %g", e_fake);
    for (int k = 0; k < 8; k++) kiln_gptq_result_free(res[k]);
    free(fake);
    free(ref);
    free(got);
    gpt_free(m);
    kiln_ctx_free(ctx);
}

KT_TEST(gpt_quant_packed_rtn) {
    packed_case(GPT_QUANT_RTN, 4, false, KILN_GQ4_32);
    packed_case(GPT_QUANT_RTN, 2, false, KILN_GQ2_32);
}

#ifdef KILN_BLAS
KT_TEST(gpt_quant_packed_gptq_act_order) {
    packed_case(GPT_QUANT_GPTQ, 3, true, KILN_GQ3_32);
}
#endif

/* model_linear with a perm is kiln_linear on x's columns gathered by hand,
 * forward and backward (x [2, 3, 8], an f32 weight) */
KT_TEST(model_linear_perm) {
    kiln_ctx *ctx = kiln_ctx_new();
    const int32_t p[8] = {3, 7, 0, 5, 1, 6, 2, 4};
    kiln_tensor *x = kiln_param(ctx, "x", KILN_F32, 3, (int64_t[]){2, 3, 8}),
                *xg = kiln_param(ctx, "xg", KILN_F32, 3, (int64_t[]){2, 3, 8}),
                *w = kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){5, 8}),
                *b = kiln_param(ctx, "b", KILN_F32, 1, (int64_t[]){5}), *perm = kiln_new_1d(ctx, KILN_I32, 8);
    KT_NOTNULL(x && xg && w && b && perm);
    KT_OK(kiln_tensor_fill_randn(x, 1, 0, 1));
    KT_OK(kiln_tensor_fill_randn(w, 2, 0, 1));
    KT_OK(kiln_tensor_fill_randn(b, 3, 0, 1));
    KT_OK(kiln_tensor_set_i32(perm, p, 8));
    float xv[48], xgv[48];
    KT_OK(kiln_tensor_get_f32(x, xv, 48));
    for (int r = 0; r < 6; r++)
        for (int j = 0; j < 8; j++) xgv[r * 8 + j] = xv[r * 8 + p[j]];
    KT_OK(kiln_tensor_set_f32(xg, xgv, 48));
    kiln_tensor *y = model_linear(ctx, x, w, perm, b), *yg = model_linear(ctx, xg, w, NULL, b);
    KT_NOTNULL(y && yg);
    kiln_tensor *loss = kiln_sum(ctx, kiln_reshape(ctx, kiln_mul(ctx, y, y), 1, (int64_t[]){-1}), 0, true),
                *lossg = kiln_sum(ctx, kiln_reshape(ctx, kiln_mul(ctx, yg, yg), 1, (int64_t[]){-1}), 0, true);
    kiln_graph *g = kiln_graph_new(ctx), *gg = kiln_graph_new(ctx);
    KT_NOTNULL(g && gg);
    KT_OK(kiln_graph_add(g, y)); /* read below: outputs keep their values */
    KT_OK(kiln_graph_add(gg, yg));
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    KT_OK(kiln_graph_add(gg, lossg));
    KT_OK(kiln_graph_backward(gg, lossg));
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_graph_compute(gg));
    float a[30], e[30], dx[48], dxg[48];
    KT_OK(kiln_tensor_get_f32(y, a, 30));
    KT_OK(kiln_tensor_get_f32(yg, e, 30));
    KT_CHECK(rel_max(a, e, 30) < 1e-6, "forward: %g", rel_max(a, e, 30));
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(x), dx, 48));
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(xg), dxg, 48));
    float want[48];
    for (int r = 0; r < 6; r++)
        for (int j = 0; j < 8; j++) want[r * 8 + p[j]] = dxg[r * 8 + j];
    KT_CHECK(rel_max(dx, want, 48) < 1e-6, "dx: %g", rel_max(dx, want, 48));
    kiln_ctx_free(ctx);
}
