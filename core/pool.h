/* pool.h — kiln's own threads: every parallel loop of the library (the
 * CPU kernels, quantization, the optimizers' steps) runs on this one
 * persistent pool; no OpenMP.
 *
 * Why not `omp parallel for`: the join of a region waits for every thread
 * of the team, and a thread that the OS has not scheduled (any other load
 * on the machine) holds the others until its next time slice, while
 * libgomp's idle threads spin and take the cores that the working ones
 * need: on a loaded 2-core machine, 2 threads trained at a sixth of the
 * rate of 1. Here a loop is split into chunks that threads claim as they
 * come; the calling thread takes part and returns as soon as every chunk
 * ran, so a worker without a core costs only the chunk it holds, and one
 * that starts late finds nothing left. Each thread first takes the chunks
 * of its own contiguous range (it streams its own part of the data, as a
 * static schedule would), then those left in the others'. Idle workers
 * spin briefly (pausing, then yielding the core to whatever else runs),
 * then sleep until the next loop.
 *
 *     static void axpy(void *arg, int64_t i0, int64_t i1, int tid) {
 *         const job *j = arg;
 *         for (int64_t i = i0; i < i1; i++) j->y[i] += j->a * j->x[i];
 *     }
 *     kiln__pool_for(n, 16384, kiln__threads(), axpy, &j);
 *
 * fn(arg, i0, i1, tid) runs over disjoint [i0, i1) covering [0, n), each
 * at most a chunk long, on up to n_threads threads; tid (0 for the caller,
 * below n_threads) is unique among the threads running one loop: an index
 * into per-thread buffers. Which thread runs which range is not fixed, so
 * results must not depend on it (per-range partial results, combined in
 * range order by the caller, keep a reduction deterministic). Loops called
 * from inside a loop's fn, or by a second application thread while one
 * runs, run on their calling thread alone. A forked child starts a pool of
 * its own. */
#ifndef KILN_POOL_H
#define KILN_POOL_H

#include <stdbool.h>
#include <stdint.h>

/* The most threads kiln runs (kiln_set_threads, $KILN_THREADS). */
#define KILN_MAX_THREADS 1024

typedef void kiln_pool_fn(void *arg, int64_t i0, int64_t i1, int tid);

/* fn over [0, n) in chunks of at least `grain` items (fewer at the end), on
 * up to n_threads threads, the caller included; returns when all ran. */
void kiln__pool_for(int64_t n, int64_t grain, int n_threads, kiln_pool_fn *fn, void *arg);

/* True on a thread that is running a loop's chunks (where kiln__pool_for
 * runs alone): callers that pick a path by thread count ask it. */
bool kiln__pool_inside(void);

/* The threads a machine's default uses: its cores (not their SMT
 * siblings) among the CPUs this process may run on. */
int kiln__pool_default_threads(void);

#endif
