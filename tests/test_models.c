/* test_models.c — the models of models/ on tiny configurations: shapes and
 * parameter counts against their formulas, seeded init, GPT's tied head,
 * a few AdamW steps lowering the loss on a fixed batch, GPT's and Llama's
 * logits against plain double-precision implementations written here, and
 * Llama's KV-cache generation against its full forward pass. */
#include "kt.h"
#include "test_nn_util.h"

#include "cnn.h"
#include "gpt.h"
#include "llama.h"
#include "mlp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---- */

static double *values(kiln_tensor *t) {
    int64_t n = kiln_tensor_numel(t);
    double *v = malloc((size_t)n * sizeof *v);
    if (v && kiln_tensor_get_f64(t, v, n)) {
        free(v);
        return NULL;
    }
    return v;
}


/* Every parameter re-drawn with larger values than the init, so that the
 * reference comparisons see every term: 1-D (norms, biases) N(1, 0.3) for
 * weights of norms, N(0, 0.3) for biases; matrices N(0, 0.4). */
static void scramble(kiln_tensor **params, int n) {
    for (int i = 0; i < n; i++) {
        kiln_tensor *p = params[i];
        const char *name = kiln_tensor_name(p);
        bool norm = kiln_tensor_ndim(p) == 1 && strstr(name, "weight");
        double std = kiln_tensor_ndim(p) == 1 ? 0.3 : 0.4;
        kiln_tensor_fill_randn(p, 1000 + (uint64_t)i, norm ? 1.0 : 0.0, std);
    }
}

/* Run steps of AdamW (lr 1e-2) on g's fixed batch; loss must fall by 20%. */
static void check_loss_falls(kiln_ctx *ctx, model_graph *g, int steps, const char *what) {
    kiln_adam_config c = kiln_adamw_defaults();
    c.lr = 1e-2f;
    kiln_optim *opt = kiln_adamw_new(ctx, &c);
    KT_NOTNULL(opt);
    double first = 0, last = 0;
    for (int s = 0; s < steps; s++) {
        KT_OK(kiln_graph_compute(g->graph));
        last = kiln_tensor_item(g->loss);
        if (s == 0) first = last;
        KT_OK(kiln_optim_step(opt));
    }
    KT_CHECK(isfinite(last) && last < 0.8 * first, "%s: loss %g -> %g over %d steps", what, first, last, steps);
}

/* y [n, out] = x [n, in] @ w^T [out, in] + b */
static void ref_linear(const double *x, const double *w, const double *b, double *y, int n, int in, int out) {
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) {
            double s = b ? b[o] : 0.0;
            for (int k = 0; k < in; k++) s += x[i * in + k] * w[o * in + k];
            y[i * out + o] = s;
        }
}

static void ref_layer_norm(const double *x, const double *w, const double *b, double *y, int n, int d) {
    for (int i = 0; i < n; i++) {
        double mu = 0, var = 0;
        for (int k = 0; k < d; k++) mu += x[i * d + k];
        mu /= d;
        for (int k = 0; k < d; k++) var += (x[i * d + k] - mu) * (x[i * d + k] - mu);
        var /= d;
        for (int k = 0; k < d; k++) y[i * d + k] = (x[i * d + k] - mu) / sqrt(var + 1e-5) * w[k] + b[k];
    }
}

static void ref_rms_norm(const double *x, const double *w, double *y, int n, int d, double eps) {
    for (int i = 0; i < n; i++) {
        double ms = 0;
        for (int k = 0; k < d; k++) ms += x[i * d + k] * x[i * d + k];
        double r = 1.0 / sqrt(ms / d + eps);
        for (int k = 0; k < d; k++) y[i * d + k] = x[i * d + k] * r * w[k];
    }
}

/* Causal attention of one sequence: query head h reads q[t, qoff + h*hd ..],
 * key/value head h / group; result y[t, h*hd ..]. Row strides qs, ks. */
