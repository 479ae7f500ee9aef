/* chat_template.c — the template an example renders with (chat_template.h). */
#include "chat_template.h"

#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* --chat-template: a family's name or a file holding the template. */
static char *from_arg(const char *arg) {
    FILE *f = fopen(arg, "rb");
    if (!f) return strdup(arg);
    char *s = calloc(1, 1 << 20);
    size_t n = s ? fread(s, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (s) s[n] = 0;
    return s;
}

/* The model's own template, malloc'd, or NULL. */
static char *from_model(const char *model) {
    struct stat st;
    const char *s = NULL;
    char *t = NULL;
    if (!stat(model, &st) && S_ISDIR(st.st_mode)) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tokenizer_config.json", model);
        kiln_json_file *j = kiln_json_file_open(path);
        if ((s = j ? kiln_json_file_string(j, NULL, "chat_template") : NULL)) t = strdup(s);
        kiln_json_file_close(j);
        return t;
    }
    kiln_gguf *g = kiln_gguf_open(model);
    if ((s = g ? kiln_gguf_get_string(g, "tokenizer.chat_template", NULL) : NULL)) t = strdup(s);
    kiln_gguf_close(g);
    return t;
}

char *chat_template_pick(const char *arg, const char *model, bool *own) {
    *own = false;
    if (arg) return from_arg(arg);
    char *t = from_model(model);
    if (t) {
        *own = true;
        return t;
    }
    return strdup("chatml");
}
