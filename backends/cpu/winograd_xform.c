/* winograd_xform.c — winograd_xform.h's transforms for the architecture's
 * baseline (SSE2, NEON), and the choice among the levels. */
#include "winograd.h"
#include "cpu_features.h"

#define WX_SUF scalar
#include "winograd_xform.h"

const kiln_wino_xform *kiln__wino_xform_scalar(void) { return &wino_table_scalar; }

const kiln_wino_xform *kiln__wino_xform(void) {
#if defined(__x86_64__)
    const kiln_cpu_caps *c = kiln__cpu_caps();
    if (kiln__cpu_avx512(c)) return kiln__wino_xform_avx512();
    if (kiln__cpu_avx2(c)) return kiln__wino_xform_avx2();
#endif
    return &wino_table_scalar;
}