static void ref_attention(const double *q, int qs, const double *k, const double *v, int ks, double *y, int T, int H,
                          int group, int hd) {
    double *p = malloc((size_t)T * sizeof *p);
    for (int h = 0; h < H; h++) {
        int g = h / group;
        for (int t = 0; t < T; t++) {
            double mx = -INFINITY, z = 0;
            for (int s = 0; s <= t; s++) {
                double d = 0;
                for (int j = 0; j < hd; j++) d += q[t * qs + h * hd + j] * k[s * ks + g * hd + j];
                p[s] = d / sqrt((double)hd);
                if (p[s] > mx) mx = p[s];
            }
            for (int s = 0; s <= t; s++) z += p[s] = exp(p[s] - mx);
            for (int j = 0; j < hd; j++) {
                double a = 0;
                for (int s = 0; s <= t; s++) a += p[s] / z * v[s * ks + g * hd + j];
                y[t * H * hd + h * hd + j] = a;
            }
        }
    }
    free(p);
}

/* ---- mlp and cnn ---- */

KT_TEST(models_mlp_shapes_count_and_training) {
    kiln_ctx *ctx = kiln_ctx_new();
    mlp_config c = {.inputs = 20, .hidden = 16, .classes = 5};
    mlp *m = mlp_new(ctx, &c, 3);
    KT_NOTNULL(m);
    KT_CHECK(mlp_param_count(m) == 20 * 16 + 16 + 16 * 5 + 5, "mlp count %lld", (long long)mlp_param_count(m));
    KT_CHECK(m->n_params == 4 && !strcmp(kiln_tensor_name(m->params[0]), "fc1.weight") &&
                 kiln_tensor_dim(m->fc1_w, 0) == 16 && kiln_tensor_dim(m->fc1_w, 1) == 20,
             "mlp parameters");
    model_graph g, e;
    KT_OK(mlp_train_graph(m, 8, &g));
    KT_OK(mlp_eval_graph(m, 8, &e));
    KT_CHECK(kiln_tensor_dim(g.logits, 0) == 8 && kiln_tensor_dim(g.logits, 1) == 5, "mlp logits [8, 5]");
    KT_CHECK(!kiln_tensor_requires_grad(e.logits), "eval graph without gradients");
    KT_OK(kiln_tensor_fill_uniform(g.input, 5, 0.0, 1.0));
    nnt_fill_ints(g.labels, 5, 1);
    check_loss_falls(ctx, &g, 15, "mlp");
    mlp_free(m);
    KT_CHECK(mlp_new(ctx, &(mlp_config){.inputs = 0, .hidden = 1, .classes = 1}, 1) == NULL &&
                 kiln_last_status() == KILN_ERR_ARG,
             "bad config refused");
    kiln_ctx_free(ctx);
}

