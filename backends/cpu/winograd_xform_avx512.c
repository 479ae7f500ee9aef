/* winograd_xform_avx512.c — winograd_xform.h's transforms for AVX-512. */
#include "winograd.h"

#if defined(__x86_64__)
#define WX_SUF avx512
#include "winograd_xform.h"

const kiln_wino_xform *kiln__wino_xform_avx512(void) { return &wino_table_avx512; }
#endif
