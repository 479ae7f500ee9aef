/* test_llama_quant.c — GPTQ and RTN over a tiny llama (models/llama_quant.h)
 * and the machinery it shares with the GPT (models/model_quant.h): the
 * taps are the inputs of each layer's weights; the results come in the
 * order wq wk wv wo w1 w3 w2 and every weight ends as its result's values;
 * on correlated (text) data each weight's output error on held-out inputs
 * is lower with GPTQ than with RTN, and the quantized model still runs
 * (its logits stay finite and closer to the f32 model's with GPTQ). */
#include "kt.h"
#include "llama_quant.h"

#include <math.h>
#include <stdlib.h>

enum { SEQ = 32, NSEQ = 16, BATCH = 8, LAYERS = 2, DIM = 64, HIDDEN = 128, NW = 7 * LAYERS };

static llama_config tiny(void) {
    return (llama_config){.vocab = 256, .context = SEQ, .layers = LAYERS, .heads = 4, .kv_heads = 2, .dim = DIM,
                          .hidden = HIDDEN, .multiple_of = 0, .norm_eps = 1e-5, .rope_theta = 10000.0};
}

/* weight i of the results' order: layer i / 7's wq wk wv wo w1 w3 w2 */
static kiln_tensor *weight(const llama *m, int i) {
    const llama_layer *y = &m->layers[i / 7];
    return (kiln_tensor *[]){y->wq, y->wk, y->wv, y->wo, y->w1, y->w3, y->w2}[i % 7];
}
/* ... and the tap it reads */
static int tap_of(int i) { return 4 * (i / 7) + (int[]){0, 0, 0, 1, 2, 2, 3}[i % 7]; }

KT_TEST(llama_quant_taps) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny();
    llama *m = llama_new(ctx, &c, 5);
    KT_NOTNULL(m);
    kiln_tensor *taps[4 * LAYERS] = {0};
    m->taps = taps;
    KT_NOTNULL(llama_forward(m, kiln_new_2d(ctx, KILN_I32, 2, 5), NULL, 0));
    m->taps = NULL;
    for (int i = 0; i < NW; i++) {
        kiln_tensor *t = taps[tap_of(i)];
        KT_REQUIRE(t != NULL, "tap %d", tap_of(i));
        KT_CHECK(kiln_tensor_ndim(t) == 3 && kiln_tensor_dim(t, 0) == 2 && kiln_tensor_dim(t, 1) == 5 &&
                     kiln_tensor_dim(t, 2) == kiln_tensor_dim(weight(m, i), 1),
                 "weight %d: its tap's last dimension %lld", i, (long long)kiln_tensor_dim(t, -1));
    }
    /* RTN needs no calibration and fills every slot in order */
    kiln_gptq_config q = kiln_gptq_defaults();
    q.group_size = 32;
    kiln_gptq_result *res[NW];
    KT_OK(llama_quantize(m, MODEL_QUANT_RTN, &q, NULL, 0, 0, 0, res));
    for (int i = 0; i < NW; i++) {
        KT_CHECK(res[i] && res[i]->rows == kiln_tensor_dim(weight(m, i), 0) &&
                     res[i]->cols == kiln_tensor_dim(weight(m, i), 1),
                 "result %d", i);
        kiln_gptq_result_free(res[i]);
    }
    KT_CHECK(llama_quantize(m, MODEL_QUANT_GPTQ, &q, NULL, NSEQ, SEQ, BATCH, NULL) == KILN_ERR_ARG &&
                 strstr(kiln_last_error(), "llama_quantize: need calibration tokens"),
             "%s", kiln_last_error());
    llama_free(m);
    kiln_ctx_free(ctx);
}

#ifdef KILN_BLAS

static const char text[] =
    "Call me Ishmael. Some years ago - never mind how long precisely - having little or no money in my purse, "
    "and nothing particular to interest me on shore, I thought I would sail about a little and see the watery "
    "part of the world. It is a way I have of driving off the spleen and regulating the circulation. Whenever "
    "I find myself growing grim about the mouth; whenever it is a damp, drizzly November in my soul; whenever "
    "I find myself involuntarily pausing before coffin warehouses, and bringing up the rear of every funeral "
    "I meet; and especially whenever my hypos get such an upper hand of me, that it requires a strong moral "
    "principle to prevent me from deliberately stepping into the street, and methodically knocking people's "
    "hats off - then, I account it high time to get to sea as soon as I can.";

static void sequences(int32_t *t, int n, int offset) {
    const int len = (int)sizeof text - 1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < SEQ; j++) t[i * SEQ + j] = (unsigned char)text[(offset + 11 * i + j) % len];
}

static float *host(kiln_tensor *t) {
    float *p = malloc(sizeof(float) * (size_t)kiln_tensor_numel(t));
    if (p && kiln_tensor_get_f32(t, p, kiln_tensor_numel(t))) {
        free(p);
        return NULL;
    }
    return p;
}


