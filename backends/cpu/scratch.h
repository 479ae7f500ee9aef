/* scratch.h — per-thread scratch memory kept between calls, for kernels
 * that pack their operands (the bf16 and int8 GEMMs): fresh pages fault on
 * first touch, which cost 1.4 ms of a 4.5 ms 1024^3 bf16 product when
 * allocated per call. Up to 32 MiB is kept per thread (freed when the
 * thread ends); bigger requests are allocated per call.
 *
 *     bool owned;
 *     char *buf = kiln__scratch_get(bytes, &owned);
 *     if (!buf) return kiln__errs(KILN_ERR_OOM, ...);
 *     ... use buf (its contents are undefined) ...
 *     if (owned) free(buf);
 *
 * One scratch per thread: a kernel must not hold it while calling another
 * kernel that asks for it. */
#ifndef KILN_CPU_SCRATCH_H
#define KILN_CPU_SCRATCH_H

#include <stdbool.h>
#include <stddef.h>

/* bytes (a multiple of 64) of 64-byte aligned memory, or NULL; *owned says
 * whether the caller frees it. */
void *kiln__scratch_get(size_t bytes, bool *owned);

#endif