KT_TEST(models_cnn_shapes_count_and_training) {
    kiln_ctx *ctx = kiln_ctx_new();
    cnn_config c = {.channels = 2, .size = 8, .c1 = 4, .c2 = 6, .hidden = 5, .classes = 3};
    cnn *m = cnn_new(ctx, &c, 3);
    KT_NOTNULL(m);
    int64_t want = 9 * 2 * 4 + 4 + 9 * 4 * 6 + 6 + (6 * 2 * 2 + 1) * 5 + (5 + 1) * 3;
    KT_CHECK(cnn_param_count(m) == want, "cnn count %lld, want %lld", (long long)cnn_param_count(m), (long long)want);
    model_graph g;
    KT_OK(cnn_train_graph(m, 4, &g));
    KT_CHECK(kiln_tensor_dim(g.logits, 0) == 4 && kiln_tensor_dim(g.logits, 1) == 3, "cnn logits [4, 3]");
    KT_OK(kiln_tensor_fill_uniform(g.input, 5, 0.0, 1.0));
    nnt_fill_ints(g.labels, 3, 2);
    check_loss_falls(ctx, &g, 30, "cnn");
    cnn_free(m);
    /* the default is the Fashion-MNIST net: 1x28x28 -> 16 -> 32 -> 128 -> 10 */
    kiln_ctx *ctx_d = kiln_ctx_new(), *ctx_n = kiln_ctx_new(); /* one model per context: names are unique */
    cnn *d = cnn_new(ctx_d, NULL, 1);
    KT_NOTNULL(d);
    KT_CHECK(cnn_param_count(d) == 9 * 16 + 16 + 9 * 16 * 32 + 32 + (32 * 7 * 7 + 1) * 128 + 129 * 10,
             "default cnn count");
    KT_CHECK(d->n_params == 8 && !strcmp(kiln_tensor_name(d->fc_w), "fc2.weight"), "default cnn parameters");
    cnn_free(d);
    /* hidden 0: the features go straight to the head "fc" */
    cnn *n = cnn_new(ctx_n, &(cnn_config){.channels = 1, .size = 4, .c1 = 2, .c2 = 3, .hidden = 0, .classes = 2}, 1);
    KT_NOTNULL(n);
    KT_CHECK(n->n_params == 6 && !n->hidden_w && !strcmp(kiln_tensor_name(n->fc_w), "fc.weight") &&
                 cnn_param_count(n) == 9 * 2 + 2 + 9 * 2 * 3 + 3 + (3 + 1) * 2,
             "cnn without a hidden layer");
    cnn_free(n);
    kiln_ctx_free(ctx), kiln_ctx_free(ctx_d), kiln_ctx_free(ctx_n);
}

/* ---- seeded init ---- */

KT_TEST(models_seeded_init_is_reproducible) {
    gpt_config c = {.vocab = 11, .context = 8, .layers = 2, .heads = 2, .width = 8};
    kiln_ctx *a = kiln_ctx_new(), *b = kiln_ctx_new(), *o = kiln_ctx_new();
    gpt *ma = gpt_new(a, &c, 7), *mb = gpt_new(b, &c, 7), *mo = gpt_new(o, &c, 8);
    KT_NOTNULL(ma && mb && mo);
    bool same = true, differ = false;
    for (int i = 0; i < ma->n_params; i++) {
        double *x = values(ma->params[i]), *y = values(mb->params[i]), *z = values(mo->params[i]);
        for (int64_t j = 0; j < kiln_tensor_numel(ma->params[i]); j++) {
            same &= x[j] == y[j];
            differ |= x[j] != z[j];
        }
        free(x), free(y), free(z);
    }
    KT_CHECK(same, "the same seed gives the same weights");
    KT_CHECK(differ, "another seed gives other weights");
    /* GPT-2's init: std 0.02, residual projections 0.02 / sqrt(2 L), biases 0, norms 1 */
    double *w = values(ma->blocks[0].fc_w), *p = values(ma->blocks[1].mlp_proj_w), *ln = values(ma->blocks[0].ln_1_w);
    double sw = 0, sp = 0;
    for (int j = 0; j < 32 * 8; j++) sw += w[j] * w[j], sp += p[j] * p[j];
    sw = sqrt(sw / 256), sp = sqrt(sp / 256);
    KT_CHECK(fabs(sw - 0.02) < 0.004 && fabs(sp - 0.01) < 0.002 && ln[3] == 1.0, "init std %g and %g", sw, sp);
    free(w), free(p), free(ln);
    gpt_free(ma), gpt_free(mb), gpt_free(mo);
    kiln_ctx_free(a), kiln_ctx_free(b), kiln_ctx_free(o);
}

/* ---- gpt ---- */

