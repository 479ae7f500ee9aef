/* quantize — convert a trained byte-level model to each weight format and
 * print a table: format, bits per weight (scales included), file size and
 * validation bits per byte on the fortunes text (models/data.h).
 *
 * The model is examples/gpt's GPT (its checkpoint: parameters, optimizer
 * state beside them is ignored) or, with --model llama, models/llama.h's
 * llama (a kiln_save_params file, or --random). Only the linear weights
 * of the blocks change format; the embeddings, norms, biases and the head
 * stay f32, as GPTQ's reference leaves them, and count in the file size.
 * The formats:
 *
 *   - f32: as trained; the file is every parameter in f32;
 *   - q8_0, nf4, nf4_dq: kiln's block dtypes, really quantized
 *     (kiln_quantize), written to a safetensors file (quantized tensors as
 *     U8 blocks, see include/kiln.h) and read back from it; the model runs
 *     on what it read, the fused quantized matmul doing the products. A
 *     weight whose shape the dtype cannot take (NF4 blocks are 64 along a
 *     row, NF4_DQ super-blocks 16384 elements) is stored flattened and
 *     zero-padded to whole blocks, as bitsandbytes blocks a flattened
 *     tensor, and dequantized each pass; the padding counts in its bits;
 *   - rtn-B, gptq-B (B = 4, 3, 2 bits): models/model_quant.h's RTN and
 *     GPTQ (128 calibration sequences of the training text by default, as
 *     the GPTQ paper), group --group, --sym, --act-order, packed
 *     (kiln_gptq_pack) into the GQ dtype of B bits and the largest block of
 *     128, 64, 32 dividing the group and the row (f16 scale, u8 zero,
 *     bit-packed codes per block), written to the file with, under
 *     --act-order, the i32 column permutation of each weight with two
 *     groups or more to a row beside it ("<name>.perm"), read back, and run by the fused quantized matmul
 *     (the permutation gathering the input's columns, models/model.h's
 *     model_linear). Their bits per weight count the perms.
 *
 *     build/examples/quantize --checkpoint gpt.safetensors
 *     build/examples/quantize --checkpoint gpt.safetensors --group 64 --act-order
 *     build/examples/quantize --random --width 64 --layers 1 --calib 8 --eval-subset 2
 *     build/examples/quantize --help
 */
#include "args.h"
#include "data.h"
#include "gpt_quant.h"
#include "kiln.h"
#include "llama_quant.h"
#include "lm_eval.h"
#include "output.h"
#include "progress.h"
#include "quantize.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EVAL_BATCH 16

static void die(const char *what) {
    fprintf(stderr, "quantize: %s: %s\n", what, kiln_last_error());
    exit(1);
}

/* ---- the models as quantize.h's qmodel ---- */

static kiln_status gpt_q(void *m, model_quant_method method, const kiln_gptq_config *cfg, const int32_t *tokens,
                         int64_t n, int64_t seq, int64_t batch, kiln_gptq_result **out) {
    return gpt_quantize(m, method, cfg, tokens, n, seq, batch, out);
}
static kiln_tensor *gpt_f(void *m, kiln_tensor *idx) { return gpt_forward(m, idx); }
static kiln_status llama_q(void *m, model_quant_method method, const kiln_gptq_config *cfg, const int32_t *tokens,
                           int64_t n, int64_t seq, int64_t batch, kiln_gptq_result **out) {
    return llama_quantize(m, method, cfg, tokens, n, seq, batch, out);
}
static kiln_tensor *llama_f(void *m, kiln_tensor *idx) { return llama_forward(m, idx, NULL, 0); }

/* The shape of tensor name in st ([0, 0] when absent). */
static void file_dims(kiln_safetensors *st, const char *name, int64_t *d0, int64_t *d1) {
    kiln_safetensors_info in;
    *d0 = *d1 = 0;
    if (!st || kiln_safetensors_info_at(st, kiln_safetensors_find(st, name), &in) || in.ndim < 1) return;
    *d0 = in.shape[0];
    *d1 = in.ndim > 1 ? in.shape[1] : 0;
}

