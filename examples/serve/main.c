/* serve — an OpenAI-compatible HTTP server for a model in a GGUF file or a
 * Hugging Face directory, with a chat page at /.
 *
 *   GET  /                      the chat page (page.html, in the binary)
 *   GET  /health                {"status":"ok", slots idle and busy, queued}
 *   GET  /v1/models             the one model, named after its file
 *   POST /v1/chat/completions   messages through the model's chat template
 *   POST /v1/completions        a prompt as it is (text, or token ids)
 * with max_tokens, temperature, top_p, stop, seed, stream (server-sent
 * events ending in data: [DONE]), usage counts and logprobs (logprobs.h),
 * errors as OpenAI's error object. --slots sequences decode
 * together, one batched step for all (scheduler.c); up to --queue more
 * wait, beyond that 503 with Retry-After. A request reuses the prompt
 * prefix an idle slot holds (a conversation's earlier turns; llama-server's
 * cache_prompt, on unless the request says false), and usage says how many
 * tokens (prompt_tokens_details.cached_tokens). libmicrohttpd serves it
 * (http.c): a thread per connection, heads and bodies bounded, idle
 * connections closed after --timeout seconds, CORS for pages of other
 * origins. It listens on 127.0.0.1 unless --host says otherwise; with
 * --api-key the API wants "Authorization: Bearer KEY" (the page asks for it).
 *
 *     build/examples/serve --model qwen2.5-0.5b-instruct-q4_k_m.gguf --port 8080
 *     curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \
 *          -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":32}'
 */
#include "args.h"
#include "chat_template.h"
#include "llama_files.h"
#include "serve.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static int fail(const char *what) {
    fprintf(stderr, "serve: %s: %s\n", what, kiln_last_error());
    return 1;
}

/* The name clients give: the file's (or directory's) base name. */
static const char *base_name(const char *path) {
    static char name[256];
    snprintf(name, sizeof name, "%s", path);
    size_t n = strlen(name);
    while (n > 1 && name[n - 1] == '/') name[--n] = 0;
    const char *slash = strrchr(name, '/');
    return slash ? slash + 1 : name;
}

