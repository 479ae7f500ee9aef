/* args.h — a tiny command-line option parser for the examples.
 *
 * Options are `--name value` (or `--name=value`) and `--flag`; each writes
 * a typed variable of the caller, whose value before parsing is the default
 * that --help shows. An unknown option, a missing or malformed value, or a
 * stray argument is an error: the message and the usage go to stderr.
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
    const char *choices; /* ARGS_CHOICE: "cpu|vulkan" */
    bool positive;       /* numbers: must be > 0 */
} args_opt;

enum { ARGS_OK = 0, ARGS_HELP = 1, ARGS_ERROR = -1 };

/* Parse argv[1..argc) into the options. Returns ARGS_OK, ARGS_HELP (after
 * printing the help to stdout for --help or -h) or ARGS_ERROR (after
 * printing why and the usage to stderr). Never exits. */
int args_parse(const char *prog, const char *summary, const args_opt *opts, int n, int argc, char **argv);

/* The generated help: usage line, summary, one line per option with its
 * default. */
void args_usage(FILE *f, const char *prog, const char *summary, const args_opt *opts, int n);

#endif
