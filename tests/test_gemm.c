/* test_gemm.c — kiln's own GEMM against a double-precision loop: every
 * SIMD micro-kernel the machine has (scalar, AVX2, AVX-512 / NEON), odd
 * sizes that leave edge tiles, all four transpose combinations, alpha and
 * beta, padded leading dimensions, beta == 0 over NaN-filled C, 1 vs 2
 * threads, the dispatcher, f64, and batched matmul through the graph. */
#include "../backends/cpu/cpu_features.h"
#include "../backends/cpu/gemm.h"
#include "../backends/cpu/gemm_kernels.h"
#include "../backends/cpu/scratch.h"
#include "kt.h"
#include "test_mov_util.h"

#include <stdint.h>
#include <string.h>

static uint64_t rng_state;
static double rnd(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 40) / (double)(1ULL << 24) * 2.0 - 1.0;
}

typedef struct {
    int64_t m, n, k;
} mnk;

/* Sizes around and across the micro-tile and block edges of every kernel. */
static const mnk shapes[] = {
    {1, 1, 1},    {1, 3, 7},     {3, 1, 7},    {7, 17, 1},    {17, 33, 3},  {33, 17, 65},  {65, 7, 33},
    {130, 65, 17}, {17, 130, 257}, {257, 33, 7}, {3, 257, 130}, {33, 65, 130}, {65, 130, 33}, {130, 257, 65},
    {257, 130, 7}, {2, 65, 33},   {65, 1, 130}, {1, 257, 65},  {1, 130, 257}, {257, 1, 65},  {12, 32, 16},
    {24, 64, 384}, {13, 33, 800}, {200, 70, 800}, {5, 4100, 20}, {40, 4100, 9},
    {16, 9, 20000}, {9, 40, 6000}, /* small C, long K: two threads split K */
};

typedef void (*sgemm_fn)(bool, bool, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *, int64_t,
                         float, float *, int64_t, int);

/* One case: fill padded operands, run f, compare the m x n block with the
 * reference and check the padding of C was left alone. Returns failures. */
static int check_sgemm(sgemm_fn f, const char *what, mnk s, bool ta, bool tb, float alpha, float beta, int pad, int nt,
                       float *out_copy) {
    int64_t m = s.m, n = s.n, k = s.k;
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    int64_t lda = ac + pad, ldb = bc + pad, ldc = n + pad;
    float *a = malloc(sizeof(float) * (size_t)(ar * lda)), *b = malloc(sizeof(float) * (size_t)(br * ldb));
    float *c = malloc(sizeof(float) * (size_t)(m * ldc)), *c0 = malloc(sizeof(float) * (size_t)(m * ldc));
    double *ref = malloc(sizeof(double) * (size_t)(m * n));
    int fails = 0;
    if (!a || !b || !c || !c0 || !ref) {
        kt_fail(__FILE__, __LINE__, "out of memory");
        fails = 1;
        goto done;
    }
    for (int64_t i = 0; i < ar * lda; i++) a[i] = (float)rnd();
    for (int64_t i = 0; i < br * ldb; i++) b[i] = (float)rnd();
    for (int64_t i = 0; i < m * ldc; i++) c0[i] = beta == 0 && i % ldc < n ? NAN : (float)rnd();
    memcpy(c, c0, sizeof(float) * (size_t)(m * ldc));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0;
            for (int64_t p = 0; p < k; p++)
                acc += (double)(ta ? a[p * lda + i] : a[i * lda + p]) * (double)(tb ? b[j * ldb + p] : b[p * ldb + j]);
            ref[i * n + j] = alpha * acc + (beta == 0 ? 0.0 : beta * (double)c0[i * ldc + j]);
        }
    f(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nt);
    double tol = 2e-6 * (double)(k + 4);
    for (int64_t i = 0; i < m && fails < 3; i++)
        for (int64_t j = 0; j < ldc && fails < 3; j++) {
            float got = c[i * ldc + j];
            bool bad = j < n ? !(fabs(got - ref[i * n + j]) <= tol * (1 + fabs(ref[i * n + j])))
                             : memcmp(&got, &c0[i * ldc + j], sizeof got) != 0;
            if (bad) {
                kt_fail(__FILE__, __LINE__,
                        "%s [%lld,%lld,%lld] ta %d tb %d alpha %g beta %g pad %d nt %d: C[%lld,%lld] = %g, want %g", what,
                        (long long)m, (long long)n, (long long)k, ta, tb, alpha, beta, pad, nt, (long long)i,
                        (long long)j, got, j < n ? ref[i * n + j] : c0[i * ldc + j]);
                fails++;
            }
        }
    if (out_copy) memcpy(out_copy, c, sizeof(float) * (size_t)(m * ldc));
