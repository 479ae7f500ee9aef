/* vk_nn.c — the row kernels of the nn family on the Vulkan backend (see
 * vk.h): softmax and log_softmax with their fused backward, layer_norm and
 * rms_norm with theirs (packed dx|dw|db), cross_entropy and its backward,
 * batch_norm in training mode (running statistics updated in place) and
 * its backward, a workgroup per channel.
 * f32 only, every operand contiguous (the constructors make them so);
 * the rest goes to the CPU. Semantics are those of backends/cpu/nn.c,
 * nn_norm.c and nn_loss.c.
 *
 * A row kernel gives each row a group of W invocations of a 256-wide
 * workgroup (shaders/nn_rows.glsl); W grows with the row length, up to a
 * cap that depends on the device (row_lanes). Rows whose length and
 * operand bases are multiples of 4 are read as vec4 (the _q kernels,
 * else _s); each op has its own kernel (variants.txt), since lavapipe
 * runs both sides of a branch. There are
 * no float atomics, so a reduction across rows parks its partial values
 * in a part of the output that a later dispatch overwrites (the norm
 * backward's row statistics) or in scratch memory (cross_entropy's row
 * losses, cross_entropy_grad's count) for a later dispatch to add up. */
#include "vk.h"

#include <stdio.h>
#include <stdlib.h>

#define NN_LOCAL 256u

static bool f32_ok(const kiln_vk *vk, const kiln_tensor *t) {
    return t->dtype == KILN_F32 && kiln_tensor_is_contiguous(t) && kiln__vk_fits(vk, t);
}

static bool i32_ok(const kiln_vk *vk, const kiln_tensor *t) {
    return t->dtype == KILN_I32 && kiln_tensor_is_contiguous(t) && kiln__vk_fits(vk, t);
}

/* Lanes per row for rows of q elements (vec4 or float), rows of them: the
 * largest power of two W with 4 W^2 <= q. Combining a row's W partial
 * results costs each lane about W steps, so a lane's own q / W elements
 * stay 4 times that. On a device with small subgroups (lavapipe's 8, a
 * CPU), where each barrier switches between all of a workgroup's
 * invocations, NN_CPU_WIDTH: one lane per row needs no barrier at all,
 * and measured no slower than 2 or 4 there. Elsewhere up to 32
 * (neighbouring lanes still read whole cache lines). Rows too few to fill
 * NN_MIN_GROUPS workgroups get more, up to a whole workgroup per row.
 * KILN_VK_ROW_LANES overrides the cap (for tuning). */
#define NN_MAX_WIDTH 32u
#define NN_CPU_WIDTH 1u
#define NN_MIN_GROUPS 16

static uint32_t row_lanes(const kiln_vk *vk, int64_t rows, int64_t q) {
    uint32_t cap = kiln__vk_caps(vk)->subgroup_size >= 16 ? NN_MAX_WIDTH : NN_CPU_WIDTH, w = 1;
    const char *env = getenv("KILN_VK_ROW_LANES");
    if (env && atoi(env) > 0) cap = (uint32_t)atoi(env);
    while (w < NN_LOCAL && 16 * (int64_t)w * w <= q && (w < cap || rows * w < (int64_t)NN_LOCAL * NN_MIN_GROUPS))
        w <<= 1;
    return w;
}

/* Workgroups for rows of width w (256 / w rows each), spread over x and y
 * as the shaders' nn_row() expects. */
static void row_groups(const kiln_vk *vk, int64_t rows, uint32_t w, uint32_t g[3]) {
    uint64_t per = NN_LOCAL / w, wgs = ((uint64_t)rows + per - 1) / per;
    kiln__vk_groups_1d(vk, wgs * NN_LOCAL, NN_LOCAL, g);
}

static int64_t last_dim(const kiln_tensor *t) { return t->shape[t->ndim - 1]; }

/* Rows read as vec4 (the _q kernels) when the row length and every
 * operand's base are multiples of 4, so each row starts on a vec4. */
static bool rows_v4(int64_t c, const uint32_t *base, int n) {
    if (c % 4) return false;
    for (int i = 0; i < n; i++)
        if (base[i] % 4) return false;
    return true;
}

/* The kernel name: prefix, then _q (vec4) or _s. */
static const char *kernel(char *buf, size_t size, const char *prefix, bool v4) {
    snprintf(buf, size, "%s_%s", prefix, v4 ? "q" : "s");
    return buf;
}

/* ---- softmax, log_softmax, softmax_grad ---- */

