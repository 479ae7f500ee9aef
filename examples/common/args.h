/* args.h — a tiny command-line option parser for the examples.
 *
 * Options are `--name value` (or `--name=value`) and `--flag`; each writes
 * a typed variable of the caller, whose value before parsing is the default
 * that --help shows. Numbers are never negative (no example takes a
 * negative count, rate or size); .positive excludes 0 too. An unknown
 * option, a missing or malformed value, or a stray argument is an error
 * that names the option and the value: the message and the usage go to
 * stderr, and an example exits with status 2. A check the table cannot
 * express (a range, one option against another) reports the same way
 * with args_reject.
 *
 *     int epochs = 3;  float lr = 1e-3f;  const char *backend = "cpu";  bool quick = false;
 *     args_opt opts[] = {
 *         {"epochs", ARGS_INT, &epochs, "N", "passes over the training set", .positive = true},
 *         {"lr", ARGS_FLOAT, &lr, "X", "learning rate", .positive = true},
 *         {"backend", ARGS_CHOICE, &backend, "B", "where the graphs run", .choices = "cpu|vulkan|cuda"},
 *         {"quick", ARGS_FLAG, &quick, NULL, "a short run", NULL, false},
 *     };
 *     // the two fields after the help are optional when named (.choices,
 *     // .positive); unnamed, -Wextra wants them spelled out
 *     int r = args_parse("fashion", "Train a classifier on Fashion-MNIST.", opts, 4, argc, argv);
 *     if (r != ARGS_OK) return r == ARGS_HELP ? 0 : 2;
 */
#ifndef ARGS_H
#define ARGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum args_type {
    ARGS_FLAG,   /* bool: present means true */
    ARGS_INT,    /* int */
    ARGS_U64,    /* uint64_t, e.g. a seed */
    ARGS_FLOAT,  /* float */
    ARGS_DOUBLE, /* double */
    ARGS_STRING, /* const char * (points into argv) */
    ARGS_CHOICE  /* const char *, one of 'choices' ("a|b|c") */
} args_type;

typedef struct args_opt {
    const char *name;    /* without the dashes */
    args_type type;
    void *value;
    const char *meta;    /* the value's placeholder in --help, e.g. "N" */
    const char *help;
    const char *choices; /* ARGS_CHOICE: "cpu|vulkan|cuda" */
    bool positive;       /* numbers: must be > 0, not only >= 0 */
} args_opt;

enum { ARGS_OK = 0, ARGS_HELP = 1, ARGS_ERROR = -1 };

/* Parse argv[1..argc) into the options. Returns ARGS_OK, ARGS_HELP (after
 * printing the help to stdout for --help or -h) or ARGS_ERROR (after
 * printing why and the usage to stderr). Never exits. */
int args_parse(const char *prog, const char *summary, const args_opt *opts, int n, int argc, char **argv);

/* The generated help: usage line, summary, one line per option with its
 * default. */
void args_usage(FILE *f, const char *prog, const char *summary, const args_opt *opts, int n);

/* After args_parse: the option named `name` (without dashes) holds a value
 * the example cannot take. Prints "PROG: bad value V for --NAME (expected
 * WHAT)" with WHAT from the printf format, and where the options are
 * listed, to stderr; returns ARGS_ERROR.
 *     if (width % heads) return args_reject("gpt", opts, n, "heads", "a divisor of --width %d", width), 2; */
int args_reject(const char *prog, const args_opt *opts, int n, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
