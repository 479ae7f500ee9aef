/* safetensors.h — what core/checkpoint.c and optim/optim_io.c share with
 * core/safetensors.c; not installed. */
#ifndef KILN_SAFETENSORS_H
#define KILN_SAFETENSORS_H

#include "internal.h"
#include "atomic_file.h"

#include <stdio.h>

/* Does the file's tensor 'name' fit dst (present, same dtype and shape)?
 * An error naming both otherwise; nothing is read. */
kiln_status kiln__st_check(const kiln_safetensors *st, const char *name, const kiln_tensor *dst, const char *who);
/* Copy a checked tensor's bytes into dst (host copy made current). */
kiln_status kiln__st_read(const kiln_safetensors *st, const char *name, kiln_tensor *dst);
/* Every parameter of ctx is in the file and fits (kiln__st_check). */
kiln_status kiln__params_check(const kiln_safetensors *st, kiln_ctx *ctx, const char *who);
kiln_status kiln__params_read(const kiln_safetensors *st, kiln_ctx *ctx);

#endif
