/* cpu_features.h — what this CPU can run, detected once at run time, so
 * one binary picks the best kernel on any x86-64 or ARM64 machine.
 *
 * Kernels live in files named for their level; the Makefile compiles each
 * with exactly that level's flags, and its dispatcher calls it only where
 * the level's test below holds (scripts/isa_check.sh reads the objects to
 * check that no instruction is above its file's level):
 *
 *   suffix        flags (Makefile SIMD_*)             runs where
 *   _avx2         -mavx2 -mfma -mf16c                 kiln__cpu_avx2
 *   _avxvnni      _avx2 + -mavxvnni (VEX vpdpbusd)    kiln__cpu_avxvnni
 *   _avx512       _avx2 + -mavx512f/bw/vl/dq          kiln__cpu_avx512
 *   _avx512vnni   _avx512 + -mavx512vnni (EVEX)       kiln__cpu_avx512vnni
 *   _vbmi         _avx512vnni + -mavx512vbmi -mgfni   kiln__cpu_vbmi
 *   _avx512bf16   _avx512 + -mavx512bf16              kiln__cpu_avx512bf16
 *   _amx          _avx512bf16 + -mamx-tile/bf16/int8  kiln__cpu_amx
 *   _neon         (ARMv8-A baseline)                  kiln__cpu_neon
 *   _neondot      -march=armv8.2-a+dotprod            kiln__cpu_neondot
 *
 * A level's file may call a lower level's functions, never a higher one's.
 * Every variant has a portable scalar twin that tests compare it against.
 *
 * $KILN_SIMD caps what is used, one of the level names: on x86-64
 * "scalar", "avx2", "avxvnni", "avx512" (AVX-512 F/BW/VL/DQ, no VNNI),
 * "avx512vnni", "vbmi" (and VBMI, GFNI), "avx512bf16" (and BF16: Zen 4,
 * no AVX-VNNI, no AMX), "amx" (all); on ARM64 "scalar", "neon", "neondot". Unset or empty means
 * the best the CPU has; another value is an error (kiln_ctx_new fails with
 * a message listing these). Tests run a kernel under every combination this
 * CPU can emulate (kiln__cpu_caps_variants; tests/kt_simd.h):
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
    KILN_SIMD_AVX2,   /* AVX2 + FMA + F16C (+ AVX-VNNI where present) */
    KILN_SIMD_AVX512  /* AVX-512 F/BW/VL/DQ (+ VNNI, VBMI, GFNI, BF16, AMX where present) */
} kiln_simd_level;

typedef struct kiln_cpu_caps {
    kiln_simd_level level; /* the widest vectors: follows the bits below */
    /* x86-64 */
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512dq;
    bool avx512vnni, avxvnni, avx512bf16;
    bool avx512vbmi; /* vpermb / vpermt2b (Ice Lake and later) */
    bool gfni;       /* gf2p8affineqb (its own cpuid bit, though every VBMI CPU so far has it) */
    bool amx_tile, amx_bf16, amx_int8; /* true only once the kernel granted tile state */
    /* ARM64 */
    bool neon, dotprod;
} kiln_cpu_caps;

/* The caps in force (detected, capped by $KILN_SIMD, or set by a test). */
const kiln_cpu_caps *kiln__cpu_caps(void);
/* The caps the hardware reports (ignores $KILN_SIMD and overrides). */
const kiln_cpu_caps *kiln__cpu_caps_detected(void);
/* Replace the caps in force (tests): bits the CPU lacks stay off, and the
 * rest is made consistent by kiln__cpu_caps_fix. Not thread-safe against
 * running kernels. */
void kiln__cpu_caps_set(const kiln_cpu_caps *c);
/* Turn off everything above level in c (level itself keeps its extensions). */
void kiln__cpu_caps_limit(kiln_cpu_caps *c, kiln_simd_level level);
/* Turn off the bits whose prerequisites are off (no VNNI without AVX-512,
 * no AVX-512 without AVX2, no dotprod without NEON, ...) and set level: a
 * combination a real CPU could have. */
void kiln__cpu_caps_fix(kiln_cpu_caps *c);
const char *kiln__simd_level_name(kiln_simd_level l);

/* The i-th of $KILN_SIMD's values on this architecture, lowest first (0:
 * "scalar"); NULL past the last. */
const char *kiln__simd_name(int i);
/* Turn off in c what the named level does not allow; false (c unchanged)
 * when name is not one of them. */
bool kiln__cpu_caps_cap(kiln_cpu_caps *c, const char *name);
/* The distinct caps that c gives capped at each named level, lowest first,
 * with the level's name: every combination of kernels a test should run
 * on this CPU. Returns the count (at most KILN_SIMD_VARIANTS_MAX). */
#define KILN_SIMD_VARIANTS_MAX 12
int kiln__cpu_caps_variants(const kiln_cpu_caps *c, kiln_cpu_caps out[KILN_SIMD_VARIANTS_MAX],
                            const char *names[KILN_SIMD_VARIANTS_MAX]);
/* "avx512 avx512_vnni ..." for c, into buf. */
const char *kiln__cpu_caps_describe(const kiln_cpu_caps *c, char *buf, int size);

/* The dispatch conditions, one per file suffix (see the table above). */
static inline bool kiln__cpu_avx2(const kiln_cpu_caps *c) { return c->avx2 && c->fma && c->f16c; }
static inline bool kiln__cpu_avxvnni(const kiln_cpu_caps *c) { return kiln__cpu_avx2(c) && c->avxvnni; }
static inline bool kiln__cpu_avx512(const kiln_cpu_caps *c) {
    return kiln__cpu_avx2(c) && c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq;
}
static inline bool kiln__cpu_avx512vnni(const kiln_cpu_caps *c) { return kiln__cpu_avx512(c) && c->avx512vnni; }
static inline bool kiln__cpu_vbmi(const kiln_cpu_caps *c) {
    return kiln__cpu_avx512vnni(c) && c->avx512vbmi && c->gfni;
}
static inline bool kiln__cpu_avx512bf16(const kiln_cpu_caps *c) { return kiln__cpu_avx512(c) && c->avx512bf16; }
static inline bool kiln__cpu_amx(const kiln_cpu_caps *c) {
    return kiln__cpu_avx512bf16(c) && c->amx_tile && c->amx_bf16 && c->amx_int8;
}
static inline bool kiln__cpu_neon(const kiln_cpu_caps *c) { return c->neon; }
static inline bool kiln__cpu_neondot(const kiln_cpu_caps *c) { return c->neon && c->dotprod; }

#endif
