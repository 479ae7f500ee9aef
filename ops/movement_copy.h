/* movement_copy.h — what ops/movement.c needs from ops/movement_copy.c. */
#ifndef KILN_OPS_MOVEMENT_COPY_H
#define KILN_OPS_MOVEMENT_COPY_H

#include "internal.h"

/* Rows for CONCAT, PAD, SLICE_SCATTER and CAST (called by kiln__ops_register_movement). */
void kiln__ops_register_movement_copy(kiln_op_info *tab);

/* Zeros of shape [ndim, shape] with g placed at positions start, start+step, ...
 * along axis (the gradient of kiln_slice). */
kiln_tensor *kiln__slice_scatter(kiln_ctx *ctx, kiln_tensor *g, int ndim, const int64_t *shape, int axis,
                                 int64_t start, int64_t step);

#endif
