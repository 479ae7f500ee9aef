/* finetune — LoRA or QLoRA fine-tuning of a llama-family model (a GGUF
 * file or a Hugging Face directory) on a plain-text file or a chat JSONL
 * file ({"messages": [{"role", "content"}, ...]} per line, rendered with
 * the model's chat template, ChatML when it has none; the loss on the
 * assistant's tokens only, as TRL's assistant_only_loss; on every token
 * for plain text).
 *
 * The base is frozen leaves without gradient storage (llama_infer_from_gguf
 * / _hf): in f32 for LoRA; with --qlora quantized to NF4_DQ as it is read
 * (llama_qlora.h: embedding and head in the compute dtype, gradient
 * checkpointing on), 8-bit AdamW by default as QLoRA's paged_adamw_8bit
 * (without the paging: the optimizer's state is the adapters', a few MB).
 * --compute bf16 rounds the products' operands to bf16 (as
 * bnb_4bit_compute_dtype=bfloat16); the default where the CPU multiplies
 * bf16 natively (AVX512-BF16, AMX) and --qlora, else f32.
 *
 * The data is one token stream; its last --holdout of tokens is held out.
 * Training draws windows of --seq + 1 tokens in a shuffled order per epoch
 * (a function of --seed and the epoch), --batch at a time, and steps the
 * adapters with AdamW, 8-bit AdamW or MeZO (--mezo: two forward passes a
 * step, no gradients). It prints the held-out loss and a greedy sample of
 * --prompt before and after, a progress bar, and the memory: the trainable
 * state (adapters, their gradients, the optimizer's state), the peak RSS,
 * and what full fine-tuning with AdamW would take (4 f32 copies of every
 * parameter: weights, gradients, two moments; plus the activations this
 * run's training graph plans, which full fine-tuning keeps as well).
 * --checkpoint DIR --save-every N saves the adapters, the optimizer's
 * state and the run's place; --resume DIR continues bit for bit. --out DIR
 * writes PEFT's adapter files, --merge-to FILE the merged model as GGUF
 * (over --qlora's base: merged into its dequantized f32 copy, merge.c).
 * examples/finetune/data/sayings.txt, written for kiln, is public domain.
 *
 *     build/examples/finetune --model tests/fixtures/gguf-ref/llama-s1-F32.gguf \
 *         --data examples/finetune/data/sayings.txt --steps 60 --out /tmp/adapter
 */
#include "args.h"
#include "finetune.h"
#include "llama_files.h"
#include "llama_qlora.h"
#include "output.h"
#include "progress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>

typedef struct options {
    const char *model, *data, *format, *targets, *prompt, *optim, *out, *merge_to, *dtype, *checkpoint, *resume,
        *compute;
    int r, steps, batch, seq, threads, sample_tokens, save_every, eval_windows;
    double alpha, holdout;
    float lr, eps, weight_decay;
    uint64_t seed;
    bool mezo, qlora;
} options;

static int fail(const char *what) {
    fprintf(stderr, "finetune: %s: %s\n", what, kiln_last_error());
    return 1;
}

/* What a run holds, released on every way out (the sanitized build's
 * leak check runs the error paths too). */
typedef struct owned {
    kiln_ctx *ctx;
    llama *m;
    kiln_tokenizer *tok;
    char *tmpl;
    corpus cp;
    lora *l;
    int64_t *order;
} owned;

static int release(owned *h, int rc) {
    free(h->order);
    lora_free(h->l);
    llama_free(h->m);
    kiln_tokenizer_free(h->tok);
    corpus_free(&h->cp);
    free(h->tmpl);
    kiln_ctx_free(h->ctx);
    return rc;
}

static double mb(double bytes) { return bytes / 1e6; }

/* --targets "q_proj,v_proj" into a NULL-free array of at most 16 names (copied into buf) */
static int split_targets(char *buf, const char **out) {
    int n = 0;
    for (char *s = strtok(buf, ","); s && n < 16; s = strtok(NULL, ",")) out[n++] = s;
    return n;
}

