/* vk_conv.c — the convolution primitives KILN_OP_IM2COL and KILN_OP_COL2IM
 * on the Vulkan backend (see vk.h; layouts and ip[] in ops/conv.c), which
 * with matmul make kiln_conv2d, kiln_conv_transpose2d and the pools run
 * there. Every variant the CPU has is claimed, for f32 with contiguous
 * operands (the constructors make them so):
 *   IM2COL ip[10] = 0, either cols layout (ip[11])  -> conv_im2col
 *   IM2COL ip[10] = 1, the fused max-pool           -> conv_pool_max
 *   COL2IM ip[10] = 0, either layout                -> conv_col2im
 *   COL2IM ip[10] = 1, the max-pool's backward      -> conv_pool_max_grad
 * One invocation per output element, the output seen as blocks (image
 * planes, or cols' OH x OW grids) picked by the workgroup's y and z;
 * both backward kernels gather (each pixel sums what reaches it), so no
 * two invocations write one element. The max-pool with ip[11] = 1 reads
 * x as a view of [C, N, H, W] storage (and its backward writes gx in that
 * order): the shaders map the pooled plane n C + c to the stored c N + n.
 * f64, other ip[10]/ip[11] values, planes or block counts of 2^22 and
 * more, and geometry beyond 32-bit positions go to the CPU. */
#include "vk.h"

enum { MODE_COLS = 0, MODE_POOL_MAX = 1 };

/* conv_geom.glsl's local size */
enum { CONV_LOCAL = 64 };

/* The kernels split indices by a float division exact below this
 * (udiv in conv_geom.glsl): bigger planes or counts go to the CPU. */
#define CONV_MAX_INDEX (1 << 22)

/* Matches the push-constant block of shaders/conv_geom.glsl. */
typedef struct conv_push {
    uint32_t blocks, len;
    uint32_t n, c, h, w, oh, ow;
    uint32_t kh, kw, sh, sw;
    int32_t ph, pw;
    uint32_t dh, dw;
    uint32_t cn, tiled;
    uint32_t s0, s1, s2, d0;
    float pad;
} conv_push;

/* The image tensor (N, C from its dims 0, 1) and the tensor whose dims
 * 4, 5 (cols) or 2, 3 (pooled) give the grid OH x OW. */
static const kiln_tensor *image_of(const kiln_tensor *t) { return t->op == KILN_OP_IM2COL ? t->src[0] : t; }

static const kiln_tensor *grid_of(const kiln_tensor *t) {
    if (t->ip[10] == MODE_POOL_MAX) return t->op == KILN_OP_IM2COL ? t : t->src[1];
    return t->op == KILN_OP_IM2COL ? t : t->src[0];
}

/* x [N, C, H, W] viewing [C, N, H, W] storage (the max-pool's ip[11] = 1) */
static bool planes_swapped(const kiln_tensor *v) {
    const int64_t *s = v->shape, *st = v->stride;
    return v->ndim == 4 && st[3] == 1 && st[2] == s[3] && st[0] == s[2] * s[3] && st[1] == s[0] * s[2] * s[3];
}

static bool conv_supports(const kiln_vk *vk, const kiln_tensor *t) {
    int64_t mode = t->ip[10], layout = t->ip[11];
    if (mode != MODE_COLS && mode != MODE_POOL_MAX) return false;
    if (layout != 0 && layout != 1) return false;
    int nsrc = t->op == KILN_OP_COL2IM && mode == MODE_POOL_MAX ? 3 : 1;
    if (t->nsrc != nsrc || t->dtype != KILN_F32 || !kiln_tensor_is_contiguous(t) || !kiln__vk_fits(vk, t)) return false;
    for (int i = 0; i < nsrc; i++) {
        const kiln_tensor *s = t->src[i];
        bool swapped_x = i == 0 && mode == MODE_POOL_MAX && layout == 1 && planes_swapped(s);
        if (s->dtype != KILN_F32 || !(kiln_tensor_is_contiguous(s) || swapped_x) || !kiln__vk_fits(vk, s)) return false;
        if (kiln_tensor_numel(s) > (int64_t)UINT32_MAX) return false;
    }
    const kiln_tensor *img = image_of(t), *grid = grid_of(t);
    int grid_dims = mode == MODE_POOL_MAX ? 4 : 6;
    if (img->ndim != 4 || grid->ndim != grid_dims) return false;
    if (kiln_tensor_numel(t) > (int64_t)UINT32_MAX) return false;
    const kiln_vk_caps *caps = kiln__vk_caps(vk);
    int64_t len = t->shape[t->ndim - 2] * t->shape[t->ndim - 1], blocks = kiln_tensor_numel(t) / (len ? len : 1);
    if (len > CONV_MAX_INDEX || blocks > CONV_MAX_INDEX) return false;
    if ((len + CONV_LOCAL - 1) / CONV_LOCAL > caps->max_groups[0] ||
        blocks > (int64_t)caps->max_groups[1] * caps->max_groups[2])
        return false;
    const int64_t *ip = t->ip;
    for (int i = 0; i < 10; i++)
        if (ip[i] < (i == 4 || i == 5 ? 0 : 1) || ip[i] > CONV_MAX_INDEX / 2) return false;
    if (ip[8] != img->shape[2] || ip[9] != img->shape[3]) return false;
    if (img->shape[0] * img->shape[1] > CONV_MAX_INDEX) return false;
    /* int32 tap positions: oi*sh + ki*dh (and the same across) stay small */
    int64_t oh = grid->shape[grid_dims - 2], ow = grid->shape[grid_dims - 1];
    return oh * ip[2] + ip[0] * ip[6] + ip[8] < INT32_MAX && ow * ip[3] + ip[1] * ip[7] + ip[9] < INT32_MAX;
}

