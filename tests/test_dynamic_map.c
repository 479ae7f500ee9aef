/* test_dynamic_map.c — the 8-bit optimizers' dynamic maps and block-wise
 * quantization (quant/dynamic_map.h): the maps against a double-precision
 * construction, bitsandbytes' nearest-code and tie rule against brute force,
 * round-trip error bounds, zero, partial and non-finite blocks.
 */
#include "kt.h"
#include "../quant/dynamic_map.h"

#include <float.h>
#include <stdint.h>

/* create_dynamic_map in exact arithmetic (rounded once to double). */
static void map_double(bool is_signed, double out[256]) {
    int n = 0;
    for (int i = 0; i < 7; i++) {
        int count = is_signed ? 1 << i : 1 << (i + 1);
        double scale = pow(10.0, i - 6);
        for (int k = 0; k < count; k++) {
            double mean = 0.1 + 0.9 * (2.0 * k + 1.0) / (2.0 * count);
            out[n++] = scale * mean;
            if (is_signed) out[n++] = -scale * mean;
        }
    }
    out[n++] = 0.0;
    out[n++] = 1.0;
    KT_CHECK(n == 256, "%s map has %d values", is_signed ? "signed" : "unsigned", n);
    for (int i = 1; i < 256; i++) /* insertion sort: small and exact */
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            double t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* [0, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}

/* The rule spelled out with a linear scan: the bracketing pair, then the f32
 * midpoint; a value on the midpoint takes the even index. */
static int code_by_scan(const float *map, float x) {
    if (isnan(x) || x <= map[0]) return 0;
    if (x >= map[255]) return 255;
    int k = 0;
    while (!(map[k] <= x && x < map[k + 1])) k++;
    float mid = (map[k] + map[k + 1]) * 0.5f;
    if (x > mid) return k + 1;
    if (x < mid) return k;
    return k % 2 == 0 ? k : k + 1;
}

KT_TEST(dynamic_map_values) {
    for (int s = 0; s < 2; s++) {
        bool is_signed = s == 0;
        const char *name = is_signed ? "signed" : "unsigned";
        float map[256];
        double want[256];
        kiln__dynamic_map(is_signed, map);
        map_double(is_signed, want);
        for (int i = 0; i < 256; i++) {
            /* f32 linspace, midpoint and scale each round: a few ulp */
            KT_CHECK(fabs(map[i] - want[i]) <= 4e-7 * fabs(want[i]), "%s map[%d] = %.9g, want %.9g", name, i,
                     map[i], want[i]);
            if (i > 0) KT_CHECK(map[i - 1] < map[i], "%s map not strictly increasing at %d", name, i);
        }
        KT_CHECK(map[255] == 1.0f, "%s map[255] = %.9g", name, map[255]);
    }
    float sm[256], um[256];
    kiln__dynamic_map(true, sm);
    kiln__dynamic_map(false, um);
    /* signed: 127 negatives, 0 at 127, 128 positives; asymmetric ends */
    KT_CHECK(sm[127] == 0.0f && sm[126] < 0.0f && sm[128] > 0.0f, "signed zero not at 127");
    KT_CHECK(fabs(sm[0] + 0.99296875) < 1e-7, "signed map[0] = %.9g, want -0.99296875", sm[0]);
    KT_CHECK(fabs(sm[128] - 5.5e-7) < 1e-12 && fabs(sm[126] + 5.5e-7) < 1e-12, "signed smallest %.9g %.9g",
             sm[126], sm[128]);
    for (int i = 0; i < 127; i++) KT_CHECK(sm[i] == -sm[254 - i], "signed map not mirrored at %d", i);
    /* unsigned: [0, 1], smallest positive 3.25e-7, top midpoint 0.996484375 */
    KT_CHECK(um[0] == 0.0f, "unsigned map[0] = %.9g", um[0]);
    KT_CHECK(fabs(um[1] - 3.25e-7) < 1e-12, "unsigned map[1] = %.9g", um[1]);
    KT_CHECK(fabs(um[254] - 0.996484375) < 1e-7, "unsigned map[254] = %.9g", um[254]);
}

KT_TEST(dynamic_map_codes_exact_and_ends) {
    for (int s = 0; s < 2; s++) {
        float map[256];
        kiln__dynamic_map(s == 0, map);
        for (int k = 0; k < 256; k++)
            KT_CHECK(kiln__dynamic_code(map, map[k]) == k, "code(map[%d]) = %d", k, kiln__dynamic_code(map, map[k]));
        KT_CHECK(kiln__dynamic_code(map, -2.0f) == 0, "-2 -> %d", kiln__dynamic_code(map, -2.0f));
        KT_CHECK(kiln__dynamic_code(map, -1.0f) == 0, "-1 -> %d", kiln__dynamic_code(map, -1.0f));
        KT_CHECK(kiln__dynamic_code(map, 1.0f) == 255, "1 -> %d", kiln__dynamic_code(map, 1.0f));
        KT_CHECK(kiln__dynamic_code(map, 2.0f) == 255, "2 -> %d", kiln__dynamic_code(map, 2.0f));
        KT_CHECK(kiln__dynamic_code(map, INFINITY) == 255, "inf -> %d", kiln__dynamic_code(map, INFINITY));
        KT_CHECK(kiln__dynamic_code(map, -INFINITY) == 0, "-inf -> %d", kiln__dynamic_code(map, -INFINITY));
        KT_CHECK(kiln__dynamic_code(map, NAN) == 0, "nan -> %d", kiln__dynamic_code(map, NAN));
        KT_CHECK(map[kiln__dynamic_code(map, 0.0f)] == 0.0f, "0 -> %d", kiln__dynamic_code(map, 0.0f));
        KT_CHECK(map[kiln__dynamic_code(map, -0.0f)] == 0.0f, "-0 -> %d", kiln__dynamic_code(map, -0.0f));
        KT_CHECK(map[kiln__dynamic_code(map, 1e-9f)] == 0.0f, "1e-9 -> %d", kiln__dynamic_code(map, 1e-9f));
    }
}

/* Every f32 midpoint between consecutive codes, and its two neighbours. */
KT_TEST(dynamic_map_midpoint_ties) {
    for (int s = 0; s < 2; s++) {
        float map[256];
        kiln__dynamic_map(s == 0, map);
        for (int k = 0; k < 255; k++) {
            float mid = (map[k] + map[k + 1]) * 0.5f;
            int want = k % 2 == 0 ? k : k + 1;
            int got = kiln__dynamic_code(map, mid);
            KT_CHECK(got == want, "%s: midpoint of %d,%d (%.9g) -> %d, want %d", s ? "unsigned" : "signed", k, k + 1,
                     mid, got, want);
            float below = nextafterf(mid, -INFINITY), above = nextafterf(mid, INFINITY);
            if (below > map[k]) KT_CHECK(kiln__dynamic_code(map, below) == k, "below midpoint %d", k);
            if (above < map[k + 1]) KT_CHECK(kiln__dynamic_code(map, above) == k + 1, "above midpoint %d", k);
        }
    }
}

KT_TEST(dynamic_map_random_vs_brute_force) {
    for (int s = 0; s < 2; s++) {
        bool is_signed = s == 0;
        float map[256];
        kiln__dynamic_map(is_signed, map);
        int bad = 0;
        for (int t = 0; t < 200000 && bad < 5; t++) {
            double mag = t % 2 ? urand() : pow(10.0, -8.0 + 8.0 * urand()); /* uniform and log-uniform */
            float x = (float)(is_signed && urand() < 0.5 ? -mag : mag);
            int got = kiln__dynamic_code(map, x);
            int want = code_by_scan(map, x);
            /* nearest in exact arithmetic, unless x sits on the f32 midpoint */
            int best = 0;
            for (int k = 1; k < 256; k++)
                if (fabs((double)x - map[k]) < fabs((double)x - map[best])) best = k;
            bool near = got == best || fabs((double)x - map[got]) == fabs((double)x - map[best]) ||
                        x == (map[got] + map[best]) * 0.5f;
            if (got != want || !near) {
                bad++;
                KT_CHECK(false, "%s: x = %.9g -> %d, scan %d, nearest %d", is_signed ? "signed" : "unsigned", x, got,
                         want, best);
            }
        }
    }
}

/* Both block quantizers against kiln__dynamic_code on every code, every
 * midpoint and its neighbours, the ends and random values: each block
 * starts with 1.0 so absmax is 1 and x / absmax is x. */
KT_TEST(dynamic_map_block_codes_match_search) {
    enum { N = 64 * KILN__QBLOCK };
    static float x[N];
    static uint8_t q[N], q2[N];
    float amax[N / KILN__QBLOCK];
    kiln__qcoder *coder = malloc(sizeof *coder);
    for (int s = 0; s < 2; s++) {
        float map[256];
        kiln__dynamic_map(s == 0, map);
        kiln__qcoder_init(coder, map);
        KT_CHECK(coder->extra == 1, "%s coder: extra = %d", s ? "unsigned" : "signed", coder->extra);
        int n = 0;
        for (int k = 0; k < 256; k++) {
            if (n % KILN__QBLOCK == 0) x[n++] = 1.0f;
            x[n++] = map[k];
            if (k == 255) break;
            float mid = (map[k] + map[k + 1]) * 0.5f;
            if (n % KILN__QBLOCK == 0) x[n++] = 1.0f;
            x[n++] = mid;
            if (n % KILN__QBLOCK == 0) x[n++] = 1.0f;
            x[n++] = nextafterf(mid, -INFINITY);
            if (n % KILN__QBLOCK == 0) x[n++] = 1.0f;
            x[n++] = nextafterf(mid, INFINITY);
        }
        while (n < N) {
            if (n % KILN__QBLOCK == 0) {
                x[n++] = 1.0f;
                continue;
            }
            double mag = n % 2 ? urand() : pow(10.0, -9.0 + 9.0 * urand());
            x[n++] = (float)(s == 0 && urand() < 0.5 ? -mag : mag);
        }
        x[N - 1] = s == 0 ? -1.0f : 0.0f;
        kiln__quantize_blockwise(x, N, map, q, amax);
        kiln__quantize_blockwise_coder(x, N, coder, q2, amax);
        int bad = 0;
        for (int i = 0; i < N && bad < 5; i++) {
            int want = kiln__dynamic_code(map, x[i]);
            if (q[i] != want || q2[i] != want) {
                bad++;
                KT_CHECK(false, "%s: x = %.9g: search %d, count %d, table %d", s ? "unsigned" : "signed", x[i], want,
                         q[i], q2[i]);
            }
        }
    }
    free(coder);
}

/* |x - deq(q(x))| <= half the gap to the neighbouring code x lies towards,
 * times absmax (with f32 slack); absmax is max |x| exactly. */
static void check_round_trip(const float *x, int64_t n, bool is_signed, const char *what) {
    float map[256];
    kiln__dynamic_map(is_signed, map);
    int64_t nb = kiln__qblocks(n);
    uint8_t *q = malloc((size_t)n + 16);
    float *amax = malloc((size_t)(nb + 1) * sizeof(float));
    float *y = malloc((size_t)n * sizeof(float));
    memset(q + n, 0xAB, 16);
    amax[nb] = -7.0f;
    kiln__quantize_blockwise(x, n, map, q, amax);
    kiln__dequantize_blockwise(q, amax, n, map, y);
    for (int i = 0; i < 16; i++) KT_CHECK(q[n + i] == 0xAB, "%s: code written past n", what);
    kiln__qcoder *coder = malloc(sizeof *coder);
    uint8_t *q2 = malloc((size_t)n);
    float *amax2 = malloc((size_t)nb * sizeof(float));
    kiln__qcoder_init(coder, map);
    kiln__quantize_blockwise_coder(x, n, coder, q2, amax2);
    KT_CHECK(memcmp(q, q2, (size_t)n) == 0 && memcmp(amax, amax2, (size_t)nb * sizeof(float)) == 0,
             "%s: the table coder disagrees", what);
    free(coder);
    free(q2);
    free(amax2);
    KT_CHECK(amax[nb] == -7.0f, "%s: absmax written past the last block", what);
    int bad = 0;
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * KILN__QBLOCK, hi = lo + KILN__QBLOCK < n ? lo + KILN__QBLOCK : n;
        float m = 0.0f;
        for (int64_t i = lo; i < hi; i++) m = fmaxf(m, fabsf(x[i]));
        KT_CHECK(amax[b] == m, "%s: absmax[%lld] = %g, want %g", what, (long long)b, amax[b], m);
        for (int64_t i = lo; i < hi && bad < 5; i++) {
            int c = q[i];
            double xn = m > 0 ? (double)x[i] / m : 0.0;
            double gap = (xn > map[c] && c < 255) || c == 0 ? map[c + 1] - map[c] : map[c] - map[c - 1];
            double bound = 0.5 * gap * m * (1 + 1e-5) + 1e-6 * m;
            double err = fabs((double)x[i] - y[i]);
            if (!(err <= bound) || (m == 0 && y[i] != 0.0f)) {
                bad++;
                KT_CHECK(false, "%s: x[%lld] = %.9g -> code %d -> %.9g, error %g > %g", what, (long long)i, x[i], c,
                         y[i], err, bound);
            }
        }
    }
    free(q);
    free(amax);
    free(y);
}