static bool softmax_supports(const kiln_vk *vk, const kiln_tensor *t) {
    if (!f32_ok(vk, t) || kiln_tensor_numel(t) == 0) return false;
    for (int i = 0; i < t->nsrc; i++)
        if (!f32_ok(vk, t->src[i])) return false;
    return true;
}

/* Push constants count elements of the kernel's type (vec4 or float). */
static kiln_status softmax_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0];
    int64_t n = last_dim(t), rows = kiln_tensor_numel(t) / n;
    uint32_t base[2] = {kiln__vk_base(vk, x), kiln__vk_base(vk, t)};
    bool v4 = rows_v4(n, base, 2);
    uint32_t vw = v4 ? 4 : 1, w = row_lanes(vk, rows, n / vw), causal = t->ip[0] != 0;
    struct {
        uint32_t rows, n, mrows, causal, w, nq, x0, y0;
    } pc = {(uint32_t)rows, (uint32_t)n, causal ? (uint32_t)t->shape[t->ndim - 2] : 1, causal, w,
            (uint32_t)n / vw, base[0] / vw, base[1] / vw};
    char name[32];
    kiln_vk_dispatch d = {.shader = kernel(name, sizeof name, t->op == KILN_OP_LOG_SOFTMAX ? "nn_log_softmax" : "nn_softmax", v4),
                          .n = 2, .bind = {x, t}, .push = &pc, .push_size = sizeof pc};
    row_groups(vk, rows, w, d.groups);
    return kiln__vk_dispatch(vk, &d);
}

static kiln_status softmax_grad_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *y = t->src[0], *gy = t->src[1];
    int64_t n = last_dim(t), rows = kiln_tensor_numel(t) / n;
    uint32_t base[3] = {kiln__vk_base(vk, y), kiln__vk_base(vk, gy), kiln__vk_base(vk, t)};
    bool v4 = rows_v4(n, base, 3);
    uint32_t vw = v4 ? 4 : 1, w = row_lanes(vk, rows, n / vw), causal = t->ip[0] != 0;
    struct {
        uint32_t rows, n, mrows, causal, w, nq, y0, gy0, gx0;
    } pc = {(uint32_t)rows, (uint32_t)n, causal ? (uint32_t)t->shape[t->ndim - 2] : 1, causal, w,
            (uint32_t)n / vw, base[0] / vw, base[1] / vw, base[2] / vw};
    char name[32];
    kiln_vk_dispatch d = {.shader = kernel(name, sizeof name, t->ip[1] ? "nn_log_softmax_grad" : "nn_softmax_grad", v4),
                          .n = 3, .bind = {y, gy, t}, .push = &pc, .push_size = sizeof pc};
    row_groups(vk, rows, w, d.groups);
    return kiln__vk_dispatch(vk, &d);
}

/* ---- layer_norm, rms_norm ---- */

/* Forward src: x [, w [, b]]; backward src: x [, w], gy (ip[0] = has_w). */
static bool norm_supports(const kiln_vk *vk, const kiln_tensor *t) {
    if (!f32_ok(vk, t) || !f32_ok(vk, t->src[0]) || kiln_tensor_numel(t->src[0]) == 0) return false;
    for (int i = 1; i < t->nsrc; i++)
        if (!f32_ok(vk, t->src[i])) return false;
    return true;
}

static kiln_status norm_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    bool rms = t->op == KILN_OP_RMS_NORM, has_w = t->ip[0] != 0, has_b = !rms && t->ip[1] != 0;
    const kiln_tensor *x = t->src[0], *w = has_w ? t->src[1] : x, *b = has_b ? t->src[1 + has_w] : x;
    int64_t c = last_dim(t), rows = kiln_tensor_numel(t) / c;
    uint32_t base[4] = {kiln__vk_base(vk, x), kiln__vk_base(vk, w), kiln__vk_base(vk, b), kiln__vk_base(vk, t)};
    bool v4 = rows_v4(c, base, 4);
    uint32_t vw = v4 ? 4 : 1, wd = row_lanes(vk, rows, c / vw);
    struct {
        uint32_t rows, c, has_w, has_b, wd, nq;
        float eps;
        uint32_t x0, w0, b0, y0;
    } pc = {(uint32_t)rows, (uint32_t)c, has_w, has_b, wd, (uint32_t)c / vw, (float)t->fp[0],
            base[0] / vw, base[1] / vw, base[2] / vw, base[3] / vw};
    char name[32];
    kiln_vk_dispatch d = {.shader = kernel(name, sizeof name, rms ? "nn_rms_norm" : "nn_layer_norm", v4), .n = 4,
                          .bind = {x, w, b, t}, .push = &pc, .push_size = sizeof pc};
    row_groups(vk, rows, wd, d.groups);
    return kiln__vk_dispatch(vk, &d);
}

