/* cu_dfp.c — KILN_OP_DFP_MATMUL on the CUDA backend (ops/dfp.c; kernels in
 * k_dfp.cu): each f32 operand quantized on the device to 14-bit codes with
 * one exponent (quant/dfp.h), then the INT16 product with INT32 chunk sums
 * folded into f32 as backends/cpu/gemm_dfp.c does, so the output equals
 * the CPU's bit for bit. A convolution's product (ip[2] = 1) quantizes the
 * image and gathers its columns' codes inside the product, as the CPU's
 * implicit-im2col packer; a convolution's data gradient (ip[2] = 2) reads
 * the output gradient's codes with its taps running back, as the CPU's
 * flipped packer. A plain product the graph adds into a gradient
 * (ex->accumulate, core/fuse.c) adds its f32 result into the output.
 * Codes are not cached across nodes (the CPU's per-compute cache only
 * saves time: quantizing is deterministic). */
#include "cu.h"

static bool f32c(const kiln_tensor *t) { return t->dtype == KILN_F32 && kiln_tensor_is_contiguous(t); }

/* B's columns geometry (ip[3..12]: kh kw sh sw ph pw dh dw oh ow) over the image b. */
/* Or, for a data gradient (ip[2] = 2), b the output gradient [O, N OH OW]
 * and ip[11..15] x's H, W and gy's N, OH, OW (ops/dfp.c). */
static bool conv_geom(const kiln_tensor *t, cu_conv *g) {
    const kiln_tensor *b = t->src[1];
    const int64_t *ip = t->ip + 3;
    if (t->ip[2] == 2) {
        if (b->ndim != 2 || b->shape[1] != t->ip[13] * t->ip[14] * t->ip[15]) return false;
        *g = (cu_conv){.n = t->ip[13], .c = b->shape[0], .h = t->ip[14], .w = t->ip[15], .oh = t->ip[11],
                       .ow = t->ip[12], .kh = ip[0], .kw = ip[1], .sh = ip[2], .sw = ip[3], .ph = ip[4], .pw = ip[5],
                       .dh = ip[6], .dw = ip[7], .cn = 1, .flip = 1};
    } else {
        if (b->ndim != 4) return false;
        *g = (cu_conv){.n = b->shape[0], .c = b->shape[1], .h = b->shape[2], .w = b->shape[3], .oh = ip[8],
                       .ow = ip[9], .kh = ip[0], .kw = ip[1], .sh = ip[2], .sw = ip[3], .ph = ip[4], .pw = ip[5],
                       .dh = ip[6], .dw = ip[7], .cn = 1};
    }
    return g->h >= 1 && g->w >= 1 && g->n >= 1 && g->kh >= 1 && g->kw >= 1 && g->sh >= 1 && g->sw >= 1 && g->ph >= 0 && g->pw >= 0 && g->dh >= 1 &&
           g->dw >= 1 && g->oh >= 1 && g->ow >= 1;
}

static bool dfp_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    const kiln_tensor *a = t->src[0], *b = t->src[1];
    bool ta = t->ip[0] != 0, tb = t->ip[1] != 0, im = t->ip[2] == 1 || t->ip[2] == 2;
    if (!f32c(t) || !f32c(a) || !f32c(b) || t->ndim != 2 || a->ndim != 2 || (t->ip[2] != 0 && !im)) return false;
    if (t->ip[2] == 2 && (ta || tb)) return false;
    int64_t m = t->shape[0], n = t->shape[1], k = a->shape[ta ? 0 : 1];
    if (a->shape[ta ? 1 : 0] != m) return false;
    int64_t brows, bcols; /* B's stored shape: [k, n], or [n, k] when tb */
    if (im) {
        cu_conv g;
        if (!conv_geom(t, &g)) return false;
        brows = g.c * g.kh * g.kw, bcols = g.n * g.oh * g.ow; /* the columns [c kh kw, n oh ow] */
    } else {
        if (b->ndim != 2) return false;
        brows = b->shape[0], bcols = b->shape[1];
    }
    return (tb ? bcols : brows) == k && (tb ? brows : bcols) == n;
}

static kiln_status dfp_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    const kiln_tensor *a = t->src[0], *b = t->src[1];
    bool ta = t->ip[0] != 0, tb = t->ip[1] != 0, im = t->ip[2] == 1 || t->ip[2] == 2;
    int64_t m = t->shape[0], n = t->shape[1], k = a->shape[ta ? 0 : 1];
    int64_t na = kiln_tensor_numel(a), nb = kiln_tensor_numel(b);
    /* scratch: the two maxima (16 bytes, keeping the codes aligned), A's codes, B's */
    size_t off_a = 16, off_b = off_a + (((size_t)na * 2 + 15) & ~(size_t)15);
    kiln_devbuf *sc = kiln__cu_buffer_new(cu, off_b + (size_t)nb * 2, false);
    if (!sc) return kiln_last_status() ? kiln_last_status() : KILN_ERR_OOM;
    uint32_t *amax = sc->ptr;
    int16_t *qa = (int16_t *)((char *)sc->ptr + off_a), *qb = (int16_t *)((char *)sc->ptr + off_b);
    cu_conv g;
    if (im) conv_geom(t, &g);
    kiln_status s = kiln__cu_launched(kiln__cu_dfp_quantize(cu->stream, kiln__cu_ptr(a), na, qa, amax), "dfp quantize kernel");
    if (!s) s = kiln__cu_launched(kiln__cu_dfp_quantize(cu->stream, kiln__cu_ptr(b), nb, qb, amax + 1), "dfp quantize kernel");
    if (!s)
        s = kiln__cu_launched(kiln__cu_dfp_matmul(cu->stream, m, n, k, qa, ta, qb, tb, im ? &g : NULL, amax, kiln__cu_ptr(t),
                                                      ex->accumulate),
                              "dfp_matmul kernel");
    kiln__cu_buffer_free(cu, sc); /* its next user is queued after the product */
    return s;
}

void kiln__cu_register_dfp(kiln_cu_kernel *tab) { tab[KILN_OP_DFP_MATMUL] = (kiln_cu_kernel){dfp_supports, dfp_record}; }
