/* test_examples_compare.c — examples/optim-compare end to end: --help, and a
 * tiny comparison (a few steps, both tasks) that must write its CSV files
 * and PNG charts.
 *
 * The example's sources are compiled into this file (its main renamed)
 * rather than run as a program: the cross builds (BLAS=0, ARM64 under
 * qemu) build the test binary but not the examples, and qemu-user could
 * not exec them anyway.
 */
#include "kt.h"

#define main optim_compare_main
#include "../examples/optim-compare/main.c"
#undef main
#include "../examples/optim-compare/optimizers.c"
#include "../examples/optim-compare/report.c"
#include "../examples/optim-compare/runs.c"

#include <fcntl.h>

/* Run the example with stdout and stderr into path; returns its exit
 * status. */
static int run_example(const char *out_path, int argc, char **argv) {
    fflush(stdout);
    fflush(stderr);
    int saved1 = dup(1), saved2 = dup(2), fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (saved1 < 0 || saved2 < 0 || fd < 0) return -1;
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    int rc = optim_compare_main(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved1, 1);
    dup2(saved2, 2);
    close(saved1);
    close(saved2);
    return rc;
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 20);
    *n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    if (buf) buf[*n] = '\0';
    fclose(f);
    return buf;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

KT_TEST(examples_compare_help) {
    char dir[] = "/tmp/kiln-compare-XXXXXX", log[64];
    KT_REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(log, sizeof log, "%s/help.txt", dir);
    char *argv[] = {"optim-compare", "--help", NULL};
    KT_CHECK(run_example(log, 2, argv) == 0, "--help exit status");
    size_t n;
    char *text = slurp(log, &n);
    KT_REQUIRE(text, "no help");
    KT_CHECK(strstr(text, "--quick") && strstr(text, "--task") && strstr(text, "--out"), "help: %s", text);
    free(text);
    remove(log);
    rmdir(dir);
}

KT_TEST(examples_compare_tiny_run_writes_csv_and_png) {
    char dir[] = "/tmp/kiln-compare-XXXXXX", log[64], out[64], path[128];
    KT_REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(log, sizeof log, "%s/log.txt", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    /* 3 steps per run, no sweep, 2 seeds, evaluation on 100 images (a
     * partial last batch) and about 100 windows of text. Without zlib the
     * packaged Fashion-MNIST cannot be read: the GPT alone, and the CNN
     * must fail saying so. */
#ifdef KILN_ZLIB
    const char *task = "both";
    const int n_tasks = 2;
#else
    const char *task = "gpt";
    const int n_tasks = 1;
    char *cnn_argv[] = {"optim-compare", "--task", "cnn", "--out", out, NULL};
    KT_CHECK(run_example(log, 5, cnn_argv) == 1, "--task cnn without zlib should fail");
#endif
    char *argv[] = {"optim-compare", "--quick", "--steps", "3", "--sweep", "1", "--seeds", "2", "--eval", "100",
                    "--threads", "1", "--task", (char *)task, "--out", out, NULL};
    int rc = run_example(log, 16, argv);
    size_t n;
    char *text = slurp(log, &n);
    KT_REQUIRE(text, "no output");
    KT_CHECK(rc == 0, "exit status %d: %s", rc, text);
    KT_CHECK(strstr(text, "optimizer") && strstr(text, "APOLLO-Mini") && strstr(text, "run-to-run noise"),
             "output: %s", text);
    free(text);
    static const char *const files[] = {"results-%s.csv", "sweep-%s.csv", "noise-%s.csv", "curves-%s.csv",
                                        "loss-%s.png", "memory-%s.png"};
    static const char *const tasks[] = {"gpt", "cnn"};
    for (int k = 0; k < n_tasks; k++)
        for (int i = 0; i < 6; i++) {
            char name[32];
            snprintf(name, sizeof name, files[i], tasks[k]);
            snprintf(path, sizeof path, "%s/%s", out, name);
            char *body = slurp(path, &n);
            KT_CHECK(body && n > 8, "%s missing or empty", name);
            if (!body) continue;
            if (strstr(name, ".png")) KT_CHECK(!memcmp(body, "\x89PNG", 4), "%s is not a PNG", name);
            if (!strncmp(name, "results", 7)) KT_CHECK(count_lines(body) == 11, "%s: %d lines", name, count_lines(body));
            if (!strncmp(name, "curves", 6)) KT_CHECK(count_lines(body) == 4, "%s: %d lines", name, count_lines(body));
            free(body);
            remove(path);
        }
    remove(log);
    rmdir(out);
    rmdir(dir);
}
