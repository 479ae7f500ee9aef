/* chat_template.c — a conversation as the text a chat model was trained
 * on, from the Jinja template its GGUF stores (tokenizer.chat_template).
 * kiln runs no Jinja: it recognizes the families' templates by the text
 * they are made of (the turn markers, the quoting around them) and writes
 * what they render for messages of role and content (no tools), as
 * transformers' Jinja does. Where a template has no place for a system
 * message (Gemma, Phi-3 mini, Mistral v0.2), the system text goes in front
 * of the first user message with a newline, as llama.cpp does. */
#include "internal.h"
#include "kiln_tokenizer.h"

#include <stdio.h>
#include <time.h>

enum dialect {
    LLAMA3,      /* <|start_header_id|>role<|end_header_id|>\n\n content|trim <|eot_id|> */
    LLAMA31,     /* the same after a system header with "Cutting Knowledge Date" (3.1, 3.2, 3.3) */
    CHATML,      /* <|im_start|>role\n content <|im_end|>\n (Qwen: a default system message) */
    PHI3,        /* <|system|> <|user|> <|assistant|> ... <|end|>\n (Phi-3.5, Phi-3 small) */
    PHI3_MINI,   /* <|user|>\n content <|end|>\n<|assistant|>\n, no system (Phi-3 mini, medium) */
    GEMMA,       /* <start_of_turn>user|model\n content|trim <end_of_turn>\n */
    MISTRAL_V1,  /* " [INST] " system first " [/INST]" (Mistral 7B v0.1-0.2 with a system prompt) */
    MISTRAL_V0,  /* "[INST] " content " [/INST]", no system (Mistral 7B v0.2's first template) */
    MISTRAL_V3,  /* "[INST] " ... "[/INST]", " " reply|trim; the system in the last user turn */
    MISTRAL_TEK, /* "[INST]" ... "[/INST]", reply as it is (v3-tekken: Mistral Nemo) */
    MISTRAL_V7,  /* [SYSTEM_PROMPT] ...[/SYSTEM_PROMPT], "[INST] " ... "[/INST]" (Mistral Large 2411) */
    N_DIALECTS
};

static const char *names[N_DIALECTS] = {"llama3",     "llama3.1",   "chatml",     "phi3",
                                        "phi3-mini",  "gemma",      "mistral-v1", "mistral-v0",
                                        "mistral-v3", "mistral-v3-tekken", "mistral-v7"};

static bool has(const char *s, const char *what) { return strstr(s, what) != NULL; }

/* The dialect of a template's text (or of a name above), or -1. */
static int dialect_of(const char *t) {
    for (int d = 0; d < N_DIALECTS; d++)
        if (!strcmp(t, names[d])) return d;
    if (has(t, "<|start_header_id|>")) return has(t, "Cutting Knowledge Date") ? LLAMA31 : LLAMA3;
    if (has(t, "<|im_start|>")) return CHATML;
    if (has(t, "<start_of_turn>")) return GEMMA;
    if (has(t, "<|assistant|>") && has(t, "<|end|>"))
        return has(t, "<|system|>") || has(t, "'<|' + message['role'] + '|>'") ? PHI3 : PHI3_MINI;
    if (has(t, "[INST]") && !has(t, "<<SYS>>")) {
        if (has(t, "[SYSTEM_PROMPT]")) return MISTRAL_V7;
        if (has(t, "' [INST] '")) return MISTRAL_V1;
        if (has(t, "' [/INST]'")) return MISTRAL_V0;
        if (has(t, "\"[INST] \"") || has(t, "'[INST] '")) return MISTRAL_V3;
        if (has(t, "\"[INST]\"") || has(t, "'[INST]'")) return MISTRAL_TEK;
    }
    return -1;
}

const char *kiln_chat_template_name(const char *tmpl) {
    if (!tmpl) return kiln__err(KILN_ERR_ARG, "kiln_chat_template_name: NULL template");
    int d = dialect_of(tmpl);
    if (d < 0)
        return kiln__err(KILN_ERR_UNSUPPORTED, "kiln_chat_template_name: the chat template '%.60s%s' is not one "
                         "kiln recognizes (Llama 3, ChatML/Qwen, Phi-3, Gemma, Mistral)", tmpl,
                         strlen(tmpl) > 60 ? "..." : "");
    return names[d];
}

/* The output, counted always, stored while it fits. */
typedef struct out {
    char *p;
    size_t cap, n;
} out;

static void put_n(out *o, const char *s, size_t n) {
    if (o->n < o->cap) memcpy(o->p + o->n, s, n < o->cap - o->n ? n : o->cap - o->n);
    o->n += n;
}
static void put(out *o, const char *s) { put_n(o, s, strlen(s)); }

static bool space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* Jinja's trim: without the leading and trailing whitespace. */
static void put_trim(out *o, const char *s) {
    size_t n = strlen(s);
    while (n && space(*s)) s++, n--;
    while (n && space(s[n - 1])) n--;
    put_n(o, s, n);
}

