/* alloc.h — every heap allocation the library makes goes through these, so
 * that a test can make the N-th one fail (kiln_debug.h) and check that each
 * error path returns a status and frees what it took. They behave exactly
 * like the C library's functions otherwise; memory is released with free(). */
#ifndef KILN_ALLOC_H
#define KILN_ALLOC_H

#include <stddef.h>

void *kiln__malloc(size_t bytes);
void *kiln__calloc(size_t n, size_t size);
void *kiln__realloc(void *p, size_t bytes);
void *kiln__aligned_alloc(size_t align, size_t bytes);
char *kiln__strdup(const char *s);

#endif