KT_TEST(dynamic_map_round_trip) {
    const int64_t n = 5 * KILN__QBLOCK + 77; /* partial last block */
    float *x = malloc((size_t)n * sizeof(float));
    for (int dist = 0; dist < 3; dist++) {
        for (int64_t i = 0; i < n; i++) {
            double scale = pow(10.0, -(double)(i / KILN__QBLOCK)); /* each block its own magnitude */
            double v = dist == 0 ? urand() : dist == 1 ? pow(10.0, -7 * urand()) : urand() * urand();
            x[i] = (float)(scale * v);
        }
        check_round_trip(x, n, false, "unsigned");
        for (int64_t i = 0; i < n; i++)
            if (urand() < 0.5) x[i] = -x[i];
        check_round_trip(x, n, true, "signed");
    }
    /* the block's largest magnitude survives exactly (signed: if positive) */
    float map[256], amax[1];
    uint8_t q[3];
    float v[3] = {0.25f, -3.0f, 7.5f}, y[3];
    kiln__dynamic_map(true, map);
    kiln__quantize_blockwise(v, 3, map, q, amax);
    kiln__dequantize_blockwise(q, amax, 3, map, y);
    KT_CHECK(amax[0] == 7.5f && y[2] == 7.5f, "max 7.5 -> absmax %g, back %g", amax[0], y[2]);
    free(x);
}

