/* cu_matmul.c — KILN_OP_MATMUL on the CUDA backend through cuBLAS.
 *
 * The semantics are backends/cpu/matmul.c's: ip[0]/ip[1] transpose a's/b's
 * last two dims, batch dims broadcast, f64 runs in double (DGEMM through
 * CUBLAS_COMPUTE_64F), f16 and bf16 operands accumulate
 * in f32 and round the result once (cublasGemmEx with CUBLAS_COMPUTE_32F),
 * f32 operands are rounded to bf16 first under KILN_MATMUL_BF16, and
 * ex->accumulate adds the product into the output (beta = 1). Under
 * KILN_MATMUL_TF32 (or $KILN_CUDA_TF32=1) f32 products run on TF32 tensor
 * cores (CUBLAS_COMPUTE_32F_FAST_TF32, about 10 bits of mantissa); else
 * f32 ones are exact (CUBLAS_COMPUTE_32F_PEDANTIC: no reduced-precision
 * path, whatever the environment allows), as torch's allow_tf32 = False.
 *
 * kiln's row-major C = A B is cuBLAS's column-major C^T = B^T A^T, so B
 * goes first. An operand is used in place when each of its matrices has a
 * unit stride along one dim (a transpose is then cuBLAS's op T); anything
 * else (an expanded or sliced view) is first copied to contiguous scratch.
 * Batch dims that all operands step through alike are coalesced; the last
 * one runs as one cublasGemmStridedBatchedEx, the others loop on the host. */
#include "cu.h"

#include <limits.h>

/* An operand as the plan sees it: where it starts, its dtype, and the
 * strides of its matrix dims and of the output's batch dims (0 where it
 * is broadcast). */
typedef struct mm_opnd {
    void *ptr;
    kiln_dtype dt;
    int64_t sr, sc; /* row, column strides of op(X) as it enters the product */
    int64_t bs[KILN_MAX_DIMS];
} mm_opnd;

/* Stride of x's dim i (from the right end of out's nb batch dims: x has
 * fewer dims when it is broadcast), 0 where x has no such dim or a 1. */
static int64_t batch_stride(const kiln_tensor *x, int nb, int i) {
    int ix = i - (nb - (x->ndim - 2));
    return ix >= 0 && x->shape[ix] != 1 ? x->stride[ix] : 0;
}

static int64_t dim_stride(const kiln_tensor *x, int d) { return x->shape[d] == 1 ? 0 : x->stride[d]; }

/* X (r x c, X(i, j) at i*sr + j*sc) as a cuBLAS column-major operand:
 * op N with ld, or op T of the stored c x r matrix; false if neither. */
static bool blas_view(int64_t r, int64_t c, int64_t sr, int64_t sc, cublasOperation_t *op, int64_t *ld) {
    if ((r == 1 || sr == 1) && (c == 1 || sc >= r)) {
        *op = CUBLAS_OP_N, *ld = c == 1 ? r : sc;
        return true;
    }
    if ((c == 1 || sc == 1) && (r == 1 || sr >= c)) {
        *op = CUBLAS_OP_T, *ld = r == 1 ? c : sr;
        return true;
    }
    return false;
}

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

static bool bf16_rounding(const kiln_tensor *t) {
    return t->dtype == KILN_F32 && kiln_get_matmul_precision() == KILN_MATMUL_BF16;
}

static bool matmul_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    const kiln_tensor *a = t->src[0], *b = t->src[1];
    bool dt = (t->dtype == KILN_F32 || t->dtype == KILN_F16 || t->dtype == KILN_BF16 || t->dtype == KILN_F64) &&
              a->dtype == t->dtype &&
              b->dtype == t->dtype;
    if (!dt || a->ndim < 2 || b->ndim < 2 || t->ndim < 2) return false;
    int nb = t->ndim - 2;
    int64_t m = t->shape[nb], n = t->shape[nb + 1], k = a->shape[a->ndim - (t->ip[0] ? 2 : 1)];
    /* cuBLAS takes int sizes and leading dims: the worst leading dim is an
     * operand's whole extent; contiguous copies have k, m or n */
    int64_t ext_a = 0, ext_b = 0;
    for (int d = 0; d < a->ndim; d++) ext_a += (a->shape[d] - 1) * a->stride[d];
    for (int d = 0; d < b->ndim; d++) ext_b += (b->shape[d] - 1) * b->stride[d];
    for (int d = 0; d < a->ndim; d++)
        if (a->stride[d] < 0) return false;
    for (int d = 0; d < b->ndim; d++)
        if (b->stride[d] < 0) return false;
    return fits_int(m) && fits_int(n) && fits_int(k) && fits_int(ext_a + 1) && fits_int(ext_b + 1) && fits_int(m * n);
}

