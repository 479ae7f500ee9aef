/* kiln.h — the public API of kiln, a small tensor and autodiff library in C.
 *
 * You describe a computation as a graph of tensors. Op constructors such as
 * kiln_matmul() only record a node; nothing runs until kiln_graph_compute().
 * A graph can be built once and computed many times (set new inputs, compute,
 * step the optimizer, repeat). kiln_graph_backward() appends the reverse-mode
 * gradient of a scalar loss, derived from one backward rule per op; the
 * gradients accumulate into each parameter's grad tensor (PyTorch semantics:
 * zero them with kiln_zero_grad() or the optimizer between steps).
 *
 * Shapes follow PyTorch: shape[0] is the outermost dimension and the last
 * dimension is contiguous. Negative axes count from the end.
 *
 * Errors are values. A constructor that gets a bad shape or dtype returns
 * NULL and sets a message (kiln_last_error()) naming the op and the shapes.
 * Every constructor given a NULL source returns NULL and keeps the first
 * message, so a whole model can be built and checked once at the end.
 * Nothing in the library exits or aborts on a user error.
 *
 * Usage — one step of a linear regression:
 *
 *     kiln_ctx *ctx = kiln_ctx_new();
 *     kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 32, 8);      // inputs
 *     kiln_tensor *y = kiln_new_2d(ctx, KILN_F32, 32, 1);      // targets
 *     kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){8, 1});
 *     kiln_tensor_fill_randn(w, 42, 0.0, 0.1);
 *     kiln_tensor *loss = kiln_mse(ctx, kiln_matmul(ctx, x, w), y);
 *     kiln_graph *g = kiln_graph_new(ctx);
 *     if (!loss || kiln_graph_add(g, loss) || kiln_graph_backward(g, loss)) {
 *         fprintf(stderr, "%s\n", kiln_last_error());
 *         return 1;
 *     }
 *     kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.1f});
 *     // ... fill x and y with kiln_tensor_set_f32(), then per step:
 *     kiln_graph_compute(g);
 *     kiln_optim_step(opt);          // updates w and zeroes its gradient
 *     printf("loss %f\n", kiln_tensor_item(loss));
 *     kiln_ctx_free(ctx);            // frees everything made in ctx
 */
#ifndef KILN_H
#define KILN_H

/* The API in parts, each with its own overview: */
#include "kiln_core.h"      /* errors, dtypes, context, backends, tensors */
#include "kiln_ops.h"       /* op constructors and graphs */
#include "kiln_optim.h"     /* optimizers, schedules, clipping, groups */
#include "kiln_files.h"     /* IDX, safetensors, JSON, GGUF, checkpoints */
#include "kiln_tokenizer.h" /* BPE and SentencePiece tokenizers */
#include "kiln_gptq.h"      /* GPTQ and RTN weight quantization */

#endif /* KILN_H */
