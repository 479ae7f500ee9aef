/* test_sampler.c — examples/common/sampler.c, the token chat and generate
 * draw: greedy at temperature 0; top-k, top-p and min-p leave exactly the
 * tokens their definitions leave (counted over many draws); the
 * repetition penalty divides a positive logit and multiplies a negative
 * one; the same seed gives the same tokens. */
#include "kt.h"
#include "sampler.h"

enum { V = 6, DRAWS = 4000 };

/* the logits' softmax */
static const double P[V] = {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.03125};
static void logits(float *z) {
    for (int i = 0; i < V; i++) z[i] = (float)log(P[i]);
}

/* How often each token comes out of DRAWS draws. */
static void counts(const sampler_params *p, int *hits) {
    sampler s;
    memset(hits, 0, V * sizeof *hits);
    if (sampler_init(&s, p, 42)) return;
    for (int k = 0; k < DRAWS; k++) {
        float z[V];
        logits(z);
        hits[sampler_draw(&s, z, V)]++;
    }
    sampler_free(&s);
}

/* Exactly the first `allowed` tokens come out, each near its renormalized share. */
static void expect_first(const sampler_params *p, int allowed, const char *what) {
    int hits[V];
    counts(p, hits);
    double mass = 0;
    for (int i = 0; i < allowed; i++) mass += P[i];
    for (int i = 0; i < V; i++) {
        double want = i < allowed ? P[i] / mass * DRAWS : 0;
        KT_CHECK(i < allowed ? fabs(hits[i] - want) < 5 * sqrt(want) + 5 : hits[i] == 0,
                 "%s: token %d drawn %d times, want ~%.0f", what, i, hits[i], want);
    }
}

KT_TEST(sampler_filters) {
    expect_first(&(sampler_params){.temperature = 1}, V, "all");
    expect_first(&(sampler_params){.temperature = 1, .top_k = 2}, 2, "top-k 2");
    /* top-p 0.8: 0.5 + 0.25 < 0.8 <= 0.875: three tokens */
    expect_first(&(sampler_params){.temperature = 1, .top_p = 0.8}, 3, "top-p 0.8");
    /* min-p 0.2: p >= 0.1 (0.2 of the likeliest's 0.5): 0.5, 0.25, 0.125 */
    expect_first(&(sampler_params){.temperature = 1, .min_p = 0.2}, 3, "min-p 0.2");
    expect_first(&(sampler_params){.temperature = 1, .top_k = 4, .min_p = 0.3}, 2, "top-k 4, min-p 0.3");
    int hits[V];
    counts(&(sampler_params){.temperature = 0, .top_p = 0.1}, hits);
    KT_CHECK(hits[0] == DRAWS, "greedy: %d", hits[0]);
}

KT_TEST(sampler_penalty_and_seed) {
    sampler s;
    KT_REQUIRE(!sampler_init(&s, &(sampler_params){.repeat_penalty = 2}, 1), "init");
    float z[V] = {4, 3, -1, -2, 0, 0};
    sampler_accept(&s, 0);
    sampler_accept(&s, 2);
    sampler_accept(&s, 0); /* counted once */
    KT_CHECK(sampler_draw(&s, z, V) == 1, "greedy after the penalty");
    KT_CHECK(z[0] == 2 && z[1] == 3 && z[2] == -2 && z[3] == -2, "penalized %g %g %g %g", z[0], z[1], z[2], z[3]);
    sampler_reset(&s);
    float y[V] = {4, 3, -1, -2, 0, 0};
    KT_CHECK(sampler_draw(&s, y, V) == 0 && y[0] == 4, "reset: nothing recent");
    sampler_free(&s);
    int32_t a[50], b[50];
    for (int run = 0; run < 2; run++) {
        KT_REQUIRE(!sampler_init(&s, &(sampler_params){.temperature = 1.5, .top_k = 5, .top_p = 0.9}, 7), "init");
        for (int k = 0; k < 50; k++) {
            float x[V];
            logits(x);
            (run ? b : a)[k] = sampler_draw(&s, x, V);
        }
        sampler_free(&s);
    }
    KT_CHECK(!memcmp(a, b, sizeof a), "the same seed, the same tokens");
}
