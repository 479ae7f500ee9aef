/* chat — an interactive multi-turn chat with a model in a GGUF file: a
 * line of standard input is a user turn; the reply streams to standard
 * output token by token as it is drawn.
 *
 * The conversation is rendered whole each turn by the chat template the
 * GGUF stores (tokenizer.chat_template; --chat-template NAME|FILE instead,
 * ChatML when the file has none, as llama.cpp) with kiln_chat_render,
 * encoded with its special tokens, and run through the model's KV cache
 * from the first token that differs from what the cache holds, so a turn
 * costs its own tokens. A reply ends at an end-of-turn token (the
 * tokenizer's eos / eot, <|im_end|>, <|eot_id|>, <end_of_turn>, <|end|>,
 * ...: kiln_tokenizer_is_eog), after --tokens tokens, or when the context
 * is full, which it says; /reset starts over, /quit (or the end of the
 * input) ends. Sampling (examples/common/sampler.h) as llama.cpp's:
 * repetition penalty, top-k, top-p, min-p, temperature, a seed.
 *
 *     build/examples/chat --model qwen2.5-0.5b-instruct-q4_k_m.gguf --system "Be brief."
 *     build/examples/generate --make-random /tmp/tiny.gguf --size tiny
 *     printf 'hello\n/quit\n' | build/examples/chat --model /tmp/tiny.gguf --tokens 8
 */
#include "args.h"
#include "chat_template.h"
#include "kiln.h"
#include "llama_files.h"
#include "output.h"
#include "sampler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct chat {
    llama *m;
    llama_cache *cache;
    kiln_tokenizer *tok;
    const char *tmpl, *bos, *eos;
    kiln_chat_msg *msgs; /* the conversation; contents are malloc'd */
    int n, cap;
    int32_t *held; /* the ids in the cache, cache->pos of them */
    int64_t context;
    float *z;
    sampler smp;
    int max_reply;
    int32_t bias_id;
    double bias;
} chat;

static int fail(const char *what) {
    fprintf(stderr, "chat: %s: %s\n", what, kiln_last_error());
    return 1;
}

static bool push(chat *c, const char *role, const char *text, size_t len) {
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        kiln_chat_msg *m = realloc(c->msgs, (size_t)cap * sizeof *m);
        if (!m) return false;
        c->msgs = m, c->cap = cap;
    }
    char *s = malloc(len + 1);
    if (!s) return false;
    memcpy(s, text, len);
    s[len] = 0;
    c->msgs[c->n++] = (kiln_chat_msg){role, s};
    return true;
}

static void pop(chat *c) { free((char *)c->msgs[--c->n].content); }

/* The conversation as ids: rendered, encoded with its specials, BOS in
 * front where the tokenizer wants one and the template wrote none. */
static int32_t *render(chat *c, int64_t *n) {
    size_t len = 0;
    kiln_chat_render(c->tmpl, c->msgs, c->n, true, c->bos, c->eos, NULL, 0, &len); /* the size it needs */
    char *text = malloc(len + 1);
    int64_t cap = kiln_tokenizer_max_ids(c->tok, len) + 1;
    int32_t *ids = text ? malloc((size_t)cap * sizeof *ids) : NULL;
    if (!ids || kiln_chat_render(c->tmpl, c->msgs, c->n, true, c->bos, c->eos, text, len, &len)) {
        if (!ids) kiln_set_error(KILN_ERR_OOM, "chat: out of memory");
        free(text), free(ids);
        return NULL;
    }
    int64_t k = 0;
    bool has_bos = *c->bos && len >= strlen(c->bos) && !memcmp(text, c->bos, strlen(c->bos));
    if (kiln_tokenizer_add_bos(c->tok) && !has_bos) ids[k++] = kiln_tokenizer_bos(c->tok);
    kiln_status s = kiln_tokenizer_encode(c->tok, text, len, true, ids + k, cap - k, n);
    free(text);
    if (s) {
        free(ids);
        return NULL;
    }
    *n += k;
    return ids;
}

/* The ids into the cache from the first that differs from what it holds;
 * the last position's logits into c->z. */
static kiln_status feed(chat *c, const int32_t *ids, int64_t n) {
    int64_t same = 0;
    while (same < n && same < c->cache->pos && c->held[same] == ids[same]) same++;
    if (same == n) same--; /* run the last one again for its logits */
    c->cache->pos = same;
    memcpy(c->held + same, ids + same, (size_t)(n - same) * sizeof *ids);
    for (int64_t i = same; i < n; i++) sampler_accept(&c->smp, ids[i]); /* the penalty sees the prompt too */
    return llama_cache_step(c->m, c->cache, ids + same, n - same, c->z);
}