KT_TEST(models_gpt_count_tied_head_and_training) {
    kiln_ctx *ctx = kiln_ctx_new();
    gpt_config c = {.vocab = 11, .context = 8, .layers = 2, .heads = 2, .width = 8};
    gpt *m = gpt_new(ctx, &c, 1);
    KT_NOTNULL(m);
    const int64_t V = 11, C = 8, L = 2, D = 8;
    KT_CHECK(gpt_param_count(m) == (V + C) * D + L * (12 * D * D + 13 * D) + 2 * D, "gpt count %lld",
             (long long)gpt_param_count(m));
    /* the head is wte: no other [vocab, d] parameter, 4 + 12 L in all */
    KT_CHECK(m->n_params == 4 + 12 * L && kiln_ctx_params(ctx, NULL, 0) == m->n_params, "%d parameters",
             m->n_params);
    for (int i = 0; i < m->n_params; i++)
        KT_CHECK(m->params[i] == m->wte || kiln_tensor_dim(m->params[i], 0) != V, "%s looks like a head",
                 kiln_tensor_name(m->params[i]));
    KT_CHECK(!strcmp(kiln_tensor_name(m->blocks[0].attn_w), "h.0.attn.c_attn.weight"), "state_dict names");
    model_graph g;
    KT_OK(gpt_train_graph(m, 2, 8, &g));
    KT_CHECK(kiln_tensor_ndim(g.logits) == 3 && kiln_tensor_dim(g.logits, 2) == V, "logits [2, 8, 11]");
    nnt_fill_ints(g.input, (int)V, 3);
    nnt_fill_ints(g.labels, (int)V, 4);
    check_loss_falls(ctx, &g, 20, "gpt");
    gpt_free(m);
    kiln_ctx_free(ctx);
}

/* The GPT forward pass in double, one sequence of T tokens: logits [T, V]. */
static void ref_gpt(gpt *m, const int32_t *idx, int T, double *logits) {
    const int V = (int)m->cfg.vocab, D = (int)m->cfg.width, H = (int)m->cfg.heads, hd = D / H;
    double *x = calloc((size_t)T * D, sizeof *x), *a = calloc((size_t)T * 4 * D, sizeof *a),
           *qkv = calloc((size_t)T * 3 * D, sizeof *qkv), *y = calloc((size_t)T * D, sizeof *y),
           *f = calloc((size_t)T * 4 * D, sizeof *f);
    double *wte = values(m->wte), *wpe = values(m->wpe);
    for (int t = 0; t < T; t++)
        for (int k = 0; k < D; k++) x[t * D + k] = wte[idx[t] * D + k] + wpe[t * D + k];
    for (int l = 0; l < m->cfg.layers; l++) {
        gpt_block *b = &m->blocks[l];
        double *l1w = values(b->ln_1_w), *l1b = values(b->ln_1_b), *aw = values(b->attn_w), *ab = values(b->attn_b),
               *pw = values(b->proj_w), *pb = values(b->proj_b), *l2w = values(b->ln_2_w), *l2b = values(b->ln_2_b),
               *fw = values(b->fc_w), *fb = values(b->fc_b), *mw = values(b->mlp_proj_w), *mb = values(b->mlp_proj_b);
        ref_layer_norm(x, l1w, l1b, a, T, D);
        ref_linear(a, aw, ab, qkv, T, D, 3 * D);
        ref_attention(qkv, 3 * D, qkv + D, qkv + 2 * D, 3 * D, y, T, H, 1, hd);
        ref_linear(y, pw, pb, a, T, D, D);
        for (int i = 0; i < T * D; i++) x[i] += a[i];
        ref_layer_norm(x, l2w, l2b, a, T, D);
        ref_linear(a, fw, fb, f, T, D, 4 * D);
        for (int i = 0; i < T * 4 * D; i++) {
            double u = f[i];
            f[i] = 0.5 * u * (1.0 + tanh(sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u)));
        }
        ref_linear(f, mw, mb, a, T, 4 * D, D);
        for (int i = 0; i < T * D; i++) x[i] += a[i];
        double *all[] = {l1w, l1b, aw, ab, pw, pb, l2w, l2b, fw, fb, mw, mb};
        for (int i = 0; i < 12; i++) free(all[i]);
    }
    double *lw = values(m->ln_f_w), *lb = values(m->ln_f_b);
    ref_layer_norm(x, lw, lb, a, T, D);
    ref_linear(a, wte, NULL, logits, T, D, V);
    free(lw), free(lb), free(wte), free(wpe), free(x), free(a), free(qkv), free(y), free(f);
}

