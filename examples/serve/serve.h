/* serve.h — what serve's HTTP side shares: the model's tokenizer and chat
 * template, the scheduler, the limits (main.c fills it), and the handlers
 * http.c routes to. */
#ifndef SERVE_H
#define SERVE_H

#include "api.h"
#include "kiln.h"
#include "scheduler.h"

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct serve_app {
    sched *sched;
    const kiln_tokenizer *tok;
    const char *tmpl, *bos, *eos; /* the chat template, the tokenizer's bos / eos texts */
    const char *model;            /* its name in the API: the file's base name */
    int64_t ctx;                  /* positions of a slot */
    int64_t vocab;                /* token ids a prompt may give: 0 .. vocab - 1 (the model's and the tokenizer's) */
    long created;                 /* when the server started (unix time) */
    const char *api_key;          /* NULL: none needed */
    size_t max_body;              /* bytes of a request body */
} serve_app;

/* Where and how the daemon listens. */
typedef struct http_conf {
    const char *host;   /* an IPv4 or IPv6 address */
    int port;
    unsigned timeout;   /* seconds a connection may stay idle */
    size_t max_header;  /* bytes of a request's head (its line and headers) */
    unsigned max_conns; /* connections at once */
} http_conf;

/* Serve app's API and page (http.c); NULL with a message on stderr. */
struct MHD_Daemon *http_start(serve_app *app, const http_conf *conf);

/* A response with the JSON text json (taken; NULL: out of memory, a 500). */
struct MHD_Response *http_json(char *json, unsigned *status);
/* OpenAI's error object for e, with e->status. */
struct MHD_Response *http_error(const api_error *e, unsigned *status);

/* POST /v1/chat/completions and /v1/completions: the body into a job, its
 * answer whole or as server-sent events (sse.c). */
struct MHD_Response *completions(serve_app *app, api_kind kind, struct MHD_Connection *conn, const char *body,
                                 size_t len, unsigned *status);
/* The stream of j's chunks (with their tokens' logprobs with logprobs);
 * takes j. */
struct MHD_Response *sse_stream(serve_app *app, job *j, api_kind kind, const char *id, bool include_usage,
                                bool logprobs);

/* The chat page (page.html, embedded by the Makefile with xxd -i). */
extern const unsigned char serve_page[];
extern const unsigned int serve_page_len;

#endif