/* A contiguous copy of x (converted to dt) in scratch *buf; x's strides
 * are replaced by the copy's in *cx. */
static kiln_status to_scratch(kiln_cu *cu, const kiln_tensor *x, kiln_dtype dt, kiln_devbuf **buf, kiln_tensor *cx) {
    int64_t n = kiln_tensor_numel(x);
    *buf = kiln__cu_buffer_new(cu, (size_t)n * kiln__types[dt].size, false);
    if (!*buf) return kiln_last_status() ? kiln_last_status() : KILN_ERR_OOM;
    cu_walk w = kiln__cu_walk_self(x);
    kiln_status s = kiln__cu_launched(kiln__cu_copy(cu->stream, kiln__cu_dtype(x->dtype), kiln__cu_ptr(x), kiln__cu_dtype(dt),
                                                    (*buf)->ptr, n, &w),
                                      "matmul operand copy");
    *cx = *x;
    cx->dtype = dt;
    kiln__set_contiguous_strides(cx);
    cx->dbuf = *buf;
    cx->doff = 0;
    return s;
}

static cudaDataType_t blas_type(kiln_dtype t) {
    return t == KILN_F16 ? CUDA_R_16F : t == KILN_BF16 ? CUDA_R_16BF : t == KILN_F64 ? CUDA_R_64F : CUDA_R_32F;
}

