/* api.h — the OpenAI API's JSON for serve: request bodies of
 * /v1/chat/completions and /v1/completions read into an api_request (every
 * value checked: a bad one is an api_error naming the parameter), and the
 * answers written: results, stream chunks, the model list and OpenAI's
 * error object {"error":{"message","type","param","code"}}. Parsed and
 * written with jansson; nothing here touches the model or the network, so
 * the fuzz test (tests/serve/fuzz_api.c) runs it alone.
 *
 *     api_request r;
 *     api_error e;
 *     if (!api_parse(API_CHAT, body, len, &r, &e)) {
 *         char *json = api_error_json(&e);   // send with status e.status
 *         ...
 *     }
 *     api_request_free(&r);
 */
#ifndef SERVE_API_H
#define SERVE_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { API_MAX_STOP = 4, API_MAX_STOP_LEN = 256, API_MAX_MESSAGES = 1024, API_MAX_PROMPT_IDS = 1 << 20,
       API_MAX_TOP_LOGPROBS = 20 };

typedef enum { API_CHAT, API_COMPLETION } api_kind;

typedef struct api_msg {
    char *role, *content; /* role: system, user or assistant (developer is system) */
} api_msg;

typedef struct api_request {
    api_kind kind;
    char *model;           /* NULL when not given: the one served */
    api_msg *msgs;         /* API_CHAT: n_msgs >= 1 */
    int n_msgs;
    char *prompt;          /* API_COMPLETION: a text, or */
    int32_t *prompt_ids;   /* its token ids as given (n_prompt_ids >= 1; checked against the vocabulary later) */
    int n_prompt_ids;
    int max_tokens;        /* 0: not given (until the end of the turn or of the context) */
    double temperature;    /* [0, 2], default 1 as OpenAI's */
    double top_p;          /* (0, 1], default 1 */
    char *stop[API_MAX_STOP];
    int n_stop;
    bool has_seed;
    uint64_t seed;
    bool stream, include_usage; /* include_usage: stream_options.include_usage */
    bool cache_prompt;     /* llama-server's: keep a slot's shared prefix (default true) */
    bool logprobs;         /* the tokens' log-probabilities: chat's logprobs, or completions' logprobs given */
    int top_logprobs;      /* with each, the likeliest alternatives: chat's top_logprobs, completions' logprobs */
} api_request;

typedef struct api_error {
    int status;         /* HTTP status */
    const char *type;   /* invalid_request_error, authentication_error, ... */
    const char *param;  /* the parameter at fault, or NULL */
    const char *code;   /* a machine-readable code, or NULL */
    char message[320];
} api_error;

/* The body (len bytes, not NUL-terminated) into r; false with e filled
 * (r then holds nothing to free). */
bool api_parse(api_kind kind, const char *body, size_t len, api_request *r, api_error *e);
void api_request_free(api_request *r);

/* Fill e; always returns false (so a check can `return api_fail(...)`). */
bool api_fail(api_error *e, int status, const char *type, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* A request's token counts; cached: of the prompt's, those its slot held
 * already (usage.prompt_tokens_details.cached_tokens). */
typedef struct api_usage {
    int prompt, completion, cached;
} api_usage;

/* A token of the answer: its text (len bytes, maybe part of a UTF-8
 * character) and log-probability. An api_logprob is a generated token with
 * its likeliest alternatives and, for the completions' legacy form, the
 * characters of the answer before it. */
typedef struct api_token {
    const char *text;
    size_t len;
    double logprob;
} api_token;
typedef struct api_logprob {
    api_token chosen;
    const api_token *top;
    int n_top;
    size_t offset;
} api_logprob;
/* A run of them (lp NULL: "logprobs": null). */
typedef struct api_logprobs {
    const api_logprob *lp;
    int n;
} api_logprobs;

/* The answers, malloc'd NUL-terminated JSON (NULL when out of memory).
 * finish: "stop" or "length". id: "chatcmpl-..." / "cmpl-...". */
char *api_error_json(const api_error *e);
char *api_models_json(const char *model, long created);
char *api_result_json(api_kind kind, const char *id, long created, const char *model, const char *text, size_t len,
                      const char *finish, const api_usage *usage, api_logprobs logprobs);
/* One stream chunk. first: the chat chunk that opens with the role; text
 * NULL with finish set: the last chunk, which carries the usage too;
 * usage_only: the chunk of stream_options.include_usage (no choices). */
typedef struct api_chunk {
    const char *id, *model;
    long created;
    bool first, usage_only;
    const char *text; /* the new text (len bytes) */
    size_t len;
    const char *finish;
    api_usage usage;
    api_logprobs logprobs; /* of the tokens whose text this chunk ends */
} api_chunk;
char *api_chunk_json(api_kind kind, const api_chunk *c);

#endif
