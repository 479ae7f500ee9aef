/* api.c — OpenAI request bodies in, answers out (api.h). */
#include "api.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool api_fail(api_error *e, int status, const char *type, const char *param, const char *code, const char *fmt, ...) {
    e->status = status, e->type = type, e->param = param, e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return false;
}

static bool bad(api_error *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool bad(api_error *e, const char *param, const char *fmt, ...) {
    char msg[sizeof e->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return api_fail(e, 400, "invalid_request_error", param, "invalid_value", "%s", msg);
}

static bool oom(api_error *e) { return api_fail(e, 500, "server_error", NULL, NULL, "out of memory"); }

/* The JSON type's name, for messages. */
static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* A number in [lo, hi] (lo excluded when open) into *out; absent or null
 * leaves *out. */
static bool number(json_t *o, const char *key, double lo, double hi, bool open, double *out, api_error *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_number(v)) return bad(e, key, "'%s' must be a number, not %s", key, type_name(v));
    double x = json_number_value(v);
    if (!isfinite(x) || x > hi || x < lo || (open && x == lo))
        return bad(e, key, "'%s' is %g; it must be in %c%g, %g]", key, x, open ? '(' : '[', lo, hi);
    *out = x;
    return true;
}

static bool boolean(json_t *o, const char *key, bool *out, api_error *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) return bad(e, key, "'%s' must be a boolean, not %s", key, type_name(v));
    *out = json_is_true(v);
    return true;
}

/* A message's content: a string, or an array of {"type":"text","text":...}
 * parts, joined. */
static char *content_text(json_t *c, int i, api_error *e) {
    if (json_is_string(c)) {
        char *s = strdup(json_string_value(c));
        if (!s) oom(e);
        return s;
    }
    if (json_is_null(c)) {
        char *s = strdup("");
        if (!s) oom(e);
        return s;
    }
    if (!json_is_array(c)) {
        bad(e, "messages", "messages[%d].content must be a string or an array of text parts, not %s", i,
            type_name(c));
        return NULL;
    }
    size_t len = 0, k;
    json_t *part;
    json_array_foreach(c, k, part) {
        json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(json_object_get(part, "type")) ||
            strcmp(json_string_value(json_object_get(part, "type")), "text") || !json_is_string(text)) {
            bad(e, "messages", "messages[%d].content[%zu] must be {\"type\": \"text\", \"text\": \"...\"} (only text "
                "is served)", i, k);
            return NULL;
        }
        len += json_string_length(text);
    }
    char *s = malloc(len + 1);
    if (!s) return oom(e), NULL;
    len = 0;
    json_array_foreach(c, k, part) {
        json_t *text = json_object_get(part, "text");
        memcpy(s + len, json_string_value(text), json_string_length(text));
        len += json_string_length(text);
    }
    s[len] = 0;
    return s;
}

static bool messages(json_t *o, api_request *r, api_error *e) {
    json_t *m = json_object_get(o, "messages");
    if (!m) return bad(e, "messages", "'messages' is required");
    if (!json_is_array(m) || !json_array_size(m))
        return bad(e, "messages", "'messages' must be a non-empty array of messages");
    if (json_array_size(m) > API_MAX_MESSAGES)
        return bad(e, "messages", "'messages' holds %zu messages; at most %d are served", json_array_size(m),
                   API_MAX_MESSAGES);
    r->msgs = calloc(json_array_size(m), sizeof *r->msgs);
    if (!r->msgs) return oom(e);
    size_t i;
    json_t *msg;
    json_array_foreach(m, i, msg) {
        json_t *role = json_object_get(msg, "role");
        if (!json_is_object(msg)) return bad(e, "messages", "messages[%zu] must be an object, not %s", i, type_name(msg));
        if (!json_is_string(role)) return bad(e, "messages", "messages[%zu].role must be a string", i);
        const char *name = json_string_value(role);
        if (!strcmp(name, "developer")) name = "system";
        if (strcmp(name, "system") && strcmp(name, "user") && strcmp(name, "assistant"))
            return bad(e, "messages", "messages[%zu].role is '%.64s'; system, developer, user and assistant are "
                       "served", i, json_string_value(role));
        json_t *c = json_object_get(msg, "content");
        if (!c) return bad(e, "messages", "messages[%zu].content is required", i);
        r->msgs[i].role = strdup(name);
        if (!r->msgs[i].role) return oom(e);
        r->n_msgs = (int)i + 1;
        if (!(r->msgs[i].content = content_text(c, (int)i, e))) return false;
    }
    return true;
}

