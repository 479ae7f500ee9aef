/* winograd2_xform_avx512.c — winograd2_xform.h's transforms for AVX-512. */
#include "winograd.h"

#if defined(__x86_64__)
#define W2_SUF avx512
#include "winograd2_xform.h"

const kiln_wino2_xform *kiln__wino2_xform_avx512(void) { return &wino2_table_avx512; }
#endif
