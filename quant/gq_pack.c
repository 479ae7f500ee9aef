/* gq_pack.c — kiln_gptq_pack: a GPTQ or RTN result (kiln_gptq_result) as
 * a tensor of a GQ dtype, the columns in the order the result quantized
 * them (perm), so that each of its groups is contiguous. */
#include "quant.h"
#include "gptq.h"

#include <string.h>

kiln_tensor *kiln_gptq_pack(kiln_ctx *ctx, const kiln_gptq_result *r, kiln_dtype dtype, kiln_tensor **perm) {
    static const char who[] = "kiln_gptq_pack";
    if (perm) *perm = NULL;
    if (!ctx || !r) return kiln__err(KILN_ERR_ARG, "%s: NULL argument", who);
    if ((unsigned)dtype >= KILN_DTYPE_COUNT || !kiln__is_gq(dtype))
        return kiln__err(KILN_ERR_DTYPE, "%s: %s is not a GQ dtype", who, kiln_dtype_name(dtype));
    const int bits = kiln__gq_bits(dtype), g = kiln__gq_group(dtype);
    const int64_t rows = r->rows, cols = r->cols, gs = r->group_size;
    if (r->bits != bits)
        return kiln__err(KILN_ERR_DTYPE, "%s: a %d-bit result does not fit %s", who, r->bits, kiln_dtype_name(dtype));
    if (rows < 1 || cols < 1 || gs < 1 || cols % g || gs % g)
        return kiln__err(KILN_ERR_SHAPE,
                         "%s: %s needs the columns (%lld) and the result's group size (%lld) multiples of %d", who,
                         kiln_dtype_name(dtype), (long long)cols, (long long)gs, g);
    /* act order: the groups must be contiguous in perm order (GPTQ's g_idx
     * without static groups) */
    bool identity = true;
    for (int64_t k = 0; k < cols; k++) {
        const int32_t c = r->perm[k];
        if (c < 0 || c >= cols || r->g_idx[c] != k / gs)
            return kiln__err(KILN_ERR_ARG, "%s: column %lld's group is not contiguous in the result's order", who,
                             (long long)c);
        identity &= c == k;
    }
    if (!identity && !perm)
        return kiln__err(KILN_ERR_ARG, "%s: the result has an act-order permutation: pass perm to receive it", who);
    for (int64_t i = 0; i < rows * r->n_groups; i++) {
        const uint16_t h = kiln__f32_to_f16(r->scales[i]);
        if (!(r->scales[i] > 0.0f) || (h & 0x7fffu) >= 0x7c00u)
            return kiln__err(KILN_ERR_NUMERIC, "%s: scale %g of row %lld does not fit an f16 > 0", who,
                             (double)r->scales[i], (long long)(i / r->n_groups));
    }
    for (int64_t i = 0; i < rows * r->n_groups; i++)
        if (r->zeros[i] >> bits)
            return kiln__err(KILN_ERR_ARG, "%s: zero point %d of row %lld is out of range for %d bits", who,
                             r->zeros[i], (long long)(i / r->n_groups), bits);
    for (int64_t i = 0; i < rows * cols; i++)
        if (r->codes[i] >> bits)
            return kiln__err(KILN_ERR_ARG, "%s: code %d at %lld is out of range for %d bits", who, r->codes[i],
                             (long long)i, bits);
    kiln_tensor *w = kiln_tensor_new(ctx, dtype, 2, (int64_t[]){rows, cols});
    if (!w) return NULL;
    kiln_tensor *p = NULL;
    if (!identity) {
        p = kiln_tensor_new(ctx, KILN_I32, 1, &cols);
        if (!p) return NULL;
        memcpy(p->data, r->perm, (size_t)cols * sizeof(int32_t));
    }
    const size_t bsz = kiln__types[dtype].size;
    uint8_t *out = w->data;
    for (int64_t i = 0; i < rows; i++) {
        const uint8_t *q = r->codes + i * cols;
        for (int64_t b = 0; b < cols / g; b++, out += bsz) {
            const int64_t grp = b * g / gs;
            const uint16_t h = kiln__f32_to_f16(r->scales[i * r->n_groups + grp]);
            out[0] = (uint8_t)(h & 0xff);
            out[1] = (uint8_t)(h >> 8);
            out[2] = r->zeros[i * r->n_groups + grp];
            for (int c = 0; c < g / KILN_GQ_CHUNK; c++) {
                uint8_t chunk[KILN_GQ_CHUNK];
                for (int j = 0; j < KILN_GQ_CHUNK; j++) chunk[j] = q[r->perm[b * g + c * KILN_GQ_CHUNK + j]];
                kiln__gq_pack_chunk(chunk, bits, out + KILN_GQ_HEAD + c * KILN_GQ_CHUNK_BYTES(bits));
            }
        }
    }
    if (perm) *perm = p;
    return w;
}
