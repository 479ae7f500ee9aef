/* cu_optim_lowrank.c — the low-rank optimizer steps on the CUDA backend
 * (see cu.h): GALORE_STEP and GALORE8_STEP (optim/galore.c), APOLLO_STEP
 * (optim/apollo.c), with the CPU kernels' semantics
 * (backends/cpu/optim_galore.c, optim_apollo.c) and the Vulkan backend's
 * plan (vk_optim_galore.c, vk_optim_apollo.c). The projections are cuBLAS
 * GEMMs (f32, CUBLAS_COMPUTE_32F_PEDANTIC: never TF32, whatever
 * KILN_CUDA_TF32 says; the sums run in another order than the CPU's GEMM,
 * so results agree to f32 rounding, not bit for bit); the rest is
 * k_optim_lowrank.cu.
 *
 * GaLore: on a refresh step (ip[1]) the record function downloads G, runs
 * the host's SVD (kiln__galore_refresh, core/lowrank.c: LAPACK, once every
 * update_gap steps; a device SVD would be a project of its own) and
 * uploads P; every step then queues
 *   R = G P^T or P^T G                     (cuBLAS, into scratch)
 *   the step's scalars from the hyper leaf (one thread)
 *   Adam on R, f32 moments or 8-bit states (R becomes N)
 *   p += alpha (N P or P N)                (cuBLAS, beta 1, alpha read on
 *                                           the device: pointer mode DEVICE)
 *   p *= 1 - lr wd
 * so a step that does not refresh never touches the host.
 *
 * APOLLO: the projector regenerated on the device from the seed, R by
 * cuBLAS, the moments and per-channel sums (double), the factors and the
 * norm-growth limiter on prev_norm (an f64 leaf), the update of p. */
#include "cu.h"
#include "lowrank.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>

/* dtype, contiguous, n elements. */
static bool leaf_ok(const kiln_tensor *t, kiln_dtype dt, int64_t n) {
    return t->dtype == dt && kiln_tensor_is_contiguous(t) && kiln_tensor_numel(t) == n;
}

static kiln_status oom(const char *who) {
    kiln_status s = kiln_last_status();
    return s ? s : kiln__errs(KILN_ERR_OOM, "%s: no device memory for the scratch", who);
}

/* Row-major C [M, N] = alpha op(A) op(B) + beta C, op(A) [M, K], through
 * column-major cuBLAS as C^T = op(B)^T op(A)^T. alpha and beta are host
 * pointers, or device pointers when dev_scalars. */
static kiln_status sgemm_rm(kiln_cu *cu, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *alpha,
                            const float *A, int64_t lda, const float *B, int64_t ldb, const float *beta, float *C,
                            int64_t ldc, bool dev_scalars) {
    kiln_status s = KILN_OK;
    if (dev_scalars &&
        (s = kiln__cu_blas_check(cublasSetPointerMode(cu->blas, CUBLAS_POINTER_MODE_DEVICE), "cublasSetPointerMode")))
        return s;
    s = kiln__cu_blas_check(cublasGemmEx(cu->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         (int)N, (int)M, (int)K, alpha, B, CUDA_R_32F, (int)ldb, A, CUDA_R_32F,
                                         (int)lda, beta, C, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F_PEDANTIC,
                                         CUBLAS_GEMM_DEFAULT),
                            "cublasGemmEx (low-rank projection)");
    if (dev_scalars) { /* back to the mode the other families assume */
        kiln_status s2 = kiln__cu_blas_check(cublasSetPointerMode(cu->blas, CUBLAS_POINTER_MODE_HOST),
                                             "cublasSetPointerMode");
        if (!s) s = s2;
    }
    return s;
}

/* ---- GaLore: src p, grad, P, then m, v (f32) or (ip[2], 8-bit GaLore's
 * 8-bit states) m codes, v codes (I32), absmax [2, nb], maps [512]; hyper
 * last (lr, beta1, beta2, eps, weight_decay, then the step number t,
 * read on the device); ip[1] = refresh; fp[0] = scale ---- */

