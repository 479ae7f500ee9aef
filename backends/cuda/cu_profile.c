/* cu_profile.c — $KILN_PROFILE=1 on CUDA: device time per step from a
 * pair of events recorded on the stream around the step's kernels and
 * read after the stream's next synchronize (the graph's flush), so
 * profiling adds no wait of its own; a full set of pairs is the only
 * extra one (every PROF_PAIRS steps). */
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

kiln_status kiln__cu_profile_begin(kiln_cu *cu, int row) {
    if (!cu->prof_ev) return KILN_OK;
    kiln_status s;
    if (cu->prof_used == PROF_PAIRS && (s = kiln__cu_flush(&cu->base))) return s;
    cu->prof_row[cu->prof_used] = row;
    return kiln__cu_check(cudaEventRecord(cu->prof_ev[2 * cu->prof_used], cu->stream), "profile event");
}

kiln_status kiln__cu_profile_end(kiln_cu *cu) {
    if (!cu->prof_ev) return KILN_OK;
    return kiln__cu_check(cudaEventRecord(cu->prof_ev[2 * cu->prof_used++ + 1], cu->stream), "profile event");
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
