/* test_examples_gpt.c — examples/gpt end to end, on a tiny model: --help,
 * a few steps with a checkpoint, and a run stopped half way and resumed
 * that ends bit for bit where the uninterrupted run ends (checkpoint bytes
 * and validation loss). The example's main() is compiled in here under
 * another name, so this runs in every build the suite runs in. One thread:
 * a tiny model gains nothing from more, and a busy machine loses much. */
#define main gpt_example_main
#include "../examples/gpt/main.c"
#undef main

#include "kt.h"

#include <fcntl.h>
#include <sys/stat.h>

/* Run the example with stdout going to out_path; its exit status. */
static int run_example(const char *out_path, char **argv) {
    int argc = 0;
    while (argv[argc]) argc++;
    fflush(stdout);
    int saved = dup(1), fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (saved < 0 || fd < 0) return -1;
    dup2(fd, 1);
    close(fd);
    int r = gpt_example_main(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    return r;
}

/* The whole file, NUL-terminated (NULL if unreadable); *n its size. */
static char *slurp(const char *path, long *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)*n + 1);
    if (b && fread(b, 1, (size_t)*n, f) != (size_t)*n) {
        free(b);
        b = NULL;
    }
    if (b) b[*n] = 0;
    fclose(f);
    return b;
}

/* The "validation: X nats/byte = Y bits/byte" part of a run's output. */
static void validation_line(const char *out, char *dst, size_t n) {
    const char *v = strstr(out, "validation: ");
    const char *end = v ? strstr(v, " over ") : NULL;
    snprintf(dst, n, "%.*s", end ? (int)(end - v) : 0, end ? v : "");
}

KT_TEST(examples_gpt_help) {
    char dir[] = "/tmp/kiln-gpt-XXXXXX", out[64];
    KT_REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(out, sizeof out, "%s/help", dir);
    KT_CHECK(run_example(out, (char *[]){"gpt", "--help", NULL}) == 0, "--help fails");
    long n;
    char *text = slurp(out, &n);
    KT_CHECK(text && strstr(text, "--resume") && strstr(text, "--minutes") && strstr(text, "--top-k"), "help: %s",
             text ? text : "(none)");
    free(text);
    remove(out);
    rmdir(dir);
}

KT_TEST(examples_gpt_resume_continues_identically) {
    char dir[] = "/tmp/kiln-gpt-XXXXXX";
    KT_REQUIRE(mkdtemp(dir), "mkdtemp");
    char full[64], half[64], resumed[64], out_full[64], out_half[64], out_resumed[64];
    snprintf(full, sizeof full, "%s/full.safetensors", dir);
    snprintf(half, sizeof half, "%s/half.safetensors", dir);
    snprintf(resumed, sizeof resumed, "%s/resumed.safetensors", dir);
    snprintf(out_full, sizeof out_full, "%s/full.txt", dir);
    snprintf(out_half, sizeof out_half, "%s/half.txt", dir);
    snprintf(out_resumed, sizeof out_resumed, "%s/resumed.txt", dir);
#define TINY "--layers", "1", "--width", "32", "--heads", "2", "--seq", "16", "--batch", "4", "--warmup", "2", \
             "--eval-every", "3", "--eval-subset", "2", "--final-subset", "--lr", "0.01", "--threads", "1"
    /* 6 steps straight; 6 steps stopped after 3 (a checkpoint every 2
     * steps too); then the rest from that checkpoint */
    KT_REQUIRE(run_example(out_full, (char *[]){"gpt", TINY, "--steps", "6", "--save", full, "--sample", "8", NULL}) == 0,
               "the full run fails");
    KT_REQUIRE(run_example(out_half, (char *[]){"gpt", TINY, "--steps", "6", "--stop-at", "3", "--save-every", "2",
                                                "--save", half, "--sample", "0", NULL}) == 0,
               "the stopped run fails");
    KT_REQUIRE(run_example(out_resumed, (char *[]){"gpt", TINY, "--resume", half, "--save", resumed, "--sample", "8",
                                                   NULL}) == 0,
               "the resumed run fails");
#undef TINY
    long na, nb;
    char *a = slurp(full, &na), *b = slurp(resumed, &nb);
    KT_CHECK(a && b && na == nb && !memcmp(a, b, (size_t)na), "the resumed checkpoint differs (%ld vs %ld bytes)", na,
             nb);
    free(a);
    free(b);
    char *ta = slurp(out_full, &na), *tb = slurp(out_resumed, &nb), *th = slurp(out_half, &nb);
    KT_REQUIRE(ta && tb && th, "no output");
    char va[128], vb[128];
    validation_line(ta, va, sizeof va);
    validation_line(tb, vb, sizeof vb);
    KT_CHECK(va[0] && !strcmp(va, vb), "validation '%s' vs resumed '%s'", va, vb);
    KT_CHECK(strstr(th, "step 3 of 6") && strstr(tb, "resuming") && strstr(tb, "at step 3 of 6"), "half: %s\nresumed: %s",
             th, tb);
    /* the sample after the same weights and seed is the same too */
    const char *sa = strstr(ta, "--- sample"), *sb = strstr(tb, "--- sample");
    KT_CHECK(sa && sb && !strncmp(sa, sb, 60), "samples differ");
    free(ta);
    free(tb);
    free(th);
    const char *files[] = {full, half, resumed, out_full, out_half, out_resumed};
    for (int i = 0; i < 6; i++) remove(files[i]);
    rmdir(dir);
}
