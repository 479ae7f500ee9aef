/* registry.c — the op table: each family (ops/<family>.c) fills its rows;
 * the gradient accumulation used by the backward driver lives here. */
#include "internal.h"

#include <pthread.h>

kiln_op_info kiln__op_table[KILN_OP_COUNT];
kiln_writes_src_fn kiln__op_writes_src[KILN_OP_COUNT];

static kiln_status acc_grad_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    (void)ctx, (void)node, (void)gy, (void)gsrc;
    return KILN_OK; /* never reached: accumulation nodes do not require grad */
}

static void init_once(void) {
    kiln__op_table[KILN_OP_NONE] = (kiln_op_info){"leaf", KILN_KIND_KERNEL, NULL};
    kiln__op_table[KILN_OP_ACC_GRAD] = (kiln_op_info){"acc_grad", KILN_KIND_INPLACE, acc_grad_backward};
    kiln__ops_register_elementwise(kiln__op_table);
    kiln__ops_register_reduce(kiln__op_table);
    kiln__ops_register_movement(kiln__op_table);
    kiln__ops_register_matmul(kiln__op_table);
    kiln__ops_register_rows(kiln__op_table);
    kiln__ops_register_nn(kiln__op_table);
    kiln__ops_register_conv(kiln__op_table);
    kiln__ops_register_conv_tiled(kiln__op_table);
    kiln__ops_register_quant(kiln__op_table);
    kiln__ops_register_dfp(kiln__op_table);
    for (int i = 0; i < KILN_OP_COUNT; i++)
        if (!kiln__op_table[i].name) kiln__op_table[i].name = "(unregistered op)";
}

void kiln__ops_init(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_once);
}