/* A prompt of token ids: a non-empty array of integers. */
static bool prompt_ids(json_t *p, api_request *r, api_error *e) {
    size_t n = json_array_size(p), i;
    if (n > API_MAX_PROMPT_IDS)
        return bad(e, "prompt", "'prompt' holds %zu token ids; at most %d are served", n, API_MAX_PROMPT_IDS);
    json_t *v;
    json_array_foreach(p, i, v) {
        if (!json_is_integer(v))
            return bad(e, "prompt", "prompt[%zu] must be a token id (an integer), not %s", i, type_name(v));
        if (json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return bad(e, "prompt", "prompt[%zu] is %lld, not a token id", i, (long long)json_integer_value(v));
    }
    if (!(r->prompt_ids = malloc(n * sizeof *r->prompt_ids))) return oom(e);
    json_array_foreach(p, i, v) r->prompt_ids[i] = (int32_t)json_integer_value(v);
    r->n_prompt_ids = (int)n;
    return true;
}

/* A string, an array of one string, or an array of token ids (OpenAI's
 * forms for one prompt; a batch of several is not served). */
static bool prompt(json_t *o, api_request *r, api_error *e) {
    json_t *p = json_object_get(o, "prompt");
    if (!p) return bad(e, "prompt", "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) == 1 && !json_is_integer(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    if (json_is_array(p) && json_array_size(p) > 0 && json_is_integer(json_array_get(p, 0)))
        return prompt_ids(p, r, e);
    if (!json_is_string(p))
        return bad(e, "prompt", "'prompt' must be a string, an array of one string or an array of token ids");
    if (!(r->prompt = strdup(json_string_value(p)))) return oom(e);
    return true;
}

static bool stops(json_t *o, api_request *r, api_error *e) {
    json_t *s = json_object_get(o, "stop");
    if (!s || json_is_null(s)) return true;
    json_t *one[1] = {s};
    size_t n = 1;
    if (json_is_array(s)) {
        n = json_array_size(s);
        if (n > API_MAX_STOP) return bad(e, "stop", "'stop' holds %zu sequences; at most %d", n, API_MAX_STOP);
    } else if (!json_is_string(s)) {
        return bad(e, "stop", "'stop' must be a string or an array of strings, not %s", type_name(s));
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_is_array(s) ? json_array_get(s, i) : one[0];
        if (!json_is_string(v)) return bad(e, "stop", "stop[%zu] must be a string, not %s", i, type_name(v));
        size_t len = json_string_length(v);
        if (!len || len > API_MAX_STOP_LEN || strlen(json_string_value(v)) != len)
            return bad(e, "stop", "stop[%zu] is %zu bytes; a stop sequence is 1 to %d bytes", i, len,
                       API_MAX_STOP_LEN);
        if (!(r->stop[r->n_stop] = strdup(json_string_value(v)))) return oom(e);
        r->n_stop++;
    }
    return true;
}

/* Chat's logprobs (a boolean) and top_logprobs (0 .. 20, only with
 * logprobs); the completions' logprobs (0 .. 20: the alternatives, as
 * OpenAI's legacy API; it allows 5). */
static bool logprobs(api_kind kind, json_t *o, api_request *r, api_error *e) {
    json_t *v = json_object_get(o, "logprobs");
    const char *top = kind == API_CHAT ? "top_logprobs" : "logprobs";
    if (kind == API_CHAT) {
        if (!boolean(o, "logprobs", &r->logprobs, e)) return false;
        v = json_object_get(o, top);
    }
    if (!v || json_is_null(v)) return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > API_MAX_TOP_LOGPROBS)
        return bad(e, top, "'%s' must be an integer from 0 to %d", top, API_MAX_TOP_LOGPROBS);
    if (kind == API_CHAT && !r->logprobs) return bad(e, top, "'top_logprobs' needs 'logprobs': true");
    r->logprobs = true, r->top_logprobs = (int)json_integer_value(v);
    return true;
}

static bool parse(api_kind kind, json_t *o, api_request *r, api_error *e) {
    json_t *v;
    if ((v = json_object_get(o, "model")) && !json_is_null(v)) {
        if (!json_is_string(v)) return bad(e, "model", "'model' must be a string, not %s", type_name(v));
        if (!(r->model = strdup(json_string_value(v)))) return oom(e);
    }
    if (!(kind == API_CHAT ? messages(o, r, e) : prompt(o, r, e))) return false;
    const char *mt = json_object_get(o, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if ((v = json_object_get(o, mt)) && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1 << 24)
            return bad(e, mt, "'%s' must be an integer from 1 to %d", mt, 1 << 24);
        r->max_tokens = (int)json_integer_value(v);
    }
    if (!number(o, "temperature", 0, 2, false, &r->temperature, e)) return false;
    if (!number(o, "top_p", 0, 1, true, &r->top_p, e)) return false;
    if ((v = json_object_get(o, "n")) && !json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) != 1))
        return bad(e, "n", "'n' must be 1 (one choice per request is served)");
    if ((v = json_object_get(o, "seed")) && !json_is_null(v)) {
        if (!json_is_integer(v)) return bad(e, "seed", "'seed' must be an integer, not %s", type_name(v));
        r->has_seed = true, r->seed = (uint64_t)json_integer_value(v);
    }
    if (!boolean(o, "stream", &r->stream, e) || !boolean(o, "cache_prompt", &r->cache_prompt, e) || !stops(o, r, e))
        return false;
    if (!logprobs(kind, o, r, e)) return false;
    if ((v = json_object_get(o, "stream_options")) && !json_is_null(v)) {
        if (!json_is_object(v)) return bad(e, "stream_options", "'stream_options' must be an object");
        if (!r->stream) return bad(e, "stream_options", "'stream_options' is only allowed with 'stream': true");
        if (!boolean(v, "include_usage", &r->include_usage, e)) return false;
    }
    return true;
}