/* Compare kiln's logits [B, T, V] with the reference's for each sequence.
 * f32 against double (errors seen: ~2e-6): |err| <= 2e-5 + 1e-4 |ref|. */
#define LOGITS_ATOL 2e-5
#define LOGITS_RTOL 1e-4

KT_TEST(models_gpt_logits_match_reference) {
    kiln_ctx *ctx = kiln_ctx_new();
    gpt_config c = {.vocab = 11, .context = 8, .layers = 2, .heads = 2, .width = 8};
    gpt *m = gpt_new(ctx, &c, 5);
    KT_NOTNULL(m);
    scramble(m->params, m->n_params);
    const int B = 2, T = 7, V = 11;
    model_graph g;
    KT_OK(gpt_eval_graph(m, B, T, &g));
    nnt_fill_ints(g.input, V, 9);
    nnt_fill_ints(g.labels, V, 10);
    KT_OK(kiln_graph_compute(g.graph));
    double *got = values(g.logits), *want = malloc((size_t)B * T * V * sizeof *want);
    int32_t idx[2 * 7];
    KT_OK(kiln_tensor_get_i32(g.input, idx, B * T));
    for (int b = 0; b < B; b++) ref_gpt(m, idx + b * T, T, want + b * T * V);
    int64_t worst;
    double err = kt_rel_err(got, want, B * T * V, LOGITS_ATOL, LOGITS_RTOL, &worst);
    KT_CHECK(err <= 1, "gpt logits: error %.3g at %lld (%g vs %g)", err, (long long)worst, got[worst], want[worst]);
    free(got), free(want);
    gpt_free(m);
    kiln_ctx_free(ctx);
}

/* ---- llama ---- */

static llama_config tiny_llama(void) {
    llama_config c = llama_defaults();
    c.vocab = 13, c.context = 10, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.dim = 16, c.hidden = 24;
    return c;
}

/* Meta's RoPE on one row of a head: pairs (2i, 2i+1) by pos * theta^(-2i/hd). */
static void ref_rope(double *x, int hd, int pos, double theta) {
    for (int i = 0; i < hd / 2; i++) {
        double ang = pos * pow(theta, -2.0 * i / hd), a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * cos(ang) - b * sin(ang);
        x[2 * i + 1] = b * cos(ang) + a * sin(ang);
    }
}

