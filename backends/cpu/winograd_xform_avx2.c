/* winograd_xform_avx2.c — winograd_xform.h's transforms for AVX2 and FMA. */
#include "winograd.h"

#if defined(__x86_64__)
#define WX_SUF avx2
#include "winograd_xform.h"

const kiln_wino_xform *kiln__wino_xform_avx2(void) { return &wino_table_avx2; }
#endif
