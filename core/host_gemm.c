/* host_gemm.c — the host GEMM that the CPU backend lends (host_gemm.h). */
#include "host_gemm.h"

static kiln_sgemm_fn *lent;

void kiln__host_sgemm_lend(kiln_sgemm_fn *gemm) { lent = gemm; }

kiln_sgemm_fn *kiln__host_sgemm(const char *who) {
    if (!lent) kiln__err(KILN_ERR_UNSUPPORTED, "%s: no CPU backend lent its GEMM (a link without it)", who);
    return lent;
}