/* The Llama forward pass in double, one sequence of T tokens: logits [T, V]. */
static void ref_llama(llama *m, const int32_t *idx, int T, double *logits) {
    const llama_config *c = &m->cfg;
    const int V = (int)c->vocab, D = (int)c->dim, H = (int)c->heads, G = (int)c->kv_heads, hd = D / H,
              F = (int)c->hidden;
    double *h = calloc((size_t)T * D, sizeof *h), *x = calloc((size_t)T * D, sizeof *x),
           *q = calloc((size_t)T * D, sizeof *q), *k = calloc((size_t)T * G * hd, sizeof *k),
           *v = calloc((size_t)T * G * hd, sizeof *v), *y = calloc((size_t)T * D, sizeof *y),
           *f1 = calloc((size_t)T * F, sizeof *f1), *f3 = calloc((size_t)T * F, sizeof *f3);
    double *tok = values(m->tok_embeddings);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < D; j++) h[t * D + j] = tok[idx[t] * D + j];
    for (int l = 0; l < c->layers; l++) {
        llama_layer *L = &m->layers[l];
        double *an = values(L->attention_norm), *wq = values(L->wq), *wk = values(L->wk), *wv = values(L->wv),
               *wo = values(L->wo), *fn = values(L->ffn_norm), *w1 = values(L->w1), *w2 = values(L->w2),
               *w3 = values(L->w3);
        ref_rms_norm(h, an, x, T, D, c->norm_eps);
        ref_linear(x, wq, NULL, q, T, D, H * hd);
        ref_linear(x, wk, NULL, k, T, D, G * hd);
        ref_linear(x, wv, NULL, v, T, D, G * hd);
        for (int t = 0; t < T; t++) {
            for (int i = 0; i < H; i++) ref_rope(q + t * H * hd + i * hd, hd, t, c->rope_theta);
            for (int i = 0; i < G; i++) ref_rope(k + t * G * hd + i * hd, hd, t, c->rope_theta);
        }
        ref_attention(q, H * hd, k, v, G * hd, y, T, H, H / G, hd);
        ref_linear(y, wo, NULL, x, T, H * hd, D);
        for (int i = 0; i < T * D; i++) h[i] += x[i];
        ref_rms_norm(h, fn, x, T, D, c->norm_eps);
        ref_linear(x, w1, NULL, f1, T, D, F);
        ref_linear(x, w3, NULL, f3, T, D, F);
        for (int i = 0; i < T * F; i++) f1[i] = f1[i] / (1.0 + exp(-f1[i])) * f3[i];
        ref_linear(f1, w2, NULL, x, T, F, D);
        for (int i = 0; i < T * D; i++) h[i] += x[i];
        double *all[] = {an, wq, wk, wv, wo, fn, w1, w2, w3};
        for (int i = 0; i < 9; i++) free(all[i]);
    }
    double *nw = values(m->norm), *out = values(m->output);
    ref_rms_norm(h, nw, x, T, D, c->norm_eps);
    ref_linear(x, out, NULL, logits, T, D, V);
    free(nw), free(out), free(tok), free(h), free(x), free(q), free(k), free(v), free(y), free(f1), free(f3);
}

KT_TEST(models_llama_count_gqa_and_training) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny_llama();
    llama *m = llama_new(ctx, &c, 1);
    KT_NOTNULL(m);
    const int64_t V = 13, D = 16, L = 2, G = 2, hd = 4, F = 24;
    int64_t want = 2 * V * D + D + L * (2 * D + 2 * D * D + 2 * D * G * hd + 3 * D * F);
    KT_CHECK(llama_param_count(m) == want, "llama count %lld, want %lld", (long long)llama_param_count(m),
             (long long)want);
    /* grouped-query attention: k and v have kv_heads * hd rows */
    KT_CHECK(kiln_tensor_dim(m->layers[0].wk, 0) == G * hd && kiln_tensor_dim(m->layers[1].wv, 0) == G * hd &&
                 kiln_tensor_dim(m->layers[0].wq, 0) == D,
             "GQA shapes");
    KT_CHECK(!strcmp(kiln_tensor_name(m->layers[0].wq), "layers.0.attention.wq.weight") &&
                 !strcmp(kiln_tensor_name(m->layers[1].w2), "layers.1.feed_forward.w2.weight") &&
                 m->output != m->tok_embeddings,
             "Meta's names, untied head");
    /* Meta's hidden size rule: dim 256 -> 2/3 * 1024 = 682 -> 768 */
    llama_config d = llama_defaults();
    d.layers = 1;
    kiln_ctx *ctx_d = kiln_ctx_new(); /* one model per context: names are unique */
    llama *md = llama_new(ctx_d, &d, 1);
    KT_CHECK(md && md->cfg.hidden == 768 && md->cfg.kv_heads == 4, "default hidden and kv_heads");
    llama_free(md);
    kiln_ctx_free(ctx_d);
    model_graph g;
    KT_OK(llama_train_graph(m, 2, 8, &g));
    nnt_fill_ints(g.input, (int)V, 5);
    nnt_fill_ints(g.labels, (int)V, 6);
    check_loss_falls(ctx, &g, 20, "llama");
    llama_free(m);
    kiln_ctx_free(ctx);
}