/* Three passes: row statistics parked in dx (nn_*_norm_stats_*), dw/db
 * per column from them (nn_*_norm_wb_*), then dx over the statistics
 * (nn_*_norm_dx_*). */
static kiln_status norm_grad_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    bool rms = t->op == KILN_OP_RMS_NORM_GRAD, has_w = t->ip[0] != 0, has_b = !rms && t->ip[1] != 0;
    const kiln_tensor *x = t->src[0], *w = has_w ? t->src[1] : x, *gy = t->src[1 + has_w];
    int64_t c = last_dim(x), rows = kiln_tensor_numel(x) / c;
    uint32_t x0 = kiln__vk_base(vk, x), o0 = kiln__vk_base(vk, t), gy0 = kiln__vk_base(vk, gy);
    uint32_t base[4] = {x0, kiln__vk_base(vk, w), gy0, o0};
    bool v4s = rows_v4(c, base, 1), v4 = rows_v4(c, base, 4);
    char name[32];
    uint32_t vw = v4s ? 4 : 1, wd = row_lanes(vk, rows, c / vw);
    struct {
        uint32_t rows, c, wd, nq;
        float eps;
        uint32_t x0, o0;
    } ps = {(uint32_t)rows, (uint32_t)c, wd, (uint32_t)c / vw, (float)t->fp[0], x0 / vw, o0};
    kiln_vk_dispatch d = {.shader = kernel(name, sizeof name, rms ? "nn_rms_norm_stats" : "nn_layer_norm_stats", v4s),
                          .n = 2, .bind = {x, t}, .push = &ps, .push_size = sizeof ps};
    row_groups(vk, rows, wd, d.groups);
    kiln_status s = kiln__vk_dispatch(vk, &d);
    if (s) return s;
    if (has_w || has_b) {
        bool v4w = rows_v4(c, (uint32_t[]){x0, gy0, o0}, 3);
        uint32_t q = v4w ? 4 : 1;
        struct {
            uint32_t rows, c, nq, has_w, has_b, x0, gy0, o0;
        } pw = {(uint32_t)rows, (uint32_t)c, (uint32_t)c / q, has_w, has_b, x0 / q, gy0 / q, o0 / q};
        d = (kiln_vk_dispatch){.shader = kernel(name, sizeof name, rms ? "nn_rms_norm_wb" : "nn_layer_norm_wb", v4w),
                               .n = 3, .bind = {x, gy, t}, .push = &pw, .push_size = sizeof pw};
        kiln__vk_groups_1d(vk, (uint64_t)(c + 31) / 32 * NN_LOCAL, NN_LOCAL, d.groups); /* 32 columns each */
        if ((s = kiln__vk_dispatch(vk, &d))) return s;
    }
    vw = v4 ? 4 : 1;
    wd = row_lanes(vk, rows, c / vw);
    struct {
        uint32_t rows, c, has_w, wd, nq, x0, w0, gy0, o0;
    } px = {(uint32_t)rows, (uint32_t)c, has_w, wd, (uint32_t)c / vw, x0 / vw, base[1] / vw, gy0 / vw, o0 / vw};
    d = (kiln_vk_dispatch){.shader = kernel(name, sizeof name, rms ? "nn_rms_norm_dx" : "nn_layer_norm_dx", v4),
                           .n = 4, .bind = {x, w, gy, t}, .push = &px, .push_size = sizeof px};
    row_groups(vk, rows, wd, d.groups);
    return kiln__vk_dispatch(vk, &d);
}

/* ---- cross_entropy ---- */

/* src logits [..., C], labels i32 [...] (, gy [1] for the backward). The
 * CPU fails the compute on a label outside [0, C) that is not
 * ignore_index; a shader cannot, so such a row counts as ignored here. */
static bool cross_entropy_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *x = t->src[0], *lab = t->src[1];
    if (!f32_ok(vk, t) || !f32_ok(vk, x) || !i32_ok(vk, lab) || kiln_tensor_numel(x) == 0) return false;
    if (t->ip[0] < INT32_MIN || t->ip[0] > INT32_MAX) return false;
    return t->nsrc < 3 || f32_ok(vk, t->src[2]);
}