/* Layers in st: the first i with no "<prefix>{i}<suffix>". */
static int file_layers(kiln_safetensors *st, const char *prefix, const char *suffix) {
    char name[96];
    int n = 0;
    for (;; n++) {
        snprintf(name, sizeof name, "%s%d%s", prefix, n, suffix);
        if (!st || kiln_safetensors_find(st, name) < 0) return n;
    }
}

typedef struct shape_opts {
    int layers, width, heads, context;
} shape_opts;

static void make_gpt(qmodel *q, kiln_ctx *ctx, kiln_safetensors *st, const shape_opts *o, uint64_t seed) {
    gpt_config c = {.vocab = DATA_TEXT_VOCAB, .context = o->context, .layers = o->layers, .heads = o->heads,
                    .width = o->width};
    if (st) { /* the sizes from the file; heads cannot be seen there */
        int64_t v;
        file_dims(st, "wte.weight", &v, &c.width);
        file_dims(st, "wpe.weight", &c.context, &v);
        c.layers = file_layers(st, "h.", ".ln_1.weight");
    }
    gpt *m = gpt_new(ctx, &c, seed);
    if (!m) die("making the GPT");
    *q = (qmodel){.ctx = ctx, .params = m->params, .n_params = m->n_params, .context = c.context, .model = m,
                  .quantize = gpt_q, .forward = gpt_f};
    if (4 * c.layers > 256) fprintf(stderr, "quantize: at most 64 layers\n"), exit(1);
    for (int l = 0; l < c.layers; l++) {
        gpt_block *b = &m->blocks[l];
        kiln_tensor **w[4] = {&b->attn_w, &b->proj_w, &b->fc_w, &b->mlp_proj_w},
                    **p[4] = {&b->attn_perm, &b->proj_perm, &b->fc_perm, &b->mlp_proj_perm};
        for (int i = 0; i < 4; i++) q->perm[q->n_lin] = p[i], q->slot[q->n_lin++] = w[i];
    }
    printf("GPT: %lld layers, width %lld, %lld heads, context %lld: %.2fM parameters\n", (long long)c.layers,
           (long long)c.width, (long long)c.heads, (long long)c.context, (double)gpt_param_count(m) / 1e6);
}

static void make_llama(qmodel *q, kiln_ctx *ctx, kiln_safetensors *st, const shape_opts *o, uint64_t seed) {
    llama_config c = llama_defaults();
    c.layers = o->layers, c.dim = o->width, c.heads = o->heads, c.context = o->context;
    if (st) {
        int64_t v, kv;
        file_dims(st, "tok_embeddings.weight", &v, &c.dim);
        file_dims(st, "layers.0.feed_forward.w1.weight", &c.hidden, &v);
        file_dims(st, "layers.0.attention.wk.weight", &kv, &v);
        c.kv_heads = c.heads && c.dim ? kv / (c.dim / c.heads) : 0;
        c.layers = file_layers(st, "layers.", ".attention_norm.weight");
    }
    llama *m = llama_new(ctx, &c, seed);
    if (!m) die("making the llama");
    *q = (qmodel){.ctx = ctx, .params = m->params, .n_params = m->n_params, .context = c.context, .model = m,
                  .quantize = llama_q, .forward = llama_f};
    if (7 * c.layers > 256) fprintf(stderr, "quantize: at most 36 layers\n"), exit(1);
    for (int l = 0; l < c.layers; l++) {
        llama_layer *y = &m->layers[l];
        kiln_tensor **w[7] = {&y->wq, &y->wk, &y->wv, &y->wo, &y->w1, &y->w3, &y->w2},
                    **p[7] = {&y->wq_perm, &y->wk_perm, &y->wv_perm, &y->wo_perm, &y->w1_perm, &y->w3_perm,
                              &y->w2_perm};
        for (int i = 0; i < 7; i++) q->perm[q->n_lin] = p[i], q->slot[q->n_lin++] = w[i];
    }
    printf("llama: %lld layers, dim %lld, %lld heads (%lld kv), hidden %lld, context %lld: %.2fM parameters\n",
           (long long)c.layers, (long long)c.dim, (long long)c.heads, (long long)m->cfg.kv_heads,
           (long long)m->cfg.hidden, (long long)c.context, (double)llama_param_count(m) / 1e6);
}

