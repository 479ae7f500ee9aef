/* kt_simd.h — run a test's body under every SIMD variant the CPU can
 * emulate by turning bits off: the caps in force capped at each level
 * $KILN_SIMD names (kiln__cpu_caps_variants), the distinct ones, lowest
 * first. On x86-64 that is scalar, avx2, avxvnni (AVX-VNNI without
 * AVX-512: Alder Lake), avx512 (no VNNI: Skylake-X), avx512vnni (without
 * AVX-VNNI, VBMI, GFNI: Cascade Lake, and Zen 4's VNNI kernels),
 * vbmi, avx512bf16 (Zen 4: no AVX-VNNI, no AMX) and amx (all), as far as
 * the CPU has them; on
 * ARM64 scalar, neon, neondot. Under $KILN_SIMD=avx2 only scalar and
 * avx2. Each variant's caps are in force while the body runs; failures
 * (KT_CHECK) and a SIGILL name it; the caps from before are back after
 * the loop (leave it only by its end: break or return skip that).
 *
 *     float want = reference(...);
 *     KT_FOR_EACH_SIMD(v) {
 *         float got = kernel(...);   // the dispatcher picks per v's caps
 *         KT_CHECK(got == want, "%g vs %g", got, want);  // "[simd avx2: avx2] ..."
 *     }
 */
#ifndef KT_SIMD_H
#define KT_SIMD_H

#include "kt.h"

#include "../backends/cpu/cpu_features.h"

typedef struct kt_simd {
    const char *name;   /* the variant in force: "scalar", "avx2", ... */
    kiln_cpu_caps caps; /* its caps */
    int i, n;
    kiln_cpu_caps saved, all[KILN_SIMD_VARIANTS_MAX];
    const char *names[KILN_SIMD_VARIANTS_MAX];
} kt_simd;

kt_simd kt_simd_start(void);
/* The next variant in force (true), or the caps from before back (false). */
bool kt_simd_next(kt_simd *s);

#define KT_FOR_EACH_SIMD(v) for (kt_simd v = kt_simd_start(); kt_simd_next(&v);)

#endif
