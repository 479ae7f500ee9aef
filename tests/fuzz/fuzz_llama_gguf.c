/* fuzz_llama_gguf.c — models/llama_files.c's GGUF loaders on the bytes:
 * llama_from_gguf (f32 training model), llama_infer_from_gguf (weights as
 * stored) and llama_gguf_tokenizer. The seed is a tiny llama written by
 * llama_save_gguf (make_seeds.c), so mutations reach the config checks
 * and the weight copies, not only the GGUF header. */
#include "fuzz_util.h"
#include "llama_files.h"

kiln_status kiln_fuzz_llama_gguf(const uint8_t *data, size_t size) {
    const char *path = kiln_fuzz_file(0, data, size);
    if (!path) return KILN_ERR_IO;
    kiln_ctx *ctx = kiln_ctx_new();
    if (!ctx) return KILN_ERR_OOM;
    llama *m = llama_from_gguf(ctx, path);
    kiln_status s = m ? KILN_OK : kiln_last_status();
    llama_free(m);
    kiln_ctx_free(ctx);
    if (!(ctx = kiln_ctx_new())) return KILN_ERR_OOM;
    llama_free(llama_infer_from_gguf(ctx, path, LLAMA_AS_STORED));
    kiln_ctx_free(ctx);
    kiln_tokenizer_free(llama_gguf_tokenizer(path));
    return s;
}

KILN_FUZZ_ENTRY(kiln_fuzz_llama_gguf)
