/* cu_optim.c — the optimizers' fused step ops on the CUDA backend (see
 * cu.h), updating the parameter and its state in place: SGD_STEP,
 * ADAM_STEP (Adam, AdamW, AMSGrad) and LION_STEP on f32 or f64 (the
 * dtypes the CPU kernels define; f16/bf16 parameters have no CPU step
 * either), with the layouts of optim/sgd.c, adam.c and lion.c, and their
 * 8-bit variants ADAM8_STEP, LION8_STEP, SGD8_STEP (optim/opt8bit.c, f32).
 * The kernels (k_optim.cu) read
 * the hyper leaf on the device (the step number too) and SGD's
 * first-step flag from ip[2], which kiln_optim_step writes before each
 * compute. */
#include "cu.h"

/* dtype, contiguous, n elements. */
static bool leaf_ok(const kiln_tensor *t, kiln_dtype dt, int64_t n) {
    return t->dtype == dt && kiln_tensor_is_contiguous(t) && kiln_tensor_numel(t) == n;
}

/* The node and every source but the hyper leaf (the last) are f32 or f64
 * arrays of one dtype shaped like the parameter; the hyper leaf holds at
 * least n_hyper f32. */
static bool step_ok(const kiln_tensor *t, int n_hyper) {
    kiln_dtype dt = t->src[0]->dtype;
    int64_t n = kiln_tensor_numel(t->src[0]);
    if ((dt != KILN_F32 && dt != KILN_F64) || t->dtype != dt) return false;
    for (int k = 0; k < t->nsrc - 1; k++)
        if (!leaf_ok(t->src[k], dt, n)) return false;
    const kiln_tensor *h = t->src[t->nsrc - 1];
    return leaf_ok(h, KILN_F32, kiln_tensor_numel(h)) && kiln_tensor_numel(h) >= n_hyper;
}

static bool is_f64(const kiln_tensor *t) { return t->src[0]->dtype == KILN_F64; }

/* SGD: src p, grad, [momentum buffer], hyper; ip[0]=nesterov ip[1]=has_momentum ip[2]=0 first, 1 after */
static bool sgd_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    return t->nsrc == (t->ip[1] ? 4 : 3) && step_ok(t, 4);
}

static kiln_status sgd_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    bool mom = t->ip[1] != 0;
    return kiln__cu_launched(kiln__cu_sgd(cu->stream, is_f64(t), kiln__cu_ptr(t->src[0]), kiln__cu_ptr(t->src[1]),
                                          mom ? kiln__cu_ptr(t->src[2]) : NULL, kiln_tensor_numel(t->src[0]),
                                          kiln__cu_ptr(t->src[mom ? 3 : 2]), t->ip[0] != 0, t->ip[2] == 0),
                             "sgd kernel");
}

/* Adam/AdamW: src p, grad, exp_avg, exp_avg_sq, [max_exp_avg_sq], hyper
 * (5 values and the step number); ip[0]=amsgrad ip[1]=decoupled */
static bool adam_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    return t->nsrc == (t->ip[0] ? 6 : 5) && step_ok(t, 5 + KILN__HYPER_STEP_SLOTS);
}

static kiln_status adam_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    bool ams = t->ip[0] != 0;
    return kiln__cu_launched(kiln__cu_adam(cu->stream, is_f64(t), kiln__cu_ptr(t->src[0]), kiln__cu_ptr(t->src[1]),
                                           kiln__cu_ptr(t->src[2]), kiln__cu_ptr(t->src[3]),
                                           ams ? kiln__cu_ptr(t->src[4]) : NULL, kiln_tensor_numel(t->src[0]),
                                           kiln__cu_ptr(t->src[t->nsrc - 1]), t->ip[1] != 0),
                             "adam kernel");
}

/* Lion: src p, grad, exp_avg, hyper */
static bool lion_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    return t->nsrc == 4 && step_ok(t, 4);
}

static kiln_status lion_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    return kiln__cu_launched(kiln__cu_lion(cu->stream, is_f64(t), kiln__cu_ptr(t->src[0]), kiln__cu_ptr(t->src[1]),
                                           kiln__cu_ptr(t->src[2]), kiln_tensor_numel(t->src[0]), kiln__cu_ptr(t->src[3])),
                             "lion kernel");
}

