/* test_backend_profile.c — $KILN_PROFILE=1 on a device: every op of a
 * device graph gets device time (Vulkan timestamp queries, vk_profile.c;
 * CUDA events, cu_profile.c) in the device's table, one call per compute,
 * with no more time than the wall clock's; the results are the CPU's, bit
 * for bit; more steps than the profile's pairs hold before a collect; a
 * step whose recording submits the work before it (Vulkan) counted once;
 * a fused chain one step in the chains' row; a graph replayed (a CUDA
 * graph, a recorded command buffer) timed at every compute as node by
 * node, one recording and a replay per compute after the second. */
#include "kt_device.h"
#include "backend.h"

#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* y = sum(relu(a b + c) * d) over a chain of n adds of c: matmul, add, relu, mul, sum */
static kiln_tensor *build(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *b, kiln_tensor *c, int n_adds) {
    kiln_tensor *h = kiln_matmul(ctx, a, b);
    for (int i = 0; i < n_adds; i++) h = kiln_add(ctx, h, c);
    return kiln_sum_all(ctx, kiln_mul(ctx, kiln_relu(ctx, h), a));
}

/* small integers in [-k, k]: every sum exact, in any order */
static kiln_status fill(kiln_tensor *t, int k) {
    int64_t n = kiln_tensor_numel(t);
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)((i * 7919) % (2 * k + 1) - k);
    kiln_status s = kiln_tensor_set_f32(t, v, n);
    free(v);
    return s;
}

static void run(kiln_backend *be, int n_adds, int computes, float *out, double *wall, kiln_graph_stats *st) {
    kiln_ctx *ctx = kiln_ctx_new();
    if (be) KT_OK(kiln_ctx_set_backend(ctx, be));
    kiln_tensor *a = kiln_new_2d(ctx, KILN_F32, 64, 64), *b = kiln_new_2d(ctx, KILN_F32, 64, 64),
                *c = kiln_new_1d(ctx, KILN_F32, 64);
    KT_OK(fill(a, 1));
    KT_OK(fill(b, 3));
    KT_OK(fill(c, 1));
    kiln_tensor *y = build(ctx, a, b, c, n_adds);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    double t0 = now();
    for (int i = 0; i < computes; i++) KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_tensor_get_f32(y, out, 1));
    *wall = now() - t0;
    if (st) *st = kiln_graph_get_stats(g);
    kiln_ctx_free(ctx);
}

/* a b with a deep K, which Vulkan splits into partial tiles in scratch
 * memory bigger than the first scratch buffer: the step's recording
 * submits what came before and goes on in a new command buffer */
static void run_deep(kiln_backend *be, float *out) {
    enum { M = 128, K = 16384 };
    kiln_ctx *ctx = kiln_ctx_new();
    if (be) KT_OK(kiln_ctx_set_backend(ctx, be));
    kiln_tensor *a = kiln_new_2d(ctx, KILN_F32, M, K), *b = kiln_new_2d(ctx, KILN_F32, K, M);
    KT_OK(fill(a, 1));
    KT_OK(fill(b, 1));
    kiln_tensor *y = kiln_matmul(ctx, a, b);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_tensor_get_f32(y, out, M * M));
    kiln_ctx_free(ctx);
}

