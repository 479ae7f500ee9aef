/* safetensors.h — what core/checkpoint.c and optim/optim_io.c share with
 * core/safetensors.c; not installed. */
#ifndef KILN_SAFETENSORS_H
#define KILN_SAFETENSORS_H

#include "internal.h"
#include "atomic_file.h"

#include <stdio.h>

/* kiln_safetensors_open for the call `who` (kiln_load_params, ...), whose
 * name its messages carry. */
kiln_safetensors *kiln__safetensors_open(const char *path, const char *who);
/* kiln_safetensors_save for the call `who` (kiln_save_params, ...). */
kiln_status kiln__safetensors_save(const char *path, kiln_tensor *const *tensors, const char *const *names, int n,
                                   const char *const *meta, int n_meta, const char *who);
/* Does the file's tensor 'name' fit dst (present, same dtype and shape)?
 * Otherwise an error saying what it is in the file and what in `side`
 * ("the model": where dst belongs); nothing is read. */
kiln_status kiln__st_check(const kiln_safetensors *st, const char *name, const kiln_tensor *dst, const char *who,
                           const char *side);
/* Copy a checked tensor's bytes into dst (host copy made current). */
kiln_status kiln__st_read(const kiln_safetensors *st, const char *name, kiln_tensor *dst);
/* Every parameter of ctx is in the file and fits (kiln__st_check). */
kiln_status kiln__params_check(const kiln_safetensors *st, kiln_ctx *ctx, const char *who);
kiln_status kiln__params_read(const kiln_safetensors *st, kiln_ctx *ctx);

#endif
