/* test_lora_llama.c — LoRA on a whole tiny llama against plain PyTorch
 * (tests/fixtures/lora_llama.safetensors, scripts/make_lora_fixtures.py):
 * logits and every adapter's gradient; PEFT's regex form of target_modules
 * (tests/fixtures/peft_regex). */
#include "kt.h"
#include "test_nn_util.h"

#include "lora.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const all7[7] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

static lora_config config(int r, double alpha, int n, const char *const *targets) {
    lora_config c = lora_defaults();
    c.r = r, c.alpha = alpha, c.targets = targets, c.n_targets = n;
    return c;
}

static llama_config tiny(void) {
    llama_config c = llama_defaults();
    c.vocab = 32, c.context = 16, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.dim = 16, c.hidden = 32;
    return c;
}

/* t against the fixture's F64 tensor name, within 2e-5 (1 + |want|): f32
 * through two layers (the worst now 1.1e-5) */
static void near(kiln_safetensors *st, const char *name, const kiln_tensor *t) {
    kiln_ctx *tmp = kiln_ctx_new();
    kiln_tensor *w = kiln_safetensors_load(st, tmp, name);
    KT_NOTNULL(w);
    double *got = nnt_values(t), *want = nnt_values(w);
    KT_CHECK(got && want && kiln_tensor_numel(t) == kiln_tensor_numel(w), "%s: %lld elements, want %lld", name,
             (long long)kiln_tensor_numel(t), (long long)kiln_tensor_numel(w));
    if (got && want) nnt_close(name, got, want, kiln_tensor_numel(t), 2e-5, 2e-5);
    free(got), free(want);
    kiln_ctx_free(tmp);
}

KT_TEST(lora_llama_matches_pytorch) {
    kiln_safetensors *st = kiln_safetensors_open("tests/fixtures/lora_llama.safetensors");
    KT_REQUIRE(st, "tests/fixtures/lora_llama.safetensors: %s", kiln_last_error());
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny();
    c.context = 8;
    llama *m = llama_new(ctx, &c, 1);
    KT_NOTNULL(m);
    lora_config cfg = config(2, 4, 7, all7);
    lora *l = lora_attach_llama(m, &cfg, 1);
    KT_NOTNULL(l);
    KT_CHECK(l->n_layers == 14, "%d adapted layers", l->n_layers);
    kiln_tensor *const *lists[2] = {m->params, l->params};
    const int sizes[2] = {m->n_params, l->n_params};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < sizes[k]; i++)
            KT_OK(kiln_safetensors_read_into(st, kiln_tensor_name(lists[k][i]), lists[k][i]));
    model_graph g;
    KT_OK(llama_train_graph(m, 2, 8, &g));
    KT_OK(kiln_safetensors_read_into(st, "tokens", g.input));
    KT_OK(kiln_safetensors_read_into(st, "labels", g.labels));
    KT_OK(kiln_graph_compute(g.graph));
    near(st, "logits", g.logits);
    for (int i = 0; i < l->n_params; i++) {
        char name[96];
        snprintf(name, sizeof name, "grad.%s", kiln_tensor_name(l->params[i]));
        near(st, name, kiln_tensor_grad(l->params[i]));
    }
    lora_free(l);
    llama_free(m);
    kiln_ctx_free(ctx);
    kiln_safetensors_close(st);
}

/* the modules a config adapts on a fresh llama, joined by spaces */
static void adapted(lora_config *cfg, char *out, size_t size) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny();
    llama *m = llama_new(ctx, &c, 1);
    lora *l = m ? lora_attach_llama(m, cfg, 1) : NULL;
    *out = '\0';
    for (int i = 0; l && i < l->n_layers; i++)
        snprintf(out + strlen(out), size - strlen(out), "%s%s", i ? " " : "", l->layers[i].module);
    if (!l) snprintf(out, size, "error: %s", kiln_last_error());
    lora_free(l);
    llama_free(m);
    kiln_ctx_free(ctx);
}