int main(int argc, char **argv) {
    const char *model = NULL, *host = "127.0.0.1", *api_key = NULL, *template = NULL, *alias = NULL;
    int port = 8080, slots = 4, ctx_len = 0, threads = 0, queue = 64, timeout = 30, max_body = 1 << 20;
    args_opt opts[] = {
        {"model", ARGS_STRING, &model, "PATH", "a GGUF file (weights as stored) or a Hugging Face directory (in Q8_0)",
         NULL, false},
        {"host", ARGS_STRING, &host, "ADDR", "the address to listen on (0.0.0.0: every interface)", NULL, false},
        {"port", ARGS_INT, &port, "N", "the port (0: any free one, printed)", NULL, false},
        {"slots", ARGS_INT, &slots, "N", "sequences generated at once, in one batched step", NULL, true},
        {"ctx", ARGS_INT, &ctx_len, "N", "positions of each slot (0: the model's context)", NULL, false},
        {"threads", ARGS_INT, &threads, "N", "worker threads (0: $KILN_THREADS, else all cores)", NULL, false},
        {"queue", ARGS_INT, &queue, "N", "requests that may wait beyond the slots (then 503)", NULL, false},
        {"timeout", ARGS_INT, &timeout, "S", "seconds an idle connection is kept", NULL, true},
        {"max-body", ARGS_INT, &max_body, "BYTES", "the largest request body (then 413)", NULL, true},
        {"api-key", ARGS_STRING, &api_key, "KEY", "the API wants 'Authorization: Bearer KEY'", NULL, false},
        {"alias", ARGS_STRING, &alias, "NAME", "the model's name in the API (default: the file's name)", NULL, false},
        {"chat-template", ARGS_STRING, &template, "T",
         "a template file, or chatml|llama3|llama3.1|phi3|phi3-mini|gemma|mistral-v1|mistral-v3|mistral-v3-tekken|"
         "mistral-v7 (default: the model's, else ChatML)", NULL, false},
    };
    int n_opts = (int)(sizeof opts / sizeof *opts);
    /* serve, or kiln-serve where make install put it */
    const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    int r = args_parse(prog, "Serve a model over HTTP as the OpenAI API does, with a chat page at /.", opts,
                       n_opts, argc, argv);
    if (r != ARGS_OK) return r == ARGS_HELP ? 0 : 2;
    if (port > 65535) return args_reject(prog, opts, n_opts, "port", "a port from 0 to 65535"), 2;
    if (slots > 256) return args_reject(prog, opts, n_opts, "slots", "1 to 256 slots"), 2;
    if (api_key && !*api_key) return args_reject(prog, opts, n_opts, "api-key", "a key that is not empty"), 2;
    if (!model) return fprintf(stderr, "serve: --model PATH is needed; see --help\n"), 2;
    /* SIGINT and SIGTERM end the server: main waits for them; every thread
     * started below (kiln's workers, the scheduler's, MHD's) inherits them blocked
     * (a Ctrl-C while the model loads takes effect once it has) */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT), sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (threads && kiln_set_threads(threads)) return fprintf(stderr, "serve: --threads: %s\n", kiln_last_error()), 2;

    struct stat st;
    bool dir = !stat(model, &st) && S_ISDIR(st.st_mode);
    kiln_ctx *ctx = kiln_ctx_new();
    llama *m = !ctx ? NULL : dir ? llama_infer_from_hf(ctx, model, KILN_Q8_0) : llama_infer_from_gguf(ctx, model,
                                                                                                       LLAMA_AS_STORED);
    if (!m) return fail(model);
    kiln_tokenizer *tok = dir ? llama_hf_tokenizer(model) : llama_gguf_tokenizer(model);
    if (!tok) return fail(model);
    bool stored;
    char *tmpl = chat_template_pick(template, model, &stored);
    if (!tmpl) return fprintf(stderr, "serve: out of memory\n"), 1;
    const char *family = kiln_chat_template_name(tmpl);
    if (!family) return fail(template ? "--chat-template" : "the model's chat template");
    const char *bos = kiln_tokenizer_token(tok, kiln_tokenizer_bos(tok)), *eos = kiln_tokenizer_token(tok,
                                                                                      kiln_tokenizer_eos(tok));
    serve_app app = {.tok = tok, .tmpl = tmpl, .bos = bos ? bos : "", .eos = eos ? eos : "",
                     .model = alias ? alias : base_name(model), .created = (long)time(NULL), .api_key = api_key,
                     .max_body = (size_t)max_body};
    app.vocab = kiln_tokenizer_vocab_size(tok) < m->cfg.vocab ? kiln_tokenizer_vocab_size(tok) : m->cfg.vocab;
    app.ctx = ctx_len && ctx_len < m->cfg.context ? ctx_len : m->cfg.context;
    if (!(app.sched = sched_new(m, tok, slots, app.ctx, queue))) return fail("the slots");

    http_conf conf = {.host = host, .port = port, .timeout = (unsigned)timeout, .max_header = 32 << 10,
                      .max_conns = (unsigned)(slots + queue + 16)};
    struct MHD_Daemon *d = http_start(&app, &conf);
    int status = 1;
    if (d) {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
        fprintf(stderr, "serve: %s (vocab %lld, template %s%s), %d slots of %lld positions (one batched step), on "
                "http://%s:%u/\n", app.model, (long long)m->cfg.vocab, family,
                stored || template ? "" : " (the model has none)", slots, (long long)app.ctx, host,
                di ? di->port : (unsigned)port);
        int sig;
        sigwait(&stop, &sig);
        fprintf(stderr, "serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        sched_stop(app.sched); /* readers waiting on jobs wake, so the connection threads can end */
        MHD_stop_daemon(d);
        status = 0;
    }
    sched_free(app.sched);
    free(tmpl);
    kiln_tokenizer_free(tok);
    llama_free(m);
    kiln_ctx_free(ctx);
    return status;
}
