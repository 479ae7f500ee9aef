/* cpu_features.h — what this CPU can run, detected once at run time, so
 * one binary picks the best kernel on any x86-64 or ARM64 machine.
 *
 * Kernels ask kiln__cpu_caps() at call time (one load and a branch) and
 * choose among their variants: files named *_avx2.c, *_avx512.c,
 * *_avx512bf16.c, *_vnni.c, *_amx.c (x86-64) and *_neon.c, *_neondot.c
 * (ARM64) are compiled with the matching -m flags by the Makefile and guard
 * their bodies with the architecture macro; every variant has a portable
 * scalar twin that tests compare it against.
 *
 * $KILN_SIMD caps the level used: "scalar", "avx2", "avx512" (x86-64),
 * "neon" (ARM64); unset means the best the CPU has. Tests narrow the caps
 * with kiln__cpu_caps_set() to run every path on one machine:
 *
 *     kiln_cpu_caps saved = *kiln__cpu_caps(), c = saved;
 *     kiln__cpu_caps_limit(&c, KILN_SIMD_SCALAR);
 *     kiln__cpu_caps_set(&c);  ... run ...  kiln__cpu_caps_set(&saved);
 */
#ifndef KILN_CPU_FEATURES_H
#define KILN_CPU_FEATURES_H

#include <stdbool.h>

typedef enum kiln_simd_level {
    KILN_SIMD_SCALAR = 0,
    KILN_SIMD_NEON,   /* ARM64 Advanced SIMD (+ dotprod where present) */
    KILN_SIMD_AVX2,   /* AVX2 + FMA + F16C */
    KILN_SIMD_AVX512  /* AVX-512 F/BW/VL/DQ (+ VNNI, BF16, AMX where present) */
} kiln_simd_level;

typedef struct kiln_cpu_caps {
    kiln_simd_level level;
    /* x86-64 */
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512dq;
    bool avx512vnni, avxvnni, avx512bf16;
    bool avx512vbmi; /* vpermb / vpermt2b (Ice Lake and later) */
    bool amx_tile, amx_bf16, amx_int8; /* true only once the kernel granted tile state */
    /* ARM64 */
    bool neon, dotprod;
} kiln_cpu_caps;

/* The caps in force (detected, capped by $KILN_SIMD, or set by a test). */
const kiln_cpu_caps *kiln__cpu_caps(void);
/* The caps the hardware reports (ignores $KILN_SIMD and overrides). */
const kiln_cpu_caps *kiln__cpu_caps_detected(void);
/* Replace the caps in force (tests). Not thread-safe against running kernels. */
void kiln__cpu_caps_set(const kiln_cpu_caps *c);
/* Turn off everything above level in c (level itself keeps its extensions). */
void kiln__cpu_caps_limit(kiln_cpu_caps *c, kiln_simd_level level);
const char *kiln__simd_level_name(kiln_simd_level l);

#endif