static bool galore_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    bool q8 = t->op == KILN_OP_GALORE8_STEP && t->ip[2] != 0;
    if (t->nsrc != (q8 ? 8 : 6) || t->src[0]->ndim != 2 || t->src[2]->ndim != 2) return false;
    const kiln_tensor *p = t->src[0], *h = t->src[t->nsrc - 1];
    int64_t m = p->shape[0], n = p->shape[1], nr = kiln__galore_state_numel(t), nb = (nr + 255) / 256;
    bool right = m >= n;
    int64_t r = right ? t->src[2]->shape[0] : t->src[2]->shape[1];
    /* cuBLAS takes int sizes and leading dimensions */
    bool ok = m <= INT_MAX && n <= INT_MAX && r >= 1 && r <= INT_MAX && leaf_ok(p, KILN_F32, m * n) &&
              leaf_ok(t->src[1], KILN_F32, m * n) && leaf_ok(t->src[2], KILN_F32, r * (right ? n : m)) &&
              leaf_ok(h, KILN_F32, kiln_tensor_numel(h)) && kiln_tensor_numel(h) >= 5 + KILN__HYPER_STEP_SLOTS;
    if (q8)
        return ok && leaf_ok(t->src[3], KILN_I32, (nr + 3) / 4) && leaf_ok(t->src[4], KILN_I32, (nr + 3) / 4) &&
               leaf_ok(t->src[5], KILN_F32, 2 * nb) && leaf_ok(t->src[6], KILN_F32, 512);
    return ok && leaf_ok(t->src[3], KILN_F32, nr) && leaf_ok(t->src[4], KILN_F32, nr);
}

static kiln_status galore_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    bool eight = t->op == KILN_OP_GALORE8_STEP, q8 = eight && t->ip[2] != 0;
    const char *who = eight ? "galore8_step" : "galore_step";
    kiln_tensor *p = t->src[0], *grad = t->src[1], *proj = t->src[2], *h = t->src[t->nsrc - 1];
    int64_t m = p->shape[0], n = p->shape[1], nr = kiln__galore_state_numel(t);
    bool right = m >= n;
    int64_t r = right ? proj->shape[0] : proj->shape[1];
    kiln_status s;
    if (t->ip[1] && (s = kiln__galore_refresh_device(&cu->base, t, who))) return s;
    /* scratch: R [nr], then the scalars (alpha, 1, eps) */
    kiln_devbuf *d = kiln__cu_buffer_new(cu, (size_t)(nr + 4) * sizeof(float), false);
    if (!d) return oom(who);
    float *R = d->ptr, *sc = R + nr;
    const float *G = kiln__cu_ptr(grad), *P = kiln__cu_ptr(proj), *hp = kiln__cu_ptr(h);
    float *W = kiln__cu_ptr(p);
    const float one = 1.0f, zero = 0.0f;
    if (right) /* R = G P^T: [m, n] x [r, n]^T */
        s = sgemm_rm(cu, false, true, m, r, n, &one, G, n, P, n, &zero, R, r, false);
    else /* R = P^T G: [m, r]^T x [m, n] */
        s = sgemm_rm(cu, true, false, r, n, m, &one, P, r, G, n, &zero, R, n, false);
    if (!s)
        s = kiln__cu_launched(kiln__cu_galore_scalars(cu->stream, hp, t->fp[0], eight, sc), "galore scalars");
    if (!s && q8) {
        kiln_tensor *const *src = t->src;
        float *a = kiln__cu_ptr(src[5]);
        s = kiln__cu_launched(kiln__cu_lowrank_adam8(cu->stream, R, kiln__cu_ptr(src[3]), kiln__cu_ptr(src[4]), a,
                                                     a + (nr + 255) / 256, kiln__cu_ptr(src[6]), nr, hp, sc),
                              "galore 8-bit adam kernel");
    } else if (!s) {
        s = kiln__cu_launched(kiln__cu_lowrank_adam(cu->stream, R, kiln__cu_ptr(t->src[3]), kiln__cu_ptr(t->src[4]), nr,
                                                    hp, sc),
                              "galore adam kernel");
    }
    /* p += alpha (N P or P N), both [m, r] x [r, n] */
    if (!s && right) s = sgemm_rm(cu, false, false, m, n, r, sc, R, r, P, n, sc + 1, W, n, true);
    else if (!s) s = sgemm_rm(cu, false, false, m, n, r, sc, P, r, R, n, sc + 1, W, n, true);
    if (!s) s = kiln__cu_launched(kiln__cu_galore_decay(cu->stream, W, m * n, hp), "galore weight decay");
    kiln__cu_buffer_free(cu, d); /* reused only by work queued after these */
    return s;
}