bool api_parse(api_kind kind, const char *body, size_t len, api_request *r, api_error *e) {
    *r = (api_request){.kind = kind, .temperature = 1, .top_p = 1, .cache_prompt = true};
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je);
    if (!o)
        return api_fail(e, 400, "invalid_request_error", NULL, "invalid_json",
                        "the body is not valid JSON: %s at line %d, column %d", je.text, je.line, je.column);
    bool ok = json_is_object(o) ? parse(kind, o, r, e)
                                : bad(e, NULL, "the body must be a JSON object, not %s", type_name(o));
    json_decref(o);
    if (!ok) api_request_free(r);
    return ok;
}

void api_request_free(api_request *r) {
    for (int i = 0; i < r->n_msgs; i++) free(r->msgs[i].role), free(r->msgs[i].content);
    free(r->msgs), free(r->model), free(r->prompt), free(r->prompt_ids);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    *r = (api_request){0};
}

/* json_dumps of o, which it takes (NULL stays NULL) */
static char *dump(json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

/* The text as a JSON string; bytes that are not UTF-8 (a token that ends
 * inside a character) become U+FFFD. */
static json_t *text_json(const char *text, size_t len) {
    json_t *s = json_stringn(text, len);
    if (s) return s;
    char *fixed = malloc(3 * len + 1);
    if (!fixed) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)text[i];
        int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        json_t *one = n && c && i + (size_t)n <= len ? json_stringn(text + i, (size_t)n) : NULL;
        if (one) {
            memcpy(fixed + k, text + i, (size_t)n), k += (size_t)n, i += (size_t)n;
            json_decref(one);
        } else {
            memcpy(fixed + k, "\xEF\xBF\xBD", 3), k += 3, i++;
        }
    }
    s = json_stringn(fixed, k);
    free(fixed);
    return s;
}

/* The message may quote the body (jansson's parse errors do), cut anywhere
 * inside a character: text_json keeps it valid UTF-8. */
char *api_error_json(const api_error *e) {
    return dump(json_pack("{s:{s:o, s:s, s:o, s:o}}", "error", "message", text_json(e->message, strlen(e->message)),
                          "type", e->type, "param", str_or_null(e->param), "code", str_or_null(e->code)));
}

char *api_models_json(const char *model, long created) {
    return dump(json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id", model, "object",
                          "model", "created", (json_int_t)created, "owned_by", "kiln"));
}

static json_t *usage(const api_usage *u) {
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", u->prompt, "completion_tokens", u->completion,
                     "total_tokens", u->prompt + u->completion, "prompt_tokens_details", "cached_tokens", u->cached);
}

/* A log-probability as JSON can hold it (-inf as vLLM writes it). */
static json_t *logprob_json(double x) { return json_real(isfinite(x) ? x : -9999.0); }

static json_t *bytes_json(const char *text, size_t len) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < len; i++) json_array_append_new(a, json_integer((unsigned char)text[i]));
    return a;
}

