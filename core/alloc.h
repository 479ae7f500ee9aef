/* alloc.h — every heap allocation the library makes goes through these, so
 * that a test can make the N-th one fail (kiln_debug.h) and check that each
 * error path returns a status and frees what it took. They behave exactly
 * like the C library's functions otherwise; memory is released with free(),
 * except kiln__huge_map's, released with kiln__huge_unmap. */
#ifndef KILN_ALLOC_H
#define KILN_ALLOC_H

#include <stddef.h>

void *kiln__malloc(size_t bytes);
void *kiln__calloc(size_t n, size_t size);
void *kiln__realloc(void *p, size_t bytes);
void *kiln__aligned_alloc(size_t align, size_t bytes);
char *kiln__strdup(const char *s);

/* Zeroed memory for a block of `bytes` that starts on a 2 MiB boundary,
 * with `head` bytes (at most 4 KiB) before it for the caller's header; the
 * block's whole 2 MiB pages are asked for as huge pages. Returns the start
 * of the header (the block is at +head) and the mapping's length in *len,
 * or NULL. Linux only (KILN_HUGE_MAP defined). Nothing outside header and
 * block is kept: aligning costs address space, not memory, which calloc
 * of an over-sized block would not promise (glibc may serve it from the
 * heap and clear every byte). */
#if defined(__linux__)
#define KILN_HUGE_MAP 1
void *kiln__huge_map(size_t head, size_t bytes, size_t *len);
void kiln__huge_unmap(void *start, size_t len);
#endif

#endif