/* ---- the table ---- */

/* Validation loss (nats/byte) of the model as its weights are now. */
static double validate(qmodel *q, const data_text *val, int64_t seq, int subset) {
    kiln_ctx_set_grad_enabled(q->ctx, false);
    kiln_tensor *x = kiln_new_2d(q->ctx, KILN_I32, EVAL_BATCH, seq);
    lm_eval e;
    kiln_status s = lm_eval_init(&e, q->ctx, x, x ? q->forward(q->model, x) : NULL, val);
    kiln_ctx_set_grad_enabled(q->ctx, true);
    if (s) die("building the evaluation graph");
    int64_t stride = subset > 0 ? lm_eval_batches(&e) / subset : 1;
    double loss = lm_eval_loss(&e, stride < 1 ? 1 : stride);
    lm_eval_free(&e);
    if (loss < 0) {
        fprintf(stderr, "quantize: evaluating: %s %s\n", kiln_last_error(), data_last_error());
        exit(1);
    }
    return loss;
}

/* Append format name unless only (a comma-separated list) leaves it out. */
static void add(format *f, int *n, const char *only, const char *name, fmt_kind kind, kiln_dtype dtype, int bits) {
    if (only) {
        size_t len = strlen(name);
        const char *p = only;
        while ((p = strstr(p, name)) && ((p > only && p[-1] != ',') || (p[len] && p[len] != ','))) p += len;
        if (!p) return;
    }
    f[*n] = (format){.kind = kind, .dtype = dtype, .bits = bits};
    snprintf(f[*n].name, sizeof f[*n].name, "%s", name);
    (*n)++;
}