static json_t *token_json(const api_token *t) {
    return json_pack("{s:o, s:o, s:o}", "token", text_json(t->text, t->len), "logprob", logprob_json(t->logprob),
                     "bytes", bytes_json(t->text, t->len));
}

/* Chat's {"content": [{token, logprob, bytes, top_logprobs}], "refusal"}
 * or the completions' legacy {tokens, token_logprobs, top_logprobs,
 * text_offset}; NULL when out of memory. */
static json_t *logprobs_json(api_kind kind, api_logprobs l) {
    if (!l.lp) return json_null();
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offsets = json_array();
    for (int i = 0; tokens && lps && tops && offsets && i < l.n; i++) {
        const api_logprob *p = &l.lp[i];
        json_t *top = kind == API_CHAT ? json_array() : json_object();
        for (int k = 0; top && k < p->n_top; k++) {
            if (kind == API_CHAT) {
                json_array_append_new(top, token_json(&p->top[k]));
            } else {
                /* two tokens may read the same (bytes as U+FFFD): the likelier stays */
                json_t *key = text_json(p->top[k].text, p->top[k].len);
                if (key && !json_object_get(top, json_string_value(key)))
                    json_object_set_new(top, json_string_value(key), logprob_json(p->top[k].logprob));
                json_decref(key);
            }
        }
        if (kind == API_CHAT) {
            json_t *one = token_json(&p->chosen);
            if (one) json_object_set_new(one, "top_logprobs", top);
            else json_decref(top);
            json_array_append_new(tokens, one);
        } else {
            json_array_append_new(tokens, text_json(p->chosen.text, p->chosen.len));
            json_array_append_new(lps, logprob_json(p->chosen.logprob));
            json_array_append_new(tops, top);
            json_array_append_new(offsets, json_integer((json_int_t)p->offset));
        }
    }
    if (kind == API_CHAT) {
        json_decref(lps), json_decref(tops), json_decref(offsets);
        return json_pack("{s:o, s:n}", "content", tokens, "refusal");
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offsets);
}

static json_t *head(const char *object, const char *id, long created, const char *model) {
    return json_pack("{s:s, s:s, s:I, s:s}", "id", id, "object", object, "created", (json_int_t)created, "model",
                     model);
}

char *api_result_json(api_kind kind, const char *id, long created, const char *model, const char *text, size_t len,
                      const char *finish, const api_usage *u, api_logprobs lp) {
    json_t *o = head(kind == API_CHAT ? "chat.completion" : "text_completion", id, created, model);
    json_t *t = text_json(text, len);
    json_t *choice = kind == API_CHAT
                         ? json_pack("{s:i, s:{s:s, s:o}, s:o, s:s}", "index", 0, "message", "role", "assistant",
                                     "content", t, "logprobs", logprobs_json(kind, lp), "finish_reason", finish)
                         : json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "text", t, "logprobs", logprobs_json(kind, lp),
                                     "finish_reason", finish);
    if (!o || !choice || json_object_set_new(o, "choices", json_pack("[o]", choice)) ||
        json_object_set_new(o, "usage", usage(u))) {
        json_decref(o);
        return NULL;
    }
    return dump(o);
}

char *api_chunk_json(api_kind kind, const api_chunk *c) {
    json_t *o = head(kind == API_CHAT ? "chat.completion.chunk" : "text_completion", c->id, c->created, c->model);
    if (!o) return NULL;
    json_t *choices = json_array();
    if (!c->usage_only) {
        json_t *t = c->text ? text_json(c->text, c->len) : NULL;
        json_t *choice;
        if (kind == API_CHAT) {
            json_t *delta = json_object();
            if (c->first) json_object_set_new(delta, "role", json_string("assistant"));
            if (t) json_object_set_new(delta, "content", t);
            choice = json_pack("{s:i, s:o, s:o, s:o}", "index", 0, "delta", delta, "logprobs",
                               logprobs_json(kind, c->logprobs), "finish_reason", str_or_null(c->finish));
        } else {
            choice = json_pack("{s:i, s:o, s:o, s:o}", "index", 0, "text", t ? t : json_string(""), "logprobs",
                               logprobs_json(kind, c->logprobs), "finish_reason", str_or_null(c->finish));
        }
        json_array_append_new(choices, choice);
    }
    json_object_set_new(o, "choices", choices);
    if (c->finish || c->usage_only)
        json_object_set_new(o, "usage", usage(&c->usage));
    return dump(o);
}
