/* cpu.h — the CPU backend's entry points that its own files share (core
 * reaches it only through its vtable, registered in cpu.c). */
#ifndef KILN_CPU_H
#define KILN_CPU_H

#include "internal.h"

/* Run one node: its kernel, with f16/bf16 operands widened to f32 where
 * the kernel is written for f32. */
kiln_status kiln__cpu_compute(kiln_tensor *node, const kiln_exec *ex);
/* An element-wise chain (core/fuse.c chose it) as one tiled pass
 * (fused.c): only nodes[n - 1] is written. */
kiln_status kiln__cpu_compute_chain(kiln_tensor *const *nodes, int n, const kiln_exec *ex);
/* A batch_norm, [an add of it and a residual,] and the ReLU, each read
 * only by the next (a chain core/fuse.c chose): the norm written into the
 * ReLU's output, the residual added, clamped (nn_norm_chan.c). */
kiln_status kiln__cpu_batch_norm_relu(kiln_tensor *const *nodes, int n, const kiln_exec *ex);
/* The ReLU's gradient mask (cmp), its mul and the batch_norm_grad that
 * alone reads the product (a chain core/fuse.c chose): the norm's gradient
 * masking gy as it reads it (nn_norm_chan.c). */
kiln_status kiln__cpu_batch_norm_grad_relu(kiln_tensor *const *nodes, const kiln_exec *ex);
/* $KILN_SIMD as cpu_features.c read it: KILN_OK, or (who: the caller's
 * name) an error naming the value and the accepted ones. */
kiln_status kiln__cpu_simd_check(const char *who);

#endif