/* One reply, streamed; its text joins the conversation. */
static int reply(chat *c) {
    int32_t *out = malloc((size_t)(c->context + 1) * sizeof *out);
    size_t cap = 256, shown = 0, len = 0;
    char *text = malloc(cap);
    if (!out || !text) return fprintf(stderr, "chat: out of memory\n"), 1;
    text_stream ts = {0};
    int made = 0;
    bool full = false;
    for (;;) {
        if (c->bias_id >= 0 && c->bias_id < c->m->cfg.vocab) c->z[c->bias_id] += (float)c->bias;
        int32_t id = sampler_draw(&c->smp, c->z, c->m->cfg.vocab);
        if (kiln_tokenizer_is_eog(c->tok, id)) break;
        sampler_accept(&c->smp, id);
        out[made++] = id;
        kiln_status s;
        while ((s = kiln_tokenizer_decode(c->tok, out, made, text, cap, &len)) == KILN_ERR_ARG && len > cap) {
            char *t = realloc(text, cap = 2 * len);
            if (!t) return fprintf(stderr, "chat: out of memory\n"), 1;
            text = t;
        }
        if (s) return fail("decoding");
        for (; shown < len; shown++) text_put(&ts, stdout, (unsigned char)text[shown]); /* the new bytes */
        fflush(stdout);
        if (c->max_reply && made >= c->max_reply) break;
        if (c->cache->pos >= c->context) {
            full = true;
            break;
        }
        c->held[c->cache->pos] = id;
        if (llama_cache_step(c->m, c->cache, &id, 1, c->z)) return fail("generating");
    }
    text_end(&ts, stdout);
    printf("\n");
    if (full)
        printf("[the context is full (%lld tokens): the reply stops here; /reset to start over]\n",
               (long long)c->context);
    fflush(stdout);
    bool ok = push(c, "assistant", text, len);
    free(out), free(text);
    return ok ? 0 : (fprintf(stderr, "chat: out of memory\n"), 1);
}