/* ---- 8-bit: p, grad, then (codes i32 [(n+3)/4], absmax f32 [(n+255)/256])
 * per state, maps f32 [512], hyper (optim/opt8bit.c) ---- */

static bool step8_ok(const kiln_tensor *t, int n_states, int n_hyper) {
    int ns = 4 + 2 * n_states;
    if (t->nsrc != ns) return false;
    int64_t n = kiln_tensor_numel(t->src[0]), nb = (n + 255) / 256;
    const kiln_tensor *h = t->src[ns - 1];
    bool ok = leaf_ok(t->src[0], KILN_F32, n) && leaf_ok(t->src[1], KILN_F32, n) && leaf_ok(t->src[ns - 2], KILN_F32, 512) &&
              leaf_ok(h, KILN_F32, kiln_tensor_numel(h)) && kiln_tensor_numel(h) >= n_hyper;
    for (int k = 0; k < n_states && ok; k++)
        ok = leaf_ok(t->src[2 + 2 * k], KILN_I32, (n + 3) / 4) && leaf_ok(t->src[3 + 2 * k], KILN_F32, nb);
    return ok;
}

static bool adam8_supports(const kiln_cu *cu, const kiln_tensor *t) { (void)cu; return step8_ok(t, 2, 5 + KILN__HYPER_STEP_SLOTS); }
static bool lion8_supports(const kiln_cu *cu, const kiln_tensor *t) { (void)cu; return step8_ok(t, 1, 4); }
static bool sgd8_supports(const kiln_cu *cu, const kiln_tensor *t) { (void)cu; return step8_ok(t, 1, 4); }

static kiln_status adam8_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    kiln_tensor *const *s = t->src;
    return kiln__cu_launched(kiln__cu_adam8(cu->stream, kiln__cu_ptr(s[0]), kiln__cu_ptr(s[1]), kiln__cu_ptr(s[2]),
                                            kiln__cu_ptr(s[3]), kiln__cu_ptr(s[4]), kiln__cu_ptr(s[5]), kiln__cu_ptr(s[6]),
                                            kiln_tensor_numel(s[0]), kiln__cu_ptr(s[7]), t->ip[1] != 0),
                             "adam8 kernel");
}

static kiln_status lion8_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    kiln_tensor *const *s = t->src;
    return kiln__cu_launched(kiln__cu_lion8(cu->stream, kiln__cu_ptr(s[0]), kiln__cu_ptr(s[1]), kiln__cu_ptr(s[2]),
                                            kiln__cu_ptr(s[3]), kiln__cu_ptr(s[4]), kiln_tensor_numel(s[0]), kiln__cu_ptr(s[5])),
                             "lion8 kernel");
}

static kiln_status sgd8_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    kiln_tensor *const *s = t->src;
    return kiln__cu_launched(kiln__cu_sgd8(cu->stream, kiln__cu_ptr(s[0]), kiln__cu_ptr(s[1]), kiln__cu_ptr(s[2]),
                                           kiln__cu_ptr(s[3]), kiln__cu_ptr(s[4]), kiln_tensor_numel(s[0]), kiln__cu_ptr(s[5]),
                                           t->ip[0] != 0, t->ip[2] == 0),
                             "sgd8 kernel");
}

void kiln__cu_register_optim(kiln_cu_kernel *tab) {
    tab[KILN_OP_ADAM8_STEP] = (kiln_cu_kernel){adam8_supports, adam8_record};
    tab[KILN_OP_LION8_STEP] = (kiln_cu_kernel){lion8_supports, lion8_record};
    tab[KILN_OP_SGD8_STEP] = (kiln_cu_kernel){sgd8_supports, sgd8_record};
    tab[KILN_OP_SGD_STEP] = (kiln_cu_kernel){sgd_supports, sgd_record};
    tab[KILN_OP_ADAM_STEP] = (kiln_cu_kernel){adam_supports, adam_record};
    tab[KILN_OP_LION_STEP] = (kiln_cu_kernel){lion_supports, lion_record};
}
