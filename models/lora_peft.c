/* lora_peft.c — LoRA adapters in PEFT's files (see lora.h):
 * adapter_model.safetensors and adapter_config.json. */
#include "lora.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "dir/file", or NULL with the error set when it does not fit */
static bool join(char *out, size_t size, const char *dir, const char *file, const char *who) {
    if (!dir || snprintf(out, size, "%s/%s", dir, file) >= (int)size) {
        kiln_set_error(KILN_ERR_ARG, "%s: the directory '%s' is %s", who, dir ? dir : "(null)",
                       dir ? "too long" : "NULL");
        return false;
    }
    return true;
}

/* PEFT's tensor name for layer i's A (which 0) or B (1). */
static void peft_name(char *out, size_t size, const lora_layer *a, int which) {
    snprintf(out, size, "base_model.model.%s.lora_%c.weight", a->module, which ? 'B' : 'A');
}

/* A number as Python's json.dumps writes it: an int as an int, a float
 * in its shortest round-trip form with a ".0" where it has no point. */
static void py_number(FILE *f, double v, bool is_int) {
    if (is_int) {
        fprintf(f, "%lld", (long long)v);
        return;
    }
    char buf[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, v);
        if (strtod(buf, NULL) == v) break;
    }
    fprintf(f, "%s%s", buf, strpbrk(buf, ".en") ? "" : ".0");
}

static void py_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* adapter_config.json as PEFT's save_pretrained writes it: json.dumps(...,
 * indent=2, sort_keys=True); the keys PEFT needs to load it, the rest
 * left to its defaults. */
static kiln_status write_config(const lora *l, const char *path) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return kiln_set_error(KILN_ERR_IO, "lora_save_peft: cannot write '%s'", tmp);
    const lora_config *c = &l->cfg;
    fputs("{\n  \"base_model_name_or_path\": ", f);
    if (c->base_model) py_string(f, c->base_model);
    else fputs("null", f);
    fprintf(f, ",\n  \"bias\": \"none\",\n  \"fan_in_fan_out\": %s,\n  \"inference_mode\": true,\n"
               "  \"init_lora_weights\": true,\n  \"lora_alpha\": ", l->fan_in_fan_out ? "true" : "false");
    py_number(f, c->alpha, c->alpha == (double)(long long)c->alpha);
    fputs(",\n  \"lora_dropout\": ", f);
    py_number(f, c->dropout, false);
    fprintf(f, ",\n  \"modules_to_save\": null,\n  \"peft_type\": \"LORA\",\n  \"r\": %d,\n", c->r);
    fputs("  \"target_modules\": ", f);
    if (c->target_regex) py_string(f, c->target_regex); /* PEFT's string form */
    for (int t = 0; t < c->n_targets; t++) {
        fputs(t ? ",\n    " : "[\n    ", f);
        py_string(f, c->targets[t]);
    }
    fputs(c->target_regex ? ",\n  \"task_type\": \"CAUSAL_LM\"\n}" : "\n  ],\n  \"task_type\": \"CAUSAL_LM\"\n}", f);
    bool ok = !ferror(f);
    ok = !fclose(f) && ok;
    if (!ok || rename(tmp, path)) {
        remove(tmp);
        return kiln_set_error(KILN_ERR_IO, "lora_save_peft: cannot write '%s'", path);
    }
    return KILN_OK;
}

kiln_status lora_save_peft(const lora *l, const char *dir) {
    if (!l) return kiln_set_error(KILN_ERR_ARG, "lora_save_peft: NULL lora");
    char path[4096];
    if (!join(path, sizeof path, dir, "adapter_model.safetensors", "lora_save_peft")) return KILN_ERR_ARG;
    char *names = malloc((size_t)l->n_params * 160);
    const char **np = malloc((size_t)l->n_params * sizeof *np);
    if (!names || !np) {
        free(names), free(np);
        return kiln_set_error(KILN_ERR_OOM, "lora_save_peft: out of memory");
    }
    for (int i = 0; i < l->n_params; i++) {
        peft_name(names + 160 * i, 160, &l->layers[i / 2], i % 2);
        np[i] = names + 160 * i;
    }
    static const char *const meta[2] = {"format", "pt"};
    kiln_status s = kiln_safetensors_save(path, l->params, np, l->n_params, meta, 1);
    free(names), free(np);
    if (!s && join(path, sizeof path, dir, "adapter_config.json", "lora_save_peft")) s = write_config(l, path);
    return s;
}

