/* scratch.c — the per-thread scratch of scratch.h, in a pthread key whose
 * destructor frees it when the thread ends. */
#include "scratch.h"
#include "alloc.h"

#include <pthread.h>
#include <stdlib.h>

#define SCRATCH_KEEP ((size_t)32 << 20)

typedef struct scratch {
    void *p;
    size_t cap;
} scratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static bool scratch_ok;

static void scratch_free(void *s) {
    free(((scratch *)s)->p);
    free(s);
}

static void scratch_init(void) { scratch_ok = pthread_key_create(&scratch_key, scratch_free) == 0; }

void *kiln__scratch_get(size_t bytes, bool *owned) {
    *owned = true;
    pthread_once(&scratch_once, scratch_init);
    if (bytes > SCRATCH_KEEP || !scratch_ok) return kiln__aligned_alloc(64, bytes);
    scratch *s = pthread_getspecific(scratch_key);
    if (!s) {
        if (!(s = kiln__calloc(1, sizeof *s)) || pthread_setspecific(scratch_key, s)) {
            free(s);
            return kiln__aligned_alloc(64, bytes);
        }
    }
    if (s->cap < bytes) {
        free(s->p);
        s->p = kiln__aligned_alloc(64, bytes);
        s->cap = s->p ? bytes : 0;
    }
    *owned = false;
    return s->p;
}
