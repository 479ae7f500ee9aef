/* test_cpu_features.c — the CPU caps (backends/cpu/cpu_features.h): the
 * SIMD variants a test loops over are combinations a real CPU has, the
 * ones the issue names among them (Zen 4's AVX512-VNNI, VBMI, BF16 without AVX-VNNI,
 * Alder Lake's AVX-VNNI without AVX-512, Skylake-X's AVX-512 without VNNI,
 * with and without VBMI/GFNI and AMX), the caps never gain a bit the CPU
 * lacks, and $KILN_SIMD: a level name caps the kernels, another value
 * makes kiln_ctx_new fail with a message naming it and the accepted ones.
 * ($KILN_SIMD is read once per process: those tests set it first thing, in
 * their own process.) */
#include "kt.h"
#include "kt_simd.h"

#include <stdlib.h>
#include <string.h>

/* b's bits are a subset of a's */
static bool subset(const kiln_cpu_caps *b, const kiln_cpu_caps *a) {
#define SUB(x) &&(!b->x || a->x)
    return true SUB(avx2) SUB(fma) SUB(f16c) SUB(avx512f) SUB(avx512bw) SUB(avx512vl) SUB(avx512dq) SUB(avx512vnni)
        SUB(avxvnni) SUB(avx512bf16) SUB(avx512vbmi) SUB(gfni) SUB(amx_tile) SUB(amx_bf16) SUB(amx_int8) SUB(neon)
            SUB(dotprod);
#undef SUB
}

static bool same(const kiln_cpu_caps *a, const kiln_cpu_caps *b) { return subset(a, b) && subset(b, a) && a->level == b->level; }

/* a variant with the levels' tests want (true) and not_want (false), if any */
typedef bool level_test(const kiln_cpu_caps *c);
static bool has_variant(const kt_simd *s, level_test *want, level_test *not_want) {
    for (int i = 0; i < s->n; i++)
        if (want(&s->all[i]) && !not_want(&s->all[i])) return true;
    return false;
}
static bool amx_int8(const kiln_cpu_caps *c) { return c->amx_int8; }
static bool zen4(const kiln_cpu_caps *c) { return kiln__cpu_vbmi(c) && kiln__cpu_avx512bf16(c); }
static bool avxvnni_or_amx(const kiln_cpu_caps *c) { return c->avxvnni || c->amx_tile; }

KT_TEST(cpu_simd_variants_are_real_combinations) {
    const kiln_cpu_caps *now = kiln__cpu_caps();
    kt_simd s = kt_simd_start();
    char d[200];
    KT_REQUIRE(s.n >= 1 && !strcmp(s.names[0], "scalar") && s.all[0].level == KILN_SIMD_SCALAR &&
                   !s.all[0].avx2 && !s.all[0].neon,
               "the first variant is %s, not scalar", s.n ? s.names[0] : "none");
    KT_CHECK(same(&s.all[s.n - 1], now), "the last variant (%s) is not the caps in force (%s)", s.names[s.n - 1],
             kiln__cpu_caps_describe(now, d, sizeof d));
    for (int i = 0; i < s.n; i++) {
        kiln_cpu_caps fixed = s.all[i];
        kiln__cpu_caps_fix(&fixed);
        KT_CHECK(same(&fixed, &s.all[i]), "%s: not a consistent combination", s.names[i]);
        KT_CHECK(subset(&s.all[i], now), "%s: a bit the caps in force lack", s.names[i]);
        for (int j = 0; j < i; j++) KT_CHECK(!same(&s.all[i], &s.all[j]), "%s repeats %s", s.names[i], s.names[j]);
    }
    /* each level's kernels, and the combinations the issue names */
    if (kiln__cpu_avx2(now)) KT_CHECK(has_variant(&s, kiln__cpu_avx2, kiln__cpu_avxvnni), "no plain AVX2 variant");
    if (kiln__cpu_avxvnni(now))
        KT_CHECK(has_variant(&s, kiln__cpu_avxvnni, kiln__cpu_avx512), "no AVX-VNNI variant without AVX-512");
    if (kiln__cpu_avx512(now))
        KT_CHECK(has_variant(&s, kiln__cpu_avx512, kiln__cpu_avx512vnni), "no AVX-512 variant without VNNI");
    if (kiln__cpu_avx512vnni(now)) {
        KT_CHECK(has_variant(&s, kiln__cpu_avx512vnni, kiln__cpu_avxvnni), "no AVX512-VNNI variant without AVX-VNNI");
        KT_CHECK(has_variant(&s, kiln__cpu_avx512vnni, kiln__cpu_vbmi), "no AVX512-VNNI variant without VBMI");
    }
    if (kiln__cpu_vbmi(now)) KT_CHECK(has_variant(&s, kiln__cpu_vbmi, kiln__cpu_avx512bf16), "no VBMI variant");
    if (kiln__cpu_avx512bf16(now)) KT_CHECK(has_variant(&s, kiln__cpu_avx512bf16, amx_int8), "no variant without AMX");
    if (kiln__cpu_vbmi(now) && kiln__cpu_avx512bf16(now))
        KT_CHECK(has_variant(&s, zen4, avxvnni_or_amx), "no variant as Zen 4 (VNNI, VBMI, GFNI, BF16; no AVX-VNNI, AMX)");
    if (kiln__cpu_neondot(now)) KT_CHECK(has_variant(&s, kiln__cpu_neon, kiln__cpu_neondot), "no NEON variant without dotprod");
}

