/* scratch.h — per-thread scratch memory kept between calls, for kernels
 * that pack their operands (the bf16 and int8 GEMMs): fresh pages fault on
 * first touch, which cost 1.4 ms of a 4.5 ms 1024^3 bf16 product when
 * allocated per call. Up to 32 MiB is kept per thread (freed when the
 * thread ends); bigger requests are allocated per call, in 2 MiB pages.
 *
 *     bool owned;
 *     char *buf = kiln__scratch_get(bytes, &owned);
 *     if (!buf) return kiln__errs(KILN_ERR_OOM, ...);
 *     ... use buf (its contents are undefined) ...
 *     if (owned) free(buf);
 *
 * One scratch per thread: a kernel must not hold it while calling another
 * kernel that asks for it. The f32 GEMM packs into slots of its own
 * (kiln__scratch_slot), so that it can run under a kernel holding the
 * scratch. */
#ifndef KILN_CPU_SCRATCH_H
#define KILN_CPU_SCRATCH_H

#include <stdbool.h>
#include <stddef.h>

/* bytes (a multiple of 64) of 64-byte aligned memory, or NULL; *owned says
 * whether the caller frees it. */
void *kiln__scratch_get(size_t bytes, bool *owned);

/* The slots: the scratch above, and the f32 GEMM's packed A and B. */
enum { KILN_SCRATCH_ANY, KILN_SCRATCH_GEMM_A, KILN_SCRATCH_GEMM_B, KILN_SCRATCH_SLOTS };

/* Slot (KILN_SCRATCH_GEMM_*) of this thread, grown to at least bytes and
 * kept (freed when the thread ends, whatever its size), or NULL; its
 * contents are undefined. From 1 MiB on, a slot is 2 MiB-aligned, a
 * multiple of 2 MiB, and asks Linux for 2 MiB pages (MADV_HUGEPAGE). */
void *kiln__scratch_slot(int slot, size_t bytes);

#endif