/* Lanes per row for rows of c columns (vec4 columns in the vec4
 * kernels): W with 4 W^2 <= c, up to 32. Combining a row's W partial
 * results costs each lane about W steps, so a lane's own c / W columns
 * stay 4 times that (W = 32 at c = 256 would cost lavapipe 4 times the
 * row's own work); 8 lanes of vec4 still read whole 128-byte lines on a
 * GPU. Rows too few to fill CE_MIN_GROUPS workgroups (a few rows of a
 * large vocabulary) get more lanes, up to a whole workgroup per row. */
#define CE_MIN_GROUPS 16

static uint32_t ce_width(int64_t rows, int64_t c) {
    uint32_t w = 1;
    while (w < NN_LOCAL && 16 * (int64_t)w * w <= c &&
           (w < NN_MAX_WIDTH || rows * w < (int64_t)NN_LOCAL * CE_MIN_GROUPS))
        w <<= 1;
    return w;
}

/* Two passes: every row's (loss, kept) pair into scratch, rows in
 * parallel; then one workgroup adds the pairs up in a fixed order (the
 * same bits every run) into the mean. */
static kiln_status cross_entropy_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0], *lab = t->src[1];
    int64_t c = last_dim(x), rows = kiln_tensor_numel(lab);
    kiln_tensor part;
    kiln_status s = kiln__vk_scratch(vk, 2 * rows, KILN_F32, &part);
    if (s) return s;
    uint32_t x0 = kiln__vk_base(vk, x), s0 = kiln__vk_base(vk, &part);
    bool v4 = c % 4 == 0 && x0 % 4 == 0; /* rows start on vec4 boundaries */
    uint32_t w = ce_width(rows, v4 ? c / 4 : c);
    struct {
        uint32_t rows, c, wd;
        int32_t ignore;
        uint32_t x0, l0, s0;
    } pr = {(uint32_t)rows, (uint32_t)c, w, (int32_t)t->ip[0], x0, kiln__vk_base(vk, lab), s0};
    kiln_vk_dispatch d = {.shader = v4 ? "nn_ce_loss_v4" : "nn_cross_entropy", .n = 3, .bind = {x, lab, &part},
                          .push = &pr, .push_size = sizeof pr};
    row_groups(vk, rows, w, d.groups);
    if ((s = kiln__vk_dispatch(vk, &d))) return s;
    struct {
        uint32_t rows, s0, y0;
    } ps = {(uint32_t)rows, s0, kiln__vk_base(vk, t)};
    d = (kiln_vk_dispatch){.shader = "nn_ce_sum", .n = 2, .bind = {&part, t}, .push = &ps, .push_size = sizeof ps};
    return kiln__vk_dispatch(vk, &d); /* one workgroup */
}

/* Two passes: the kept-row count into scratch (one workgroup), then
 * every row's gradient. */
static kiln_status cross_entropy_grad_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0], *lab = t->src[1], *gy = t->src[2];
    int64_t c = last_dim(x), rows = kiln_tensor_numel(lab);
    kiln_tensor cnt;
    kiln_status s = kiln__vk_scratch(vk, 1, KILN_I32, &cnt);
    if (s) return s;
    int32_t ignore = (int32_t)t->ip[0];
    uint32_t l0 = kiln__vk_base(vk, lab), n0 = kiln__vk_base(vk, &cnt), x0 = kiln__vk_base(vk, x),
             gx0 = kiln__vk_base(vk, t);
    bool v4 = c % 4 == 0 && x0 % 4 == 0 && gx0 % 4 == 0;
    uint32_t w = ce_width(rows, v4 ? c / 4 : c);
    struct {
        uint32_t rows, c;
        int32_t ignore;
        uint32_t l0, n0;
    } pn = {(uint32_t)rows, (uint32_t)c, ignore, l0, n0};
    kiln_vk_dispatch d = {.shader = "nn_cross_entropy_count", .n = 2, .bind = {lab, &cnt}, .push = &pn,
                          .push_size = sizeof pn};
    if ((s = kiln__vk_dispatch(vk, &d))) return s; /* one workgroup */
    struct {
        uint32_t rows, c, wd;
        int32_t ignore;
        uint32_t x0, l0, gy0, n0, gx0;
    } pg = {(uint32_t)rows, (uint32_t)c, w, ignore, x0, l0, kiln__vk_base(vk, gy), n0, gx0};
    d = (kiln_vk_dispatch){.shader = v4 ? "nn_ce_grad_v4" : "nn_cross_entropy_grad", .n = 5,
                           .bind = {x, lab, gy, &cnt, t}, .push = &pg, .push_size = sizeof pg};
    row_groups(vk, rows, w, d.groups);
    return kiln__vk_dispatch(vk, &d);
}

/* ---- batch_norm (training) and its backward ---- */