static void check_profile(const char *name) {
    setenv("KILN_PROFILE", "1", 1); /* before the device starts: its queries or events are made then */
    kiln_backend *be = kt_device(name);
    if (!be) return;
    enum { ADDS = 1100, COMPUTES = 2 }; /* 2 x 1104 steps: more than the pool's 1024 pairs */
    double wall_cpu, wall_dev;
    kiln_graph_stats st;
    float want = 0, got = 1;
    run(NULL, ADDS, 1, &want, &wall_cpu, NULL);
    setenv("KILN_FUSE", "0", 1); /* every node its own step (fused, the adds, relu and mul are one) */
    run(be, ADDS, COMPUTES, &got, &wall_dev, &st);
    unsetenv("KILN_FUSE");
    KT_CHECK(got == want, "%s %.9g, cpu %.9g", name, got, want);
    KT_CHECK(st.nodes_fallback == 0, "%lld nodes fell back", (long long)st.nodes_fallback);
    float *deep_want = malloc(128 * 128 * sizeof *deep_want), *deep_got = calloc(128 * 128, sizeof *deep_got);
    double t0 = now();
    run_deep(be, deep_got);
    wall_dev += now() - t0;
    run_deep(NULL, deep_want);
    KT_CHECK(!memcmp(deep_got, deep_want, 128 * 128 * sizeof *deep_got), "deep product: %s differs from the cpu", name);
    free(deep_want), free(deep_got);
    static const kiln_op ops[] = {KILN_OP_MATMUL, KILN_OP_ADD, KILN_OP_RELU, KILN_OP_MUL, KILN_OP_SUM};
    static const long calls[] = {COMPUTES + 1, COMPUTES * ADDS, COMPUTES, COMPUTES, COMPUTES};
    double total = 0;
    for (int i = 0; i < 5; i++) {
        double sec;
        long n;
        kiln__profile_get(be, ops[i], &sec, &n);
        KT_CHECK(n == calls[i] && sec > 0, "%s: %ld calls (want %ld), %g s", kiln__op_table[ops[i]].name, n, calls[i], sec);
        total += sec;
    }
    KT_CHECK(total <= wall_dev, "device time %g s, more than the %g s the computes took", total, wall_dev);
    /* fused: the chain is one step, in the fused chains' row */
    double sec;
    long chains;
    run(be, 3, COMPUTES, &got, &wall_dev, &st);
    kiln__profile_get(be, KILN_OP_COUNT, &sec, &chains);
    KT_CHECK(chains == COMPUTES && sec > 0, "fused chains: %ld calls (want %d), %g s", chains, COMPUTES, sec);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    kiln__profile_print(f);
    fclose(f);
    char head[64];
    snprintf(head, sizeof head, "s in kernels on %s (device time)", name);
    KT_CHECK(text && strstr(text, head) && strstr(text, "  matmul ") && strstr(text, "2200 calls"), "profile:\n%s",
             text ? text : "");
    free(text);
}

/* per-op lines for a graph computed COMPUTES times through one recording */
static void check_profile_replay(const char *name) {
    setenv("KILN_PROFILE", "1", 1);
    kiln_backend *be = kt_device(name);
    if (!be) return;
    enum { ADDS = 4, COMPUTES = 6 };
    double wall;
    kiln_graph_stats st;
    float want = 0, got = 1;
    run(NULL, ADDS, 1, &want, &wall, NULL);
    setenv("KILN_FUSE", "0", 1);
    run(be, ADDS, COMPUTES, &got, &wall, &st);
    unsetenv("KILN_FUSE");
    KT_CHECK(got == want, "%s %.9g, cpu %.9g", name, got, want);
    KT_CHECK(st.recordings == 1 && st.replays == COMPUTES - 2 && st.nodes_fallback == 0,
             "%lld recordings, %lld replays, %lld nodes fell back", (long long)st.recordings, (long long)st.replays,
             (long long)st.nodes_fallback);
    static const kiln_op ops[] = {KILN_OP_MATMUL, KILN_OP_ADD, KILN_OP_RELU, KILN_OP_MUL, KILN_OP_SUM};
    static const long calls[] = {COMPUTES, COMPUTES * ADDS, COMPUTES, COMPUTES, COMPUTES};
    for (int i = 0; i < 5; i++) {
        double sec;
        long n;
        kiln__profile_get(be, ops[i], &sec, &n);
        KT_CHECK(n == calls[i] && sec > 0, "%s: %ld calls (want %ld), %g s", kiln__op_table[ops[i]].name, n, calls[i], sec);
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    kiln__profile_print(f);
    fclose(f);
    KT_CHECK(text && strstr(text, "  add ") && strstr(text, "24 calls"), "profile:\n%s", text ? text : "");
    free(text);
}

KT_TEST(backend_profile_vulkan) { check_profile("vulkan"); }
KT_TEST(backend_profile_replay_vulkan) { check_profile_replay("vulkan"); }
KT_TEST(backend_profile_replay_cuda) { check_profile_replay("cuda"); }
KT_TEST(backend_profile_cuda) { check_profile("cuda"); }
