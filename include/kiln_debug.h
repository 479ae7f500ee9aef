/* kiln_debug.h — test-only hooks; not part of the stable API.
 *
 * Failure injection: every heap allocation inside libkiln is counted, and
 * one of them can be made to fail, to test that each error path returns a
 * status (KILN_ERR_OOM or another) and leaks nothing.
 *
 *     kiln_debug_fail_alloc_after(-1);           // count only
 *     run_the_operation();
 *     long n = kiln_debug_alloc_count();         // allocations it made
 *     for (long i = 0; i < n; i++) {
 *         kiln_debug_fail_alloc_after(i);        // the i-th one (from 0) fails
 *         assert(run_the_operation() != KILN_OK);
 *     }
 *     kiln_debug_fail_alloc_after(-1);           // back to normal
 *
 * Only that one allocation fails; later ones succeed again, as after a
 * transient shortage. Allocations by libraries kiln calls (OpenBLAS,
 * OpenMP, the Vulkan driver, zlib) are not counted. */
#ifndef KILN_DEBUG_H
#define KILN_DEBUG_H

#ifdef __cplusplus
extern "C" {
#endif

/* Reset the count to 0 and make allocation number n (counting from 0 after
 * this call) fail; n < 0 fails none. */
void kiln_debug_fail_alloc_after(long n);
/* Allocations counted since the last kiln_debug_fail_alloc_after. */
long kiln_debug_alloc_count(void);
/* Distinct call sites in libkiln among those allocations. */
long kiln_debug_alloc_sites(void);
/* Whether the armed failure has happened since. */
int kiln_debug_alloc_failed(void);

#ifdef __cplusplus
}
#endif
#endif