static kiln_status conv_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const int64_t *ip = t->ip;
    const kiln_tensor *img = image_of(t), *grid = grid_of(t);
    bool pool = ip[10] == MODE_POOL_MAX;
    int gd = grid->ndim;
    /* blocks of the output's last two dims: planes, or cols' grids per (plane, tap) */
    int64_t len = t->shape[t->ndim - 2] * t->shape[t->ndim - 1];
    if (len == 0 || kiln_tensor_numel(t) == 0) return KILN_OK;
    int64_t blocks = kiln_tensor_numel(t) / len;
    conv_push pc = {
        .blocks = (uint32_t)blocks, .len = (uint32_t)len,
        .n = (uint32_t)img->shape[0], .c = (uint32_t)img->shape[1],
        .h = (uint32_t)ip[8], .w = (uint32_t)ip[9],
        .oh = (uint32_t)grid->shape[gd - 2], .ow = (uint32_t)grid->shape[gd - 1],
        .kh = (uint32_t)ip[0], .kw = (uint32_t)ip[1], .sh = (uint32_t)ip[2], .sw = (uint32_t)ip[3],
        .ph = (int32_t)ip[4], .pw = (int32_t)ip[5], .dh = (uint32_t)ip[6], .dw = (uint32_t)ip[7],
        .cn = ip[11] == 1,
        /* the CPU's tiled max-pool backward (see conv_pool_max_grad.comp) */
        .tiled = ip[4] == 0 && ip[5] == 0 && ip[2] == ip[0] && ip[3] == ip[1] && ip[6] == 1 && ip[7] == 1,
        .d0 = kiln__vk_base(vk, t),
        .pad = (float)t->fp[0],
    };
    kiln_vk_dispatch d = {.n = t->nsrc + 1, .push = &pc, .push_size = sizeof pc};
    for (int i = 0; i < t->nsrc; i++) d.bind[i] = t->src[i];
    d.bind[t->nsrc] = t;
    pc.s0 = kiln__vk_base(vk, t->src[0]);
    if (t->nsrc == 3) pc.s1 = kiln__vk_base(vk, t->src[1]), pc.s2 = kiln__vk_base(vk, t->src[2]);
    if (t->op == KILN_OP_IM2COL) d.shader = pool ? "conv_pool_max" : "conv_im2col";
    else d.shader = pool ? "conv_pool_max_grad" : "conv_col2im";
    uint32_t gy = (uint32_t)(blocks < kiln__vk_caps(vk)->max_groups[1] ? blocks : kiln__vk_caps(vk)->max_groups[1]);
    d.groups[0] = (uint32_t)((len + CONV_LOCAL - 1) / CONV_LOCAL);
    d.groups[1] = gy;
    d.groups[2] = (uint32_t)((blocks + gy - 1) / gy);
    return kiln__vk_dispatch(vk, &d);
}

void kiln__vk_register_conv(kiln_vk_kernel *tab) {
    tab[KILN_OP_IM2COL] = (kiln_vk_kernel){conv_supports, conv_record};
    tab[KILN_OP_COL2IM] = (kiln_vk_kernel){conv_supports, conv_record};
}