KT_TEST(dynamic_map_zero_and_partial_blocks) {
    enum { N = 2 * KILN__QBLOCK + 44 };
    static float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = i < KILN__QBLOCK ? 0.0f : (float)(i % 13) - 6.0f;
    x[N - 1] = 9.0f;
    for (int s = 0; s < 2; s++) {
        float map[256], amax[3];
        uint8_t q[N];
        kiln__dynamic_map(s == 0, map);
        for (int i = 0; i < N; i++) x[i] = s == 1 ? fabsf(x[i]) : x[i];
        kiln__quantize_blockwise(x, N, map, q, amax);
        kiln__dequantize_blockwise(q, amax, N, map, y);
        KT_CHECK(amax[0] == 0.0f, "zero block absmax %g", amax[0]);
        KT_CHECK(amax[2] == 9.0f, "partial block absmax %g", amax[2]);
        for (int i = 0; i < KILN__QBLOCK; i++)
            KT_CHECK(y[i] == 0.0f && !signbit(y[i]), "zero block: y[%d] = %g", i, y[i]);
        KT_CHECK(y[N - 1] == 9.0f, "partial block max back as %g", y[N - 1]);
        kiln__qcoder *coder = malloc(sizeof *coder);
        uint8_t q2[N];
        kiln__qcoder_init(coder, map);
        kiln__quantize_blockwise_coder(x, N, coder, q2, amax);
        KT_CHECK(memcmp(q, q2, N) == 0, "table coder differs on zero/partial blocks");
        free(coder);
    }
    kiln__quantize_blockwise(x, 0, NULL, NULL, NULL); /* n == 0 touches nothing */
}

