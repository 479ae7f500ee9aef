/* completions.c — POST /v1/chat/completions and /v1/completions: the
 * body checked (api.c), the model's name, the prompt rendered with the
 * chat template and encoded, its length against the context, then a job
 * for the scheduler, answered whole or streamed (sse.c). */
#include "serve.h"

#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static atomic_uint_fast64_t counter;

/* A fresh "chatcmpl-..." / "cmpl-..." id; its number seeds a request
 * that gives no seed. */
static uint64_t new_id(api_kind kind, char *id, size_t cap) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t n = (uint64_t)atomic_fetch_add(&counter, 1) + 1;
    uint64_t x = ((uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec) ^ (n * 0x9E3779B97F4A7C15ull);
    snprintf(id, cap, "%s-%016llx", kind == API_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)x);
    return x;
}

/* The prompt's text: the conversation through the chat template, or the
 * completion's prompt as it is. */
static char *prompt_text(const serve_app *app, const api_request *r, size_t *len, api_error *e) {
    if (r->kind == API_COMPLETION) {
        *len = strlen(r->prompt);
        char *s = strdup(r->prompt);
        if (!s) api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        return s;
    }
    kiln_chat_msg *msgs = malloc((size_t)r->n_msgs * sizeof *msgs);
    if (!msgs) return api_fail(e, 500, "server_error", NULL, NULL, "out of memory"), NULL;
    for (int i = 0; i < r->n_msgs; i++) msgs[i] = (kiln_chat_msg){r->msgs[i].role, r->msgs[i].content};
    *len = 0;
    kiln_chat_render(app->tmpl, msgs, r->n_msgs, true, app->bos, app->eos, NULL, 0, len); /* the size it needs */
    char *s = malloc(*len + 1);
    if (!s || kiln_chat_render(app->tmpl, msgs, r->n_msgs, true, app->bos, app->eos, s, *len, len)) {
        if (s) api_fail(e, 400, "invalid_request_error", "messages", "invalid_value", "%s", kiln_last_error());
        else api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        free(s), free(msgs);
        return NULL;
    }
    free(msgs);
    return s;
}

/* A prompt given as token ids: as they are, each in the vocabulary. */
static int32_t *given_ids(const serve_app *app, const api_request *r, int64_t *n, api_error *e) {
    int64_t vocab = app->vocab;
    for (int i = 0; i < r->n_prompt_ids; i++)
        if (r->prompt_ids[i] >= vocab)
            return api_fail(e, 400, "invalid_request_error", "prompt", "invalid_value", "prompt[%d] is token %d; "
                            "the vocabulary is 0 .. %lld", i, (int)r->prompt_ids[i], (long long)(vocab - 1)), NULL;
    int32_t *ids = malloc((size_t)r->n_prompt_ids * sizeof *ids);
    if (!ids) return api_fail(e, 500, "server_error", NULL, NULL, "out of memory"), NULL;
    memcpy(ids, r->prompt_ids, (size_t)r->n_prompt_ids * sizeof *ids);
    *n = r->n_prompt_ids;
    return ids;
}

/* The prompt's ids (BOS in front where the model wants one and the text
 * has none; token ids as given); NULL with e filled. */
static int32_t *prompt_ids(const serve_app *app, const api_request *r, int64_t *n, api_error *e) {
    if (r->prompt_ids) return given_ids(app, r, n, e);
    size_t len;
    char *text = prompt_text(app, r, &len, e);
    if (!text) return NULL;
    int64_t cap = kiln_tokenizer_max_ids(app->tok, len) + 1;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) {
        free(text);
        return api_fail(e, 500, "server_error", NULL, NULL, "out of memory"), NULL;
    }
    int64_t k = 0;
    size_t bl = strlen(app->bos);
    if (kiln_tokenizer_add_bos(app->tok) && !(bl && len >= bl && !memcmp(text, app->bos, bl)))
        ids[k++] = kiln_tokenizer_bos(app->tok);
    kiln_status s = kiln_tokenizer_encode(app->tok, text, len, true, ids + k, cap - k, n);
    free(text);
    if (s) {
        free(ids);
        return api_fail(e, 400, "invalid_request_error", r->kind == API_CHAT ? "messages" : "prompt",
                        "invalid_value", "the prompt cannot be encoded: %s", kiln_last_error()), NULL;
    }
    *n += k;
    return ids;
}

/* Whether the client closed its end (a non-streamed answer has nothing to
 * write that would tell). */
static bool client_gone(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    char c;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN};
    return poll(&p, 1, 0) == 1 && ((p.revents & (POLLHUP | POLLERR)) ||
                                   recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0);
}

