/* fuzz_api.c — serve's request parser (examples/serve/api.c) on mutated
 * bodies for a few seconds, built with ASan and UBSan: valid requests of
 * both endpoints, their bytes flipped, cut, repeated and spliced with JSON
 * tokens. Every body must come back as a request whose values are in
 * range or as an error with a 4xx status, a type and a message whose
 * error object is valid JSON; the answers written from random bytes
 * (tokens that end inside a UTF-8 character, logprobs of -inf and NaN)
 * must be valid JSON too.
 * Usage: serve_fuzz [SECONDS] [SEED] (none or 0: from the clock); last line
 * "N passed, N failed". */
#include "api.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *seeds[] = {
    "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":"
    "\"Hi\"}],\"max_tokens\":16,\"temperature\":0.7,\"top_p\":0.9,\"stop\":[\"\\n\",\"END\"],\"seed\":42,"
    "\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
    "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\","
    "\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":null},{\"role\":\"developer\",\"content\":\"x\"}],"
    "\"n\":1,\"max_completion_tokens\":3}",
    "{\"model\":\"m\",\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"stop\":\"\\n\",\"stream\":false}",
    "{\"prompt\":[\"one\"],\"temperature\":0,\"top_p\":1,\"seed\":-3}",
    "{\"prompt\":[1,259,3,511],\"max_tokens\":4,\"cache_prompt\":false,\"logprobs\":null}",
    "{\"prompt\":\"a\",\"logprobs\":3,\"max_tokens\":2}",
    "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":true,\"top_logprobs\":5}",
};
static const char *pieces[] = {"{",    "}",      "[",          "]",       "\"",       ",",     ":",
                               "null", "true",   "-1",         "1e999",   "0.5",      "\\u0000", "\\",
                               "[[[[[[[[", "\"messages\"", "\"prompt\"", "\"stop\"", "2147483648", "\xff\xfe",
                               "\"role\":\"user\"", "{\"type\":\"image\"}", "\xc3", "9223372036854775807",
                               "\"logprobs\"", "\"top_logprobs\"", "\"cache_prompt\"", "20", "21"};

static uint64_t rng;
static uint64_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

/* One to eight mutations of b (len bytes, room for cap). */
static size_t mutate(char *b, size_t len, size_t cap) {
    int k = 1 + (int)(next() % 8);
    for (int i = 0; i < k; i++) {
        size_t at = len ? next() % (len + 1) : 0;
        switch (next() % 5) {
        case 0: /* a byte changed */
            if (at < len) b[at] = (char)next();
            break;
        case 1: { /* a range cut */
            size_t n = at < len ? 1 + next() % (len - at) : 0;
            n = n > 16 ? 1 + n % 16 : n;
            memmove(b + at, b + at + n, len - at - n);
            len -= n;
            break;
        }
        case 2: { /* a JSON token put in */
            const char *p = pieces[next() % (sizeof pieces / sizeof *pieces)];
            size_t n = strlen(p);
            if (len + n > cap) break;
            memmove(b + at + n, b + at, len - at);
            memcpy(b + at, p, n);
            len += n;
            break;
        }
        case 3: { /* a range repeated */
            size_t n = at < len ? 1 + next() % (len - at) : 0;
            if (len + n > cap) break;
            memmove(b + at + n, b + at, len - at);
            len += n;
            break;
        }
        default: /* a random byte put in */
            if (len + 1 > cap) break;
            memmove(b + at + 1, b + at, len - at);
            b[at] = (char)next();
            len++;
        }
    }
    return len;
}

static int failures;
static void check(bool ok, const char *what, const char *body, size_t len) {
    if (ok) return;
    if (failures++ < 5) fprintf(stderr, "FAIL %s on the body (%zu bytes): %.*s\n", what, len, (int)len, body);
}

