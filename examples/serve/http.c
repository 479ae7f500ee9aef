/* http.c — serve's HTTP side on libmicrohttpd: a thread per connection
 * (a streaming answer blocks in its reader until the scheduler has text),
 * bounded heads (MHD's per-connection memory) and bodies (here), idle
 * connections closed after a timeout, the API key, and the routes: the
 * page, /health, /v1/models and the two completions. Nothing else is
 * served. As llama-server, the API answers pages of any origin (CORS:
 * every answer allows origin *, an OPTIONS preflight is answered without
 * the key, which a browser never sends with it); the API key, where one
 * is set, is what keeps other sites out. */
#include "serve.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* A request's state between MHD's calls: its body so far. */
typedef struct request {
    char *body;
    size_t len, cap;
    bool too_large;
} request;

static struct MHD_Response *text(const char *s, size_t len, const char *type, enum MHD_ResponseMemoryMode mode) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)s, mode);
    if (r) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    return r;
}

struct MHD_Response *http_json(char *json, unsigned *status) {
    static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                              "\"code\":null}}";
    if (!json) {
        *status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        return text(oom, sizeof oom - 1, "application/json", MHD_RESPMEM_PERSISTENT);
    }
    return text(json, strlen(json), "application/json", MHD_RESPMEM_MUST_FREE);
}

struct MHD_Response *http_error(const api_error *e, unsigned *status) {
    *status = (unsigned)e->status;
    return http_json(api_error_json(e), status);
}

static struct MHD_Response *fail(unsigned *status, int code, const char *type, const char *err, const char *msg) {
    api_error e;
    api_fail(&e, code, type, NULL, err, "%s", msg);
    return http_error(&e, status);
}

/* Equal without a timing that tells how much of the key was right. */
static bool same_key(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = la != lb;
    for (size_t i = 0; i < la; i++) d |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return !d;
}

