/* nn_kernels.h — shared by the nn family's CPU kernel files
 * (backends/cpu/nn*.c): the register helpers that kiln__cpu_register_nn
 * (backends/cpu/nn.c) calls so each file fills its own kernel-table rows. */
#ifndef KILN_NN_KERNELS_H
#define KILN_NN_KERNELS_H

#include "internal.h"

/* Below this much work (elements touched) a kernel stays on one thread. */
#define KILN_NN_PAR_WORK 32768

void kiln__cpu_register_nn_loss(kiln_cpu_kernel *tab);      /* cross_entropy: nn_loss.c */
void kiln__cpu_register_nn_norm(kiln_cpu_kernel *tab);      /* layer_norm, rms_norm: nn_norm.c */
void kiln__cpu_register_nn_norm_chan(kiln_cpu_kernel *tab); /* batch_norm: nn_norm_chan.c */
void kiln__cpu_register_nn_attention(kiln_cpu_kernel *tab); /* rope, attention: nn_attention.c */

#endif
