/* test_backend_fused.c — the fused forms (core/fuse.c) on every device
 * backend, in the cross-backend table (backend_ops_util.h, BO_FUSED):
 * element-wise chains with same-shape, scalar, broadcast-row and
 * per-channel operands, a chain with more inputs and steps than one
 * device kernel takes (the backends cut it in pieces), a comparison inside
 * a chain, a bias and activation after a product, and the weight
 * gradient a product (matmul, DFP) adds straight into. Each case that runs
 * wholly on the device fuses exactly as the CPU does, matches the CPU
 * within the table's tolerance and its own unfused run bit for bit. */
#include "backend_ops_util.h"

#define CTX (io->ctx)
#define IN(...) bo_in(io, BO_SHAPE(__VA_ARGS__))

/* test_fused.c's chain: a row bias, same-shape operands, scalars, gelu */
static kiln_tensor *b_rows(bo_io *io) {
    kiln_tensor *u = IN(37, 19), *bias = IN(19), *v = bo_in_range(io, 0.5, 2, BO_SHAPE(37, 19));
    kiln_tensor *h = kiln_mul(CTX, kiln_tanh(CTX, kiln_add(CTX, u, bias)), v);
    h = kiln_gelu(CTX, kiln_add_scalar(CTX, kiln_scale(CTX, h, 0.5), 0.25));
    return kiln_div(CTX, kiln_sub(CTX, h, v), kiln_add_scalar(CTX, kiln_abs(CTX, bias), 1.0));
}

/* test_fused_chan.c's: a convolution's bias [1, C, 1, 1] and a row */
static kiln_tensor *b_chan(bo_io *io) {
    kiln_tensor *x = IN(3, 5, 4, 7), *bias = IN(1, 5, 1, 1), *row = IN(7);
    kiln_tensor *h = kiln_relu(CTX, kiln_add(CTX, x, bias));
    return kiln_sub(CTX, kiln_mul(CTX, h, row), bias);
}

/* nine inputs and forty links: more than one device kernel's program */
static kiln_tensor *b_long(bo_io *io) {
    kiln_tensor *in[9];
    for (int k = 0; k < 9; k++) /* the table compares at most 8 inputs' gradients */
        in[k] = k < 5 ? bo_in_range(io, 0.5, 1.5, BO_SHAPE(6, 11)) : bo_const(io, io->dt, 0.5, 1.5, BO_SHAPE(6, 11));
    kiln_tensor *h = kiln_mul(CTX, in[0], in[1]);
    for (int i = 0; i < 39; i++)
        h = i % 3 == 2 ? kiln_sigmoid(CTX, h) : (i % 3 ? kiln_sub : kiln_add)(CTX, h, in[(i + 2) % 9]);
    return h;
}

/* a comparison and a scalar operand inside an exact chain */
static kiln_tensor *b_cmp(bo_io *io) {
    kiln_tensor *x = IN(13, 9), *y = IN(13, 9), *s = IN(1);
    kiln_tensor *m = kiln_cmp(CTX, kiln_add(CTX, x, s), y, KILN_CMP_GT);
    return kiln_mul(CTX, kiln_add(CTX, m, x), y);
}

/* a linear layer's bias and activation after the product; backward, the
 * weight's gradient added into by its product */
static kiln_tensor *b_linear(bo_io *io) {
    kiln_tensor *x = IN(9, 13), *w = IN(5, 13), *b = IN(5);
    return kiln_gelu_tanh(CTX, kiln_scale(CTX, kiln_linear(CTX, x, w, b), 1.5));
}

/* a DFP product (ops/dfp.c) adding into the weight's gradient */
static kiln_tensor *b_dfp_linear(bo_io *io) { return kiln_relu(CTX, kiln_dfp_linear(CTX, IN(11, 37), IN(7, 37), IN(7))); }

static const bo_case fused_cases[] = {
    {"chain_rows", b_rows, KILN_F32, BO_TRANS, BO_FUSED, NULL},
    {"chain_chan", b_chan, KILN_F32, BO_EXACT, BO_FUSED, NULL},
    {"chain_long", b_long, KILN_F32, BO_TRANS, BO_FUSED, NULL},
    {"chain_cmp", b_cmp, KILN_F32, BO_EXACT, BO_FUSED, NULL},
    {"linear_act", b_linear, KILN_F32, BO_TRANS, BO_FUSED, NULL},
    /* f64 and DFP: CUDA fuses them, Vulkan leaves them to the CPU */
    {"dfp_linear", b_dfp_linear, KILN_F32, BO_TRANS, BO_FUSED | BO_MAY_FALL_BACK, NULL},
    {"chain_rows", b_rows, KILN_F64, BO_TRANS, BO_FUSED | BO_MAY_FALL_BACK, NULL},
};
KT_TEST(backend_ops_fused) { bo_run_cases("fused", fused_cases, BO_COUNT(fused_cases)); }
