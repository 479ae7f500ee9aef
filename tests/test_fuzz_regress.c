/* test_fuzz_regress.c — every input under tests/fuzz/regress/<target>/
 * (each one crashed, leaked, ran out of memory or ran for seconds in a fuzz
 * target before its fix) replayed through the same target function as
 * make fuzz runs (tests/fuzz/fuzz_<target>.c), in this build without the
 * sanitizers: each must come back, accepted or refused with a message,
 * within the test's time. Each test runs in its own process, so a crash
 * fails it. */
#include "kt.h"
#include "fuzz/fuzz_util.h"

#include <dirent.h>
#include <time.h>

static const struct {
    const char *name;
    kiln_status (*fn)(const uint8_t *, size_t);
} targets[] = {
    {"safetensors", kiln_fuzz_safetensors},       {"gguf", kiln_fuzz_gguf},
    {"idx", kiln_fuzz_idx},                       {"idx_gz", kiln_fuzz_idx_gz},
    {"tokenizer_json", kiln_fuzz_tokenizer_json}, {"checkpoint", kiln_fuzz_checkpoint},
    {"llama_gguf", kiln_fuzz_llama_gguf},         {"llama_config", kiln_fuzz_llama_config},
    {"llama_index", kiln_fuzz_llama_index},
};

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *b = NULL;
    size_t cap = 0;
    *n = 0;
    for (;;) {
        if (*n == cap) {
            uint8_t *g = realloc(b, cap = cap ? 2 * cap : 4096);
            if (!g) break;
            b = g;
        }
        size_t r = fread(b + *n, 1, cap - *n, f);
        if (!r) break;
        *n += r;
    }
    fclose(f);
    return b;
}

KT_TEST(fuzz_regress_inputs_fail_cleanly) {
    int replayed = 0;
    for (size_t k = 0; k < sizeof targets / sizeof targets[0]; k++) {
        char dir[256];
        snprintf(dir, sizeof dir, "tests/fuzz/regress/%s", targets[k].name);
        DIR *d = opendir(dir);
        if (!d) continue; /* no input of this target has failed yet */
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            char path[600];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            size_t n;
            uint8_t *b = read_all(path, &n);
            KT_CHECK(b, "cannot read %s", path);
            if (!b) continue;
            kiln_clear_error();
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            kiln_status s = targets[k].fn(b, n);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            const char *msg = kiln_last_error();
            KT_CHECK(s == KILN_OK || (msg && *msg), "%s: %s with no message", path, kiln_status_name(s));
            KT_CHECK(sec < 2.0, "%s: took %.2f s", path, sec);
            free(b);
            replayed++;
        }
        closedir(d);
    }
    kiln_fuzz_llama_dir_remove();
    KT_CHECK(replayed > 0, "no inputs under tests/fuzz/regress/ (run from the repository root)");
}