KT_TEST(lora_regex_targets_as_peft) {
    char got[1024];
    /* re.fullmatch: anchored at both ends */
    static const struct { const char *re, *want; } cases[] = {
        {".*\\.(q|v)_proj", "model.layers.0.self_attn.q_proj model.layers.0.self_attn.v_proj "
                            "model.layers.1.self_attn.q_proj model.layers.1.self_attn.v_proj"},
        {"model[.]layers[.]1[.]mlp[.].*_proj", "model.layers.1.mlp.gate_proj model.layers.1.mlp.down_proj "
                                               "model.layers.1.mlp.up_proj"},
        {".*layers\\.0\\.self_attn\\.[ko]_proj", "model.layers.0.self_attn.k_proj model.layers.0.self_attn.o_proj"},
        {".*\\.(up|down)_pro", "error: lora_attach: target_modules regex '.*\\.(up|down)_pro' matches none"},
        {"q_proj", "error: lora_attach: target_modules regex 'q_proj' matches none"},
        {".*\\d", "error: lora_attach: target_modules regex '.*\\d': '\\d' means something else in POSIX"},
        {"(?:.*)_proj", "error: lora_attach: target_modules regex '(?:.*)_proj': "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kt_set_context(cases[i].re);
        lora_config cfg = config(2, 16, 0, NULL);
        cfg.target_regex = cases[i].re;
        adapted(&cfg, got, sizeof got);
        KT_CHECK(!strncmp(got, cases[i].want, strlen(cases[i].want)), "got '%s'", got);
        kiln_clear_error();
    }
    kt_set_context(NULL);
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny();
    llama *m = llama_new(ctx, &c, 1);
    KT_NOTNULL(m);
    lora_config both = config(2, 16, 1, all7);
    both.target_regex = ".*";
    KT_EXPECT_ERR(lora_attach_llama(m, &both, 1), KILN_ERR_ARG, "give one form of target_modules");
    KT_CHECK(kiln_tensor_requires_grad(m->layers[0].wq), "a failed attach froze wq");
    /* PEFT's config with the string form, byte for byte, and back */
    lora_config cfg = config(2, 16, 0, NULL);
    cfg.dropout = 0.05, cfg.base_model = "tiny-llama", cfg.target_regex = ".*\\.(q|v)_proj";
    lora *l = lora_attach_llama(m, &cfg, 1);
    KT_NOTNULL(l);
    KT_OK(lora_load_peft(l, "tests/fixtures/peft_regex"));
    double *a0 = nnt_values(l->params[0]);
    KT_CHECK(a0 && a0[1] == 1 / 8.0 + 1 / 64.0, "A[1] = %g", a0 ? a0[1] : NAN);
    free(a0);
    char dir[64] = "/tmp/kiln_peft_re_XXXXXX", p[128], q[128];
    KT_REQUIRE(mkdtemp(dir), "mkdtemp");
    KT_OK(lora_save_peft(l, dir));
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    KT_CHECK(nnt_same_file(p, "tests/fixtures/peft_regex/adapter_config.json"), "%s differs from the fixture's", p);
    snprintf(q, sizeof q, "%s/adapter_model.safetensors", dir);
    remove(p), remove(q), rmdir(dir);
    /* a list's file into a regex's adapters and the reverse: refused by name */
    kiln_clear_error();
    KT_CHECK(lora_load_peft(l, "tests/fixtures/peft") == KILN_ERR_FORMAT &&
                 strstr(kiln_last_error(), "target_modules is a list; these adapters have the regex '.*\\.(q|v)_proj'"),
             "list into regex: %s", kiln_last_error());
    lora_free(l);
    llama_free(m);
    kiln_ctx_free(ctx);
    ctx = kiln_ctx_new();
    m = llama_new(ctx, &c, 1);
    cfg = config(2, 16, 2, (const char *[]){"q_proj", "v_proj"});
    l = lora_attach_llama(m, &cfg, 1);
    KT_NOTNULL(l);
    kiln_clear_error();
    KT_CHECK(lora_load_peft(l, "tests/fixtures/peft_regex") == KILN_ERR_FORMAT &&
                 strstr(kiln_last_error(), "target_modules is the regex '.*\\.(q|v)_proj'; these adapters have a list"),
             "regex into list: %s", kiln_last_error());
    lora_free(l);
    llama_free(m);
    kiln_ctx_free(ctx);
}
