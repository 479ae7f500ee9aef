/* cu_qgemm.c — QMATMUL with many rows of x (a prompt) on the CUDA backend:
 * W dequantized to f16 a tile of rows at a time into scratch
 * (kiln__qgemm_tile_rows: at most 64 MiB), x converted to f16 once, and
 * each tile's product on tensor cores by cublasGemmEx (f16 inputs, f32
 * sums and output), as
 * llama.cpp runs prompts through cuBLAS. Every block dtype the backend
 * decodes takes it (k_quant.cu's decode: the dequantized values are the
 * CPU's bits before the f16 rounding).
 *
 * The result is the f32 product of W and x each rounded to f16 once (unit
 * roundoff 2^-11), not the CPU's bits (its batched paths round x to int8,
 * about 1e-2 off the f32 product). A finite x or W beyond f16's range
 * (65504) raises a flag on the device, and k_quant.cu's f32 kernel, gated
 * by that flag, then redoes the whole product (no host round trip, so a
 * captured graph keeps it). */
#include "cu.h"

#include <limits.h>

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

bool kiln__cu_qgemm_ok(const kiln_tensor *t) {
    const kiln_tensor *x = t->src[0], *w = t->src[1];
    const int64_t m = x->shape[0], n = w->shape[0], k = w->shape[1];
    return m >= CU_QGEMM_MIN_M && fits_int(m) && fits_int(n) && fits_int(k);
}

kiln_status kiln__cu_qgemm(kiln_cu *cu, kiln_tensor *t) {
    const kiln_tensor *x = t->src[0], *w = t->src[1];
    const int64_t m = x->shape[0], n = w->shape[0], k = w->shape[1];
    const int qt = kiln__cu_quant(w->dtype);
    const int64_t rows = kiln__qgemm_tile_rows(w->dtype, n, k, 2);
    /* scratch: the overflow flag (16 bytes), x in f16, W's tile in f16 */
    const size_t xb = ((size_t)(m * k) * 2 + 15) & ~(size_t)15;
    kiln_devbuf *sc = kiln__cu_buffer_new(cu, 16 + xb + (size_t)(rows * k) * 2, false);
    if (!sc) return kiln_last_status() ? kiln_last_status() : KILN_ERR_OOM;
    unsigned *big = sc->ptr;
    char *xh = (char *)sc->ptr + 16, *wh = xh + xb;
    const float *xp = kiln__cu_ptr(x);
    const void *wp = kiln__cu_ptr(w);
    float *yp = kiln__cu_ptr(t);
    kiln_status s = kiln__cu_check(cudaMemsetAsync(big, 0, sizeof *big, cu->stream), "qmatmul overflow flag");
    if (!s) s = kiln__cu_launched(kiln__cu_f32_h16(cu->stream, xp, xh, m * k, big), "qmatmul: x to f16");
    const float alpha = 1.0f, beta = 0.0f;
    for (int64_t r0 = 0; r0 < n && !s; r0 += rows) {
        const int64_t nr = n - r0 < rows ? n - r0 : rows;
        s = kiln__cu_launched(kiln__cu_dequantize_h16(cu->stream, qt, wp, r0 * k, wh, nr * k, big),
                              "qmatmul: W's tile to f16");
        /* row-major y[:, r0 .. r0 + nr) = x . tile^T is column-major tile^T-as-stored (op T) times x^T */
        if (!s)
            s = kiln__cu_blas_check(cublasGemmEx(cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, (int)m, (int)k, &alpha, wh,
                                                 CUDA_R_16F, (int)k, xh, CUDA_R_16F, (int)k, &beta, yp + r0, CUDA_R_32F,
                                                 (int)n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                                    "cublasGemmEx (qmatmul)");
    }
    if (!s)
        s = kiln__cu_launched(kiln__cu_qmatmul_if(cu->stream, qt, xp, wp, yp, m, n, k, big), "qmatmul: f32 redo");
    kiln__cu_buffer_free(cu, sc); /* its next user is queued after the product */
    return s;
}