/* Qwen's ChatML: the system message written when the first is none,
 * '<|im_start|>system\nTEXT<|im_end|>' as a literal in the template. */
static void chatml_default_system(const char *t, const char **text, size_t *len) {
    const char *key = "<|im_start|>system\\n";
    *text = NULL;
    for (const char *p = strstr(t, key); p; p = strstr(p + 1, key)) {
        const char *s = p + strlen(key), *e = strstr(s, "<|im_end|>");
        if (e && e > s && !memchr(s, '\'', (size_t)(e - s)) && !memchr(s, '"', (size_t)(e - s))) {
            *text = s, *len = (size_t)(e - s);
            return;
        }
    }
}

static const char *role_of(const kiln_chat_msg *m) { return m->role ? m->role : ""; }
static const char *text_of(const kiln_chat_msg *m) { return m->content ? m->content : ""; }
static bool is(const kiln_chat_msg *m, const char *role) { return !strcmp(role_of(m), role); }

/* user, assistant, user, ... after the system message, as the templates check. */
static kiln_status alternate(const kiln_chat_msg *m, int n, const char *who) {
    for (int i = 0; i < n; i++)
        if (!(i % 2 == 0 ? is(&m[i], "user") : is(&m[i], "assistant")))
            return kiln__errs(KILN_ERR_ARG, "%s: message %d is '%s': after the optional system message, "
                              "conversation roles must alternate user/assistant/user/assistant/...", who, i,
                              role_of(&m[i]));
    return KILN_OK;
}

/* A user message with the system text in front, where the template has no system role. */
static const char *with_system(const char *sys, const char *user, char **own) {
    size_t a = strlen(sys), b = strlen(user);
    *own = kiln__malloc(a + b + 2);
    if (!*own) return NULL;
    memcpy(*own, sys, a);
    (*own)[a] = '\n';
    memcpy(*own + a + 1, user, b + 1);
    return *own;
}

static void llama3_turn(out *o, const char *role, const char *content) {
    put(o, "<|start_header_id|>"), put(o, role), put(o, "<|end_header_id|>\n\n");
    put_trim(o, content), put(o, "<|eot_id|>");
}