static kiln_status matmul_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    bool ta = t->ip[0], tb = t->ip[1];
    int nb = t->ndim - 2;
    int64_t m = t->shape[nb], n = t->shape[nb + 1];
    kiln_tensor ca = *t->src[0], cb = *t->src[1]; /* the operands as used (maybe copies) */
    int64_t k = ca.shape[ca.ndim - (ta ? 2 : 1)];
    kiln_dtype in_dt = bf16_rounding(t) ? KILN_BF16 : t->dtype;
    kiln_devbuf *sa = NULL, *sb = NULL;
    kiln_status s = KILN_OK;
    cublasOperation_t opa = CUBLAS_OP_N, opb = CUBLAS_OP_N;
    int64_t lda = 0, ldb = 0;
    for (int pass = 0; pass < 2 && !s; pass++) {
        kiln_tensor *x = pass ? &cb : &ca;
        bool tr = pass ? tb : ta;
        int64_t r_s = dim_stride(x, x->ndim - 2), c_s = dim_stride(x, x->ndim - 1);
        /* op(x): rows and columns as they enter the product */
        int64_t xr = tr ? c_s : r_s, xc = tr ? r_s : c_s;
        bool ok;
        if (pass == 0) /* Y = op(A)^T, k x m: Y(kk, i) at kk*xc + i*xr */
            ok = x->dtype == in_dt && blas_view(k, m, xc, xr, &opa, &lda);
        else /* X = op(B)^T, n x k: X(j, kk) at j*xc + kk*xr */
            ok = x->dtype == in_dt && blas_view(n, k, xc, xr, &opb, &ldb);
        if (ok) continue;
        s = to_scratch(cu, x, in_dt, pass ? &sb : &sa, x);
        if (s) break;
        r_s = dim_stride(x, x->ndim - 2), c_s = dim_stride(x, x->ndim - 1);
        xr = tr ? c_s : r_s, xc = tr ? r_s : c_s;
        ok = pass == 0 ? blas_view(k, m, xc, xr, &opa, &lda) : blas_view(n, k, xc, xr, &opb, &ldb);
        if (!ok) s = kiln__errs(KILN_ERR_UNSUPPORTED, "cuda: matmul: a contiguous operand has no cuBLAS layout");
    }
    /* coalesced batch dims (size 1 dropped, neighbours merged where every
     * operand and the output step through them as through one) */
    int nbd = 0;
    int64_t bd[KILN_MAX_DIMS], as[KILN_MAX_DIMS], bs[KILN_MAX_DIMS], cs[KILN_MAX_DIMS];
    for (int i = 0; i < nb && !s; i++) {
        int64_t d = t->shape[i], x = batch_stride(&ca, nb, i), y = batch_stride(&cb, nb, i);
        if (d == 1) continue;
        if (nbd > 0 && as[nbd - 1] == x * d && bs[nbd - 1] == y * d) {
            bd[nbd - 1] *= d, as[nbd - 1] = x, bs[nbd - 1] = y;
            continue;
        }
        bd[nbd] = d, as[nbd] = x, bs[nbd] = y, nbd++;
    }
    for (int j = 0; j < nbd; j++) { /* the output is contiguous */
        cs[j] = m * n;
        for (int l = j + 1; l < nbd; l++) cs[j] *= bd[l];
    }
    /* f64: cuBLAS's DGEMM (compute and scalars in double); else f32 accumulation */
    bool f64 = t->dtype == KILN_F64;
    float alpha = 1.0f, beta = ex->accumulate ? 1.0f : 0.0f;
    double alpha64 = 1.0, beta64 = ex->accumulate ? 1.0 : 0.0;
    const void *pal = f64 ? (const void *)&alpha64 : (const void *)&alpha;
    const void *pbe = f64 ? (const void *)&beta64 : (const void *)&beta;
    bool f32 = t->dtype == KILN_F32 && in_dt == KILN_F32;
    bool tf32 = cu->tf32 || kiln_get_matmul_precision() == KILN_MATMUL_TF32;
    cublasComputeType_t ct = f64   ? CUBLAS_COMPUTE_64F
                             : f32 ? (tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC)
                                   : CUBLAS_COMPUTE_32F;
    cudaDataType_t it = blas_type(in_dt), ot = blas_type(t->dtype);
    size_t esz = kiln__types[in_dt].size, osz = kiln__types[t->dtype].size;
    /* the innermost coalesced batch dim is cuBLAS's batch; the rest loop here */
    int64_t inner = nbd ? bd[nbd - 1] : 1, outer = 1;
    for (int j = 0; j + 1 < nbd; j++) outer *= bd[j];
    int64_t ias = nbd ? as[nbd - 1] : 0, ibs = nbd ? bs[nbd - 1] : 0, ics = nbd ? cs[nbd - 1] : m * n;
    for (int64_t o = 0; o < outer && !s; o++) {
        int64_t offa = 0, offb = 0, offc = 0, r = o;
        for (int j = nbd - 1; j-- > 0;) {
            int64_t idx = r % bd[j];
            r /= bd[j];
            offa += idx * as[j], offb += idx * bs[j], offc += idx * cs[j];
        }
        const char *pa = (const char *)kiln__cu_ptr(&ca) + offa * (int64_t)esz;
        const char *pb = (const char *)kiln__cu_ptr(&cb) + offb * (int64_t)esz;
        char *pc = (char *)kiln__cu_ptr(t) + offc * (int64_t)osz;
        s = kiln__cu_blas_check(cublasGemmStridedBatchedEx(cu->blas, opb, opa, (int)n, (int)m, (int)k, pal, pb, it,
                                                           (int)ldb, ibs, pa, it, (int)lda, ias, pbe, pc, ot, (int)n,
                                                           ics, (int)inner, ct, CUBLAS_GEMM_DEFAULT),
                                "cublasGemmStridedBatchedEx");
    }
    /* the scratch goes back to the cache; its next user is queued after this */
    kiln__cu_buffer_free(cu, sa);
    kiln__cu_buffer_free(cu, sb);
    return s;
}

void kiln__cu_register_matmul(kiln_cu_kernel *tab) {
    tab[KILN_OP_MATMUL] = (kiln_cu_kernel){matmul_supports, matmul_record};
    kiln__cu_register_dfp(tab); /* cu_dfp.c */
}