done:
    free(a);
    free(b);
    free(c);
    free(c0);
    free(ref);
    return fails;
}

/* Every shape, transpose pair and a few alpha/beta/padding choices through f. */
static void sweep(sgemm_fn f, const char *what, int nt) {
    static const float ab[][2] = {{1, 0}, {0.5f, 2}, {-1.5f, 1}, {2, 0}};
    int fails = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes && fails < 5; si++)
        for (int t = 0; t < 4; t++) {
            int v = (int)(si + (size_t)t) % 4;
            rng_state = si * 31 + (size_t)t;
            fails += check_sgemm(f, what, shapes[si], t & 1, t >> 1, ab[v][0], ab[v][1], v == 1 ? 0 : 3, nt, NULL);
        }
}

/* Run body once per SIMD level the CPU has, with the caps narrowed to it. */
#define FOR_EACH_LEVEL(lvl)                                                                                          \
    for (kiln_simd_level lvl = KILN_SIMD_SCALAR; lvl <= KILN_SIMD_AVX512; lvl++)                                     \
        if (lvl <= kiln__cpu_caps_detected()->level && (lvl != KILN_SIMD_NEON || kiln__cpu_caps_detected()->neon) && \
            (lvl < KILN_SIMD_AVX2 || kiln__cpu_caps_detected()->avx2))

static void with_level(kiln_simd_level lvl, void (*body)(kiln_simd_level)) {
    kiln_cpu_caps saved = *kiln__cpu_caps(), c = *kiln__cpu_caps_detected();
    kiln__cpu_caps_limit(&c, lvl);
    kiln__cpu_caps_set(&c);
    body(lvl);
    kiln__cpu_caps_set(&saved);
}

static void own_level(kiln_simd_level lvl) {
    KT_CHECK(kiln__sgemm_kernel_pick()->name != NULL, "no kernel");
    sweep(kiln__sgemm_own, kiln__simd_level_name(lvl), 1);
}

KT_TEST(gemm_own_every_simd_level) {
    int ran = 0;
    FOR_EACH_LEVEL(lvl) {
        with_level(lvl, own_level);
        ran++;
    }
    KT_CHECK(ran >= 1, "no level ran");
}

static void threads_level(kiln_simd_level lvl) {
    static const mnk big[] = {{130, 257, 65}, {257, 130, 400}, {8, 300, 200}, {300, 8, 200}, {1, 700, 300}, {700, 1, 300}};
    for (size_t si = 0; si < sizeof big / sizeof *big; si++)
        for (int t = 0; t < 4; t++) {
            mnk s = big[si];
            size_t sz = (size_t)(s.m * (s.n + 2));
            float *c1 = malloc(sz * sizeof *c1), *c2 = malloc(sz * sizeof *c2);
            KT_REQUIRE(c1 && c2, "out of memory");
            rng_state = si * 7 + (size_t)t;
            check_sgemm(kiln__sgemm_own, kiln__simd_level_name(lvl), s, t & 1, t >> 1, 1.0f, 0.0f, 2, 1, c1);
            rng_state = si * 7 + (size_t)t;
            check_sgemm(kiln__sgemm_own, kiln__simd_level_name(lvl), s, t & 1, t >> 1, 1.0f, 0.0f, 2, 2, c2);
            double worst = 0;
            for (size_t i = 0; i < sz; i++) worst = fmax(worst, fabs((double)c1[i] - c2[i]));
            KT_CHECK(worst <= 1e-4, "%s 1 vs 2 threads differ by %g", kiln__simd_level_name(lvl), worst);
            free(c1);
            free(c2);
        }
}

KT_TEST(gemm_own_threads_1_vs_2) {
    FOR_EACH_LEVEL(lvl) with_level(lvl, threads_level);
}

/* The blocks follow the caches: each fits its level, and other caches give
 * other blocks (none reported: defaults). */