static void render_llama3(out *o, int d, const char *tmpl, const kiln_chat_msg *m, int n, bool gen, const char *bos) {
    int first = 0;
    if (d == LLAMA31) {
        char date[32] = "26 Jul 2024";
        if (has(tmpl, "strftime_now")) { /* Llama 3.2: today, as transformers passes strftime_now */
            time_t now = time(NULL);
            struct tm tm;
            if (localtime_r(&now, &tm)) strftime(date, sizeof date, "%d %b %Y", &tm);
        }
        put(o, bos);
        put(o, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ");
        put(o, date), put(o, "\n\n");
        if (n && is(&m[0], "system")) put_trim(o, text_of(&m[0])), first = 1;
        put(o, "<|eot_id|>");
    }
    for (int i = first; i < n; i++) {
        if (i == 0 && d == LLAMA3) put(o, bos);
        llama3_turn(o, role_of(&m[i]), text_of(&m[i]));
    }
    if (gen || (d == LLAMA3 && !has(tmpl, "add_generation_prompt"))) /* some write it unasked */
        put(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void render_chatml(out *o, const char *tmpl, const kiln_chat_msg *m, int n, bool gen) {
    const char *def;
    size_t dlen;
    chatml_default_system(tmpl, &def, &dlen);
    if (def && (!n || !is(&m[0], "system")))
        put(o, "<|im_start|>system\n"), put_n(o, def, dlen), put(o, "<|im_end|>\n");
    for (int i = 0; i < n; i++)
        put(o, "<|im_start|>"), put(o, role_of(&m[i])), put(o, "\n"), put(o, text_of(&m[i])), put(o, "<|im_end|>\n");
    if (gen) put(o, "<|im_start|>assistant\n");
}

static void render_phi3(out *o, int d, const char *tmpl, const kiln_chat_msg *m, int n, bool gen, const char *eos) {
    bool any_role = has(tmpl, "'<|' + message['role'] + '|>'");
    for (int i = 0; i < n; i++) {
        const char *r = role_of(&m[i]), *c = text_of(&m[i]);
        if (d == PHI3_MINI) {
            if (is(&m[i], "user")) put(o, "<|user|>\n"), put(o, c), put(o, "<|end|>\n<|assistant|>\n");
            else if (is(&m[i], "assistant")) put(o, c), put(o, "<|end|>\n");
        } else if (any_role || is(&m[i], "user") || is(&m[i], "assistant") || (is(&m[i], "system") && *c)) {
            put(o, "<|"), put(o, r), put(o, "|>\n"), put(o, c), put(o, "<|end|>\n");
        }
    }
    bool last_assistant = n && is(&m[n - 1], "assistant");
    if (d == PHI3_MINI) return;
    if (gen && !(has(tmpl, "messages[-1]['role'] != 'assistant'") && last_assistant)) put(o, "<|assistant|>\n");
    else if (!gen && has(tmpl, "eos_token")) put(o, eos);
}

static void render_gemma(out *o, const kiln_chat_msg *m, int n, bool gen, const char *bos) {
    put(o, bos);
    for (int i = 0; i < n; i++) {
        put(o, "<start_of_turn>"), put(o, is(&m[i], "assistant") ? "model" : role_of(&m[i])), put(o, "\n");
        put_trim(o, text_of(&m[i])), put(o, "<end_of_turn>\n");
    }
    if (gen) put(o, "<start_of_turn>model\n");
}

static void render_mistral(out *o, int d, const kiln_chat_msg *m, int n, const char *sys, const char *bos,
                           const char *eos) {
    put(o, bos);
    for (int i = 0; i < n; i++) {
        const char *c = text_of(&m[i]);
        if (is(&m[i], "system")) { /* v7 only: the others took it out */
            put(o, "[SYSTEM_PROMPT] "), put(o, c), put(o, "[/SYSTEM_PROMPT]");
        } else if (is(&m[i], "user")) {
            bool here = sys && (d == MISTRAL_V1 ? i == 0 : i == n - 1); /* v1: the first turn; v3: the last */
            put(o, d == MISTRAL_V1 ? " [INST] " : d == MISTRAL_TEK ? "[INST]" : "[INST] ");
            if (here) put(o, sys), put(o, "\n\n");
            put(o, c), put(o, d == MISTRAL_V1 || d == MISTRAL_V0 ? " [/INST]" : "[/INST]");
        } else {
            if (d != MISTRAL_TEK && d != MISTRAL_V0) put(o, " ");
            if (d == MISTRAL_V3) put_trim(o, c);
            else put(o, c);
            put(o, eos);
        }
    }
}

kiln_status kiln_chat_render(const char *tmpl, const kiln_chat_msg *msgs, int n, bool add_generation_prompt,
                             const char *bos, const char *eos, char *text, size_t cap, size_t *len) {
    const char *who = "kiln_chat_render";
    if (!tmpl || (!msgs && n) || n < 0 || (!text && cap) || !len)
        return kiln__errs(KILN_ERR_ARG, "%s: bad argument", who);
    if (!kiln_chat_template_name(tmpl)) return kiln_last_status();
    int d = dialect_of(tmpl);
    /* the templates write bos_token / eos_token where they name them */
    const char *b = bos && has(tmpl, "bos_token") ? bos : "", *e = eos ? eos : "";
    if (d >= 0 && !strcmp(tmpl, names[d])) b = bos && d != CHATML && d != PHI3 ? bos : ""; /* a name: the family's */
    out o = {text, cap, 0};
    const char *sys = n && is(&msgs[0], "system") ? text_of(&msgs[0]) : NULL;
    kiln_chat_msg *copy = NULL;
    char *merged = NULL;
    kiln_status s = KILN_OK;
    bool no_system = d == GEMMA || d == PHI3_MINI || d == MISTRAL_V0;
    if (sys && (no_system || d == MISTRAL_V1 || d == MISTRAL_V3 || d == MISTRAL_TEK)) {
        msgs++, n--; /* out of the turns: in front of the first user message, or the template's place */
        if (no_system && n && is(&msgs[0], "user")) {
            if (!(copy = kiln__malloc((size_t)n * sizeof *copy)) || !with_system(sys, text_of(&msgs[0]), &merged))
                s = kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
            else {
                memcpy(copy, msgs, (size_t)n * sizeof *copy);
                copy[0].content = merged;
                msgs = copy;
            }
        }
    }
    if (!s && (d == GEMMA || d >= MISTRAL_V1) && d != MISTRAL_V7) s = alternate(msgs, n, who);
    if (!s) switch (d) {
        case LLAMA3:
        case LLAMA31: render_llama3(&o, d, tmpl, msgs, n, add_generation_prompt, b); break;
        case CHATML: render_chatml(&o, tmpl, msgs, n, add_generation_prompt); break;
        case PHI3:
        case PHI3_MINI: put(&o, b), render_phi3(&o, d, tmpl, msgs, n, add_generation_prompt, e); break;
        case GEMMA: render_gemma(&o, msgs, n, add_generation_prompt, b); break;
        default: render_mistral(&o, d, msgs, n, no_system || d == MISTRAL_V7 ? NULL : sys, b, e); break;
        }
    free(copy);
    free(merged);
    if (s) return s;
    *len = o.n;
    if (o.n > cap) return kiln__errs(KILN_ERR_ARG, "%s: %zu bytes do not fit in %zu", who, o.n, cap);
    return KILN_OK;
}
