/* test_attention_cached.c — kiln_attention_cached (a sequence per row over
 * a KV cache) against attention computed here in double: rows of three
 * sequences in any order, runs of one (prompt chunks), grouped heads,
 * a sliding window, soft-capped scores (kiln_attention_cached_softcap);
 * the cache written at each row's position and nowhere else; f32 under
 * every SIMD variant, f64; and the errors. */
#include "kt.h"
#include "kt_device.h"
#include "kt_simd.h"

enum { B = 3, HQ = 4, HKV = 2, S = 96, D = 16, DV = 8, N = 88 };

/* The rows: single rows of three sequences interleaved (sequence 1's at
 * 70.., past a 64-key block), then runs, which take the blocked path: 10
 * of sequence 0 and 70 of sequence 2 (more queries than a block), and a
 * last single row. */
static int32_t SEQ[N], POS[N];
static void rows(void) {
    static const int32_t seq[7] = {1, 0, 1, 2, 1, 0, 2}, pos[7] = {70, 3, 71, 0, 72, 4, 1};
    int n = 0;
    for (int i = 0; i < 7; i++, n++) SEQ[n] = seq[i], POS[n] = pos[i];
    for (int p = 5; p < 15; p++, n++) SEQ[n] = 0, POS[n] = p;
    for (int p = 2; p < 72; p++, n++) SEQ[n] = 2, POS[n] = p;
    SEQ[n] = 1, POS[n] = 73;
}

static void fill(double *x, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (double)(seed >> 11) / 9007199254740992.0 * 2 - 1;
    }
}

/* row i's output [HQ, DV] from the caches after every row's write */
static void reference(const double *q, const double *kc, const double *vc, int64_t window, double cap,
                      double *out) {
    for (int i = 0; i < N; i++)
        for (int h = 0; h < HQ; h++) {
            const int g = h / (HQ / HKV);
            const int first = window > 0 && POS[i] + 1 > window ? POS[i] + 1 - (int)window : 0;
            double sc[S], mx = -INFINITY, sum = 0;
            for (int j = first; j <= POS[i]; j++) {
                const double *k = kc + (((int64_t)SEQ[i] * HKV + g) * S + j) * D;
                double d = 0;
                for (int e = 0; e < D; e++) d += q[(i * HQ + h) * D + e] * k[e];
                sc[j] = d / sqrt((double)D);
                if (cap > 0) sc[j] = cap * tanh(sc[j] / cap);
                mx = fmax(mx, sc[j]);
            }
            for (int j = first; j <= POS[i]; j++) sum += sc[j] = exp(sc[j] - mx);
            const double *v = vc + ((int64_t)SEQ[i] * HKV + g) * S * DV;
            for (int e = 0; e < DV; e++) {
                double o = 0;
                for (int j = first; j <= POS[i]; j++) o += sc[j] / sum * v[j * DV + e];
                out[(i * HQ + h) * DV + e] = o;
            }
        }
}

typedef struct data {
    double q[N * HQ * D], k[N * HKV * D], v[N * HKV * DV], kc[B * HKV * S * D], vc[B * HKV * S * DV];
} data;

/* the op once in dtype dt from fresh caches: max |out - want| and whether
 * the caches hold the rows' keys and values where they belong and their
 * old values elsewhere */
