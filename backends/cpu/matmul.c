/* matmul.c — the CPU matmul kernel: one GEMM (gemm.h) per batch matrix
 * (a broadcast operand is re-read through a zero batch stride), or a
 * single GEMM when a shared 2-D b lets the whole batch of a act as one
 * tall matrix. Operands are contiguous, stored untransposed; ip[0]/ip[1]
 * say whether the kernel uses the transpose of a's/b's last two dims.
 * A batch of small f32/f64 matrices runs batch-parallel (one thread per
 * GEMM, on kiln's own kernels: OpenBLAS runs on the calling thread only);
 * big ones run one by one with every thread. */
#include "gemm.h"
#include "gemm_kernels.h"
#include "pool.h"

/* Element stride of each output batch dim in a contiguous operand x
 * (0 where x has no such dim or a 1 that is broadcast). */
static void batch_strides(const kiln_tensor *x, int nb, const int64_t *bshape, int64_t *stride) {
    int64_t s = x->shape[x->ndim - 1] * x->shape[x->ndim - 2];
    int xb = x->ndim - 2;
    for (int i = nb - 1; i >= 0; i--) {
        int ix = i - (nb - xb);
        int64_t d = ix >= 0 ? x->shape[ix] : 1;
        stride[i] = d == bshape[i] && d != 1 ? s : 0;
        s *= d;
    }
}

/* Element offsets of batch p's a and b. */
static void batch_offsets(int64_t p, int nb, const int64_t *shape, const int64_t *sa, const int64_t *sb, int64_t *oa,
                          int64_t *ob) {
    for (int d = nb - 1; d >= 0; d--) {
        int64_t i = p % shape[d];
        p /= shape[d];
        *oa += i * sa[d];
        *ob += i * sb[d];
    }
}

/* Up to this many multiply-adds per matrix, a batch is spread over the
 * threads rather than each GEMM (one 2-thread GEMM this small spends much
 * of its time waking and joining). */
#define SMALL_GEMM_WORK (256.0 * 256 * 256)

/* C[m, n] = op(A) op(B) for one matrix of t's dtype. f32 goes through
 * bf16 when the matmul precision asks for it. */
static kiln_status gemm(kiln_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                        const void *b, int64_t ldb, void *c, int nt) {
    kiln_status s = KILN_OK;
    if (dt == KILN_F32 && kiln_get_matmul_precision() != KILN_MATMUL_BF16)
        kiln__sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, n, nt);
    else if (dt == KILN_F64)
        kiln__dgemm(ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, n, nt);
    else
        s = kiln__gemm_lowp(dt == KILN_F32 ? KILN_F32 : dt, dt, ta, tb, m, n, k, a, lda, b, ldb, c, n, nt);
    return s;
}

/* C += op(A) op(B) (ex->accumulate: the graph let this matmul add straight
 * into a gradient): beta = 1 where the GEMM can, else through a scratch. */
static kiln_status gemm_acc(kiln_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                            int64_t lda, const void *b, int64_t ldb, void *c, int nt) {
    if (dt == KILN_F32 && kiln_get_matmul_precision() != KILN_MATMUL_BF16) {
        kiln__sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 1.0f, c, n, nt);
        return KILN_OK;
    }
    if (dt == KILN_F64) {
        kiln__dgemm(ta, tb, m, n, k, 1.0, a, lda, b, ldb, 1.0, c, n, nt);
        return KILN_OK;
    }
    const kiln_type_traits *tr = &kiln__types[dt];
    void *tmp = kiln__malloc((size_t)(m * n) * tr->size + 1);
    if (!tmp) return kiln__errs(KILN_ERR_OOM, "matmul: out of memory for a %lld x %lld scratch", (long long)m, (long long)n);
    kiln_status s = gemm(dt, ta, tb, m, n, k, a, lda, b, ldb, tmp, nt);
    for (int64_t i = 0; !s && i < m * n; i++) tr->set(c, i, tr->get(c, i) + tr->get(tmp, i));
    free(tmp);
    return s;
}

/* A batch of small GEMMs, one per matrix on one thread. */
typedef struct batch_job {
    kiln_tensor *t;
    bool ta, tb;
    int nb;
    int64_t m, n, k, lda, ldb;
    const int64_t *sa, *sb;
} batch_job;