KT_TEST(gemm_blocks_from_caches) {
    static const kiln__cpu_caches cases[] = {
        {32 << 10, 1 << 20, 16 << 20}, {48 << 10, 2 << 20, 240 << 20}, {4 << 10, 64 << 10, 0}, {0, 0, 0},
        {64 << 10, 256 << 10, 128 << 10},
    };
    const kiln__sgemm_kernel *ks[] = {&kiln__sgemm_kernel_scalar,
#if defined(__x86_64__)
                                      &kiln__sgemm_kernel_avx2, &kiln__sgemm_kernel_avx512,
#endif
    };
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++)
        for (size_t j = 0; j < sizeof cases / sizeof *cases; j++) {
            const kiln__sgemm_kernel *K = ks[i];
            kiln__cpu_caches c = cases[j];
            kiln__sgemm_blocks b = kiln__sgemm_blocks_derive(K, &c);
            if (!c.l1d && !c.l2) c = (kiln__cpu_caches){32 << 10, 1 << 20, 2 << 20};
            int64_t l3 = c.l3_per_core > c.l2 ? c.l3_per_core : c.l2;
            KT_CHECK(b.kc >= 128 && b.kc <= 512 && b.kc % 16 == 0, "%s case %zu: kc %lld", K->name, j, (long long)b.kc);
            KT_CHECK(b.kc == 128 || b.kc * K->nr * 4 <= c.l1d, "%s case %zu: B panel %lld x %d over L1 %lld", K->name,
                     j, (long long)b.kc, K->nr, (long long)c.l1d);
            KT_CHECK(b.mc % K->mr == 0 && (b.mc == K->mr || b.mc * b.kc * 4 <= c.l2 * 3 / 4),
                     "%s case %zu: mc %lld x kc %lld for L2 %lld", K->name, j, (long long)b.mc, (long long)b.kc,
                     (long long)c.l2);
            KT_CHECK(b.nc % K->nr == 0 && (b.nc == K->nr || b.nc * b.kc * 4 <= l3 / 2),
                     "%s case %zu: nc %lld x kc %lld for L3 %lld", K->name, j, (long long)b.nc, (long long)b.kc,
                     (long long)l3);
        }
    kiln__sgemm_blocks small = kiln__sgemm_blocks_derive(&kiln__sgemm_kernel_scalar, &cases[0]);
    kiln__sgemm_blocks big = kiln__sgemm_blocks_derive(&kiln__sgemm_kernel_scalar, &cases[1]);
    KT_CHECK(big.mc > small.mc && big.nc > small.nc, "mc %lld -> %lld, nc %lld -> %lld for bigger caches",
             (long long)small.mc, (long long)big.mc, (long long)small.nc, (long long)big.nc);
}

/* Tiny caches cut products into many kc, mc and nc blocks (edges in all
 * three), and 2 threads share each packed block of B (or, 100 x 260 x 130,
 * each packs all of A and its own columns of B): the same result as the
 * reference and as 1 thread, at every level. */
static void tiny_blocks_level(kiln_simd_level lvl) {
    static const mnk s[] = {{100, 300, 300}, {9, 1100, 300}, {300, 20, 300}, {100, 260, 130}};
    const kiln__cpu_caches tiny = {4 << 10, 64 << 10, 512 << 10};
    kiln__cpu_caches_set(&tiny);
    for (size_t si = 0; si < sizeof s / sizeof *s; si++)
        for (int t = 0; t < 4; t++) {
            size_t sz = (size_t)(s[si].m * (s[si].n + 2));
            float *c1 = malloc(sz * sizeof *c1), *c2 = malloc(sz * sizeof *c2);
            KT_REQUIRE(c1 && c2, "out of memory");
            for (int nt = 1; nt <= 2; nt++) {
                rng_state = si * 5 + (size_t)t;
                check_sgemm(kiln__sgemm_own, kiln__simd_level_name(lvl), s[si], t & 1, t >> 1, 0.5f, 0.25f, 2, nt,
                            nt == 1 ? c1 : c2);
            }
            KT_CHECK(!memcmp(c1, c2, sz * sizeof *c1), "%s %lldx%lldx%lld: 1 and 2 threads differ",
                     kiln__simd_level_name(lvl), (long long)s[si].m, (long long)s[si].n, (long long)s[si].k);
            free(c1);
            free(c2);
        }
    kiln__cpu_caches_set(NULL);
}

KT_TEST(gemm_own_tiny_cache_blocks) {
    FOR_EACH_LEVEL(lvl) with_level(lvl, tiny_blocks_level);
}

