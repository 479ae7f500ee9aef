/* cu_memory.c — device memory for the CUDA backend: plain cudaMalloc
 * behind a caching allocator, and host<->device copies on the stream.
 *
 * Blocks come in size classes (256 B << c); a freed block goes on its
 * class's free list and the next request of that class takes it back
 * without a cudaMalloc. Reuse is safe without waiting because all work
 * runs on one stream: whatever the new owner queues runs after the old
 * owner's last kernel. A cudaMalloc that fails first gives the cached
 * blocks back to the driver and tries once more. Blocks over the largest
 * class are allocated and freed directly (after the stream drains). */
#include "cu.h"

static int class_of(size_t bytes) {
    for (int c = 0; c < KILN_CU_CLASSES; c++)
        if (bytes <= ((size_t)256 << c)) return c;
    return -1;
}

void kiln__cu_cache_release(kiln_cu *cu) {
    for (int c = 0; c < KILN_CU_CLASSES; c++)
        while (cu->free_list[c]) {
            kiln_devbuf *d = cu->free_list[c];
            cu->free_list[c] = d->next;
            cudaFree(d->ptr);
            free(d);
        }
    cu->cached_bytes = 0;
}

kiln_devbuf *kiln__cu_buffer_new(kiln_cu *cu, size_t bytes, bool zero) {
    int c = class_of(bytes ? bytes : 1);
    kiln_devbuf *d = c >= 0 ? cu->free_list[c] : NULL;
    if (d) {
        cu->free_list[c] = d->next;
        cu->cached_bytes -= (size_t)256 << c;
    } else {
        d = kiln__calloc(1, sizeof *d);
        if (!d) return kiln__err(KILN_ERR_OOM, "cuda: out of memory");
        size_t real = c >= 0 ? (size_t)256 << c : (bytes + 255) & ~(size_t)255;
        cudaError_t e = cudaMalloc(&d->ptr, real);
        if (e == cudaErrorMemoryAllocation) { /* give the cache back and try again */
            cudaGetLastError();
            cudaStreamSynchronize(cu->stream);
            kiln__cu_cache_release(cu);
            e = cudaMalloc(&d->ptr, real);
        }
        if (e != cudaSuccess) {
            free(d);
            cudaGetLastError();
            kiln__cu_check(e, "cudaMalloc");
            return NULL;
        }
        d->cls = c;
    }
    d->size = bytes;
    d->next = NULL;
    if (zero && kiln__cu_check(cudaMemsetAsync(d->ptr, 0, bytes ? bytes : 1, cu->stream), "zeroing new memory")) {
        kiln__cu_buffer_free(cu, d);
        return NULL;
    }
    return d;
}

void kiln__cu_buffer_free(kiln_cu *cu, kiln_devbuf *d) {
    if (!d) return;
    if (cu->capturing) { /* captured kernels use it on every replay: the recording keeps it */
        d->next = cu->held;
        cu->held = d;
        return;
    }
    if (d->cls < 0) {
        cudaStreamSynchronize(cu->stream); /* queued work may still read it */
        cudaFree(d->ptr);
        free(d);
        return;
    }
    d->next = cu->free_list[d->cls];
    cu->free_list[d->cls] = d;
    cu->cached_bytes += (size_t)256 << d->cls;
}

static kiln_status in_range(const kiln_devbuf *d, size_t off, size_t n, const char *who) {
    if (off > d->size || n > d->size - off)
        return kiln__errs(KILN_ERR_ARG, "cuda: %s of %zu bytes at %zu outside a buffer of %zu", who, n, off, d->size);
    return KILN_OK;
}

kiln_status kiln__cu_upload(kiln_backend *b, kiln_devbuf *d, size_t off, const void *src, size_t n) {
    kiln_cu *cu = (kiln_cu *)b;
    kiln_status s = in_range(d, off, n, "upload");
    if (s || !n) return s;
    s = kiln__cu_check(cudaMemcpyAsync((char *)d->ptr + off, src, n, cudaMemcpyHostToDevice, cu->stream), "upload");
    return s ? s : kiln__cu_check(cudaStreamSynchronize(cu->stream), "upload");
}

kiln_status kiln__cu_download(kiln_backend *b, kiln_devbuf *d, size_t off, void *dst, size_t n) {
    kiln_cu *cu = (kiln_cu *)b;
    kiln_status s = in_range(d, off, n, "download");
    if (s || !n) return s;
    s = kiln__cu_check(cudaMemcpyAsync(dst, (char *)d->ptr + off, n, cudaMemcpyDeviceToHost, cu->stream), "download");
    return s ? s : kiln__cu_check(cudaStreamSynchronize(cu->stream), "download");
}

kiln_status kiln__cu_zero(kiln_backend *b, kiln_devbuf *d, size_t off, size_t n) {
    kiln_cu *cu = (kiln_cu *)b;
    kiln_status s = in_range(d, off, n, "zero");
    if (s || !n) return s;
    return kiln__cu_check(cudaMemsetAsync((char *)d->ptr + off, 0, n, cu->stream), "zero");
}

kiln_status kiln__cu_flush(kiln_backend *b) {
    kiln_cu *cu = (kiln_cu *)b;
    /* a kernel's failure at run time surfaces here */
    kiln_status s = kiln__cu_check(cudaStreamSynchronize(cu->stream), "running the queued kernels");
    if (!s) kiln__cu_profile_collect(cu);
    return s;
}
