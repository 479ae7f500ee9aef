/* winograd2_xform_avx2.c — winograd2_xform.h's transforms for AVX2 and FMA. */
#include "winograd.h"

#if defined(__x86_64__)
#define W2_SUF avx2
#include "winograd2_xform.h"

const kiln_wino2_xform *kiln__wino2_xform_avx2(void) { return &wino2_table_avx2; }
#endif