static double run(kiln_dtype dt, const data *x, int64_t window, double cap, const double *want, bool *cache_right) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *q = kiln_new_3d(ctx, dt, N, HQ, D), *k = kiln_new_3d(ctx, dt, N, HKV, D);
    kiln_tensor *v = kiln_new_3d(ctx, dt, N, HKV, DV), *kc = kiln_new_4d(ctx, dt, B, HKV, S, D);
    kiln_tensor *vc = kiln_new_4d(ctx, dt, B, HKV, S, DV), *seq = kiln_new_1d(ctx, KILN_I32, N);
    kiln_tensor *pos = kiln_new_1d(ctx, KILN_I32, N);
    kiln_tensor_set_f64(q, x->q, N * HQ * D), kiln_tensor_set_f64(k, x->k, N * HKV * D);
    kiln_tensor_set_f64(v, x->v, N * HKV * DV), kiln_tensor_set_f64(kc, x->kc, B * HKV * S * D);
    kiln_tensor_set_f64(vc, x->vc, B * HKV * S * DV);
    kiln_tensor_set_i32(seq, SEQ, N), kiln_tensor_set_i32(pos, POS, N);
    kiln_tensor *y = kiln_attention_cached_softcap(ctx, q, k, v, kc, vc, seq, pos, window, 0, cap);
    kiln_graph *g = y ? kiln_graph_new(ctx) : NULL;
    double worst = -1;
    static double got[N * HQ * DV], kgot[B * HKV * S * D], vgot[B * HKV * S * DV];
    if (g && !kiln_graph_add(g, y) && !kiln_graph_compute(g) && !kiln_tensor_get_f64(y, got, N * HQ * DV) &&
        !kiln_tensor_get_f64(kc, kgot, B * HKV * S * D) && !kiln_tensor_get_f64(vc, vgot, B * HKV * S * DV)) {
        worst = 0;
        for (int i = 0; i < N * HQ * DV; i++) worst = fmax(worst, fabs(got[i] - want[i]));
        /* the caches: the old values (in dt) except each row's slab */
        static double ks[B * HKV * S * D], vs[B * HKV * S * DV];
        memcpy(ks, x->kc, sizeof ks), memcpy(vs, x->vc, sizeof vs);
        for (int i = 0; i < N; i++)
            for (int h = 0; h < HKV; h++) {
                int64_t at = ((int64_t)SEQ[i] * HKV + h) * S + POS[i];
                memcpy(ks + at * D, x->k + (i * HKV + h) * D, D * sizeof *ks);
                memcpy(vs + at * DV, x->v + (i * HKV + h) * DV, DV * sizeof *vs);
            }
        *cache_right = true;
        for (int i = 0; i < B * HKV * S * D; i++) *cache_right &= fabs(kgot[i] - ks[i]) < 1e-6;
        for (int i = 0; i < B * HKV * S * DV; i++) *cache_right &= fabs(vgot[i] - vs[i]) < 1e-6;
    }
    KT_CHECK(worst >= 0, "%s: %s", kiln_dtype_name(dt), kiln_last_error());
    kiln_ctx_free(ctx);
    return worst;
}

KT_TEST(attention_cached_matches_reference) {
    static data x;
    rows();
    fill(x.q, N * HQ * D, 1), fill(x.k, N * HKV * D, 2), fill(x.v, N * HKV * DV, 3);
    fill(x.kc, B * HKV * S * D, 4), fill(x.vc, B * HKV * S * DV, 5);
    /* the caches after the writes, for the reference */
    static double kc[B * HKV * S * D], vc[B * HKV * S * DV];
    memcpy(kc, x.kc, sizeof kc), memcpy(vc, x.vc, sizeof vc);
    for (int i = 0; i < N; i++)
        for (int h = 0; h < HKV; h++) {
            int64_t at = ((int64_t)SEQ[i] * HKV + h) * S + POS[i];
            memcpy(kc + at * D, x.k + (i * HKV + h) * D, D * sizeof *kc);
            memcpy(vc + at * DV, x.v + (i * HKV + h) * DV, DV * sizeof *vc);
        }
    /* soft-caps: none, one that bends the scores (|s| reaches ~1.5), one that flattens them */
    const int64_t windows[2] = {0, 3};
    const double caps[3] = {0, 2, 0.25};
    for (int w = 0; w < 2; w++)
        for (int c = 0; c < 3; c++) {
            static double want[N * HQ * DV];
            reference(x.q, kc, vc, windows[w], caps[c], want);
            bool right = false;
            double d = run(KILN_F64, &x, windows[w], caps[c], want, &right);
            KT_CHECK(d <= 1e-12 && right, "f64, window %lld, softcap %g: max |diff| %.3g, cache %s",
                     (long long)windows[w], caps[c], d, right ? "right" : "wrong");
            KT_FOR_EACH_SIMD(v) {
                d = run(KILN_F32, &x, windows[w], caps[c], want, &right);
                KT_CHECK(d <= 1e-5 && right, "f32, window %lld, softcap %g: max |diff| %.3g, cache %s",
                         (long long)windows[w], caps[c], d, right ? "right" : "wrong");
            }
        }
}

