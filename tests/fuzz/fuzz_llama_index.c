/* fuzz_llama_index.c — the sharded Hugging Face layout: the bytes are a
 * model.safetensors.index.json (its weight_map names each tensor's shard)
 * beside the seed config.json and the tiny llama's model.safetensors in
 * kiln_fuzz_llama_dir, loaded by llama_from_hf and llama_infer_from_hf.
 * A shard name that leaves the directory, a missing shard or tensor, or a
 * map that is not an object of strings must be refused cleanly. The index
 * is removed after each input, so the config target sees one file. */
#include "fuzz_util.h"
#include "llama_files.h"

#include <string.h>

kiln_status kiln_fuzz_llama_index(const uint8_t *data, size_t size) {
    const char *dir = kiln_fuzz_llama_dir();
    if (!dir) return KILN_ERR_IO;
    const char *cfg = kiln_fuzz_llama_config_json();
    char p[300], q[300];
    snprintf(p, sizeof p, "%s/config.json", dir);
    snprintf(q, sizeof q, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(p, "wb");
    if (!f) return KILN_ERR_IO;
    size_t w = fwrite(cfg, 1, strlen(cfg), f);
    if (fclose(f) || w != strlen(cfg)) return KILN_ERR_IO;
    if (!(f = fopen(q, "wb"))) return KILN_ERR_IO;
    w = fwrite(data, 1, size, f);
    if (fclose(f) || w != size) return unlink(q), KILN_ERR_IO;
    kiln_ctx *ctx = kiln_ctx_new();
    if (!ctx) return unlink(q), KILN_ERR_OOM;
    llama *m = llama_from_hf(ctx, dir);
    kiln_status s = m ? KILN_OK : kiln_last_status();
    llama_free(m);
    kiln_ctx_free(ctx);
    if ((ctx = kiln_ctx_new())) {
        llama_free(llama_infer_from_hf(ctx, dir, KILN_Q8_0));
        kiln_ctx_free(ctx);
    }
    unlink(q);
    return s;
}

KILN_FUZZ_ENTRY(kiln_fuzz_llama_index)
