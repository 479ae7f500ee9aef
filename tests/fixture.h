/* fixture.h — read the PyTorch reference values in tests/fixtures/<family>.txt.
 *
 * The files are made once by scripts/make_fixtures.py and committed, so the
 * tests need no Python. This reader has no kiln dependency. Format ('#'
 * starts a comment that runs to the end of the line):
 *
 *     case <name>
 *     param <key> <number>                 (0 or more)
 *     tensor <name> <ndim> <d0> ... <dn-1>      (a dim may be 0: no values follow)
 *     <values, whitespace-separated, row-major; inf/-inf/nan allowed>
 *     end
 *
 * Each case holds its inputs (x, w, b, q, k, v, pos, labels; integers are
 * stored as doubles), the expected output y, an upstream gradient gy and
 * g<name> = d sum(y * gy) / d <name> for every float input.
 */
#ifndef KILN_TEST_FIXTURE_H
#define KILN_TEST_FIXTURE_H

#include <stdint.h>

typedef struct fx_tensor {
    char name[32];
    int ndim;
    int64_t shape[6];
    int64_t n; /* element count */
    double *v; /* n values, row-major */
} fx_tensor;

typedef struct fx_case {
    char name[64];
    int nparam;
    char pkey[16][32];
    double pval[16];
    int ntensor;
    fx_tensor t[8];
} fx_case;

typedef struct fx_file {
    int ncase;
    fx_case *cases;
} fx_file;

/* Parse a whole file; NULL with a message (path:line: why) on stderr if it
 * is missing or malformed. Paths are relative to the repo root, where the
 * tests run: "tests/fixtures/softmax.txt". */
fx_file *fx_load(const char *path);
void fx_free(fx_file *f);
/* NULL when there is no such case or tensor (no message: some tensors,
 * such as a bias, are optional). */
const fx_case *fx_find(const fx_file *f, const char *case_name);
const fx_tensor *fx_tensor_get(const fx_case *c, const char *name);
/* The param's value, or dflt when the case does not have it. */
double fx_param(const fx_case *c, const char *key, double dflt);

#endif /* KILN_TEST_FIXTURE_H */
