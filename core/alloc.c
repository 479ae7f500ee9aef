/* alloc.c — the library's allocator entry points and the failure-injection
 * counter behind kiln_debug.h. Counting is one relaxed atomic add per
 * allocation (OpenMP workers allocate scratch too). */
#include "alloc.h"
#include "kiln_debug.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

static atomic_long alloc_count;
static atomic_long fail_at = -1;
static atomic_int failed;

/* Distinct call sites (return addresses) seen while a test is counting:
 * an open-addressed set, filled only after kiln_debug_fail_alloc_after. */
#define SITES 4096
static atomic_int tracking;
static _Atomic(uintptr_t) sites[SITES];
static atomic_long n_sites;

static void site_seen(uintptr_t pc) {
    for (size_t i = (pc >> 4) % SITES, k = 0; k < SITES; i = (i + 1) % SITES, k++) {
        uintptr_t cur = atomic_load_explicit(&sites[i], memory_order_relaxed);
        if (cur == pc) return;
        if (!cur) {
            uintptr_t expected = 0;
            if (atomic_compare_exchange_strong(&sites[i], &expected, pc)) {
                atomic_fetch_add(&n_sites, 1);
                return;
            }
            if (expected == pc) return;
        }
    }
}

/* false when this allocation is the one chosen to fail; pc is the caller */
static int alloc_ok(void *pc) {
    if (atomic_load_explicit(&tracking, memory_order_relaxed)) site_seen((uintptr_t)pc);
    long n = atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
    if (n != atomic_load_explicit(&fail_at, memory_order_relaxed)) return 1;
    atomic_store(&failed, 1);
    return 0;
}

#define CALLER __builtin_return_address(0)
void *kiln__malloc(size_t bytes) { return alloc_ok(CALLER) ? malloc(bytes) : NULL; }
void *kiln__calloc(size_t n, size_t size) { return alloc_ok(CALLER) ? calloc(n, size) : NULL; }
void *kiln__realloc(void *p, size_t bytes) { return alloc_ok(CALLER) ? realloc(p, bytes) : NULL; }

void *kiln__aligned_alloc(size_t align, size_t bytes) {
    /* C11 wants a multiple of the alignment */
    size_t rounded = (bytes + align - 1) / align * align;
    if (rounded < bytes) return NULL;
    return alloc_ok(CALLER) ? aligned_alloc(align, rounded ? rounded : align) : NULL;
}

char *kiln__strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = alloc_ok(CALLER) ? malloc(n) : NULL;
    if (d) memcpy(d, s, n);
    return d;
}

#define HUGE_PAGE ((size_t)2 << 20)
#define SMALL_PAGE ((size_t)4096)

#if defined(__linux__)
void *kiln__huge_map(size_t head, size_t bytes, size_t *len) {
    *len = 0;
    if (head > SMALL_PAGE || bytes > SIZE_MAX - 2 * HUGE_PAGE || !alloc_ok(CALLER)) return NULL;
    const size_t want = (SMALL_PAGE + bytes + SMALL_PAGE - 1) & ~(SMALL_PAGE - 1), span = want + HUGE_PAGE;
    char *base = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return NULL;
    /* the block at the first 2 MiB boundary that leaves a page for the header */
    char *block = (char *)(((uintptr_t)base + SMALL_PAGE + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    char *start = block - SMALL_PAGE, *end = start + want;
    if (start > base) munmap(base, (size_t)(start - base));
    if (base + span > end) munmap(end, (size_t)(base + span - end));
#ifdef MADV_HUGEPAGE
    if (bytes >= HUGE_PAGE) madvise(block, bytes & ~(HUGE_PAGE - 1), MADV_HUGEPAGE);
#endif
    *len = want;
    return block - head;
}

void kiln__huge_unmap(void *start, size_t len) {
    /* the mapping began on the page that holds the header */
    munmap((void *)((uintptr_t)start & ~(uintptr_t)(SMALL_PAGE - 1)), len);
}
#endif

void kiln_debug_fail_alloc_after(long n) {
    atomic_store(&fail_at, -1);
    atomic_store(&alloc_count, 0);
    atomic_store(&failed, 0);
    for (size_t i = 0; i < SITES; i++) atomic_store(&sites[i], 0);
    atomic_store(&n_sites, 0);
    atomic_store(&tracking, 1);
    atomic_store(&fail_at, n < 0 ? -1 : n);
}

long kiln_debug_alloc_sites(void) { return atomic_load(&n_sites); }

long kiln_debug_alloc_count(void) { return atomic_load(&alloc_count); }
int kiln_debug_alloc_failed(void) { return atomic_load(&failed); }