/* The caps a test sets are made consistent, and never hold a bit the CPU
 * lacks (its kernels would fault). */
KT_TEST(cpu_caps_set_keeps_real_combinations) {
    const kiln_cpu_caps saved = *kiln__cpu_caps(), *det = kiln__cpu_caps_detected();
    kiln_cpu_caps c;
    memset(&c, 1, sizeof c); /* every bit on */
    c.level = KILN_SIMD_AVX512;
    kiln__cpu_caps_set(&c);
    KT_CHECK(subset(kiln__cpu_caps(), det), "a bit the CPU lacks was set");
    c = *det;
    c.avx512f = false;
    kiln__cpu_caps_set(&c);
    const kiln_cpu_caps *now = kiln__cpu_caps();
    KT_CHECK(!now->avx512bw && !now->avx512vnni && !now->avx512vbmi && !now->avx512bf16 && !now->amx_int8 &&
                 now->level <= KILN_SIMD_AVX2,
             "AVX-512 extensions left on without AVX512F");
    c = *det;
    c.avx2 = false;
    kiln__cpu_caps_set(&c);
    KT_CHECK(!now->avxvnni && !now->avx512f && now->level <= KILN_SIMD_NEON, "AVX-VNNI or AVX-512 left on without AVX2");
    c = *det;
    c.neon = false;
    kiln__cpu_caps_set(&c);
    KT_CHECK(!now->dotprod, "dotprod left on without NEON");
    kiln__cpu_caps_set(&saved);
}

KT_TEST(cpu_simd_env_bad_value_fails_ctx_new) {
    setenv("KILN_SIMD", "avx-512", 1);
    kiln_clear_error();
    kiln_ctx *ctx = kiln_ctx_new();
    KT_CHECK(!ctx, "kiln_ctx_new accepted KILN_SIMD=avx-512");
    KT_CHECK(kiln_last_status() == KILN_ERR_ARG, "status %s", kiln_status_name(kiln_last_status()));
    const char *e = kiln_last_error();
    KT_CHECK(strstr(e, "kiln_ctx_new") && strstr(e, "KILN_SIMD='avx-512'") && strstr(e, "scalar"),
             "the message '%s' does not name the call, the value and the accepted ones", e);
    for (int i = 0; kiln__simd_name(i); i++)
        KT_CHECK(strstr(e, kiln__simd_name(i)), "the message '%s' lacks %s", e, kiln__simd_name(i));
    kiln_ctx_free(ctx);
}

/* KILN_SIMD=avx512 means AVX-512 without VNNI (x86-64), neon without
 * dotprod (ARM64), and scalar elsewhere: the second level named. */
KT_TEST(cpu_simd_env_names_a_level) {
    int n = 0;
    while (kiln__simd_name(n)) n++;
    const char *name = n > 3 ? "avx512" : n > 1 ? "neon" : "scalar";
    setenv("KILN_SIMD", name, 1);
    kiln_ctx *ctx = kiln_ctx_new();
    KT_CHECK(ctx, "KILN_SIMD=%s: %s", name, kiln_last_error());
    const kiln_cpu_caps *c = kiln__cpu_caps(), *d = kiln__cpu_caps_detected();
    KT_CHECK(subset(c, d), "KILN_SIMD=%s: a bit the CPU lacks", name);
    KT_CHECK(!c->avx512vnni && !c->avxvnni && !c->avx512vbmi && !c->gfni && !c->avx512bf16 && !c->amx_int8 &&
                 !c->dotprod,
             "KILN_SIMD=%s left an extension on", name);
    KT_CHECK(c->avx512f == (n > 3 && kiln__cpu_avx512(d)) && c->neon == (n == 3 && d->neon), "KILN_SIMD=%s: %s", name,
             kiln_cpu_describe());
    kiln_cpu_caps capped = *d;
    KT_CHECK(kiln__cpu_caps_cap(&capped, name) && same(&capped, c), "kiln__cpu_caps_cap(%s) differs", name);
    KT_CHECK(!kiln__cpu_caps_cap(&capped, "AVX512"), "a level name in capitals accepted");
    kiln_ctx_free(ctx);
}
