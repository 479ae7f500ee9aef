/* gptq_layout.c — the GPTQ layout (include/kiln.h): its quantizer, results,
 * dequantization and round-to-nearest. */
#include "gptq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

kiln_gptq_config kiln_gptq_defaults(void) {
    return (kiln_gptq_config){.bits = 4, .group_size = 128, .sym = false, .act_order = false, .percdamp = 0.01f,
                              .block_size = 128};
}

kiln_status kiln__gptq_check(const char *who, int64_t rows, int64_t cols, const kiln_gptq_config *cfg) {
    if (!cfg) return kiln__errs(KILN_ERR_ARG, "%s: config is NULL", who);
    if (cfg->bits != 2 && cfg->bits != 3 && cfg->bits != 4 && cfg->bits != 8)
        return kiln__errs(KILN_ERR_ARG, "%s: invalid bits: %d (must be 2, 3, 4 or 8)", who, cfg->bits);
    if (cfg->group_size < 0)
        return kiln__errs(KILN_ERR_ARG, "%s: invalid group_size: %lld (must be >= 0)", who,
                          (long long)cfg->group_size);
    if (!(cfg->percdamp >= 0.0f && isfinite(cfg->percdamp)))
        return kiln__errs(KILN_ERR_ARG, "%s: invalid percdamp: %g", who, (double)cfg->percdamp);
    if (cfg->block_size < 1) return kiln__errs(KILN_ERR_ARG, "%s: invalid block_size: %d", who, cfg->block_size);
    /* g_idx and perm are int32, BLAS takes int sizes, rows * cols f32 must fit */
    if (rows < 1 || cols < 1 || rows > INT32_MAX || cols > INT32_MAX || rows > INT64_MAX / 8 / cols)
        return kiln__errs(KILN_ERR_SHAPE, "%s: invalid layer shape [%lld, %lld]", who, (long long)rows,
                          (long long)cols);
    return KILN_OK;
}

void kiln_gptq_result_free(kiln_gptq_result *r) {
    if (!r) return;
    free(r->codes);
    free(r->scales);
    free(r->zeros);
    free(r->g_idx);
    free(r->perm);
    free(r);
}

kiln_gptq_result *kiln__gptq_result_new(int64_t rows, int64_t cols, const kiln_gptq_config *cfg) {
    kiln_gptq_result *r = kiln__calloc(1, sizeof *r);
    if (!r) return kiln__err(KILN_ERR_OOM, "gptq: out of memory");
    r->rows = rows;
    r->cols = cols;
    r->group_size = cfg->group_size == 0 || cfg->group_size > cols ? cols : cfg->group_size;
    r->n_groups = (cols + r->group_size - 1) / r->group_size;
    r->bits = cfg->bits;
    r->sym = cfg->sym;
    r->codes = kiln__malloc((size_t)(rows * cols));
    r->scales = kiln__malloc((size_t)(rows * r->n_groups) * sizeof *r->scales);
    r->zeros = kiln__malloc((size_t)(rows * r->n_groups));
    r->g_idx = kiln__malloc((size_t)cols * sizeof *r->g_idx);
    r->perm = kiln__malloc((size_t)cols * sizeof *r->perm);
    if (!r->codes || !r->scales || !r->zeros || !r->g_idx || !r->perm) {
        kiln_gptq_result_free(r);
        return kiln__err(KILN_ERR_OOM, "gptq: out of memory for a [%lld, %lld] layer", (long long)rows,
                         (long long)cols);
    }
    for (int64_t k = 0; k < cols; k++) {
        r->g_idx[k] = (int32_t)(k / r->group_size);
        r->perm[k] = (int32_t)k;
    }
    return r;
}

void kiln__gptq_fit(const float *x, int64_t n, int64_t stride, int bits, bool sym, float *scale, uint8_t *zero) {
    const int maxq = (1 << bits) - 1;
    float xmin = 0.0f, xmax = 0.0f; /* the range always holds 0 */
    for (int64_t i = 0; i < n; i++) {
        float v = x[i * stride];
        xmin = v < xmin ? v : xmin;
        xmax = v > xmax ? v : xmax;
    }
    if (sym) {
        xmax = fabsf(xmin) > xmax ? fabsf(xmin) : xmax;
        if (xmin < 0.0f) xmin = -xmax;
    }
    if (xmin == 0.0f && xmax == 0.0f) {
        xmin = -1.0f;
        xmax = 1.0f;
    }
    *scale = (xmax - xmin) / (float)maxq;
    *zero = sym ? (uint8_t)((maxq + 1) / 2) : (uint8_t)nearbyintf(-xmin / *scale);
}

kiln_status kiln_gptq_dequantize(const kiln_gptq_result *r, float *out) {
    if (!r || !out) return kiln__errs(KILN_ERR_ARG, "kiln_gptq_dequantize: NULL argument");
    for (int64_t i = 0; i < r->rows; i++) {
        const uint8_t *q = r->codes + i * r->cols;
        const float *s = r->scales + i * r->n_groups;
        const uint8_t *z = r->zeros + i * r->n_groups;
        for (int64_t k = 0; k < r->cols; k++) {
            int32_t g = r->g_idx[k];
            out[i * r->cols + k] = kiln__gptq_dequant(q[k], s[g], z[g]);
        }
    }
    return KILN_OK;
}

kiln_gptq_result *kiln_rtn_quantize(const float *w, int64_t rows, int64_t cols, const kiln_gptq_config *cfg) {
    static const char who[] = "kiln_rtn_quantize";
    if (!w) return kiln__err(KILN_ERR_ARG, "%s: w is NULL", who);
    if (kiln__gptq_check(who, rows, cols, cfg)) return NULL;
    for (int64_t i = 0; i < rows * cols; i++)
        if (!isfinite(w[i]))
            return kiln__err(KILN_ERR_NUMERIC, "%s: w[%lld, %lld] is not finite", who, (long long)(i / cols),
                             (long long)(i % cols));
    kiln_gptq_result *r = kiln__gptq_result_new(rows, cols, cfg);
    if (!r) return NULL;
    const int maxq = (1 << cfg->bits) - 1;
    double err = 0.0;
    for (int64_t i = 0; i < rows; i++) {
        const float *wr = w + i * cols;
        for (int64_t g = 0; g < r->n_groups; g++) {
            int64_t k0 = g * r->group_size, n = k0 + r->group_size > cols ? cols - k0 : r->group_size;
            float s;
            uint8_t z;
            kiln__gptq_fit(wr + k0, n, 1, cfg->bits, cfg->sym, &s, &z);
            r->scales[i * r->n_groups + g] = s;
            r->zeros[i * r->n_groups + g] = z;
            for (int64_t k = k0; k < k0 + n; k++) {
                uint8_t q = kiln__gptq_code(wr[k], s, z, maxq);
                r->codes[i * cols + k] = q;
                double d = (double)wr[k] - kiln__gptq_dequant(q, s, z);
                err += d * d;
            }
        }
    }
    r->error = err;
    return r;
}
