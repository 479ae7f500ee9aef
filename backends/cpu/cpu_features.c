/* cpu_features.c — run-time CPU detection (cpuid/xgetbv on x86-64, the
 * auxiliary vector on ARM64), the levels $KILN_SIMD names, and the AMX
 * permission request Linux needs before the first tile instruction. */
#include "cpu_features.h"

#include "cpu.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

static kiln_cpu_caps detected, active;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static char simd_env_bad[64]; /* a $KILN_SIMD that names no level, or "" */

#if defined(__x86_64__)
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* Linux hands out AMX tile state only on request (arch_prctl
 * ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); without it the first tile
 * instruction faults. The grant is per process. */
static bool request_amx(void) {
    const long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

static void detect(kiln_cpu_caps *c) {
    unsigned a, b, cx, d;
    if (!__get_cpuid(1, &a, &b, &cx, &d)) return;
    bool osxsave = cx >> 27 & 1, avx = cx >> 28 & 1;
    c->fma = cx >> 12 & 1;
    c->f16c = cx >> 29 & 1;
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    bool ymm_os = (xcr0 & 0x6) == 0x6, zmm_os = (xcr0 & 0xe6) == 0xe6;
    if (!__get_cpuid_count(7, 0, &a, &b, &cx, &d)) return;
    unsigned max_sub = a;
    c->avx2 = avx && ymm_os && (b >> 5 & 1);
    c->avx512f = zmm_os && (b >> 16 & 1);
    c->avx512dq = c->avx512f && (b >> 17 & 1);
    c->avx512bw = c->avx512f && (b >> 30 & 1);
    c->avx512vl = c->avx512f && (b >> 31 & 1);
    c->avx512vnni = c->avx512f && (cx >> 11 & 1);
    c->avx512vbmi = c->avx512bw && (cx >> 1 & 1);
    c->gfni = cx >> 8 & 1;
    bool amx_tile = d >> 24 & 1, amx_bf16 = d >> 22 & 1, amx_int8 = d >> 25 & 1;
    if (max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &cx, &d)) {
        c->avxvnni = c->avx2 && (a >> 4 & 1);
        c->avx512bf16 = c->avx512f && (a >> 5 & 1);
    }
    if (amx_tile && request_amx()) {
        c->amx_tile = true;
        c->amx_bf16 = amx_bf16;
        c->amx_int8 = amx_int8;
    }
    kiln__cpu_caps_fix(c);
}
#elif defined(__aarch64__)
static void detect(kiln_cpu_caps *c) {
    unsigned long hw = getauxval(AT_HWCAP);
    c->neon = hw & (1UL << 1);     /* HWCAP_ASIMD */
    c->dotprod = hw & (1UL << 20); /* HWCAP_ASIMDDP */
    kiln__cpu_caps_fix(c);
}
#else
static void detect(kiln_cpu_caps *c) { (void)c; }
#endif

/* Every bit of the caps, for the operations on all of them. */
#define CAPS_BITS(X)                                                                                   \
    X(avx2) X(fma) X(f16c) X(avx512f) X(avx512bw) X(avx512vl) X(avx512dq) X(avx512vnni) X(avxvnni)    \
    X(avx512bf16) X(avx512vbmi) X(gfni) X(amx_tile) X(amx_bf16) X(amx_int8) X(neon) X(dotprod)

void kiln__cpu_caps_fix(kiln_cpu_caps *c) {
    if (!kiln__cpu_avx2(c)) c->avxvnni = c->avx512f = false;
    if (!c->avx512f) c->avx512bw = c->avx512vl = c->avx512dq = c->avx512vnni = c->avx512bf16 = false;
    if (!c->avx512bw) c->avx512vbmi = false;
    if (!c->amx_tile) c->amx_bf16 = c->amx_int8 = false;
    if (!c->avx512f) c->amx_tile = c->amx_bf16 = c->amx_int8 = false;
    if (!c->neon) c->dotprod = false;
    c->level = kiln__cpu_avx512(c) ? KILN_SIMD_AVX512
             : kiln__cpu_avx2(c)   ? KILN_SIMD_AVX2
             : kiln__cpu_neon(c)   ? KILN_SIMD_NEON
                                   : KILN_SIMD_SCALAR;
}

void kiln__cpu_caps_limit(kiln_cpu_caps *c, kiln_simd_level level) {
    if (c->level <= level) return;
    if (level < KILN_SIMD_AVX512) {
        c->avx512f = c->avx512bw = c->avx512vl = c->avx512dq = false;
        c->avx512vnni = c->avx512bf16 = c->avx512vbmi = false;
        c->amx_tile = c->amx_bf16 = c->amx_int8 = false;
    }
    if (level < KILN_SIMD_AVX2) c->avx2 = c->fma = c->f16c = c->avxvnni = c->gfni = false;
    if (level < KILN_SIMD_NEON) c->neon = c->dotprod = false;
    kiln__cpu_caps_fix(c);
}

const char *kiln__simd_level_name(kiln_simd_level l) {
    static const char *names[] = {"scalar", "neon", "avx2", "avx512"};
    return l >= KILN_SIMD_SCALAR && l <= KILN_SIMD_AVX512 ? names[l] : "?";
}