static bool valid_json(char *s) {
    json_t *o = s ? json_loads(s, JSON_ALLOW_NUL, NULL) : NULL; /* a token may be a NUL byte, written escaped */
    bool ok = o != NULL;
    json_decref(o);
    free(s);
    return ok;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 3;
    rng = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
    rng = rng ? rng : (uint64_t)time(NULL); /* seed 0 or none: from the clock */
    printf("serve_fuzz: %.1f s of mutated bodies, seed %llu\n", seconds, (unsigned long long)rng);
    /* bodies that failed once: jansson's message quotes a cut character */
    static const char *found[] = {
        "{\"model\":\"m\",\"prompt\":\"Once\",\"stop\":\"\\\xd2\x8bn\",\"stream\":\":alse}",
        "{\"prompt\":\"\xc3",
    };
    for (size_t i = 0; i < sizeof found / sizeof *found; i++) {
        api_request r;
        api_error e;
        bool parsed = api_parse(API_COMPLETION, found[i], strlen(found[i]), &r, &e);
        check(!parsed, "a broken body accepted", found[i], strlen(found[i]));
        check(parsed || valid_json(api_error_json(&e)), "an error object that is not JSON", found[i], strlen(found[i]));
        if (parsed) api_request_free(&r);
    }
    enum { CAP = 8192 };
    char *b = malloc(CAP);
    long bodies = 0, accepted = 0;
    clock_t end = clock() + (clock_t)(seconds * CLOCKS_PER_SEC);
    while (clock() < end) {
        for (int i = 0; i < 64; i++, bodies++) {
            const char *seed = seeds[next() % (sizeof seeds / sizeof *seeds)];
            size_t len = strlen(seed);
            memcpy(b, seed, len);
            if (next() % 8) len = mutate(b, len, CAP);
            api_kind kind = seed[2] == 'p' || strstr(seed, "\"prompt\"") ? API_COMPLETION : API_CHAT;
            if (next() % 4 == 0) kind = !kind;
            api_request r;
            api_error e;
            if (api_parse(kind, b, len, &r, &e)) {
                accepted++;
                bool ok = r.kind == kind && r.temperature >= 0 && r.temperature <= 2 && r.top_p > 0 &&
                          r.top_p <= 1 && r.n_stop >= 0 && r.n_stop <= API_MAX_STOP && r.max_tokens >= 0 &&
                          r.top_logprobs >= 0 && r.top_logprobs <= API_MAX_TOP_LOGPROBS &&
                          (r.logprobs || !r.top_logprobs);
                for (int k = 0; k < r.n_stop; k++) ok = ok && r.stop[k] && *r.stop[k];
                if (kind == API_CHAT) {
                    ok = ok && r.n_msgs >= 1 && r.msgs;
                    for (int k = 0; ok && k < r.n_msgs; k++) ok = r.msgs[k].role && r.msgs[k].content;
                } else {
                    ok = ok && (r.prompt != NULL) != (r.prompt_ids != NULL) && (r.prompt || r.n_prompt_ids >= 1);
                    for (int k = 0; ok && k < r.n_prompt_ids; k++) ok = r.prompt_ids[k] >= 0;
                }
                check(ok, "an accepted request with a value out of range", b, len);
                api_request_free(&r);
            } else {
                check(e.status >= 400 && e.status < 500 && e.type && *e.message, "an error without a 4xx status",
                      b, len);
                check(valid_json(api_error_json(&e)), "an error object that is not JSON", b, len);
            }
            /* the answers from random bytes, with tokens cut from them (-inf and NaN among their logprobs) */
            api_token top[3];
            api_logprob lp[2];
            for (int k = 0; k < 3; k++)
                top[k] = (api_token){b + next() % (len + 1), 0, k == 1 ? -INFINITY : k == 2 ? NAN : -0.5};
            for (int k = 0; k < 3; k++) top[k].len = next() % (size_t)(b + len - top[k].text + 1);
            for (int k = 0; k < 2; k++) lp[k] = (api_logprob){top[2 - k], top, (int)(next() % 4), next() % 9};
            api_logprobs lps = {next() % 2 ? lp : NULL, 2};
            api_chunk c = {.id = "chatcmpl-1", .model = "m", .created = 1, .text = b, .len = len % 64,
                           .finish = next() % 2 ? "stop" : NULL, .first = next() % 2, .logprobs = lps};
            check(valid_json(api_chunk_json(kind, &c)), "a chunk that is not JSON", b, len % 64);
            check(valid_json(api_result_json(kind, "cmpl-1", 1, "m", b, len % 64, "length", &(api_usage){3, 4, 2},
                                             lps)),
                  "a result that is not JSON", b, len % 64);
        }
    }
    free(b);
    printf("serve_fuzz: %ld bodies, %ld accepted as requests, %ld answered with an error\n", bodies, accepted,
           bodies - accepted);
    printf("%s serve_fuzz_api\n", failures ? "FAIL" : "ok");
    printf("%d passed, %d failed\n", !failures, !!failures);
    return failures != 0;
}