/* One workgroup per channel of x [N, C, S] (shaders/nn_bn_common.glsl);
 * src: x [, running mean, var] [, w] [, b], or x [, w], gy. */
static bool batch_norm_supports(const kiln_vk *vk, const kiln_tensor *t) {
    return norm_supports(vk, t);
}

static void channel_groups(const kiln_vk *vk, int64_t c, uint32_t g[3]) {
    kiln__vk_groups_1d(vk, (uint64_t)c * NN_LOCAL, NN_LOCAL, g);
}

static kiln_status batch_norm_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    bool has_w = t->ip[0] != 0, has_b = t->ip[1] != 0, has_r = t->ip[2] != 0;
    const kiln_tensor *x = t->src[0], *rm = has_r ? t->src[1] : x, *rv = has_r ? t->src[2] : x;
    const kiln_tensor *w = has_w ? t->src[1 + 2 * has_r] : x, *b = has_b ? t->src[1 + 2 * has_r + has_w] : x;
    int64_t c = x->shape[1];
    struct {
        uint32_t n, c, s, has_w, has_b, has_r;
        float eps, mom;
        uint32_t x0, rm0, rv0, w0, b0, y0;
    } pc = {(uint32_t)x->shape[0], (uint32_t)c, (uint32_t)(kiln_tensor_numel(x) / (x->shape[0] * c)), has_w, has_b,
            has_r, (float)t->fp[0], (float)t->fp[1], kiln__vk_base(vk, x), kiln__vk_base(vk, rm), kiln__vk_base(vk, rv),
            kiln__vk_base(vk, w), kiln__vk_base(vk, b), kiln__vk_base(vk, t)};
    kiln_vk_dispatch d = {.shader = "nn_batch_norm", .n = 6, .bind = {x, rm, rv, w, b, t}, .push = &pc,
                          .push_size = sizeof pc};
    channel_groups(vk, c, d.groups);
    return kiln__vk_dispatch(vk, &d);
}

static kiln_status batch_norm_grad_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    bool has_w = t->ip[0] != 0;
    const kiln_tensor *x = t->src[0], *w = has_w ? t->src[1] : x, *gy = t->src[1 + has_w];
    int64_t c = x->shape[1];
    struct {
        uint32_t n, c, s, has_w, has_b;
        float eps;
        uint32_t x0, w0, g0, o0;
    } pc = {(uint32_t)x->shape[0], (uint32_t)c, (uint32_t)(kiln_tensor_numel(x) / (x->shape[0] * c)), has_w,
            t->ip[1] != 0, (float)t->fp[0], kiln__vk_base(vk, x), kiln__vk_base(vk, w), kiln__vk_base(vk, gy),
            kiln__vk_base(vk, t)};
    kiln_vk_dispatch d = {.shader = "nn_batch_norm_grad", .n = 4, .bind = {x, w, gy, t}, .push = &pc,
                          .push_size = sizeof pc};
    channel_groups(vk, c, d.groups);
    return kiln__vk_dispatch(vk, &d);
}

void kiln__vk_register_nn(kiln_vk_kernel *tab) {
    tab[KILN_OP_BATCH_NORM] = (kiln_vk_kernel){batch_norm_supports, batch_norm_record};
    tab[KILN_OP_BATCH_NORM_GRAD] = (kiln_vk_kernel){batch_norm_supports, batch_norm_grad_record};
    tab[KILN_OP_SOFTMAX] = (kiln_vk_kernel){softmax_supports, softmax_record};
    tab[KILN_OP_LOG_SOFTMAX] = (kiln_vk_kernel){softmax_supports, softmax_record};
    tab[KILN_OP_SOFTMAX_GRAD] = (kiln_vk_kernel){softmax_supports, softmax_grad_record};
    tab[KILN_OP_LAYER_NORM] = (kiln_vk_kernel){norm_supports, norm_record};
    tab[KILN_OP_RMS_NORM] = (kiln_vk_kernel){norm_supports, norm_record};
    tab[KILN_OP_LAYER_NORM_GRAD] = (kiln_vk_kernel){norm_supports, norm_grad_record};
    tab[KILN_OP_RMS_NORM_GRAD] = (kiln_vk_kernel){norm_supports, norm_grad_record};
    tab[KILN_OP_CROSS_ENTROPY] = (kiln_vk_kernel){cross_entropy_supports, cross_entropy_record};
    tab[KILN_OP_CROSS_ENTROPY_GRAD] = (kiln_vk_kernel){cross_entropy_supports, cross_entropy_grad_record};
}
