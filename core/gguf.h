/* gguf.h — what core/gguf.c and core/gguf_write.c share; not installed. */
#ifndef KILN_GGUF_H
#define KILN_GGUF_H

#include "json.h"

/* ggml's tensor types: elements per block and bytes per block. */
typedef struct kiln__ggml_type {
    const char *name;
    int blck;
    int size;
} kiln__ggml_type;

#define KILN__GGML_TYPES 40
extern const kiln__ggml_type kiln__ggml_types[KILN__GGML_TYPES];
/* NULL for an unknown or removed type. */
const kiln__ggml_type *kiln__ggml_type_of(uint32_t t);
/* Bytes of type t with ne[4] (ggml order); false when ne[0] is not whole
 * blocks or the size overflows. */
bool kiln__ggml_nbytes(uint32_t t, const int64_t ne[4], uint64_t *out);

#endif
