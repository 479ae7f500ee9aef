/* winograd2_xform.c — winograd2_xform.h's transforms for the
 * architecture's baseline (SSE2, NEON), the reference of the others, and
 * the choice among the levels. */
#include "winograd.h"
#include "cpu_features.h"

#define W2_SUF scalar
#include "winograd2_xform.h"

const kiln_wino2_xform *kiln__wino2_xform_scalar(void) { return &wino2_table_scalar; }

const kiln_wino2_xform *kiln__wino2_xform(void) {
#if defined(__x86_64__)
    const kiln_cpu_caps *c = kiln__cpu_caps();
    if (kiln__cpu_avx512(c)) return kiln__wino2_xform_avx512();
    if (kiln__cpu_avx2(c)) return kiln__wino2_xform_avx2();
#endif
    return &wino2_table_scalar;
}