int main(int argc, char **argv) {
    const char *checkpoint = "gpt.safetensors", *model = "gpt", *data_dir = DATA_FORTUNES_DIR, *out_dir = ".",
               *only = NULL;
    int group = 128, calib_n = 128, calib_batch = 8, subset = 0, threads = 0;
    bool act_order = false, sym = false, random = false;
    float damp = 0.01f;
    shape_opts so = {.layers = 4, .width = 96, .heads = 4, .context = 128};
    uint64_t seed = 1;
    args_opt opts[] = {
        {"checkpoint", ARGS_STRING, &checkpoint, "FILE", "the trained model (examples/gpt --save, or kiln_save_params)",
         NULL, false},
        {"model", ARGS_CHOICE, &model, "M", "the architecture", "gpt|llama", false},
        {"random", ARGS_FLAG, &random, NULL, "a random model of --layers, --width, --context instead", NULL, false},
        {"layers", ARGS_INT, &so.layers, "N", "--random: blocks", NULL, true},
        {"width", ARGS_INT, &so.width, "N", "--random: width", NULL, true},
        {"heads", ARGS_INT, &so.heads, "N", "attention heads (a file does not say)", NULL, true},
        {"context", ARGS_INT, &so.context, "N", "--random or llama: positions", NULL, true},
        {"group", ARGS_INT, &group, "N", "RTN/GPTQ: columns per group (0: one per row)", NULL, false},
        {"act-order", ARGS_FLAG, &act_order, NULL, "GPTQ: columns by descending Hessian diagonal", NULL, false},
        {"sym", ARGS_FLAG, &sym, NULL, "RTN/GPTQ: symmetric (zero point fixed)", NULL, false},
        {"damp", ARGS_FLOAT, &damp, "X", "GPTQ: damping, fraction of mean(diag H)", NULL, false},
        {"calib", ARGS_INT, &calib_n, "N", "GPTQ: calibration sequences of the training text", NULL, true},
        {"calib-batch", ARGS_INT, &calib_batch, "N", "GPTQ: sequences per forward pass (divides --calib)", NULL, true},
        {"eval-subset", ARGS_INT, &subset, "N", "batches of 16 windows evaluated (0: all the validation text)", NULL,
         false},
        {"only", ARGS_STRING, &only, "LIST", "these formats only, by name: \"f32,rtn-4,gptq-4\" (f32 is the baseline)",
         NULL, false},
        {"out", ARGS_STRING, &out_dir, "DIR", "where the f32 and block-format files are written", NULL, false},
        {"data", ARGS_STRING, &data_dir, "DIR", "the fortunes files", NULL, false},
        {"seed", ARGS_U64, &seed, "N", "seed of --random and of the calibration windows", NULL, false},
        {"threads", ARGS_INT, &threads, "N", "worker threads (0: $KILN_THREADS, else all cores)", NULL, false},
    };
    const int nopts = (int)(sizeof opts / sizeof opts[0]);
    int r = args_parse("quantize",
                       "Convert a trained byte-level model to f32, q8_0, nf4, nf4_dq, RTN and GPTQ at 4, 3, 2 bits; "
                       "print bits per weight, file size and validation bits per byte.",
                       opts, nopts, argc, argv);
    if (r != ARGS_OK) return r == ARGS_HELP ? 0 : 2;
    if (calib_n % calib_batch)
        return args_reject("quantize", opts, nopts, "calib-batch", "a divisor of --calib %d", calib_n), 2;
    if (!output_dir("quantize", "--out", out_dir)) return 2;
    kiln_gptq_config cfg = kiln_gptq_defaults();
    cfg.group_size = group, cfg.sym = sym, cfg.act_order = act_order, cfg.percdamp = damp;
    format f[16];
    int nf = 0;
    add(f, &nf, only, "f32", FMT_F32, KILN_F32, 0);
    add(f, &nf, only, "q8_0", FMT_BLOCK, KILN_Q8_0, 0);
    add(f, &nf, only, "nf4", FMT_BLOCK, KILN_NF4, 0);
    add(f, &nf, only, "nf4_dq", FMT_BLOCK, KILN_NF4_DQ, 0);
    for (int b = 4; b >= 2; b--) {
        char name[24];
        snprintf(name, sizeof name, "rtn-%d", b);
        add(f, &nf, only, name, FMT_RTN, KILN_F32, b);
        snprintf(name, sizeof name, "gptq-%d", b);
        add(f, &nf, only, name, FMT_GPTQ, KILN_F32, b);
    }
    /* every name --only lists is one of them */
    for (const char *p = only; p && (*p || p == only);) {
        size_t len = strcspn(p, ",");
        bool known = false;
        for (int i = 0; i < nf; i++) known |= strlen(f[i].name) == len && !strncmp(f[i].name, p, len);
        if (!known)
            return fprintf(stderr, "quantize: bad value '%.*s' in --only (expected names among f32, q8_0, nf4, nf4_dq, "
                                   "rtn-4, gptq-4, rtn-3, gptq-3, rtn-2, gptq-2)\n", (int)len, p), 2;
        p += len + (p[len] == ',');
    }
    if (threads && kiln_set_threads(threads))
        return fprintf(stderr, "quantize: --threads: %s\n", kiln_last_error()), 2;

    data_corpus corpus;
    if (data_fortunes_load(data_dir, &corpus)) {
        fprintf(stderr, "quantize: %s\n", data_last_error());
        return 1;
    }
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_safetensors *st = NULL;
    if (!random && !(st = kiln_safetensors_open(checkpoint))) die("opening the checkpoint (or pass --random)");
    qmodel q;
    if (!strcmp(model, "gpt")) make_gpt(&q, ctx, st, &so, seed);
    else make_llama(&q, ctx, st, &so, seed);
    for (int i = 0; st && i < q.n_params; i++)
        if (kiln_safetensors_read_into(st, kiln_tensor_name(q.params[i]), q.params[i])) die("reading the checkpoint");
    kiln_safetensors_close(st);
    if (qmodel_snapshot(&q)) die("copying the weights");
    const int64_t seq = q.context;

    /* calibration: random windows of the training text (GPTQ's paper: 128
     * sequences of the model's context) */
    kiln_tensor *cx = kiln_new_2d(ctx, KILN_I32, calib_n, seq), *cy = kiln_new_2d(ctx, KILN_I32, calib_n, seq);
    data_text_sampler *smp = data_text_sampler_new(&corpus.train, calib_n, seq, seed);
    if (!cx || !cy || !smp || data_text_sampler_next(smp, cx, cy)) {
        fprintf(stderr, "quantize: calibration windows: %s %s\n", kiln_last_error(), data_last_error());
        return 1;
    }
    data_text_sampler_free(smp);
    const int32_t *calib = kiln_tensor_data(cx);

    printf("validation: %s of %lld bytes; GPTQ/RTN group %d%s%s, damp %g; GPTQ calibration %d x %lld bytes\n",
           subset ? "a subset" : "all", (long long)corpus.val.n, group, sym ? ", symmetric" : "",
           act_order ? ", act-order" : "", (double)damp, calib_n, (long long)seq);
    printf("\n%-8s %12s %12s %14s %10s  %s\n", "format", "bits/weight", "file size", "val bits/byte", "vs f32",
           "notes");
    double base = NAN;
    for (int i = 0; i < nf; i++) {
        char file[1024], note[128] = "";
        snprintf(file, sizeof file, "%.900s/quantize-%.23s.safetensors", out_dir, f[i].name);
        fmt_result res;
        double t0 = progress_now();
        kiln_status s = format_apply(&q, &f[i], &cfg, file, calib, calib_n, seq, calib_batch, &res);
        const double t_quant = progress_now() - t0;
        if (s == KILN_ERR_UNSUPPORTED) { /* GPTQ in a build without LAPACK */
            printf("%-8s %12s %12s %14s %10s  %s\n", f[i].name, "-", "-", "-", "-", kiln_last_error());
            continue;
        }
        if (s) die(f[i].name);
        double bpb = validate(&q, &corpus.val, seq, subset) / log(2);
        if (f[i].kind == FMT_F32) base = bpb;
        if (f[i].kind == FMT_BLOCK)
            snprintf(note, sizeof note, "%d fused; %d flattened + padded, dequantized per pass", res.fused,
                     res.dequantized);
        else if (f[i].kind != FMT_F32) {
            char blocks[16] = ""; /* GQ<b>_<smallest>/<largest> when the weights' blocks differ */
            if (res.block_max != res.block) snprintf(blocks, sizeof blocks, "/%d", res.block_max);
            char perms[32] = "";
            if (res.permuted) snprintf(perms, sizeof perms, ", %d with a perm", res.permuted);
            snprintf(note, sizeof note, "%d fused in GQ%d_%d%s%s; quantized in %.1f s", res.fused, f[i].bits,
                     res.block, blocks, perms, t_quant);
        }
        char bpw[32], size[32];
        snprintf(bpw, sizeof bpw, "%.3f", 8.0 * res.weight_bytes / (double)res.weights);
        snprintf(size, sizeof size, "%.1f KiB", (double)res.file_bytes / 1024.0);
        printf("%-8s %12s %12s %14.4f %+10.4f  %s\n", f[i].name, bpw, size, bpb, bpb - base, note);
        fflush(stdout);
    }
    printf("\nbits/weight: the blocks' linear weights (scales and zeros included); file size: every parameter, "
           "the embeddings, norms%s and head in f32; both as written to and read from the file\n", strcmp(model, "gpt") ? "" : ", biases");
    for (int k = 0; k < q.n_lin; k++) free(q.values[k]);
    if (!strcmp(model, "gpt")) gpt_free(q.model);
    else llama_free(q.model);
    data_corpus_free(&corpus);
    kiln_ctx_free(ctx);
    return 0;
}