KT_TEST(models_llama_logits_match_reference) {
    /* with kv_heads < heads and with kv_heads = heads */
    for (int kv = 2; kv <= 4; kv += 2) {
        kiln_ctx *ctx = kiln_ctx_new();
        llama_config c = tiny_llama();
        c.kv_heads = kv;
        llama *m = llama_new(ctx, &c, 2);
        KT_NOTNULL(m);
        scramble(m->params, m->n_params);
        const int B = 2, T = 9, V = 13;
        model_graph g;
        KT_OK(llama_eval_graph(m, B, T, &g));
        nnt_fill_ints(g.input, V, 7);
        nnt_fill_ints(g.labels, V, 8);
        KT_OK(kiln_graph_compute(g.graph));
        double *got = values(g.logits), *want = malloc((size_t)B * T * V * sizeof *want);
        int32_t idx[2 * 9];
        KT_OK(kiln_tensor_get_i32(g.input, idx, B * T));
        for (int b = 0; b < B; b++) ref_llama(m, idx + b * T, T, want + b * T * V);
        int64_t worst;
        double err = kt_rel_err(got, want, B * T * V, LOGITS_ATOL, LOGITS_RTOL, &worst);
        KT_CHECK(err <= 1, "llama (kv_heads %d) logits: error %.3g at %lld (%g vs %g)", kv, err, (long long)worst,
                 got[worst], want[worst]);
        free(got), free(want);
        llama_free(m);
        kiln_ctx_free(ctx);
    }
}

/* The prompt, then one token at a time through the cache: each step's
 * logits equal the full forward pass's at that position. On the CPU and,
 * where there is one, on the Vulkan device. */
KT_TEST(models_llama_kv_cache_matches_full_forward) {
    const int B = 2, T = 8, P = 3, V = 13;
    for (int dev = 0; dev < 2; dev++) {
        kiln_backend *be = dev ? kiln_backend_get("vulkan") : NULL;
        if (dev && !be) break; /* no device here: the CPU run above is the test */
        kiln_ctx *ctx = kiln_ctx_new();
        KT_OK(kiln_ctx_set_backend(ctx, be));
        llama_config c = tiny_llama();
        llama *m = llama_new(ctx, &c, 4);
        KT_NOTNULL(m);
        scramble(m->params, m->n_params);
        model_graph full;
        KT_OK(llama_eval_graph(m, B, T, &full));
        nnt_fill_ints(full.input, V, 11);
        KT_OK(kiln_graph_compute(full.graph));
        double *want = values(full.logits);
        int32_t tok[2 * 8];
        KT_OK(kiln_tensor_get_i32(full.input, tok, B * T));
        llama_cache *cache = llama_cache_new(m, B, c.context);
        KT_NOTNULL(cache);
        float got[2 * 13];
        for (int t = P - 1; t < T; t++) {
            int n = t == P - 1 ? P : 1, start = t + 1 - n;
            int32_t step[2 * 3];
            for (int b = 0; b < B; b++)
                for (int i = 0; i < n; i++) step[b * n + i] = tok[b * T + start + i];
            KT_OK(llama_cache_step(m, cache, step, n, got));
            for (int b = 0; b < B; b++)
                for (int j = 0; j < V; j++) {
                    double w = want[(b * T + t) * V + j];
                    KT_CHECK(fabs(got[b * V + j] - w) <= 1e-5 + 1e-4 * fabs(w), "%s: position %d seq %d logit %d: %g vs %g",
                             dev ? "vulkan" : "cpu", t, b, j, got[b * V + j], w);
                }
        }
        KT_CHECK(cache->pos == T, "cache at %lld", (long long)cache->pos);
        free(want);
        llama_cache_free(cache);
        llama_free(m);
        kiln_ctx_free(ctx);
    }
}