/* The config's r, lora_alpha and target_modules' form against l's. */
static kiln_status check_config(const lora *l, const char *path) {
    kiln_json_file *j = kiln_json_file_open(path);
    if (!j) return kiln_set_error(kiln_last_status(), "lora_load_peft: %s", kiln_last_error());
    double r = 0, alpha = 0;
    kiln_status s = kiln_json_file_number(j, NULL, "r", &r);
    if (!s) s = kiln_json_file_number(j, NULL, "lora_alpha", &alpha);
    const char *type = s ? NULL : kiln_json_file_string(j, NULL, "peft_type");
    if (s) s = kiln_set_error(KILN_ERR_FORMAT, "lora_load_peft: %s: needs numbers r and lora_alpha", path);
    else if (!type || strcmp(type, "LORA"))
        s = kiln_set_error(KILN_ERR_FORMAT, "lora_load_peft: %s: peft_type is '%s', not 'LORA'", path,
                           type ? type : "(missing)");
    else if (r != l->cfg.r || alpha != l->cfg.alpha)
        s = kiln_set_error(KILN_ERR_FORMAT, "lora_load_peft: %s: r = %g, lora_alpha = %g; these adapters have %d, %g",
                           path, r, alpha, l->cfg.r, l->cfg.alpha);
    if (s) {
        kiln_json_file_close(j);
        return s;
    }
    /* a string is a regex (PEFT's re.fullmatch form), anything else a list
     * (whose names the tensors' names check) */
    const char *re = kiln_json_file_string(j, NULL, "target_modules"), *want = l->cfg.target_regex;
    if ((re || want) && (!re || !want || strcmp(re, want)))
        s = kiln_set_error(KILN_ERR_FORMAT, "lora_load_peft: %s: target_modules is %s%s%s; these adapters have %s%s%s",
                           path, re ? "the regex '" : "a list", re ? re : "", re ? "'" : "",
                           want ? "the regex '" : "a list", want ? want : "", want ? "'" : "");
    kiln_json_file_close(j);
    return s;
}

kiln_status lora_load_peft(lora *l, const char *dir) {
    if (!l) return kiln_set_error(KILN_ERR_ARG, "lora_load_peft: NULL lora");
    char path[4096], name[160];
    if (!join(path, sizeof path, dir, "adapter_config.json", "lora_load_peft")) return KILN_ERR_ARG;
    kiln_status s = check_config(l, path);
    if (s) return s;
    if (!join(path, sizeof path, dir, "adapter_model.safetensors", "lora_load_peft")) return KILN_ERR_ARG;
    kiln_safetensors *st = kiln_safetensors_open(path);
    if (!st) return kiln_last_status();
    if (kiln_safetensors_count(st) != l->n_params)
        s = kiln_set_error(KILN_ERR_FORMAT, "lora_load_peft: %s holds %d tensors; these adapters have %d", path,
                           kiln_safetensors_count(st), l->n_params);
    /* every name and shape first, so a bad file changes nothing */
    for (int i = 0; i < l->n_params && !s; i++) {
        peft_name(name, sizeof name, &l->layers[i / 2], i % 2);
        kiln_safetensors_info info;
        int at = kiln_safetensors_find(st, name);
        if (at < 0 || kiln_safetensors_info_at(st, at, &info)) {
            s = kiln_set_error(KILN_ERR_FORMAT, "lora_load_peft: %s has no tensor '%s'", path, name);
            break;
        }
        const kiln_tensor *p = l->params[i];
        if (info.ndim != 2 || info.shape[0] != kiln_tensor_dim(p, 0) || info.shape[1] != kiln_tensor_dim(p, 1))
            s = kiln_set_error(KILN_ERR_SHAPE, "lora_load_peft: %s: '%s' is %d-d [%lld, ...], not [%lld, %lld]", path,
                               name, info.ndim, info.ndim ? (long long)info.shape[0] : 0LL,
                               (long long)kiln_tensor_dim(p, 0), (long long)kiln_tensor_dim(p, 1));
    }
    for (int i = 0; i < l->n_params && !s; i++) {
        peft_name(name, sizeof name, &l->layers[i / 2], i % 2);
        s = kiln_safetensors_read_into(st, name, l->params[i]);
    }
    kiln_safetensors_close(st);
    return s;
}
