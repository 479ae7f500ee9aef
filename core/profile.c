/* profile.c — $KILN_PROFILE=1: kernel time per op, a table per backend
 * that ran any (the host's measured on the host's clock around each
 * kernel, a device's on the device: Vulkan timestamps, CUDA events),
 * printed to stderr at exit. Graphs run serially, so plain statics
 * suffice. */
#include "backend.h"

#define PROF_BACKENDS 8

static int profile = -1;
static struct {
    const kiln_backend *b;
    double sec[KILN_OP_COUNT + 1];
    long calls[KILN_OP_COUNT + 1];
} prof[PROF_BACKENDS];

void kiln__profile_print(FILE *f) {
    for (int k = 0; k < PROF_BACKENDS && prof[k].b; k++) {
        double total = 0;
        for (int i = 0; i <= KILN_OP_COUNT; i++) total += prof[k].sec[i];
        bool dev = kiln__is_device(prof[k].b);
        fprintf(f, "kiln profile: %.3f s in kernels on %s%s\n", total, prof[k].b->name, dev ? " (device time)" : "");
        for (int i = 0; i <= KILN_OP_COUNT; i++)
            if (prof[k].calls[i])
                fprintf(f, "  %-20s %9.3f ms %5.1f%% %8ld calls\n", i < KILN_OP_COUNT ? kiln__op_table[i].name : "(fused chains)",
                        1e3 * prof[k].sec[i], 100 * prof[k].sec[i] / (total > 0 ? total : 1), prof[k].calls[i]);
    }
}

static void print_at_exit(void) { kiln__profile_print(stderr); }

bool kiln__profiling(void) {
    if (profile < 0) {
        const char *env = getenv("KILN_PROFILE");
        profile = env && *env && strcmp(env, "0");
        if (profile) atexit(print_at_exit);
    }
    return profile;
}

void kiln__profile_add(const kiln_backend *b, int row, double sec, long calls) {
    if (row < 0 || row > KILN_OP_COUNT) return;
    int k = 0;
    while (k < PROF_BACKENDS && prof[k].b && prof[k].b != b) k++;
    if (k == PROF_BACKENDS) return; /* core registers at most 8 backends */
    prof[k].b = b;
    prof[k].sec[row] += sec > 0 ? sec : 0;
    prof[k].calls[row] += calls;
}

void kiln__profile_get(const kiln_backend *b, int row, double *sec, long *calls) {
    *sec = 0, *calls = 0;
    for (int k = 0; k < PROF_BACKENDS && prof[k].b && row >= 0 && row <= KILN_OP_COUNT; k++)
        if (prof[k].b == b) *sec = prof[k].sec[row], *calls = prof[k].calls[row];
}
