/* test_common.c — examples/common: the option parser, the progress line,
 * the CSV writer and the optimizers by name. */
#include "args.h"
#include "csv.h"
#include "kt.h"
#include "optimizers.h"
#include "output.h"
#include "progress.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* Run args_parse (or, argc 0, args_reject of argv[0] with the expectation
 * argv[1]) with stdout and stderr into a scratch file; return its result
 * and what it printed. */
static int parse_quiet(const args_opt *o, int n, int argc, char **argv, char *out, size_t outn) {
    fflush(stdout), fflush(stderr);
    FILE *tmp = tmpfile();
    int so = dup(1), se = dup(2);
    dup2(fileno(tmp), 1), dup2(fileno(tmp), 2);
    int r = argc ? args_parse("prog", "A test program.", o, n, argc, argv)
                 : args_reject("prog", o, n, argv[0], "at most %d", 4);
    fflush(stdout), fflush(stderr);
    dup2(so, 1), dup2(se, 2);
    close(so), close(se);
    rewind(tmp);
    size_t got = fread(out, 1, outn - 1, tmp);
    out[got] = '\0';
    fclose(tmp);
    return r;
}

KT_TEST(args_parse_types_and_errors) {
    int epochs = 3;
    float lr = 1e-3f;
    uint64_t seed = 1;
    double mom = 0.9;
    const char *backend = "cpu", *out = "run.csv";
    bool quick = false;
    args_opt o[] = {
        {"epochs", ARGS_INT, &epochs, "N", "passes over the data", .positive = true},
        {"lr", ARGS_FLOAT, &lr, "X", "learning rate", .positive = true},
        {"seed", ARGS_U64, &seed, "N", "seed", NULL, false},
        {"momentum", ARGS_DOUBLE, &mom, "X", "momentum", NULL, false},
        {"backend", ARGS_CHOICE, &backend, "B", "where to run", .choices = "cpu|vulkan|cuda"},
        {"out", ARGS_STRING, &out, "FILE", "results", NULL, false},
        {"quick", ARGS_FLAG, &quick, NULL, "a short run", NULL, false},
    };
    const int n = 7;
    char text[4096];
    char *ok[] = {"prog", "--epochs", "5", "--lr=0.01", "--seed", "18446744073709551615", "--momentum", "0",
                  "--backend", "vulkan", "--quick", "--out", "x.csv"};
    KT_CHECK(parse_quiet(o, n, 13, ok, text, sizeof text) == ARGS_OK, "parse: %s", text);
    KT_CHECK(epochs == 5 && fabsf(lr - 0.01f) < 1e-9f && seed == UINT64_MAX && mom == 0 && !strcmp(backend, "vulkan") &&
                 quick && !strcmp(out, "x.csv"),
             "values %d %g %llu %g %s %d %s", epochs, (double)lr, (unsigned long long)seed, mom, backend, quick, out);
    char *help[] = {"prog", "--help"};
    KT_CHECK(parse_quiet(o, n, 2, help, text, sizeof text) == ARGS_HELP, "--help");
    KT_CHECK(strstr(text, "usage: prog") && strstr(text, "--epochs N") && strstr(text, "(default 5)") &&
                 strstr(text, "cpu|vulkan|cuda") && strstr(text, "--quick") && strstr(text, "A test program."),
             "help text:\n%s", text);
    struct {
        int argc;
        char *argv[4];
        const char *msg;
    } bad[] = {
        {2, {"prog", "--nope"}, "unknown option '--nope'"},
        {2, {"prog", "--epochs"}, "needs a value"},
        {3, {"prog", "--epochs", "x3"}, "bad value x3 for --epochs"},
        {3, {"prog", "--epochs", "0"}, "bad value 0 for --epochs (expected an integer > 0)"},
        {3, {"prog", "--lr", "-1"}, "bad value"},
        {3, {"prog", "--momentum", "-0.5"}, "bad value -0.5 for --momentum (expected a number >= 0)"},
        {3, {"prog", "--backend", "tpu"}, "cpu|vulkan|cuda"},
        {3, {"prog", "--seed", "-4"}, "bad value"},
        {2, {"prog", "--quick=1"}, "takes no value"},
        {2, {"prog", "stray"}, "unexpected argument 'stray'"},
        {3, {"prog", "--momentum", "nan"}, "bad value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int r = parse_quiet(o, n, bad[i].argc, bad[i].argv, text, sizeof text);
        KT_CHECK(r == ARGS_ERROR && strstr(text, bad[i].msg) && strstr(text, "usage: prog"), "case %zu: %d\n%s", i, r,
                 text);
    }
    /* a check of the example's own names the option and its value as parsed */
    KT_CHECK(parse_quiet(o, n, 0, (char *[]){"epochs", NULL}, text, sizeof text) == ARGS_ERROR &&
                 strstr(text, "prog: bad value 5 for --epochs (expected at most 4); prog --help lists the options"),
             "args_reject: %s", text);
    KT_CHECK(parse_quiet(o, n, 0, (char *[]){"out", NULL}, text, sizeof text) == ARGS_ERROR &&
                 strstr(text, "bad value 'x.csv' for --out"),
             "args_reject: %s", text);
}

KT_TEST(progress_plain_lines) {
    FILE *f = tmpfile();
    progress p;
    progress_start(&p, f, "epoch 1/2", 50, "img");
    for (int i = 1; i <= 50; i++) progress_update(&p, i, 1.0 / i, 64);
    progress_finish(&p);
    rewind(f);
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
    /* not a terminal: one line per tenth, plus the final one; no \r */
    KT_CHECK(lines >= 5 && lines <= 11 && !strchr(text, '\r'), "%d lines:\n%s", lines, text);
    KT_CHECK(strstr(text, "epoch 1/2 [####################] 50/50 100%  loss 0.0200") && strstr(text, "img/s") &&
                 strstr(text, "ETA 0:00") && strstr(text, "elapsed"),
             "final line:\n%s", text);
}

KT_TEST(csv_quotes_fields) {
    char path[] = "/tmp/kiln-csv-XXXXXX";
    close(mkstemp(path));
    csv *c = csv_open(path);
    KT_NOTNULL(c);
    csv_str(c, "name"), csv_str(c, "a,b"), csv_str(c, "say \"hi\""), csv_row(c);
    csv_num(c, 0.25), csv_num(c, NAN), csv_int(c, -3), csv_row(c);
    KT_CHECK(csv_close(c) == 0, "close");
    FILE *f = fopen(path, "r");
    char text[256];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    unlink(path);
    KT_CHECK(!strcmp(text, "name,\"a,b\",\"say \"\"hi\"\"\"\n0.25,,-3\n"), "got:\n%s", text);
    KT_CHECK(csv_open("/nonexistent/dir/x.csv") == NULL, "bad path");
}

/* Every optimizer by name: names, display names, the choices string, the
 * 8-bit twins, and a constructor that honours lr and weight decay. */
KT_TEST(examples_common_optimizers_by_name) {
    KT_CHECK(!strcmp(optimizer_choices(),
                     "sgd|adam|adamw|adamw8bit|lion|lion8bit|galore|galore8bit|apollo|apollo-mini"),
             "choices: %s", optimizer_choices());
    for (int i = 0; i < OPT_COUNT; i++) KT_CHECK(optimizer_parse(optimizer_name(i)) == i, "%d", i);
    KT_CHECK(optimizer_parse("adamw-8bit") == -1 && optimizer_parse(NULL) == -1, "unknown names");
    KT_CHECK(!strcmp(optimizer_title(OPT_SGD), "SGD-momentum") && !strcmp(optimizer_title(OPT_LION8), "Lion-8bit") &&
                 !strcmp(optimizer_title(OPT_APOLLO_MINI), "APOLLO-Mini") && !strcmp(optimizer_title(OPT_COUNT), "?"),
             "titles");
    KT_CHECK(optimizer_twin(OPT_ADAMW8) == OPT_ADAMW && optimizer_twin(OPT_LION8) == OPT_LION &&
                 optimizer_twin(OPT_GALORE8) == OPT_GALORE && optimizer_twin(OPT_ADAM) == -1 &&
                 optimizer_twin(OPT_APOLLO_MINI) == -1,
             "twins");
    for (int i = 0; i < OPT_COUNT; i++) {
        kiln_ctx *ctx = kiln_ctx_new();
        KT_REQUIRE(ctx, "ctx");
        kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){8, 6});
        KT_REQUIRE(w, "param");
        kiln_optim *opt = optimizer_new(ctx, i, &(optimizer_settings){.lr = 0.25f, .weight_decay = 0.5f, .rank = 2});
#ifndef KILN_BLAS
        if (!opt && (i == OPT_GALORE || i == OPT_GALORE8)) { /* no LAPACK */
            kiln_ctx_free(ctx);
            continue;
        }
#endif
        KT_CHECK(opt, "%s: %s", optimizer_name(i), kiln_last_error());
        if (opt) KT_CHECK(kiln_optim_lr(opt) == 0.25f, "%s: lr %g", optimizer_name(i), (double)kiln_optim_lr(opt));
        kiln_ctx_free(ctx);
    }
    kiln_ctx *ctx = kiln_ctx_new();
    KT_CHECK(!optimizer_new(ctx, OPT_COUNT, &(optimizer_settings){.lr = 1}), "no optimizer past the ten");
    kiln_ctx_free(ctx);
}

