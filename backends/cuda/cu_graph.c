/* cu_graph.c — graph replay on CUDA (core/graph_replay.c): a kiln graph's
 * kernels, cuBLAS calls and memsets captured from the backend's stream
 * into a CUDA graph (cudaStreamBeginCapture), instantiated once and run as
 * one launch (cudaGraphLaunch) on later computes of the same key. Uploads
 * happen before the capture opens (the executor brings every operand
 * first), so nothing captured copies from the host or synchronizes; a
 * capture the driver invalidates anyway (a cudaMalloc retry that waits on
 * the stream) comes back as a NULL recording and the graph runs node by
 * node. Relaxed capture mode: scratch may be cudaMalloc'ed while capturing.
 * Scratch the captured kernels use is held by the recording (freed while
 * capturing, it is not handed out again) until the recording is freed.
 * Under $KILN_PROFILE the steps' event pairs are captured too, and each
 * launch hands their rows back to the profile (cu_profile.c). */
#include "cu.h"

struct kiln_record {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    kiln_devbuf *held; /* scratch the captured kernels read and write */
    int *prof_rows, prof_n; /* $KILN_PROFILE: the captured event pairs' rows */
};

/* Scratch held by a capture goes back to the cache (the stream is idle). */
static void release(kiln_cu *cu, kiln_devbuf *held) {
    for (kiln_devbuf *d = held, *next; d; d = next) {
        next = d->next;
        kiln__cu_buffer_free(cu, d);
    }
}

kiln_status kiln__cu_record_begin(kiln_backend *b) {
    kiln_cu *cu = (kiln_cu *)b;
    kiln_status s = kiln__cu_profile_record_begin(cu);
    if (!s) s = kiln__cu_check(cudaStreamBeginCapture(cu->stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
    cu->capturing = !s;
    cu->held = NULL;
    return s;
}

kiln_record *kiln__cu_record_end(kiln_backend *b) {
    kiln_cu *cu = (kiln_cu *)b;
    kiln_record *r = kiln__calloc(1, sizeof *r);
    cudaGraph_t graph = NULL;
    kiln_status s = kiln__cu_check(cudaStreamEndCapture(cu->stream, &graph), "cudaStreamEndCapture");
    cu->capturing = false;
    int prof_n, *prof_rows = kiln__cu_profile_record_end(cu, &prof_n);
    if (!s && !graph) s = kiln__errs(KILN_ERR_UNSUPPORTED, "cuda: cudaStreamEndCapture made no graph");
    if (!s && !r) s = kiln__errs(KILN_ERR_OOM, "cuda: out of memory");
    if (!s) s = kiln__cu_check(cudaGraphInstantiate(&r->exec, graph, 0), "cudaGraphInstantiate");
    if (s) {
        cudaGetLastError(); /* an invalidated capture's error is not sticky: the stream goes on */
        if (graph) cudaGraphDestroy(graph);
        release(cu, cu->held); /* nothing captured ran */
        cu->held = NULL;
        free(prof_rows);
        free(r);
        return NULL;
    }
    r->prof_rows = prof_rows, r->prof_n = prof_n;
    r->graph = graph;
    r->held = cu->held;
    cu->held = NULL;
    return r;
}

kiln_status kiln__cu_replay(kiln_backend *b, kiln_record *r) {
    kiln_cu *cu = (kiln_cu *)b;
    kiln_status s = kiln__cu_profile_replay(cu, r->prof_rows, r->prof_n);
    return s ? s : kiln__cu_check(cudaGraphLaunch(r->exec, cu->stream), "cudaGraphLaunch");
}

void kiln__cu_record_free(kiln_backend *b, kiln_record *r) {
    kiln_cu *cu = (kiln_cu *)b;
    cudaStreamSynchronize(cu->stream); /* its last launch may still use the held scratch */
    cudaGraphExecDestroy(r->exec);
    cudaGraphDestroy(r->graph);
    release(cu, r->held);
    free(r->prof_rows);
    free(r);
}

/* Every kernel the backend queues is capturable: none reads the host or waits. */
bool kiln__cu_recordable(kiln_backend *b, const kiln_tensor *node) {
    (void)b, (void)node;
    return true;
}

uint64_t kiln__cu_buffer_id(const kiln_devbuf *d) { return (uint64_t)(uintptr_t)d->ptr; }