/* Greedy decoding of n tokens after prompt, printed after label. */
static kiln_status sample(llama *m, const kiln_tokenizer *tok, const char *label, const char *prompt, int n) {
    size_t len = strlen(prompt);
    int64_t cap = kiln_tokenizer_max_ids(tok, len) + 2 + n, k = 0, got = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    float *logits = malloc((size_t)m->cfg.vocab * sizeof *logits);
    kiln_status s = ids && logits ? KILN_OK : kiln_set_error(KILN_ERR_OOM, "sample: out of memory");
    if (!s && kiln_tokenizer_add_bos(tok)) ids[k++] = kiln_tokenizer_bos(tok);
    if (!s) s = kiln_tokenizer_encode(tok, prompt, len, false, ids + k, cap - k, &got);
    k += got;
    int64_t ctx_len = k + n < m->cfg.context ? k + n : m->cfg.context;
    llama_cache *c = !s && k > 0 && k < ctx_len ? llama_cache_new(m, 1, ctx_len) : NULL;
    if (!s && !c)
        s = k < 1 || k >= ctx_len ? kiln_set_error(KILN_ERR_ARG, "--prompt: %lld tokens, context %lld", (long long)k,
                                                   (long long)m->cfg.context)
                                  : kiln_last_status();
    int64_t first = k;
    if (!s) s = llama_cache_step(m, c, ids, k, logits);
    while (!s && k < ctx_len) {
        int32_t best = 0;
        for (int64_t v = 1; v < m->cfg.vocab; v++)
            if (logits[v] > logits[best]) best = (int32_t)v;
        ids[k++] = best;
        if (kiln_tokenizer_is_eog(tok, best) || k == ctx_len) break;
        s = llama_cache_step(m, c, &best, 1, logits);
    }
    char *text = NULL;
    size_t tl = 0;
    if (!s) kiln_tokenizer_decode(tok, ids + first, k - first, NULL, 0, &tl);
    if (!s && !(text = malloc(tl + 1))) s = kiln_set_error(KILN_ERR_OOM, "sample: out of memory");
    if (!s) s = kiln_tokenizer_decode(tok, ids + first, k - first, text, tl, &tl);
    if (!s) {
        printf("sample %s: ", label);
        text_write(stdout, prompt, len);
        printf("|");
        text_write(stdout, text, tl);
        printf("\n");
    }
    llama_cache_free(c);
    free(ids), free(logits), free(text);
    return s;
}

/* A hash of the frozen base's bytes (FNV-1a over 8-byte words), taken
 * before and after training: the base must come out bit for bit. */
static uint64_t base_hash(const llama *m) {
    uint64_t h = 14695981039346656037ull;
    for (int i = 0; i < m->n_params; i++) {
        const unsigned char *p = kiln_tensor_data(m->params[i]);
        size_t n = kiln_tensor_nbytes(m->params[i]), k = 0;
        for (uint64_t w; k + 8 <= n; k += 8) memcpy(&w, p + k, 8), h = (h ^ w) * 1099511628211ull;
        for (; k < n; k++) h = (h ^ p[k]) * 1099511628211ull;
    }
    return h;
}

/* The run's MeZO forward: the loss of the eval graph on the batch in it. */
static kiln_status forward_loss(void *user, double *loss) {
    const model_graph *g = user;
    kiln_status s = kiln_graph_compute(g->graph);
    *loss = s ? NAN : kiln_tensor_item(g->loss);
    return s;
}

static void memory_report(const llama *m, const lora *l, const kiln_optim *opt, size_t activations, bool mezo) {
    double params = 0, grads = 0, base = 0, base_bytes = 0, base_grads = 0;
    for (int i = 0; i < l->n_params; i++) {
        params += (double)kiln_tensor_nbytes(l->params[i]);
        kiln_tensor *g = kiln_tensor_grad(l->params[i]);
        grads += g ? (double)kiln_tensor_nbytes(g) : 0;
    }
    for (int i = 0; i < m->n_params; i++) {
        base += (double)kiln_tensor_numel(m->params[i]);
        base_bytes += (double)kiln_tensor_nbytes(m->params[i]);
        kiln_tensor *g = kiln_tensor_grad(m->params[i]);
        base_grads += g ? (double)kiln_tensor_nbytes(g) : 0;
    }
    double state = (double)kiln_optim_state_bytes(opt);
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    printf("memory: trainable state %.3f MB (adapters %.3f MB, their gradients %.3f MB%s, optimizer state %.3f MB)\n",
           mb(params + grads + state), mb(params), mb(grads), mezo ? ", allocated but never written by MeZO" : "",
           mb(state));
    printf("memory: frozen base %.3f MB (layers in %s), its gradients %.3f MB, no optimizer state\n", mb(base_bytes),
           kiln_dtype_name(m->weights), mb(base_grads));
    printf("memory: peak RSS %.1f MB\n", mb((double)u.ru_maxrss * 1024)); /* KiB on Linux */
    printf("memory: full fine-tuning with AdamW: about %.1f MB (4 x %.0f parameters x 4 bytes for weights, "
           "gradients and moments = %.1f MB, + %.1f MB of activations: this run's %s graph as planned)\n",
           mb(16 * base + (double)activations), base, mb(16 * base), mb((double)activations),
           mezo ? "forward (a lower bound: training keeps more)" : "training");
}

