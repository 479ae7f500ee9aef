/* cu_profile.c — $KILN_PROFILE=1 on CUDA: device time per step from a
 * pair of events recorded on the stream around the step's kernels and
 * read after the stream's next synchronize (the graph's flush), so
 * profiling adds no wait of its own; a full set of pairs is the only
 * extra one (every PROF_PAIRS steps). In a graph's capture (cu_graph.c)
 * the events are recorded as the graph's own event nodes
 * (cudaEventRecordExternal), which each launch records again: the
 * recording keeps its pairs' rows and a replay hands them back. */
#include "cu.h"

#define PROF_PAIRS 1024

void kiln__cu_profile_init(kiln_cu *cu) {
    if (!kiln__profiling()) return;
    cu->prof_ev = kiln__calloc(2 * PROF_PAIRS, sizeof *cu->prof_ev);
    cu->prof_row = kiln__calloc(PROF_PAIRS, sizeof *cu->prof_row);
    bool ok = cu->prof_ev && cu->prof_row;
    for (int i = 0; ok && i < 2 * PROF_PAIRS; i++) ok = cudaEventCreate(&cu->prof_ev[i]) == cudaSuccess;
    if (!ok) { /* no profile of the device, nothing else lost */
        cudaGetLastError();
        kiln__cu_profile_free(cu);
    }
}

void kiln__cu_profile_free(kiln_cu *cu) {
    for (int i = 0; cu->prof_ev && i < 2 * PROF_PAIRS; i++)
        if (cu->prof_ev[i]) cudaEventDestroy(cu->prof_ev[i]);
    free(cu->prof_ev);
    free(cu->prof_row);
    cu->prof_ev = NULL;
    cu->prof_row = NULL;
    cu->prof_used = 0;
}

/* e on the stream; in a capture, as the graph's event record node */
static kiln_status record(kiln_cu *cu, cudaEvent_t e) {
    return kiln__cu_check(cu->capturing ? cudaEventRecordWithFlags(e, cu->stream, cudaEventRecordExternal)
                                        : cudaEventRecord(e, cu->stream),
                          "profile event");
}

kiln_status kiln__cu_profile_begin(kiln_cu *cu, int row) {
    if (!cu->prof_ev) return KILN_OK;
    kiln_status s;
    if (cu->prof_used == PROF_PAIRS && cu->capturing) /* the recording fails: core runs the graph node by node */
        return kiln__errs(KILN_ERR_UNSUPPORTED, "cuda: a captured graph's profile holds %d steps at most", PROF_PAIRS);
    if (cu->prof_used == PROF_PAIRS && (s = kiln__cu_flush(&cu->base))) return s;
    cu->prof_row[cu->prof_used] = row;
    return record(cu, cu->prof_ev[2 * cu->prof_used]);
}

kiln_status kiln__cu_profile_end(kiln_cu *cu) {
    if (!cu->prof_ev) return KILN_OK;
    return record(cu, cu->prof_ev[2 * cu->prof_used++ + 1]);
}

kiln_status kiln__cu_profile_record_begin(kiln_cu *cu) {
    return cu->prof_used ? kiln__cu_flush(&cu->base) : KILN_OK; /* the capture's pairs start at 0 */
}

int *kiln__cu_profile_record_end(kiln_cu *cu, int *n) {
    *n = cu->prof_used;
    cu->prof_used = 0; /* the captured events have not run */
    int *rows = *n ? kiln__calloc((size_t)*n, sizeof *rows) : NULL;
    if (rows) memcpy(rows, cu->prof_row, (size_t)*n * sizeof *rows);
    if (!rows) *n = 0; /* out of memory: the replays go unprofiled, nothing else lost */
    return rows;
}

kiln_status kiln__cu_profile_replay(kiln_cu *cu, const int *rows, int n) {
    kiln_status s = n && cu->prof_used ? kiln__cu_flush(&cu->base) : KILN_OK;
    if (s || !n || !cu->prof_ev) return s;
    memcpy(cu->prof_row, rows, (size_t)n * sizeof *rows);
    cu->prof_used = n;
    return KILN_OK;
}

void kiln__cu_profile_collect(kiln_cu *cu) {
    for (int p = 0; p < cu->prof_used; p++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, cu->prof_ev[2 * p], cu->prof_ev[2 * p + 1]) == cudaSuccess)
            kiln__profile_add(&cu->base, cu->prof_row[p], 1e-3 * ms, 1);
        else cudaGetLastError();
    }
    cu->prof_used = 0;
}
