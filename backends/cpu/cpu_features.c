/* cpu_features.c — run-time CPU detection (cpuid/xgetbv on x86-64, the
 * auxiliary vector on ARM64), the $KILN_SIMD cap, and the AMX permission
 * request Linux needs before the first tile instruction. */
#include "cpu_features.h"

#include "internal.h"

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
    if (c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq && c->fma && c->f16c) c->level = KILN_SIMD_AVX512;
    else if (c->avx2 && c->fma && c->f16c) c->level = KILN_SIMD_AVX2;
}
#elif defined(__aarch64__)
static void detect(kiln_cpu_caps *c) {
    unsigned long hw = getauxval(AT_HWCAP);
    c->neon = hw & (1UL << 1);     /* HWCAP_ASIMD */
    c->dotprod = hw & (1UL << 20); /* HWCAP_ASIMDDP */
    if (c->neon) c->level = KILN_SIMD_NEON;
}
#else
static void detect(kiln_cpu_caps *c) { (void)c; }
#endif

void kiln__cpu_caps_limit(kiln_cpu_caps *c, kiln_simd_level level) {
    if (c->level <= level) return;
    if (level < KILN_SIMD_AVX512) {
        c->avx512f = c->avx512bw = c->avx512vl = c->avx512dq = false;
        c->avx512vnni = c->avx512bf16 = c->avx512vbmi = false;
        c->amx_tile = c->amx_bf16 = c->amx_int8 = false;
    }
    if (level < KILN_SIMD_AVX2) c->avx2 = c->fma = c->f16c = c->avxvnni = false;
    if (level < KILN_SIMD_NEON) c->neon = c->dotprod = false;
    c->level = level;
}

const char *kiln__simd_level_name(kiln_simd_level l) {
    static const char *names[] = {"scalar", "neon", "avx2", "avx512"};
    return l >= KILN_SIMD_SCALAR && l <= KILN_SIMD_AVX512 ? names[l] : "?";
}

static void init(void) {
    detect(&detected);
    active = detected;
    const char *env = getenv("KILN_SIMD");
    if (env && *env) {
        for (int l = KILN_SIMD_SCALAR; l <= KILN_SIMD_AVX512; l++)
            if (!strcmp(env, kiln__simd_level_name((kiln_simd_level)l))) kiln__cpu_caps_limit(&active, (kiln_simd_level)l);
    }
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
}

const char *kiln_cpu_describe(void) {
    static _Thread_local char buf[160];
    const kiln_cpu_caps *c = kiln__cpu_caps();
    snprintf(buf, sizeof buf, "%s%s%s%s%s%s%s%s", kiln__simd_level_name(c->level), c->avx512vnni ? " avx512_vnni" : "",
             c->avx512vbmi ? " avx512_vbmi" : "",
             c->avxvnni ? " avx_vnni" : "", c->avx512bf16 ? " avx512_bf16" : "", c->amx_bf16 ? " amx_bf16" : "",
             c->amx_int8 ? " amx_int8" : "", c->dotprod ? " dotprod" : "");
    return buf;
}