/* Files in dir, . and .. aside. */
static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

/* Output paths checked before any work: a writable place passes and is
 * left as it was; a missing directory, a path under a file and a
 * directory in the file's place fail. (As root, permissions would not
 * show: these fail for anyone.) */
KT_TEST(examples_common_output_paths) {
    char dir[] = "/tmp/kiln-out-XXXXXX", file[64], under[96], nested[96];
    KT_REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(file, sizeof file, "%s/a.safetensors", dir);
    snprintf(under, sizeof under, "%s/x.png", file);
    snprintf(nested, sizeof nested, "%s/one/two", dir);
    fflush(stderr);
    int se = dup(2), devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 2);
    bool fresh = output_file("t", "--save", file);
    bool missing_ok = count_files(dir) == 0;
    FILE *f = fopen(file, "w");
    if (f) fclose(f);
    bool existing = output_file("t", "--save", file), no_dir = output_file("t", "--save", "/nonexistent/dir/a.bin");
    bool under_file = output_file("t", "--plot", under), is_dir = output_file("t", "--save", dir);
    bool made = output_dir("t", "--out", nested), dir_under_file = output_dir("t", "--out", under);
    bool empty = output_file("t", "--save", "");
    fflush(stderr);
    dup2(se, 2);
    close(se), close(devnull);
    struct stat st;
    KT_CHECK(fresh && missing_ok && existing, "a writable path: %d %d %d", fresh, missing_ok, existing);
    KT_CHECK(!no_dir && !under_file && !is_dir && !empty, "bad paths pass: %d %d %d %d", no_dir, under_file, is_dir,
             empty);
    KT_CHECK(made && stat(nested, &st) == 0 && S_ISDIR(st.st_mode) && count_files(nested) == 0 && !dir_under_file,
             "output_dir: %d %d", made, dir_under_file);
    remove(file);
    rmdir(nested);
    snprintf(nested, sizeof nested, "%s/one", dir);
    rmdir(nested);
    rmdir(dir);
}

