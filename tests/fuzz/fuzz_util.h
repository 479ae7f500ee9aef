/* fuzz_util.h — what the fuzz targets (tests/fuzz/fuzz_*.c) share. Each
 * target is a function kiln_fuzz_<name>(data, size) that hands the bytes
 * to a public loader and returns its status; built with -DKILN_FUZZ_MAIN
 * (make fuzz) it also defines libFuzzer's entry point, and the regular
 * suite (tests/test_fuzz_regress.c) calls the same function on the
 * inputs under tests/fuzz/regress/<name>/.
 *
 * The loaders take paths, so the bytes go into a memfd (an anonymous file
 * in memory) named by /proc/self/fd/N: the loaders open, stat, map and
 * read it as any regular file, with no disk traffic per input. */
#ifndef KILN_FUZZ_UTIL_H
#define KILN_FUZZ_UTIL_H

#include "kiln.h"

#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* A path holding exactly data[0..size) (slot: one file per slot, so a
 * target can have two files at once); NULL if the memfd failed. */
static inline const char *kiln_fuzz_file(int slot, const uint8_t *data, size_t size) {
    static int fd[2] = {-1, -1};
    static char path[2][64];
    if (fd[slot] < 0) {
        fd[slot] = memfd_create("kiln-fuzz", MFD_CLOEXEC);
        if (fd[slot] < 0) return NULL;
        snprintf(path[slot], sizeof path[slot], "/proc/self/fd/%d", fd[slot]);
    }
    if (ftruncate(fd[slot], 0)) return NULL;
    for (size_t at = 0; at < size;) {
        ssize_t w = pwrite(fd[slot], data + at, size - at, (off_t)at);
        if (w <= 0) return NULL;
        at += (size_t)w;
    }
    return path[slot];
}

/* The targets: each returns the first loader's status (KILN_OK when the
 * input loaded, else the error it was refused with). */
kiln_status kiln_fuzz_safetensors(const uint8_t *data, size_t size);
kiln_status kiln_fuzz_gguf(const uint8_t *data, size_t size);
kiln_status kiln_fuzz_idx(const uint8_t *data, size_t size);
kiln_status kiln_fuzz_idx_gz(const uint8_t *data, size_t size);
kiln_status kiln_fuzz_tokenizer_json(const uint8_t *data, size_t size);
kiln_status kiln_fuzz_checkpoint(const uint8_t *data, size_t size);
/* fuzz_checkpoint.c's model (its context in *ctx), for the seeds too */
kiln_optim *kiln_fuzz_checkpoint_model(kiln_ctx **ctx);
kiln_status kiln_fuzz_llama_gguf(const uint8_t *data, size_t size);
kiln_status kiln_fuzz_llama_config(const uint8_t *data, size_t size);
kiln_status kiln_fuzz_llama_index(const uint8_t *data, size_t size);
/* fuzz_llama_config.c's seed config and its weights' directory */
const char *kiln_fuzz_llama_config_json(void);
const char *kiln_fuzz_llama_dir(void);
void kiln_fuzz_llama_dir_remove(void);

#ifdef KILN_FUZZ_MAIN
#define KILN_FUZZ_ENTRY(fn)                                                  \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);            \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {           \
        fn(data, size);                                                      \
        return 0;                                                            \
    }
#else
#define KILN_FUZZ_ENTRY(fn)
#endif

#endif
