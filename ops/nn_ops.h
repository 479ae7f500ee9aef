/* nn_ops.h — shared by the nn family's constructor files (ops/nn*.c):
 * argument checks and the register helpers that kiln__ops_register_nn
 * (ops/nn.c) calls so each file fills its own op-table rows. */
#ifndef KILN_NN_OPS_H
#define KILN_NN_OPS_H

#include "internal.h"

void kiln__ops_register_nn_loss(kiln_op_info *tab);      /* ops/nn_loss.c */
void kiln__ops_register_nn_norm(kiln_op_info *tab);      /* ops/nn_norm.c */
void kiln__ops_register_nn_norm_chan(kiln_op_info *tab); /* ops/nn_norm_chan.c */
void kiln__ops_register_nn_attention(kiln_op_info *tab); /* ops/nn_attention.c */

/* True if t is f32 or f64; otherwise sets KILN_ERR_DTYPE naming op and what. */
bool kiln__nn_check_float(const char *op, const char *what, const kiln_tensor *t);
/* True if t has x's dtype; otherwise sets KILN_ERR_DTYPE naming both. */
bool kiln__nn_check_same_dtype(const char *op, const char *what, const kiln_tensor *t, const char *xname,
                               const kiln_tensor *x);

/* True if eps is finite and >= 0; otherwise sets KILN_ERR_ARG naming op. */
bool kiln__nn_check_eps(const char *op, double eps);

/* The gradients in a norm's packed backward node pk = [dx (x's numel) |
 * dw [C] | db [C]] (dw, db present when iw, ib >= 0): views of pk into
 * gsrc[0], gsrc[iw], gsrc[ib] for the sources of node that require grad. */
kiln_status kiln__nn_unpack_grads(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *pk, int iw, int ib, int64_t c,
                                  kiln_tensor **gsrc);

/* Backward of a composite op: gsrc[i] = the vector-Jacobian product of ref
 * (its reference decomposition, built from node->src) with gy, for each
 * source that requires grad. ref NULL returns the pending error. */
kiln_status kiln__nn_vjp_sources(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *ref, kiln_tensor *gy,
                                 kiln_tensor **gsrc);

/* The fused backward kernels' nodes (layouts beside each constructor). */
kiln_tensor *kiln__softmax_grad(kiln_ctx *ctx, kiln_tensor *y, kiln_tensor *gy, bool causal, bool log_in); /* nn.c */

#endif