/* Generated text on a terminal: printable UTF-8, newlines and tabs as
 * they are; C0 and C1 controls, DEL, stray, overlong and unfinished
 * sequences as \xNN, byte by byte as sampled or all at once. */
KT_TEST(examples_common_text_escapes_controls) {
    const char in[] = "a\x1b[2Jb\r\n\t\xc3\xa9\xe2\x82\xac\x7f\xc2\x9b\xff\xc0\xaf\xe2\x82z"
                      "\xed\xa0\x80\xf0\x9f\x98\x80\xe2\x82";
    const char want[] = "a\\x1b[2Jb\\x0d\n\t\xc3\xa9\xe2\x82\xac\\x7f\\xc2\\x9b\\xff\\xc0\\xaf\\xe2\\x82z"
                        "\\xed\\xa0\\x80\xf0\x9f\x98\x80\\xe2\\x82";
    char got[512];
    FILE *f = fmemopen(got, sizeof got, "w");
    KT_REQUIRE(f, "fmemopen");
    text_write(f, in, sizeof in - 1);
    fclose(f);
    KT_CHECK(!strcmp(got, want), "got\n%s\nwant\n%s", got, want);
    bool control = false;
    for (const char *p = got; *p; p++) control |= ((unsigned char)*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f;
    KT_CHECK(!control, "a control byte passed");
}
