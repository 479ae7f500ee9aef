/* scratch.c — the per-thread scratch of scratch.h, in a pthread key whose
 * destructor frees it when the thread ends. */
#include "scratch.h"
#include "alloc.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#define SCRATCH_KEEP ((size_t)32 << 20)
#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_FROM ((size_t)1 << 20)

typedef struct scratch {
    void *p[KILN_SCRATCH_SLOTS];
    size_t cap[KILN_SCRATCH_SLOTS];
} scratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static bool scratch_ok;

static void scratch_free(void *s) {
    for (int i = 0; i < KILN_SCRATCH_SLOTS; i++) free(((scratch *)s)->p[i]);
    free(s);
}

static void scratch_init(void) { scratch_ok = pthread_key_create(&scratch_key, scratch_free) == 0; }

/* This thread's slots, made on first use; NULL without memory. */
static scratch *mine(void) {
    pthread_once(&scratch_once, scratch_init);
    if (!scratch_ok) return NULL;
    scratch *s = pthread_getspecific(scratch_key);
    if (!s && (s = kiln__calloc(1, sizeof *s)) && pthread_setspecific(scratch_key, s)) {
        free(s);
        return NULL;
    }
    return s;
}

/* bytes of memory (*size of them, rounded up), in 2 MiB pages when huge
 * and bytes >= HUGE_FROM, or NULL */
static void *alloc(size_t bytes, bool huge, size_t *size) {
    size_t align = 64;
#ifdef MADV_HUGEPAGE
    if (huge && bytes >= HUGE_FROM) align = HUGE_PAGE;
#endif
    *size = (bytes + align - 1) / align * align;
    void *p = *size >= bytes ? kiln__aligned_alloc(align, *size) : NULL;
#ifdef MADV_HUGEPAGE
    if (p && align == HUGE_PAGE) madvise(p, *size, MADV_HUGEPAGE); /* a hint: failure is harmless */
#endif
    return p;
}

/* Slot i grown to at least bytes (its contents lost), or NULL. The GEMM's
 * packs of a MiB or more ask for 2 MiB pages (Linux THP in its madvise
 * mode gives none unasked): its kernels walk the packed panels tile after
 * tile, and on a loaded Zen 5 the products took 2-3% less CPU time
 * (1024^2 at 2 threads, 2048^2 and 4096^2 at 1; about 1% on a quiet
 * one); the rounding up is less than half. */
static void *grow(scratch *s, int i, size_t bytes) {
    if (s->cap[i] < bytes) {
        free(s->p[i]);
        size_t size;
        s->p[i] = alloc(bytes, i != KILN_SCRATCH_ANY, &size);
        s->cap[i] = s->p[i] ? size : 0;
    }
    return s->p[i];
}

/* Requests beyond SCRATCH_KEEP are fresh memory each call, faulted in
 * anew: in 2 MiB pages, 512 times fewer faults (a 4096^2 bf16 product
 * packs 64 MiB: 1.12x faster in CPU time on a Zen 5 at 1 thread) */
void *kiln__scratch_get(size_t bytes, bool *owned) {
    *owned = true;
    scratch *s = bytes > SCRATCH_KEEP ? NULL : mine();
    void *p = s ? grow(s, KILN_SCRATCH_ANY, bytes) : NULL;
    size_t size;
    if (!p) return alloc(bytes, bytes > SCRATCH_KEEP, &size);
    *owned = false;
    return p;
}

void *kiln__scratch_slot(int slot, size_t bytes) {
    scratch *s = mine();
    return s ? grow(s, slot, bytes) : NULL;
}