/* ---- APOLLO: src p, grad, exp_avg, exp_avg_sq, prev_norm (f64 [1]), hyper;
 * ip[0] = rank, ip[1] = update_gap, ip[2] = the projector's period,
 * ip[3] = mini, ip[4] = the parameter's seed; fp[0] = scale; the step
 * number read from the hyper leaf on the device ---- */

static bool apollo_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    if (t->nsrc != 6 || t->src[0]->ndim != 2 || t->ip[0] < 1 || t->ip[1] < 1) return false;
    kiln_apollo_dims d = kiln__apollo_dims(t);
    const kiln_tensor *h = t->src[5];
    return d.m <= INT_MAX && d.n <= INT_MAX && d.rank <= INT_MAX && leaf_ok(t->src[0], KILN_F32, d.m * d.n) &&
           leaf_ok(t->src[1], KILN_F32, d.m * d.n) && leaf_ok(t->src[2], KILN_F32, d.nr) &&
           leaf_ok(t->src[3], KILN_F32, d.nr) && leaf_ok(t->src[4], KILN_F64, 1) &&
           leaf_ok(h, KILN_F32, kiln_tensor_numel(h)) && kiln_tensor_numel(h) >= 5 + KILN__HYPER_STEP_SLOTS;
}

static kiln_status apollo_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    kiln_apollo_dims d = kiln__apollo_dims(t);
    /* scratch: the f64 sums S [3 nch] first (8-byte aligned), then P, R, F [nch + 1] */
    size_t bytes = (size_t)(3 * d.nch) * sizeof(double) + (size_t)(d.np + d.nr + d.nch + 1) * sizeof(float);
    kiln_devbuf *buf = kiln__cu_buffer_new(cu, bytes, false);
    if (!buf) return oom("apollo_step");
    double *S = buf->ptr;
    float *P = (float *)(S + 3 * d.nch), *R = P + d.np, *F = R + d.nr;
    const float *G = kiln__cu_ptr(t->src[1]), *hp = kiln__cu_ptr(t->src[5]);
    float *W = kiln__cu_ptr(t->src[0]);
    uint64_t seed = kiln__apollo_proj_seed((uint64_t)t->ip[4], t->ip[2]);
    const float one = 1.0f, zero = 0.0f;
    kiln_status s = kiln__cu_launched(
        kiln__cu_apollo_projector(cu->stream, P, d.np, kiln__hash64(seed), 1.0 / sqrt((double)d.rank)),
        "apollo projector kernel");
    if (!s && d.right) /* R = G P^T: [m, n] x [rank, n]^T */
        s = sgemm_rm(cu, false, true, d.m, d.rank, d.n, &one, G, d.n, P, d.n, &zero, R, d.rank, false);
    else if (!s) /* R = P^T G: [m, rank]^T x [m, n] */
        s = sgemm_rm(cu, true, false, d.rank, d.n, d.m, &one, P, d.rank, G, d.n, &zero, R, d.n, false);
    if (!s)
        s = kiln__cu_launched(kiln__cu_apollo_moments(cu->stream, G, R, kiln__cu_ptr(t->src[2]), kiln__cu_ptr(t->src[3]),
                                                      hp, S, d.m, d.n, d.rank, d.right),
                              "apollo moments kernel");
    if (!s)
        s = kiln__cu_launched(kiln__cu_apollo_norm(cu->stream, S, d.nch, hp, kiln__cu_ptr(t->src[4]), F,
                                                   sqrt(t->fp[0]), t->ip[3] != 0),
                              "apollo norm kernel");
    if (!s) s = kiln__cu_launched(kiln__cu_apollo_update(cu->stream, W, G, F, d.m, d.n, d.right), "apollo update kernel");
    kiln__cu_buffer_free(cu, buf);
    return s;
}

void kiln__cu_register_optim_lowrank(kiln_cu_kernel *tab) {
    tab[KILN_OP_GALORE_STEP] = (kiln_cu_kernel){galore_supports, galore_record};
    tab[KILN_OP_GALORE8_STEP] = (kiln_cu_kernel){galore_supports, galore_record};
    tab[KILN_OP_APOLLO_STEP] = (kiln_cu_kernel){apollo_supports, apollo_record};
}
