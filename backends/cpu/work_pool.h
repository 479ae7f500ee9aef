/* work_pool.h — a small persistent thread pool for the short, many,
 * memory-bound loops of batch-1 generation (the quantized GEMVs: ~90 a
 * token, each 0.1-2 ms).
 *
 * Why not `omp parallel for`: each region is a fork and a join, and the
 * join waits for every thread of the team. On a machine whose cores are
 * shared, a thread that is not scheduled when the region starts holds the
 * others at the barrier until its next time slice (milliseconds, against
 * a GEMV of a fraction of one), and with OMP_WAIT_POLICY=passive each
 * fork is a futex wake-up. Here the caller takes part in the work and
 * returns as soon as every unit is done: a worker that starts late finds
 * nothing left and costs nothing. Units are split into one contiguous
 * range per thread (each thread streams its own part of W: what the
 * hardware prefetcher likes); a thread that finishes its range takes
 * chunks from the others'. Which thread runs a unit never changes what
 * the unit computes, so results do not depend on the schedule.
 *
 *     static void rows(void *arg, int64_t u0, int64_t u1) { ... }
 *     kiln__pool_for(n_rows, 16, kiln__threads(), rows, &job);
 *
 * Workers spin for a short while after a job (the next GEMV follows within
 * microseconds) and then sleep; $KILN_POOL_SPIN_US sets the spin (default
 * 200; 0 with OMP_WAIT_POLICY=passive). A second caller arriving while the
 * pool is busy (another host thread) runs its loop on its own thread; a
 * forked child starts a pool of its own. */
#ifndef KILN_CPU_WORK_POOL_H
#define KILN_CPU_WORK_POOL_H

#include <stdint.h>

typedef void kiln_pool_fn(void *arg, int64_t u0, int64_t u1);

/* fn(arg, u0, u1) over [0, n_units) in chunks of at most `chunk` units,
 * on up to n_threads threads (the caller included); returns when all
 * units ran. */
void kiln__pool_for(int64_t n_units, int64_t chunk, int n_threads, kiln_pool_fn *fn, void *arg);

#endif