static void batch_range(void *arg, int64_t p0, int64_t p1, int tid) {
    const batch_job *j = arg;
    const kiln_tensor *t = j->t, *a = t->src[0], *b = t->src[1];
    const int64_t m = j->m, n = j->n, k = j->k;
    (void)tid;
    for (int64_t p = p0; p < p1; p++) {
        int64_t oa = 0, ob = 0;
        batch_offsets(p, j->nb, t->shape, j->sa, j->sb, &oa, &ob);
        if (t->dtype == KILN_F32)
            kiln__sgemm_own(j->ta, j->tb, m, n, k, 1.0f, (const float *)a->data + oa, j->lda,
                            (const float *)b->data + ob, j->ldb, 0.0f, (float *)t->data + p * m * n, n, 1);
        else
            kiln__dgemm_own(j->ta, j->tb, m, n, k, 1.0, (const double *)a->data + oa, j->lda,
                            (const double *)b->data + ob, j->ldb, 0.0, (double *)t->data + p * m * n, n, 1);
    }
}

static kiln_status matmul_kernel(kiln_tensor *t, const kiln_exec *ex) {
    const kiln_tensor *a = t->src[0], *b = t->src[1];
    bool ta = t->ip[0], tb = t->ip[1];
    int nb = t->ndim - 2;
    int64_t m = t->shape[nb], n = t->shape[nb + 1], k = a->shape[a->ndim - (ta ? 2 : 1)];
    int64_t lda = ta ? m : k, ldb = tb ? k : n;
    if (!k) { /* a sum over K = 0 terms: zeros, or nothing to add into a gradient (and BLAS would refuse lda 0) */
        if (!ex->accumulate) memset(t->data, 0, kiln_tensor_nbytes(t));
        return KILN_OK;
    }
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "matmul: a dim above 2^31 - 1 is beyond BLAS (m %lld n %lld k %lld)",
                          (long long)m, (long long)n, (long long)k);
    int64_t sa[KILN_MAX_DIMS], sb[KILN_MAX_DIMS], batch = kiln__numel(nb, t->shape);
    batch_strides(a, nb, t->shape, sa);
    batch_strides(b, nb, t->shape, sb);
    /* b shared by every batch and a's matrices stored one after another
     * (not transposed, not broadcast): a is one [batch*m, k] matrix */
    bool fold = !ta && batch > 1 && kiln__numel(b->ndim - 2, b->shape) == 1 &&
                kiln__numel(a->ndim - 2, a->shape) == batch && batch * m <= INT32_MAX;
    if (!kiln__is_float(t->dtype))
        return kiln__errs(KILN_ERR_UNSUPPORTED, "matmul: no CPU kernel for %s", kiln_dtype_name(t->dtype));
    if (ex->accumulate) {
        if (batch != 1) return kiln__errs(KILN_ERR_UNSUPPORTED, "matmul: accumulating needs one matrix, not %lld", (long long)batch);
        return gemm_acc(t->dtype, ta, tb, m, n, k, a->data, lda, b->data, ldb, t->data, ex->n_threads);
    }
    if (fold) return gemm(t->dtype, false, tb, batch * m, n, k, a->data, lda, b->data, ldb, t->data, ex->n_threads);
    size_t es = kiln__types[t->dtype].size;
    /* many small GEMMs: across the batch, each on one thread */
    int nt = ex->n_threads;
    bool own_dt = t->dtype == KILN_F64 || (t->dtype == KILN_F32 && kiln_get_matmul_precision() != KILN_MATMUL_BF16);
    if (own_dt && nt > 1 && batch >= 2 * nt && (double)m * n * k <= SMALL_GEMM_WORK) {
        batch_job j = {t, ta, tb, nb, m, n, k, lda, ldb, sa, sb};
        kiln__pool_for(batch, 1, nt, batch_range, &j);
        return KILN_OK;
    }
    for (int64_t p = 0; p < batch; p++) {
        int64_t oa = 0, ob = 0;
        batch_offsets(p, nb, t->shape, sa, sb, &oa, &ob);
        kiln_status s = gemm(t->dtype, ta, tb, m, n, k, (const char *)a->data + (size_t)oa * es, lda,
                             (const char *)b->data + (size_t)ob * es, ldb, (char *)t->data + (size_t)(p * m * n) * es,
                             ex->n_threads);
        if (s) return s;
    }
    return KILN_OK;
}

void kiln__cpu_register_matmul(kiln_cpu_kernel *tab) { tab[KILN_OP_MATMUL] = matmul_kernel; }