int main(int argc, char **argv) {
    const char *model = NULL, *system = NULL, *template = NULL, *bias = NULL;
    int top_k = 40, threads = 0, context = 0, tokens = 0;
    double temperature = 0.8, top_p = 0.95, min_p = 0.05, repeat_penalty = 1.0;
    uint64_t seed = (uint64_t)time(NULL);
    args_opt opts[] = {
        {"model", ARGS_STRING, &model, "FILE", "a GGUF file (llama.cpp's; kiln's generate --make-random)", NULL, false},
        {"system", ARGS_STRING, &system, "TEXT", "a system message to begin the conversation", NULL, false},
        {"chat-template", ARGS_STRING, &template, "T",
         "a template file, or chatml|llama3|llama3.1|phi3|phi3-mini|gemma|mistral-v1|mistral-v3|mistral-v3-tekken|"
         "mistral-v7 (default: the GGUF's)", NULL, false},
        {"temperature", ARGS_DOUBLE, &temperature, "X", "sampling temperature (0: greedy)", NULL, false},
        {"top-k", ARGS_INT, &top_k, "K", "sample among the K likeliest tokens (0: all)", NULL, false},
        {"top-p", ARGS_DOUBLE, &top_p, "P", "and among the likeliest holding P of the probability (1: all)", NULL, false},
        {"min-p", ARGS_DOUBLE, &min_p, "P", "and among those at least P times the likeliest's (0: all)", NULL, false},
        {"repeat-penalty", ARGS_DOUBLE, &repeat_penalty, "X", "divide the logits of the last 64 tokens by X (1: off)",
         NULL, false},
        {"logit-bias", ARGS_STRING, &bias, "ID+B", "add B (ID-B: subtract) to token ID's logit", NULL, false},
        {"seed", ARGS_U64, &seed, "N", "seed of the sampling (default: the time)", NULL, false},
        {"threads", ARGS_INT, &threads, "N", "worker threads (0: $KILN_THREADS, else all cores)", NULL, false},
        {"context", ARGS_INT, &context, "N", "tokens the conversation may hold (0: the model's context)", NULL, false},
        {"tokens", ARGS_INT, &tokens, "N", "at most N tokens a reply (0: until the end of the turn)", NULL, false},
    };
    int r = args_parse("chat", "Chat with a model in a GGUF file; a line of input is a turn, /reset, /quit.", opts,
                       (int)(sizeof opts / sizeof *opts), argc, argv);
    if (r != ARGS_OK) return r == ARGS_HELP ? 0 : 2;
    chat c = {.bias_id = -1, .max_reply = tokens};
    if (bias) {
        char sign = 0;
        int id = -1, k = 0;
        if (sscanf(bias, "%d%c%lf%n", &id, &sign, &c.bias, &k) < 3 || bias[k] || id < 0 ||
            (sign != '+' && sign != '-'))
            return args_reject("chat", opts, (int)(sizeof opts / sizeof *opts), "logit-bias", "ID+BIAS or ID-BIAS"), 2;
        c.bias_id = id, c.bias = sign == '-' ? -c.bias : c.bias;
    }
    if (!model) return fprintf(stderr, "chat: --model FILE is needed; see --help\n"), 2;
    if (threads && kiln_set_threads(threads)) return fprintf(stderr, "chat: --threads: %s\n", kiln_last_error()), 2;

    kiln_ctx *ctx = kiln_ctx_new();
    c.m = ctx ? llama_infer_from_gguf(ctx, model, LLAMA_AS_STORED) : NULL;
    if (!c.m) return fail(model);
    if (!(c.tok = llama_gguf_tokenizer(model))) return fail(model);
    bool stored;
    char *tmpl = chat_template_pick(template, model, &stored);
    if (!tmpl) return fprintf(stderr, "chat: out of memory\n"), 1;
    const char *family = kiln_chat_template_name(tmpl);
    if (!family) return fail(template ? "--chat-template" : "the GGUF's chat template");
    c.tmpl = tmpl;
    c.bos = kiln_tokenizer_token(c.tok, kiln_tokenizer_bos(c.tok));
    c.eos = kiln_tokenizer_token(c.tok, kiln_tokenizer_eos(c.tok));
    c.bos = c.bos ? c.bos : "", c.eos = c.eos ? c.eos : "";
    c.context = context && context < c.m->cfg.context ? context : c.m->cfg.context;
    c.cache = llama_cache_new(c.m, 1, c.context);
    c.z = malloc((size_t)c.m->cfg.vocab * sizeof *c.z);
    c.held = malloc((size_t)c.context * sizeof *c.held);
    sampler_params sp = {temperature, top_k, top_p, min_p, repeat_penalty, 64};
    if (!c.cache || !c.z || !c.held || sampler_init(&c.smp, &sp, seed ^ 0x63686174ull)) return fail("the cache");
    fprintf(stderr, "chat: %s: vocab %lld, context %lld, template %s%s; /reset starts over, /quit ends\n", model,
            (long long)c.m->cfg.vocab, (long long)c.context, family, stored || template ? "" : " (the GGUF has none)");
    if (system && !push(&c, "system", system, strlen(system))) return fprintf(stderr, "chat: out of memory\n"), 1;

    char *line = NULL;
    size_t lcap = 0;
    int status = 0;
    for (;;) {
        printf("> ");
        fflush(stdout);
        ssize_t n = getline(&line, &lcap, stdin);
        if (n < 0) break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (!strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            while (c.n > (system ? 1 : 0)) pop(&c);
            c.cache->pos = 0;
            sampler_reset(&c.smp);
            printf("[a new conversation]\n");
            continue;
        }
        if (!n) continue;
        if (!push(&c, "user", line, (size_t)n)) return fprintf(stderr, "chat: out of memory\n"), 1;
        int64_t k;
        int32_t *ids = render(&c, &k);
        if (!ids) {
            fprintf(stderr, "chat: %s\n", kiln_last_error());
            pop(&c);
            status = 1;
            continue;
        }
        if (k >= c.context) { /* a reply needs room for one token at least */
            printf("[the context is full: the conversation with this turn is %lld tokens of %lld; /reset to start "
                   "over]\n", (long long)k, (long long)c.context);
            pop(&c);
        } else if (feed(&c, ids, k)) {
            free(ids);
            return fail("the prompt");
        } else if ((status = reply(&c))) {
            free(ids);
            return status;
        }
        free(ids);
    }
    printf("\n");
    free(line);
    while (c.n) pop(&c);
    free(c.msgs), free(c.held), free(c.z), free(tmpl);
    sampler_free(&c.smp);
    llama_cache_free(c.cache);
    kiln_tokenizer_free(c.tok);
    llama_free(c.m);
    kiln_ctx_free(ctx);
    return status;
}