KT_TEST(gemm_dispatch_matches_reference) {
    sweep(kiln__sgemm, "kiln__sgemm", 1);
    sweep(kiln__sgemm, "kiln__sgemm", 2);
}

KT_TEST(gemm_k0_and_alpha0_scale_c) {
    float c[6] = {1, 2, 3, 4, 5, 6}, a[6] = {1, 1, 1, 1, 1, 1};
    kiln__sgemm_own(false, false, 2, 3, 0, 1.0f, a, 1, a, 3, 2.0f, c, 3, 1);
    KT_CHECK(c[0] == 2 && c[5] == 12, "k == 0 should scale C by beta: %g %g", c[0], c[5]);
    for (int i = 0; i < 6; i++) c[i] = NAN;
    kiln__sgemm_own(false, false, 2, 3, 1, 0.0f, a, 1, a, 3, 0.0f, c, 3, 1);
    for (int i = 0; i < 6; i++) KT_CHECK(c[i] == 0, "alpha == beta == 0 should zero C: c[%d] = %g", i, c[i]);
}

typedef void (*dgemm_fn)(bool, bool, int64_t, int64_t, int64_t, double, const double *, int64_t, const double *,
                         int64_t, double, double *, int64_t, int);

static void check_dgemm(dgemm_fn f, const char *what, mnk s, bool ta, bool tb, double alpha, double beta, int nt) {
    int64_t m = s.m, n = s.n, k = s.k, pad = 2;
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    int64_t lda = ac + pad, ldb = bc + pad, ldc = n + pad;
    double *a = malloc(sizeof(double) * (size_t)(ar * lda)), *b = malloc(sizeof(double) * (size_t)(br * ldb));
    double *c = malloc(sizeof(double) * (size_t)(m * ldc)), *ref = malloc(sizeof(double) * (size_t)(m * ldc));
    KT_REQUIRE(a && b && c && ref, "out of memory");
    for (int64_t i = 0; i < ar * lda; i++) a[i] = rnd();
    for (int64_t i = 0; i < br * ldb; i++) b[i] = rnd();
    for (int64_t i = 0; i < m * ldc; i++) c[i] = ref[i] = beta == 0 && i % ldc < n ? NAN : rnd();
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            long double acc = 0;
            for (int64_t p = 0; p < k; p++)
                acc += (long double)(ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
            ref[i * ldc + j] = (double)(alpha * acc + (beta == 0 ? 0.0L : (long double)beta * ref[i * ldc + j]));
        }
    f(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nt);
    int fails = 0;
    for (int64_t i = 0; i < m * ldc && fails < 3; i++) {
        bool pad_col = i % ldc >= n;
        if (pad_col ? memcmp(&c[i], &ref[i], sizeof *c) != 0 : !(fabs(c[i] - ref[i]) <= 1e-12 * (double)(k + 4))) {
            kt_fail(__FILE__, __LINE__, "%s [%lld,%lld,%lld] ta %d tb %d nt %d: C[%lld] = %.17g, want %.17g", what,
                    (long long)m, (long long)n, (long long)k, ta, tb, nt, (long long)i, c[i], ref[i]);
            fails++;
        }
    }
    free(a);
    free(b);
    free(c);
    free(ref);
}

KT_TEST(gemm_dgemm_own_and_dispatch) {
    static const mnk ds[] = {{1, 1, 1}, {3, 7, 17}, {17, 33, 65}, {65, 130, 7}, {130, 33, 257}, {7, 600, 140}, {200, 100, 300}};
    for (size_t si = 0; si < sizeof ds / sizeof *ds; si++)
        for (int t = 0; t < 4; t++) {
            rng_state = si * 13 + (size_t)t;
            double beta = t == 1 ? 0.5 : 0.0;
            check_dgemm(kiln__dgemm_own, "dgemm_own", ds[si], t & 1, t >> 1, t == 2 ? -2.0 : 1.0, beta, 1 + (t & 1));
            check_dgemm(kiln__dgemm, "dgemm", ds[si], t & 1, t >> 1, 1.0, beta, 2);
        }
}

/* Many small matrices go batch-parallel, big ones one at a time: both
 * against the loop reference, at 1 and 2 threads. */
