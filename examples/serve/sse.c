/* sse.c — a job's answer as server-sent events, OpenAI's framing: each
 * chunk one `data: {json}\n\n` event (a chat stream opens with the
 * assistant's role), the last chunk with finish_reason and usage (and
 * with stream_options.include_usage the usage chunk of no choices), then
 * `data: [DONE]\n\n`. MHD calls the reader from the connection's thread
 * whenever the socket can take more; it waits for the scheduler's text.
 * While the job waits in the queue, a comment line every two seconds
 * keeps proxies patient and finds a client that has gone: a write that
 * fails ends the response, and its free callback cancels the job. */
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct stream {
    serve_app *app;
    job *j;
    api_kind kind;
    char id[48];
    long created;
    bool include_usage, opened, finished;
    bool logprobs; /* each chunk with its tokens' records */
    int lp_from;   /* the records given so far */
    char *out; /* formatted bytes not yet given to MHD */
    size_t len, at, cap;
} stream;

static bool put(stream *s, const char *text, size_t len) {
    if (s->len + len > s->cap) {
        size_t cap = 2 * (s->len + len);
        char *o = realloc(s->out, cap);
        if (!o) return false;
        s->out = o, s->cap = cap;
    }
    memcpy(s->out + s->len, text, len);
    s->len += len;
    return true;
}

/* One event: data: JSON (taken) */
static bool event(stream *s, char *json) {
    bool ok = json && put(s, "data: ", 6) && put(s, json, strlen(json)) && put(s, "\n\n", 2);
    free(json);
    return ok;
}

/* The events after the job's end. */
static bool closing(stream *s, const job_news *n) {
    if (n->error) {
        api_error e;
        api_fail(&e, 500, "server_error", NULL, NULL, "the request failed: %s", n->error);
        return event(s, api_error_json(&e)) && put(s, "data: [DONE]\n\n", 14);
    }
    api_chunk c = {.id = s->id, .model = s->app->model, .created = s->created, .finish = n->finish,
                   .usage = {n->prompt_tokens, n->completion_tokens, n->cached_tokens}};
    if (!event(s, api_chunk_json(s->kind, &c))) return false;
    if (s->include_usage) {
        c.finish = NULL, c.usage_only = true;
        if (!event(s, api_chunk_json(s->kind, &c))) return false;
    }
    return put(s, "data: [DONE]\n\n", 14);
}

/* Fill s->out with what comes next. false: out of memory. */
static bool more(stream *s) {
    api_chunk c = {.id = s->id, .model = s->app->model, .created = s->created};
    if (!s->opened) { /* the role first, at once: the client sees the answer has begun */
        s->opened = true;
        if (s->kind == API_CHAT) {
            c.first = true, c.text = "", c.len = 0;
            return event(s, api_chunk_json(s->kind, &c));
        }
    }
    char buf[4096];
    job_news n;
    size_t len = sched_next(s->app->sched, s->j, buf, sizeof buf, 2000, &n);
    const job_logprob *recs[256];
    int k = s->logprobs ? sched_logprobs(s->app->sched, s->j, s->lp_from, recs, 256) : 0;
    if (len || k) {
        c.text = buf, c.len = len;
        if (s->logprobs && !(c.logprobs.lp = lp_views(recs, c.logprobs.n = k))) return false;
        bool ok = event(s, api_chunk_json(s->kind, &c));
        free((void *)c.logprobs.lp);
        if (!ok) return false;
        s->lp_from += k;
    }
    if (k == 256) return true; /* more records than a chunk takes: the rest in the next */
    if (n.done) {
        s->finished = true;
        return closing(s, &n);
    }
    return len || k || put(s, ": waiting\n\n", 11);
}

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream *s = cls;
    if (s->at == s->len) {
        if (s->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        s->len = s->at = 0;
        if (!more(s)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = s->len - s->at < max ? s->len - s->at : max;
    memcpy(buf, s->out + s->at, n);
    s->at += n;
    return (ssize_t)n;
}

/* The response is done (sent, or the client went away): the job with it. */
static void done(void *cls) {
    stream *s = cls;
    job_release(s->app->sched, s->j);
    free(s->out), free(s);
}

struct MHD_Response *sse_stream(serve_app *app, job *j, api_kind kind, const char *id, bool include_usage,
                                bool logprobs) {
    stream *s = calloc(1, sizeof *s);
    if (!s) {
        job_release(app->sched, j);
        return NULL;
    }
    *s = (stream){.app = app, .j = j, .kind = kind, .created = (long)time(NULL), .include_usage = include_usage,
                  .logprobs = logprobs};
    snprintf(s->id, sizeof s->id, "%s", id);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, reader, s, done);
    if (!r) {
        done(s);
        return NULL;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    return r;
}