int main(int argc, char **argv) {
    options o = {.model = NULL,
                 .data = NULL,
                 .format = "auto",
                 .targets = "q_proj,v_proj",
                 .prompt = "The",
                 .optim = "auto",
                 .compute = "auto",
                 .dtype = "F16",
                 .r = 8,
                 .steps = 100,
                 .batch = 4,
                 .seq = 64,
                 .sample_tokens = 24,
                 .eval_windows = 64,
                 .alpha = 16,
                 .holdout = 0.1,
                 .lr = 1e-3f,
                 .eps = 1e-3f,
                 .weight_decay = 0,
                 .seed = 42};
    args_opt opts[] = {
        {"model", ARGS_STRING, &o.model, "PATH", "a llama-family GGUF file or Hugging Face directory (required)", NULL,
         false},
        {"data", ARGS_STRING, &o.data, "FILE", "plain text, or chat JSONL (required)", NULL, false},
        {"format", ARGS_CHOICE, &o.format, "F", "the data's form (auto: chat for .jsonl)", "auto|text|chat", false},
        {"targets", ARGS_STRING, &o.targets, "LIST", "modules to adapt, comma-separated (PEFT's target_modules)", NULL,
         false},
        {"r", ARGS_INT, &o.r, "N", "LoRA rank", NULL, true},
        {"alpha", ARGS_DOUBLE, &o.alpha, "X", "lora_alpha (the update is scaled by alpha / r)", NULL, true},
        {"lr", ARGS_FLOAT, &o.lr, "X", "learning rate", NULL, true},
        {"weight-decay", ARGS_FLOAT, &o.weight_decay, "X", "weight decay (decoupled for AdamW)", NULL, false},
        {"steps", ARGS_INT, &o.steps, "N", "training steps in all (a resumed run counts the ones done)", NULL, false},
        {"batch", ARGS_INT, &o.batch, "N", "windows per step", NULL, true},
        {"seq", ARGS_INT, &o.seq, "N", "tokens per window", NULL, true},
        {"seed", ARGS_U64, &o.seed, "N", "adapters' init, window order, MeZO's noise", NULL, false},
        {"threads", ARGS_INT, &o.threads, "N", "kiln's threads (0: kiln's default)", NULL, false},
        {"holdout", ARGS_DOUBLE, &o.holdout, "X", "fraction of the tokens held out for the loss before and after", NULL,
         true},
        {"eval-windows", ARGS_INT, &o.eval_windows, "N", "held-out windows evaluated (0: all)", NULL, false},
        {"prompt", ARGS_STRING, &o.prompt, "TEXT", "the greedy sample's prompt", NULL, false},
        {"sample-tokens", ARGS_INT, &o.sample_tokens, "N", "tokens of each sample (0: no sample)", NULL, false},
        {"mezo", ARGS_FLAG, &o.mezo, NULL, "MeZO: two forward passes a step, no gradients", NULL, false},
        {"eps", ARGS_FLOAT, &o.eps, "X", "MeZO's perturbation scale", NULL, true},
        {"optim", ARGS_CHOICE, &o.optim, "NAME", "the optimizer without --mezo (auto: adamw8bit with --qlora)",
         "auto|adamw|adamw8bit", false},
        {"qlora", ARGS_FLAG, &o.qlora, NULL, "QLoRA: the base's layers quantized to NF4_DQ on load", NULL, false},
        {"compute", ARGS_CHOICE, &o.compute, "T",
         "the products' precision (auto: bf16 with --qlora where the CPU has AVX512-BF16 or AMX)", "auto|f32|bf16",
         false},
        {"checkpoint", ARGS_STRING, &o.checkpoint, "DIR", "where --save-every saves the run", NULL, false},
        {"save-every", ARGS_INT, &o.save_every, "N", "steps between checkpoints (0: none)", NULL, false},
        {"resume", ARGS_STRING, &o.resume, "DIR", "continue the run saved there", NULL, false},
        {"out", ARGS_STRING, &o.out, "DIR", "write the adapters there as PEFT does", NULL, false},
        {"merge-to", ARGS_STRING, &o.merge_to, "FILE", "write the merged model as GGUF", NULL, false},
        {"dtype", ARGS_STRING, &o.dtype, "T", "the merged model's weight type (F32, F16, Q8_0, Q4_K, ...)", NULL,
         false},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    int r = args_parse("finetune", "LoRA or QLoRA fine-tuning of a llama-family model on text or chat JSONL.", opts,
                       n_opts, argc, argv);
    if (r != ARGS_OK) return r == ARGS_HELP ? 0 : 2;
    if (!o.model) return args_reject("finetune", opts, n_opts, "model", "a GGUF file or a model directory"), 2;
    if (!o.data) return args_reject("finetune", opts, n_opts, "data", "a text or JSONL file"), 2;
    if (o.holdout >= 1) return args_reject("finetune", opts, n_opts, "holdout", "a fraction in (0, 1)"), 2;
    if (o.batch > 4096) return args_reject("finetune", opts, n_opts, "batch", "at most 4096"), 2;
    if (o.save_every && !o.checkpoint)
        return args_reject("finetune", opts, n_opts, "save-every", "0 without --checkpoint DIR"), 2;
    kiln_dtype merge_dtype = KILN_F32;
    bool known = false;
    for (int t = 0; t < KILN_DTYPE_COUNT && !known; t++)
        if (!strcasecmp(o.dtype, kiln_dtype_name((kiln_dtype)t))) merge_dtype = (kiln_dtype)t, known = true;
    if (!known) return args_reject("finetune", opts, n_opts, "dtype", "a kiln dtype name: F32, F16, Q8_0, ..."), 2;
    if ((o.out && !output_dir("finetune", "--out", o.out)) ||
        (o.checkpoint && !output_dir("finetune", "--checkpoint", o.checkpoint)) ||
        (o.merge_to && !output_file("finetune", "--merge-to", o.merge_to)))
        return 2;
    if (o.threads > 0 && kiln_set_threads(o.threads)) return fail("--threads");
    if (!strcmp(o.optim, "auto")) o.optim = o.qlora ? "adamw8bit" : "adamw";

    /* the model, its tokenizer and chat template */
    struct stat st;
    bool dir = stat(o.model, &st) == 0 && S_ISDIR(st.st_mode);
    owned h = {0};
    kiln_ctx *ctx = h.ctx = kiln_ctx_new();
    if (!ctx) return release(&h, fail("kiln_ctx_new"));
    /* the CPU's bf16 as kiln_ctx_new sees it ($KILN_SIMD caps it) */
    const char *cpu = kiln_cpu_describe();
    bool bf16 = !strcmp(o.compute, "bf16") ||
                (!strcmp(o.compute, "auto") && o.qlora && (strstr(cpu, "avx512_bf16") || strstr(cpu, "amx_bf16")));
    if (bf16 && kiln_set_matmul_precision(KILN_MATMUL_BF16)) return release(&h, fail("--compute"));
    kiln_dtype compute = bf16 ? KILN_BF16 : KILN_F32;
    llama *m = h.m = o.qlora ? (dir ? llama_qlora_from_hf(ctx, o.model, KILN_NF4_DQ, compute)
                                    : llama_qlora_from_gguf(ctx, o.model, KILN_NF4_DQ, compute))
                             : (dir ? llama_infer_from_hf(ctx, o.model, KILN_F32)
                                    : llama_infer_from_gguf(ctx, o.model, KILN_F32));
    if (!m) return release(&h, fail(o.model));
    kiln_tokenizer *tok = h.tok = dir ? llama_hf_tokenizer(o.model) : llama_gguf_tokenizer(o.model);
    if (!tok) return release(&h, fail(o.model));
    char *tmpl = NULL;
    if (dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tokenizer_config.json", o.model);
        kiln_json_file *j = kiln_json_file_open(path);
        const char *t = j ? kiln_json_file_string(j, NULL, "chat_template") : NULL;
        h.tmpl = tmpl = t ? strdup(t) : NULL;
        kiln_json_file_close(j);
    } else {
        kiln_gguf *g = kiln_gguf_open(o.model);
        const char *t = g ? kiln_gguf_get_string(g, "tokenizer.chat_template", NULL) : NULL;
        h.tmpl = tmpl = t ? strdup(t) : NULL;
        kiln_gguf_close(g);
    }
    size_t dl = strlen(o.data);
    bool chat =
        !strcmp(o.format, "chat") || (!strcmp(o.format, "auto") && dl > 6 && !strcmp(o.data + dl - 6, ".jsonl"));

    /* the data: train on the head of the stream, hold out the tail */
    const corpus *cp = &h.cp;
    if (!corpus_load(&h.cp, o.data, chat, tok, tmpl ? tmpl : "chatml")) return release(&h, 1);
    for (int64_t i = 0; i < cp->n; i++) /* a tokenizer with more ids than the model's embedding has rows */
        if (cp->ids[i] >= m->cfg.vocab) {
            const char *t = kiln_tokenizer_token(tok, cp->ids[i]);
            fprintf(stderr, "finetune: %s: token %d ('%s', the data's token %lld) is outside %s's vocabulary of %lld "
                    "ids: its tokenizer and its weights disagree\n", o.data, (int)cp->ids[i], t ? t : "?",
                    (long long)i, o.model, (long long)m->cfg.vocab);
            return release(&h, 1);
        }
    int64_t n_hold = (int64_t)(o.holdout * (double)cp->n);
    windows train = windows_of(cp, 0, cp->n - n_hold, o.seq), held = windows_of(cp, cp->n - n_hold, n_hold, o.seq);
    if (o.seq > m->cfg.context)
        return release(&h, (args_reject("finetune", opts, n_opts, "seq", "at most the model's context %lld",
                                        (long long)m->cfg.context),
                            2));
    if (train.count < 1 || held.count < 1)
        return release(
            &h, (args_reject("finetune", opts, n_opts, "seq",
                             "fewer tokens: %lld training and %lld held-out tokens give %lld and %lld windows",
                             (long long)train.n, (long long)held.n, (long long)train.count, (long long)held.count),
                 2));
    int64_t labels = 0;
    for (int64_t i = 0; i < cp->n; i++) labels += cp->train[i];
    printf("data: %s, %s, %lld documents, %lld tokens (%lld of them labels), %lld training windows and %lld "
           "held-out of %d tokens\n",
           o.data, chat ? "chat (loss on the assistant's tokens)" : "plain text", (long long)cp->docs, (long long)cp->n,
           (long long)labels, (long long)train.count, (long long)held.count, o.seq);

    /* the adapters and the graphs over them */
    char tbuf[512];
    snprintf(tbuf, sizeof tbuf, "%s", o.targets);
    const char *targets[16];
    lora_config lc = lora_defaults();
    lc.r = o.r, lc.alpha = o.alpha, lc.targets = targets, lc.n_targets = split_targets(tbuf, targets);
    lc.base_model = o.model;
    lora *l = h.l = lora_attach_llama(m, &lc, o.seed);
    if (!l) return release(&h, fail("lora_attach_llama"));
    int64_t trainable = 0;
    for (int i = 0; i < l->n_params; i++) trainable += kiln_tensor_numel(l->params[i]);
    printf("model: %s, %lld parameters frozen (layers in %s, compute %s); %s r %d alpha %g on %d layers (%s): %lld "
           "trainable\n",
           o.model, (long long)llama_param_count(m), kiln_dtype_name(m->weights), bf16 ? "bf16" : "f32",
           o.qlora ? "QLoRA" : "LoRA", o.r, o.alpha, l->n_layers, o.targets, (long long)trainable);
    if (o.sample_tokens && sample(m, tok, "before", o.prompt, o.sample_tokens)) return release(&h, fail("sample"));
    model_graph eval, tr = {0};
    if (llama_eval_graph(m, o.batch, o.seq, &eval)) return release(&h, fail("llama_eval_graph"));
    if (!o.mezo && llama_train_graph(m, o.batch, o.seq, &tr)) return release(&h, fail("llama_train_graph"));
    kiln_optim *opt;
    if (o.mezo)
        opt = kiln_mezo_new(
            ctx, l->params, l->n_params,
            &(kiln_mezo_config){.lr = o.lr, .eps = o.eps, .weight_decay = o.weight_decay, .seed = o.seed});
    else {
        kiln_adam_config ac = kiln_adamw_defaults();
        ac.lr = o.lr, ac.weight_decay = o.weight_decay;
        opt = !strcmp(o.optim, "adamw8bit") ? kiln_adamw8bit_new_for(ctx, l->params, l->n_params, &ac)
                                            : kiln_adamw_new_for(ctx, l->params, l->n_params, &ac);
    }
    if (!opt) return release(&h, fail("optimizer"));
    run_state rs = {.seed = o.seed, .batch = o.batch, .seq = o.seq};
    snprintf(rs.optim, sizeof rs.optim, "%s", o.mezo ? "mezo" : o.optim);
    snprintf(rs.base, sizeof rs.base, "%s-%s", o.qlora ? "qlora" : "lora", bf16 ? "bf16" : "f32");
    if (o.resume && !checkpoint_load(o.resume, l, opt, &rs)) return release(&h, 1);
    if (o.resume) printf("resumed %s at step %lld\n", o.resume, (long long)rs.step);

    double before = mean_loss(&eval, &held, o.batch, o.eval_windows);
    if (isnan(before)) return release(&h, fail("held-out loss"));
    printf("held-out loss before: %.4f\n", before);
    uint64_t base_before = base_hash(m);

    /* training */
    int64_t *order = h.order = malloc((size_t)train.count * sizeof *order), start = rs.step;
    if (!order) return release(&h, (fprintf(stderr, "finetune: out of memory\n"), 1));
    windows_order(order, train.count, o.seed, rs.epoch);
    const model_graph *g = o.mezo ? &eval : &tr;
    progress p;
    if (o.steps > start) progress_start(&p, stdout, o.mezo ? "mezo" : o.optim, o.steps - start, "tok");
    for (; rs.step < o.steps; rs.step++) {
        int64_t idx[4096], k = 0;
        for (; k < o.batch; k++, rs.pos++) {
            if (rs.pos == train.count) windows_order(order, train.count, o.seed, ++rs.epoch), rs.pos = 0;
            idx[k] = order[rs.pos];
        }
        int64_t labels = fill_batch(g, &train, idx, k, o.batch);
        if (labels < 0) return release(&h, fail("batch"));
        double loss;
        kiln_status s;
        if (o.mezo) {
            s = kiln_mezo_step(opt, forward_loss, &eval);
            loss = kiln_tensor_item(eval.loss); /* at theta - eps z: the step's second forward */
        } else {
            s = kiln_graph_compute(tr.graph);
            loss = kiln_tensor_item(tr.loss);
            if (!s) s = kiln_optim_step(opt);
        }
        if (s == KILN_ERR_NUMERIC)
            fprintf(stderr, "finetune: step %lld skipped: %s\n", (long long)rs.step, kiln_last_error());
        else if (s) return release(&h, fail("training step"));
        progress_update(&p, rs.step - start + 1, labels ? loss : NAN, (double)o.batch * o.seq); /* no labels: no loss */
        if (o.save_every && (rs.step + 1) % o.save_every == 0) {
            run_state at = rs;
            at.step++;
            if (!checkpoint_save(o.checkpoint, l, opt, &at)) return release(&h, 1);
        }
    }
    if (o.steps > start) progress_finish(&p);

    double after = mean_loss(&eval, &held, o.batch, o.eval_windows);
    if (isnan(after)) return release(&h, fail("held-out loss"));
    printf("held-out loss after: %.4f (before %.4f, %+.4f)\n", after, before, after - before);
    if (base_hash(m) != base_before)
        return release(&h, (fprintf(stderr, "finetune: the frozen base's bytes changed in training\n"), 1));
    printf("base: unchanged bit for bit by training\n");
    if (o.sample_tokens && sample(m, tok, "after", o.prompt, o.sample_tokens)) return release(&h, fail("sample"));
    memory_report(m, l, opt, kiln_graph_planned_bytes(g->graph), o.mezo);
    if (o.out) {
        if (lora_save_peft(l, o.out)) return release(&h, fail("--out"));
        printf("adapters: %s/adapter_model.safetensors, %s/adapter_config.json\n", o.out, o.out);
    }
    if (o.merge_to) {
        llama *merged = m->weights == KILN_F32 ? (lora_merge(l) ? NULL : m) : merge_dequantized(m, l);
        kiln_status s = merged ? llama_save_gguf_tok(merged, tok, o.merge_to, merge_dtype) : kiln_last_status();
        if (merged != m) llama_free(merged);
        if (s) return release(&h, fail("--merge-to"));
        printf("merged model: %s (%s)\n", o.merge_to, kiln_dtype_name(merge_dtype));
    }
    return release(&h, 0);
}