KT_TEST(attention_cached_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *q = kiln_new_3d(ctx, KILN_F32, 2, 4, 8), *k = kiln_new_3d(ctx, KILN_F32, 2, 2, 8);
    kiln_tensor *kc = kiln_new_4d(ctx, KILN_F32, 3, 2, 5, 8), *vc = kiln_new_4d(ctx, KILN_F32, 3, 2, 5, 8);
    kiln_tensor *seq = kiln_new_1d(ctx, KILN_I32, 2), *pos = kiln_new_1d(ctx, KILN_I32, 2);
    kiln_tensor *p3 = kiln_new_1d(ctx, KILN_I32, 3), *odd = kiln_new_3d(ctx, KILN_F32, 2, 3, 8);
    KT_CHECK(!kiln_attention_cached(ctx, q, k, k, kiln_scale(ctx, kc, 1), vc, seq, pos, 0, 0) &&
                 strstr(kiln_last_error(), "contiguous leaf"),
             "a cache that is no leaf: %s", kiln_last_error());
    KT_CHECK(!kiln_attention_cached(ctx, q, k, k, kc, vc, seq, p3, 0, 0) && strstr(kiln_last_error(), "pos [3]"),
             "pos of 3 rows for 2: %s", kiln_last_error());
    KT_CHECK(!kiln_attention_cached(ctx, q, odd, odd, kc, vc, seq, pos, 0, 0) && strstr(kiln_last_error(), "heads"),
             "3 kv heads for 4: %s", kiln_last_error());
    KT_CHECK(!kiln_attention_cached(ctx, q, k, k, kc, vc, seq, pos, -1, 0) && strstr(kiln_last_error(), "window = -1"),
             "window -1: %s", kiln_last_error());
    KT_CHECK(!kiln_attention_cached_softcap(ctx, q, k, k, kc, vc, seq, pos, 0, 0, -1) &&
                 strstr(kiln_last_error(), "kiln_attention_cached: softcap = -1"),
             "softcap -1: %s", kiln_last_error());
    KT_CHECK(!kiln_attention_cached_softcap(ctx, q, k, k, kc, vc, seq, pos, 0, 0, INFINITY) &&
                 strstr(kiln_last_error(), "softcap = inf"),
             "softcap inf: %s", kiln_last_error());
    /* a position past the cache fails the compute, naming it, and writes nothing */
    kiln_tensor_set_i32(seq, (int32_t[]){0, 2}, 2), kiln_tensor_set_i32(pos, (int32_t[]){1, 5}, 2);
    kiln_tensor_fill(k, 1.0), kiln_tensor_fill(kc, 0.0);
    kiln_tensor *y = kiln_attention_cached(ctx, q, k, k, kc, vc, seq, pos, 0, 0);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    KT_CHECK(kiln_graph_compute(g) == KILN_ERR_ARG && strstr(kiln_last_error(), "row 1's sequence 2, position 5"),
             "position 5 of 5: %s", kiln_last_error());
    float c[3 * 2 * 5 * 8];
    KT_OK(kiln_tensor_get_f32(kc, c, 3 * 2 * 5 * 8));
    int written = 0; /* counted, not a max: gcc 12's aarch64 vectorizer fails on that reduction here */
    for (int i = 0; i < 3 * 2 * 5 * 8; i++) written += c[i] != 0;
    KT_CHECK(written == 0, "a refused compute wrote %d values of the cache", written);
    kiln_ctx_free(ctx);
}

/* sum of t's elements through a graph of t's context (on its backend) */
static double device_sum(kiln_ctx *ctx, kiln_tensor *t) {
    kiln_tensor *s = kiln_sum(ctx, kiln_reshape(ctx, t, 1, (int64_t[]){kiln_tensor_numel(t)}), 0, false);
    kiln_graph *g = kiln_graph_new(ctx);
    double v = NAN;
    if (g && !kiln_graph_add(g, s) && !kiln_graph_compute(g)) v = kiln_tensor_item(s);
    return v;
}

/* On Vulkan the op runs on the CPU; a device copy of the cache made
 * before it is stale after it, and a later device read sees the writes. */
KT_TEST(attention_cached_on_vulkan_keeps_the_cache_right) {
    kiln_backend *vk = kt_device("vulkan");
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, vk));
    kiln_tensor *q = kiln_new_3d(ctx, KILN_F32, 1, 2, 8), *k = kiln_new_3d(ctx, KILN_F32, 1, 1, 8);
    kiln_tensor *kc = kiln_new_4d(ctx, KILN_F32, 2, 1, 4, 8), *vc = kiln_new_4d(ctx, KILN_F32, 2, 1, 4, 8);
    kiln_tensor *seq = kiln_new_1d(ctx, KILN_I32, 1), *pos = kiln_new_1d(ctx, KILN_I32, 1);
    KT_OK(kiln_tensor_fill(q, 1.0));
    KT_OK(kiln_tensor_fill(k, 2.0));
    KT_OK(kiln_tensor_fill(kc, 0.0));
    KT_OK(kiln_tensor_fill(vc, 0.0));
    KT_OK(kiln_tensor_set_i32(seq, (int32_t[]){1}, 1));
    KT_OK(kiln_tensor_set_i32(pos, (int32_t[]){2}, 1));
    KT_CHECK(device_sum(ctx, kc) == 0, "the cache before");
    kiln_tensor *y = kiln_attention_cached(ctx, q, k, k, kc, vc, seq, pos, 0, 0);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    KT_OK(kiln_graph_compute(g));
    double sk = device_sum(ctx, kc), sv = device_sum(ctx, vc);
    KT_CHECK(sk == 16 && sv == 16, "the caches on the device after the write: sums %g, %g (16: 8 twos each)", sk, sv);
    kiln_ctx_free(ctx);
}