/* relative squared error of x [n, cols] . (w - wq)^T against x . w^T */
static double out_err(const float *x, int64_t n, const float *w, const float *wq, int64_t rows, int64_t cols) {
    double e = 0, ref = 0;
    for (int64_t s = 0; s < n; s++)
        for (int64_t r = 0; r < rows; r++) {
            double a = 0, b = 0;
            for (int64_t k = 0; k < cols; k++) {
                a += (double)x[s * cols + k] * w[r * cols + k];
                b += (double)x[s * cols + k] * wq[r * cols + k];
            }
            e += (a - b) * (a - b);
            ref += a * a;
        }
    return e / ref;
}

KT_TEST(llama_quant_gptq_beats_rtn) {
    int32_t calib[NSEQ * SEQ], held[BATCH * SEQ];
    sequences(calib, NSEQ, 0);
    sequences(held, BATCH, 300);
    const int64_t NL = (int64_t)BATCH * SEQ * 256;
    /* the f32 model: each weight's input and the logits on held-out text */
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny();
    llama *m = llama_new(ctx, &c, 5);
    KT_NOTNULL(m);
    kiln_tensor *taps[4 * LAYERS] = {0}, *idx = kiln_new_2d(ctx, KILN_I32, BATCH, SEQ);
    KT_OK(kiln_tensor_set_i32(idx, held, BATCH * SEQ));
    kiln_ctx_set_grad_enabled(ctx, false);
    m->taps = taps;
    kiln_tensor *logits = llama_forward(m, idx, NULL, 0);
    m->taps = NULL;
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, logits));
    for (int k = 0; k < 4 * LAYERS; k++) KT_OK(kiln_graph_add(g, taps[k]));
    KT_OK(kiln_graph_compute(g));
    float *x[4 * LAYERS], *w[NW], *ref = host(logits);
    for (int k = 0; k < 4 * LAYERS; k++) x[k] = host(taps[k]);
    for (int i = 0; i < NW; i++) w[i] = host(weight(m, i));
    llama_free(m);
    kiln_ctx_free(ctx);

    for (int bits = 4; bits >= 3; bits--) {
        double err[2][NW], lerr[2];
        for (int method = 0; method < 2; method++) {
            ctx = kiln_ctx_new();
            m = llama_new(ctx, &c, 5);
            KT_NOTNULL(m);
            model_graph eg;
            KT_OK(llama_eval_graph(m, BATCH, SEQ, &eg));
            kiln_gptq_config q = kiln_gptq_defaults();
            q.bits = bits;
            q.group_size = 32;
            kiln_gptq_result *res[NW];
            KT_OK(llama_quantize(m, method ? MODEL_QUANT_GPTQ : MODEL_QUANT_RTN, &q, calib, NSEQ, SEQ, BATCH, res));
            for (int i = 0; i < NW; i++) {
                kiln_tensor *t = weight(m, i);
                const int64_t rows = kiln_tensor_dim(t, 0), cols = kiln_tensor_dim(t, 1);
                float *a = host(t), *d = malloc(sizeof(float) * (size_t)(rows * cols));
                KT_OK(kiln_gptq_dequantize(res[i], d));
                KT_CHECK(!memcmp(a, d, sizeof(float) * (size_t)(rows * cols)), "weight %d is not its result", i);
                err[method][i] = out_err(x[tap_of(i)], BATCH * SEQ, w[i], a, rows, cols);
                free(a);
                free(d);
                kiln_gptq_result_free(res[i]);
            }
            /* the quantized model runs: logits finite, near the f32 ones */
            KT_OK(kiln_tensor_set_i32(eg.input, held, BATCH * SEQ));
            KT_OK(kiln_tensor_set_i32(eg.labels, held, BATCH * SEQ));
            KT_OK(kiln_graph_compute(eg.graph));
            float *got = host(eg.logits);
            double e = 0, n = 0;
            for (int64_t i = 0; i < NL; i++) {
                KT_REQUIRE(isfinite(got[i]), "logit %lld not finite", (long long)i);
                e += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
                n += (double)ref[i] * ref[i];
            }
            lerr[method] = e / n;
            free(got);
            llama_free(m);
            kiln_ctx_free(ctx);
        }
        static const char *names[7] = {"wq", "wk", "wv", "wo", "w1", "w3", "w2"};
        for (int i = 0; i < NW; i++)
            KT_CHECK(err[1][i] <= err[0][i], "%d bits: layer %d %s: GPTQ %.3e above RTN %.3e", bits, i / 7,
                     names[i % 7], err[1][i], err[0][i]);
        printf("  %d-bit g32: layer 0 output error RTN/GPTQ wq %.2e/%.2e w2 %.2e/%.2e; logits %.2e/%.2e\n", bits,
               err[0][0], err[1][0], err[0][6], err[1][6], lerr[0], lerr[1]);
        KT_CHECK(lerr[1] < lerr[0], "%d bits: logits GPTQ %g not below RTN %g", bits, lerr[1], lerr[0]);
    }
    for (int k = 0; k < 4 * LAYERS; k++) free(x[k]);
    for (int i = 0; i < NW; i++) free(w[i]);
    free(ref);
}

#endif
