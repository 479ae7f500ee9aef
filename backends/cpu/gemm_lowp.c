/* gemm_lowp.c — bf16/f16 GEMM. (Scaffolding: not implemented yet, so the
 * matmul kernel reports these dtypes as unsupported, as before.) */
#include "gemm.h"

kiln_status kiln__gemm_lowp(kiln_dtype in_dt, kiln_dtype c_dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                            const void *a, int64_t lda, const void *b, int64_t ldb, void *c, int64_t ldc,
                            int n_threads) {
    (void)c_dt, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c;
    (void)ldc, (void)n_threads;
    return kiln__errs(KILN_ERR_UNSUPPORTED, "matmul: no CPU kernel for %s", kiln_dtype_name(in_dt));
}