static bool authorized(const serve_app *app, struct MHD_Connection *c) {
    if (!app->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    return h && !strncmp(h, "Bearer ", 7) && same_key(h + 7, app->api_key);
}

static struct MHD_Response *health(serve_app *app, unsigned *status) {
    sched_stats st;
    sched_get_stats(app->sched, &st);
    char *s = malloc(160);
    if (s)
        snprintf(s, 160, "{\"status\":\"ok\",\"slots_idle\":%d,\"slots_processing\":%d,\"queued\":%d,"
                 "\"tokens_generated\":%lld}", st.slots - st.busy, st.busy, st.queued, (long long)st.generated);
    return http_json(s, status);
}

/* The answer to a whole request. */
static struct MHD_Response *route(serve_app *app, struct MHD_Connection *c, const char *url, const char *method,
                                  request *rq, unsigned *status) {
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    api_kind kind = API_CHAT;
    enum { PAGE, HEALTH, MODELS, COMPLETE, NONE } what = NONE;
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) what = PAGE;
    else if (!strcmp(url, "/health")) what = HEALTH;
    else if (!strcmp(url, "/v1/models")) what = MODELS;
    else if (!strcmp(url, "/v1/chat/completions")) what = COMPLETE;
    else if (!strcmp(url, "/v1/completions")) what = COMPLETE, kind = API_COMPLETION;
    const char *allow = what == COMPLETE ? "POST, OPTIONS" : "GET, HEAD, OPTIONS";
    if (what != NONE && !strcmp(method, "OPTIONS")) { /* a browser's CORS preflight */
        struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        if (r) {
            MHD_add_response_header(r, "Access-Control-Allow-Methods", allow);
            /* the headers asked for (an SDK sends its own beside Authorization), else the API's two */
            const char *asked = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
            MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                    asked && *asked ? asked : "Authorization, Content-Type");
            MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
        }
        *status = MHD_HTTP_NO_CONTENT;
        return r;
    }
    if (what == NONE) {
        char msg[160];
        snprintf(msg, sizeof msg, "no such endpoint: %s %.100s", method, url);
        return fail(status, 404, "invalid_request_error", "not_found", msg);
    }
    if ((what == COMPLETE && !post) || (what != COMPLETE && !get)) {
        char msg[160];
        snprintf(msg, sizeof msg, "%.100s takes %s, not %s", url, what == COMPLETE ? "POST" : "GET", method);
        struct MHD_Response *r = fail(status, 405, "invalid_request_error", "method_not_allowed", msg);
        if (r) MHD_add_response_header(r, "Allow", allow);
        return r;
    }
    if (what == PAGE) {
        struct MHD_Response *r = text((const char *)serve_page, serve_page_len, "text/html; charset=utf-8",
                                      MHD_RESPMEM_PERSISTENT);
        /* the page may talk to this server only: no fetch elsewhere, no frames */
        if (r)
            MHD_add_response_header(r, "Content-Security-Policy",
                                    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                    "connect-src 'self'; img-src data:; frame-ancestors 'none'");
        return r;
    }
    if (what == HEALTH) return health(app, status);
    if (!authorized(app, c))
        return fail(status, 401, "invalid_request_error", "invalid_api_key",
                    "a valid API key is needed: send the header 'Authorization: Bearer KEY' (serve --api-key)");
    if (what == MODELS) return http_json(api_models_json(app->model, app->created), status);
    if (rq->too_large) {
        char msg[160];
        snprintf(msg, sizeof msg, "the request body is over %zu bytes", app->max_body);
        return fail(status, 413, "invalid_request_error", "request_too_large", msg);
    }
    return completions(app, kind, c, rq->body ? rq->body : "", rq->len, status);
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **state) {
    (void)version;
    serve_app *app = cls;
    request *rq = *state;
    if (!rq) { /* the head has come; the body (if any) comes in the next calls */
        if (!(rq = calloc(1, sizeof *rq))) return MHD_NO;
        *state = rq;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (rq->too_large || rq->len + n > app->max_body) {
            rq->too_large = true; /* the rest is read and dropped; the answer is 413 */
            return MHD_YES;
        }
        if (rq->len + n + 1 > rq->cap) {
            size_t cap = 2 * (rq->len + n + 1);
            char *b = realloc(rq->body, cap);
            if (!b) return MHD_NO;
            rq->body = b, rq->cap = cap;
        }
        memcpy(rq->body + rq->len, upload, n);
        rq->len += n;
        return MHD_YES;
    }
    unsigned status = MHD_HTTP_OK;
    struct MHD_Response *r = route(app, c, url, method, rq, &status);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static void completed(void *cls, struct MHD_Connection *c, void **state, enum MHD_RequestTerminationCode why) {
    (void)cls, (void)c, (void)why;
    request *rq = *state;
    if (rq) free(rq->body), free(rq);
    *state = NULL;
}

/* MHD's own messages (a refused connection, a head over the limit). */
static void log_mhd(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    fprintf(stderr, "serve: ");
    vfprintf(stderr, fmt, ap);
}

struct MHD_Daemon *http_start(serve_app *app, const http_conf *conf) {
    struct sockaddr_storage addr = {0};
    struct sockaddr_in *v4 = (struct sockaddr_in *)&addr;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&addr;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (inet_pton(AF_INET, conf->host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET, v4->sin_port = htons((uint16_t)conf->port);
    } else if (inet_pton(AF_INET6, conf->host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6, v6->sin6_port = htons((uint16_t)conf->port);
        flags |= MHD_USE_IPv6;
    } else {
        fprintf(stderr, "serve: --host %s is not an IPv4 or IPv6 address\n", conf->host);
        return NULL;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)conf->port, NULL, NULL, answer, app, MHD_OPTION_EXTERNAL_LOGGER, log_mhd, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_CONNECTION_TIMEOUT, conf->timeout, MHD_OPTION_CONNECTION_MEMORY_LIMIT, conf->max_header,
        MHD_OPTION_CONNECTION_LIMIT, conf->max_conns, MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
    if (!d) fprintf(stderr, "serve: cannot listen on %s port %d (in use, or not this machine's address?)\n",
                    conf->host, conf->port);
    return d;
}
