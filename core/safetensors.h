/* safetensors.h — what core/checkpoint.c and optim/optim_io.c share with
 * core/safetensors.c; not installed. */
#ifndef KILN_SAFETENSORS_H
#define KILN_SAFETENSORS_H

#include "internal.h"

#include <stdio.h>

/* Does the file's tensor 'name' fit dst (present, same dtype and shape)?
 * An error naming both otherwise; nothing is read. */
kiln_status kiln__st_check(const kiln_safetensors *st, const char *name, const kiln_tensor *dst, const char *who);
/* Copy a checked tensor's bytes into dst (host copy made current). */
kiln_status kiln__st_read(const kiln_safetensors *st, const char *name, kiln_tensor *dst);
/* Every parameter of ctx is in the file and fits (kiln__st_check). */
kiln_status kiln__params_check(const kiln_safetensors *st, kiln_ctx *ctx, const char *who);
kiln_status kiln__params_read(const kiln_safetensors *st, kiln_ctx *ctx);

/* Write path atomically: body writes a temporary file beside it (tmp is
 * its name, for messages), which is flushed, synced and renamed over path,
 * then the directory is synced; on any error the temporary file is removed
 * and an existing file at path is left as it was. */
typedef kiln_status (*kiln__write_fn)(FILE *f, const char *tmp, void *arg);
kiln_status kiln__atomic_write(const char *path, const char *who, kiln__write_fn body, void *arg);

#endif