/* The named levels, lowest first: what each allows. A chain of real CPUs
 * (x86-64: Haswell, Alder Lake, Skylake-X, Cascade Lake, Ice Lake, Zen 4,
 * Sapphire Rapids), each capping the one detected. */
typedef struct named_level {
    const char *name;
    kiln_cpu_caps allow;
} named_level;
#define AVX2_BITS .avx2 = true, .fma = true, .f16c = true
#define AVX512_BITS AVX2_BITS, .avx512f = true, .avx512bw = true, .avx512vl = true, .avx512dq = true
#define VBMI_BITS AVX512_BITS, .avx512vnni = true, .avx512vbmi = true, .gfni = true
static const named_level named[] = {
    {"scalar", {0}},
#if defined(__x86_64__)
    {"avx2", {AVX2_BITS}},
    {"avxvnni", {AVX2_BITS, .avxvnni = true}},
    {"avx512", {AVX512_BITS}},
    {"avx512vnni", {AVX512_BITS, .avx512vnni = true}},
    {"vbmi", {VBMI_BITS}},
    {"avx512bf16", {VBMI_BITS, .avx512bf16 = true}},
    {"amx", {VBMI_BITS, .avxvnni = true, .avx512bf16 = true, .amx_tile = true, .amx_bf16 = true, .amx_int8 = true}},
#elif defined(__aarch64__)
    {"neon", {.neon = true}},
    {"neondot", {.neon = true, .dotprod = true}},
#endif
};
#define N_NAMED ((int)(sizeof named / sizeof *named))

const char *kiln__simd_name(int i) { return i >= 0 && i < N_NAMED ? named[i].name : NULL; }

bool kiln__cpu_caps_cap(kiln_cpu_caps *c, const char *name) {
    for (int i = 0; i < N_NAMED; i++) {
        if (strcmp(name, named[i].name)) continue;
#define AND(b) c->b = c->b && named[i].allow.b;
        CAPS_BITS(AND)
#undef AND
        kiln__cpu_caps_fix(c);
        return true;
    }
    return false;
}

static bool caps_equal(const kiln_cpu_caps *a, const kiln_cpu_caps *b) {
#define SAME(x) &&a->x == b->x
    return a->level == b->level CAPS_BITS(SAME);
#undef SAME
}

int kiln__cpu_caps_variants(const kiln_cpu_caps *c, kiln_cpu_caps out[KILN_SIMD_VARIANTS_MAX],
                            const char *names[KILN_SIMD_VARIANTS_MAX]) {
    int n = 0;
    for (int i = 0; i < N_NAMED && n < KILN_SIMD_VARIANTS_MAX; i++) {
        kiln_cpu_caps v = *c;
        kiln__cpu_caps_cap(&v, named[i].name);
        bool seen = false;
        for (int j = 0; j < n && !seen; j++) seen = caps_equal(&out[j], &v);
        if (!seen) out[n] = v, names[n++] = named[i].name;
    }
    return n;
}

static void init(void) {
    detect(&detected);
    active = detected;
    const char *env = getenv("KILN_SIMD");
    if (env && *env && !kiln__cpu_caps_cap(&active, env))
        snprintf(simd_env_bad, sizeof simd_env_bad, "%.*s%s", 40, env, strlen(env) > 40 ? "..." : "");
}

kiln_status kiln__cpu_simd_check(const char *who) {
    pthread_once(&once, init);
    if (!*simd_env_bad) return KILN_OK;
    char list[160] = "";
    for (int i = 0; i < N_NAMED; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", named[i].name);
    return kiln__errs(KILN_ERR_ARG, "%s: KILN_SIMD='%s' is not one of: %s (unset or empty: the best this CPU has)", who,
                      simd_env_bad, list);
}

const kiln_cpu_caps *kiln__cpu_caps(void) {
    pthread_once(&once, init);
    return &active;
}

const kiln_cpu_caps *kiln__cpu_caps_detected(void) {
    pthread_once(&once, init);
    return &detected;
}

void kiln__cpu_caps_set(const kiln_cpu_caps *c) {
    pthread_once(&once, init);
    active = *c;
#define AND(b) active.b = active.b && detected.b; /* never a bit this CPU lacks */
    CAPS_BITS(AND)
#undef AND
    kiln__cpu_caps_fix(&active);
}

const char *kiln__cpu_caps_describe(const kiln_cpu_caps *c, char *buf, int size) {
    snprintf(buf, (size_t)size, "%s%s%s%s%s%s%s%s%s", kiln__simd_level_name(c->level), c->avxvnni ? " avx_vnni" : "",
             c->avx512vnni ? " avx512_vnni" : "", c->avx512vbmi ? " avx512_vbmi" : "", c->gfni ? " gfni" : "",
             c->avx512bf16 ? " avx512_bf16" : "", c->amx_bf16 ? " amx_bf16" : "", c->amx_int8 ? " amx_int8" : "",
             c->dotprod ? " dotprod" : "");
    return buf;
}

const char *kiln_cpu_describe(void) {
    static _Thread_local char buf[200];
    return kiln__cpu_caps_describe(kiln__cpu_caps(), buf, sizeof buf);
}