KT_TEST(gemm_batched_matmul_threads) {
    int saved = kiln_get_threads();
    for (int nt = 1; nt <= 2; nt++) {
        kiln_set_threads(nt);
        int64_t sa[3] = {16, 33, 20}, sb[3] = {16, 20, 47}, sc[3] = {16, 33, 47};
        for (int big = 0; big < 2; big++) {
            if (big) sa[0] = sb[0] = sc[0] = 2, sa[1] = sc[1] = 160, sa[2] = sb[1] = 150, sb[2] = sc[2] = 170;
            kiln_ctx *ctx = kiln_ctx_new();
            kiln_tensor *a = mt_leaf(ctx, KILN_F32, 3, sa, 1), *b = mt_leaf(ctx, KILN_F32, 3, sb, 2);
            kiln_tensor *c = kiln_matmul(ctx, a, b);
            KT_NOTNULL(c);
            KT_OK(mt_compute(ctx, c));
            int64_t na = kiln_tensor_numel(a), nb = kiln_tensor_numel(b), nc = kiln_tensor_numel(c);
            double *av = malloc(sizeof(double) * (size_t)na), *bv = malloc(sizeof(double) * (size_t)nb),
                   *want = malloc(sizeof(double) * (size_t)nc);
            KT_REQUIRE(av && bv && want, "out of memory");
            KT_OK(kiln_tensor_get_f64(a, av, na));
            KT_OK(kiln_tensor_get_f64(b, bv, nb));
            int64_t m = sa[1], k = sa[2], n = sb[2];
            for (int64_t p = 0; p < sa[0]; p++)
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n; j++) {
                        double s = 0;
                        for (int64_t q = 0; q < k; q++) s += av[(p * m + i) * k + q] * bv[(p * k + q) * n + j];
                        want[(p * m + i) * n + j] = s;
                    }
            mt_check_close(big ? "batched big" : "batched small", c, 3, sc, want, 2e-3, 1e-4);
            free(av);
            free(bv);
            free(want);
            kiln_ctx_free(ctx);
        }
    }
    kiln_set_threads(saved);
}

/* The GEMM packs into buffers each thread keeps; a thread that ends must
 * take them with it (they were _Thread_local pointers, and 2,000
 * short-lived threads that each ran a matmul grew RSS from 7 MB to 106
 * MB). Heap in use (every arena, mmapped blocks too) after 48 threads,
 * each packing a 256^3 product on its own, against before them. */
#if defined(__GLIBC__)
#include <malloc.h>
#include <pthread.h>

static void *one_product(void *arg) {
    float *m = arg; /* a, b, c: 256 x 256 each */
    kiln__sgemm_own(false, false, 256, 256, 256, 1.0f, m, 256, m + 65536, 256, 0.0f, m + 2 * 65536, 256, 1);
    return NULL;
}

static size_t heap_in_use(void) {
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

KT_TEST(gemm_buffers_end_with_their_thread) {
    float *m = calloc(3 * 65536, sizeof *m);
    KT_REQUIRE(m, "out of memory");
    pthread_t t;
    KT_REQUIRE(!pthread_create(&t, NULL, one_product, m) && !pthread_join(t, NULL), "a thread");
    const size_t before = heap_in_use();
    for (int i = 0; i < 48; i++) KT_REQUIRE(!pthread_create(&t, NULL, one_product, m) && !pthread_join(t, NULL), "thread %d", i);
    const size_t after = heap_in_use();
    KT_CHECK(after < before + ((size_t)2 << 20), "heap in use grew by %zu KiB over 48 threads (from %zu KiB)",
             (after - before) >> 10, before >> 10);
    free(m);
}
#endif

/* Packs of a MiB or more sit in 2 MiB pages where Linux gives them: the
 * slot starts on a 2 MiB boundary. */
KT_TEST(gemm_packs_of_a_mib_in_2mib_pages) {
    const uintptr_t huge = (uintptr_t)2 << 20;
    char *b = kiln__scratch_slot(KILN_SCRATCH_GEMM_B, (size_t)3 << 20);
    KT_REQUIRE(b, "out of memory");
    KT_CHECK((uintptr_t)b % huge == 0, "a 3 MiB pack at %p, not on a 2 MiB boundary", (void *)b);
    memset(b, 1, (size_t)3 << 20);
    char *a = kiln__scratch_slot(KILN_SCRATCH_GEMM_A, 4096);
    KT_REQUIRE(a, "out of memory");
    KT_CHECK(a != b, "two slots share memory");
}
