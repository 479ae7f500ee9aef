/* fuzz_llama_config.c — models/llama_files.c's Hugging Face loader on a
 * config.json of the bytes: llama_from_hf and llama_infer_from_hf on a
 * directory whose model.safetensors holds a tiny llama's weights (written
 * once per process by kiln_fuzz_llama_dir), so a config that fits them
 * loads and one that does not is refused. kiln_json_file, the public JSON
 * reader, is what parses it. */
#include "fuzz_util.h"
#include "llama_files.h"

#include <stdlib.h>
#include <string.h>

/* The tiny llama of the seed config (make_seeds.c writes the same). */
const char *kiln_fuzz_llama_config_json(void) {
    return "{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 12, \"num_hidden_layers\": 1,\n"
           " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"vocab_size\": 8,\n"
           " \"max_position_embeddings\": 8, \"rms_norm_eps\": 1e-05, \"rope_theta\": 500.0, \"rope_scaling\": null,\n"
           " \"hidden_act\": \"silu\", \"attention_bias\": false, \"tie_word_embeddings\": false}\n";
}

/* dir/model.safetensors with HF-named random weights of that config. */
static kiln_status write_weights(const char *dir) {
    const int64_t V = 8, D = 8, KV = 4, F = 12;
    struct { const char *name; int64_t r, c; } w[] = {
        {"model.embed_tokens.weight", V, D},
        {"model.layers.0.input_layernorm.weight", D, 0},
        {"model.layers.0.self_attn.q_proj.weight", D, D},
        {"model.layers.0.self_attn.k_proj.weight", KV, D},
        {"model.layers.0.self_attn.v_proj.weight", KV, D},
        {"model.layers.0.self_attn.o_proj.weight", D, D},
        {"model.layers.0.post_attention_layernorm.weight", D, 0},
        {"model.layers.0.mlp.gate_proj.weight", F, D},
        {"model.layers.0.mlp.up_proj.weight", F, D},
        {"model.layers.0.mlp.down_proj.weight", D, F},
        {"model.norm.weight", D, 0},
        {"lm_head.weight", V, D},
    };
    enum { N = sizeof w / sizeof w[0] };
    kiln_ctx *ctx = kiln_ctx_new();
    if (!ctx) return KILN_ERR_OOM;
    kiln_tensor *t[N];
    const char *names[N];
    kiln_status s = KILN_OK;
    for (int i = 0; i < N && !s; i++) {
        t[i] = w[i].c ? kiln_new_2d(ctx, KILN_F32, w[i].r, w[i].c) : kiln_new_1d(ctx, KILN_F32, w[i].r);
        names[i] = w[i].name;
        s = t[i] ? kiln_tensor_fill_uniform(t[i], 10 + (uint64_t)i, -0.5, 0.5) : kiln_last_status();
    }
    char p[300];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (!s) s = kiln_safetensors_save(p, t, names, N, NULL, 0);
    kiln_ctx_free(ctx);
    return s;
}

static char dir[64];

void kiln_fuzz_llama_dir_remove(void) {
    if (!dir[0]) return;
    char p[300];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/config.json", dir);
    unlink(p);
    rmdir(dir);
    dir[0] = 0;
}

/* A directory with the weights, made once per process and removed at
 * exit (or by kiln_fuzz_llama_dir_remove: the test runner's processes
 * leave by _exit); NULL on failure. */
const char *kiln_fuzz_llama_dir(void) {
    if (dir[0]) return dir;
    char tmpl[] = "/tmp/kiln-fuzz-llama-XXXXXX";
    if (!mkdtemp(tmpl)) return NULL;
    memcpy(dir, tmpl, sizeof tmpl);
    atexit(kiln_fuzz_llama_dir_remove);
    if (write_weights(dir)) return NULL;
    return dir;
}

kiln_status kiln_fuzz_llama_config(const uint8_t *data, size_t size) {
    const char *dir = kiln_fuzz_llama_dir();
    if (!dir) return KILN_ERR_IO;
    char p[300];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "wb");
    if (!f) return KILN_ERR_IO;
    size_t w = fwrite(data, 1, size, f);
    if (fclose(f) || w != size) return KILN_ERR_IO;
    kiln_ctx *ctx = kiln_ctx_new();
    if (!ctx) return KILN_ERR_OOM;
    llama *m = llama_from_hf(ctx, dir);
    kiln_status s = m ? KILN_OK : kiln_last_status();
    llama_free(m);
    kiln_ctx_free(ctx);
    if (!(ctx = kiln_ctx_new())) return KILN_ERR_OOM;
    llama_free(llama_infer_from_hf(ctx, dir, KILN_Q8_0));
    kiln_ctx_free(ctx);
    return s;
}

KILN_FUZZ_ENTRY(kiln_fuzz_llama_config)