/* The whole answer of j, and its tokens' logprobs with want. */
static struct MHD_Response *whole(serve_app *app, job *j, api_kind kind, const char *id, bool want,
                                  struct MHD_Connection *conn, unsigned *status) {
    size_t len = 0, cap = 4096;
    char *text = malloc(cap);
    job_news news = {0};
    while (text && !news.done) {
        if (len == cap) {
            char *t = realloc(text, cap *= 2);
            if (!t) free(text);
            text = t;
            if (!text) break;
        }
        len += sched_next(app->sched, j, text + len, cap - len, 500, &news);
        if (!news.done && client_gone(conn)) break; /* the job is dropped below; nobody reads an answer */
    }
    api_error e;
    struct MHD_Response *res;
    const job_logprob **recs = NULL;
    api_logprobs lp = {0};
    bool ok = text && news.done && !news.error;
    if (ok && want) {
        int most = news.completion_tokens ? news.completion_tokens : 1; /* a record per token at most */
        if ((recs = malloc((size_t)most * sizeof *recs))) lp.n = sched_logprobs(app->sched, j, 0, recs, most);
        ok = recs && (lp.lp = lp_views(recs, lp.n));
    }
    if (ok) {
        api_usage u = {news.prompt_tokens, news.completion_tokens, news.cached_tokens};
        char *json = api_result_json(kind, id, (long)time(NULL), app->model, text, len, news.finish, &u, lp);
        res = http_json(json, status);
    } else {
        const char *why = news.error ? news.error : "cancelled";
        if (!text || (news.done && !news.error)) api_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        else api_fail(&e, 500, "server_error", NULL, NULL, "the request failed: %s", why);
        res = http_error(&e, status);
    }
    free((void *)lp.lp), free(recs), free(text);
    job_release(app->sched, j); /* after the records are written: they are the job's */
    return res;
}

struct MHD_Response *completions(serve_app *app, api_kind kind, struct MHD_Connection *conn, const char *body,
                                 size_t len, unsigned *status) {
    api_request r;
    api_error e;
    if (!api_parse(kind, body, len, &r, &e)) return http_error(&e, status);
    struct MHD_Response *res = NULL;
    int64_t n = 0;
    int32_t *ids = NULL;
    job *j = NULL;
    if (r.model && strcmp(r.model, app->model)) {
        api_fail(&e, 404, "invalid_request_error", "model", "model_not_found",
                 "the model '%.100s' does not exist; this server serves '%.100s'", r.model, app->model);
    } else if (!(ids = prompt_ids(app, &r, &n, &e))) {
    } else if (n == 0) { /* an empty text where the model wants no BOS: nothing to take the next token from */
        api_fail(&e, 400, "invalid_request_error", kind == API_CHAT ? "messages" : "prompt", "invalid_value",
                 "the prompt is empty: it encodes to no tokens");
    } else if (n >= app->ctx || (r.max_tokens && n + r.max_tokens > app->ctx)) {
        api_fail(&e, 400, "invalid_request_error", kind == API_CHAT ? "messages" : "prompt",
                 "context_length_exceeded", "the context is %lld tokens; this request wants %lld (%lld of prompt, "
                 "%d of completion)", (long long)app->ctx, (long long)(n + (r.max_tokens ? r.max_tokens : 1)),
                 (long long)n, r.max_tokens ? r.max_tokens : 1);
    } else {
        char id[48];
        uint64_t seed = new_id(kind, id, sizeof id);
        job_params p = {.max_tokens = r.max_tokens,
                        .sampling = {.temperature = r.temperature, .top_p = r.top_p, .repeat_penalty = 1},
                        .seed = r.has_seed ? r.seed : seed,
                        .stop = (const char *const *)r.stop,
                        .n_stop = r.n_stop,
                        .id = id,
                        .no_prompt_cache = !r.cache_prompt,
                        .logprobs = r.logprobs,
                        .top_logprobs = r.top_logprobs};
        if (!(j = job_new(ids, (int)n, &p))) {
            api_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        } else if (sched_submit(app->sched, j)) {
            job_release(app->sched, j);
            api_fail(&e, 503, "server_error", NULL, "server_busy",
                     "every slot is busy and the queue is full; try again shortly");
        } else {
            res = r.stream ? sse_stream(app, j, kind, id, r.include_usage, r.logprobs)
                           : whole(app, j, kind, id, r.logprobs, conn, status);
            if (!res) api_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        }
    }
    free(ids);
    api_request_free(&r);
    return res ? res : http_error(&e, status);
}