/* NaN: ignored by absmax, stored as code 0, neighbours unaffected.
 * Inf: absmax Inf, and the whole block dequantizes to NaN. */
KT_TEST(dynamic_map_non_finite) {
    enum { N = 2 * KILN__QBLOCK };
    static float x[N], ref[N], y[N];
    float map[256], amax[2], ref_amax[2];
    uint8_t q[N], ref_q[N];
    kiln__dynamic_map(true, map);
    for (int i = 0; i < N; i++) x[i] = ref[i] = (float)sin(0.37 * i);
    x[3] = NAN;
    ref[3] = 0.0f;
    x[KILN__QBLOCK + 5] = INFINITY;
    kiln__quantize_blockwise(x, N, map, q, amax);
    kiln__quantize_blockwise(ref, N, map, ref_q, ref_amax);
    kiln__dequantize_blockwise(q, amax, N, map, y);
    kiln__qcoder *coder = malloc(sizeof *coder);
    static uint8_t q2[N];
    float amax2[2];
    kiln__qcoder_init(coder, map);
    kiln__quantize_blockwise_coder(x, N, coder, q2, amax2);
    KT_CHECK(memcmp(q, q2, N) == 0 && amax2[0] == amax[0] && isinf(amax2[1]), "table coder differs on non-finite");
    free(coder);
    KT_CHECK(amax[0] == ref_amax[0], "NaN changed absmax: %g vs %g", amax[0], ref_amax[0]);
    KT_CHECK(q[3] == 0, "NaN -> code %d", q[3]);
    for (int i = 0; i < KILN__QBLOCK; i++)
        if (i != 3) KT_CHECK(q[i] == ref_q[i], "NaN changed code %d", i);
    KT_CHECK(isinf(amax[1]), "Inf block absmax %g", amax[1]);
    /* Inf / Inf is NaN: code 0, and map[0] * Inf = -Inf; the rest 0 * Inf */
    KT_CHECK(q[KILN__QBLOCK + 5] == 0 && isinf(y[KILN__QBLOCK + 5]), "Inf -> code %d -> %g", q[KILN__QBLOCK + 5],
             y[KILN__QBLOCK + 5]);
    for (int i = KILN__QBLOCK; i < N; i++)
        if (i != KILN__QBLOCK + 5) KT_CHECK(isnan(y[i]), "Inf block: y[%d] = %g, want NaN", i, y[i]);
}
