/* hf_gptq.c — Hugging Face GPTQ checkpoints into kiln's GPTQ layout (see
 * hf_gptq.h). */
#include "hf_gptq.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- settings ---- */

/* A whole number setting of obj (NULL: top level), or def when absent. */
static kiln_status setting(const char *who, const char *src, kiln_json_file *j, const char *obj, const char *key,
                           double def, double *out) {
    if (!kiln_json_file_has(j, obj, key)) {
        *out = def;
        return KILN_OK;
    }
    kiln_status s = kiln_json_file_number(j, obj, key, out);
    if (s || *out != floor(*out) || fabs(*out) > 1e12)
        return kiln_set_error(KILN_ERR_FORMAT, "%s: %s: %s is not a whole number or a bool", who, src, key);
    return KILN_OK;
}

static kiln_status read_settings(const char *who, kiln_json_file *j, const char *obj, hf_gptq *q) {
    const char *src = q->source, *method = kiln_json_file_string(j, obj, "quant_method");
    if (method && strcmp(method, "gptq"))
        return kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: quant_method '%s' (kiln reads GPTQ checkpoints)", who,
                              src, method);
    const char *fmt = kiln_json_file_string(j, obj, "checkpoint_format");
    if (!fmt) fmt = kiln_json_file_string(j, obj, "format");
    if (!fmt) fmt = "gptq";
    if (strcmp(fmt, "gptq") && strcmp(fmt, "gptq_v2"))
        return kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: checkpoint_format '%s' (kiln reads 'gptq' and 'gptq_v2')",
                              who, src, fmt);
    q->v2 = !strcmp(fmt, "gptq_v2");
    const char *pack = kiln_json_file_string(j, obj, "pack_dtype");
    if (pack && strcmp(pack, "int32"))
        return kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: pack_dtype '%s' (kiln reads int32)", who, src, pack);
    if (kiln_json_file_has(j, obj, "dynamic") && kiln_json_file_string(j, obj, "dynamic") == NULL) {
        /* an object of per-module overrides (null: none, which has() says false) */
        return kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: per-module 'dynamic' settings are not supported", who,
                              src);
    }
    double bits, gs, sym, act, marlin;
    kiln_status s;
    if ((s = setting(who, src, j, obj, "bits", -1, &bits)) || (s = setting(who, src, j, obj, "group_size", -1, &gs)) ||
        (s = setting(who, src, j, obj, "sym", 1, &sym)) || (s = setting(who, src, j, obj, "desc_act", 0, &act)) ||
        (s = setting(who, src, j, obj, "is_marlin_format", 0, &marlin)))
        return s;
    if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
        return kiln_set_error(bits == -1 ? KILN_ERR_FORMAT : KILN_ERR_UNSUPPORTED,
                              "%s: %s: bits = %g (kiln reads 2, 3, 4 and 8)", who, src, bits);
    if (gs != -1 && gs < 1)
        return kiln_set_error(KILN_ERR_FORMAT, "%s: %s: group_size = %g (-1 or >= 1)", who, src, gs);
    if (marlin)
        return kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: is_marlin_format (kiln reads 'gptq' and 'gptq_v2')", who,
                              src);
    q->bits = (int)bits;
    q->group_size = (int64_t)gs;
    q->sym = sym != 0;
    q->act_order = act != 0;
    if (q->bits == 8 && !q->sym)
        return kiln_set_error(KILN_ERR_UNSUPPORTED,
                              "%s: %s: 8 bits with sym = false: kiln holds 8-bit GPTQ as Q8_0, which has no zero point",
                              who, src);
    return KILN_OK;
}

kiln_status hf_gptq_config(const char *who, const char *dir, hf_gptq *q, bool *found) {
    *found = false;
    memset(q, 0, sizeof *q);
    snprintf(q->source, sizeof q->source, "%s/quantize_config.json", dir);
    FILE *f = fopen(q->source, "rb");
    const char *obj = NULL;
    if (f) {
        fclose(f);
    } else { /* transformers' layout: config.json's quantization_config */
        snprintf(q->source, sizeof q->source, "%s/config.json", dir);
        obj = "quantization_config";
    }
    kiln_json_file *j = kiln_json_file_open(q->source);
    if (!j) return kiln_last_status();
    kiln_status s = KILN_OK;
    if (!obj || kiln_json_file_has(j, NULL, obj)) {
        *found = true;
        s = read_settings(who, j, obj, q);
    }
    kiln_json_file_close(j);
    return s;
}

kiln_dtype hf_gptq_dtype(const hf_gptq *q, const char *who, const int64_t *cols, int n) {
    static const int groups[] = {128, 64, 32};
    for (int k = q->bits == 8 ? 2 : 0; k < 3; k++) {
        const int g = groups[k];
        bool ok = q->group_size < 0 || q->group_size % g == 0;
        for (int i = 0; i < n; i++) ok &= cols[i] % g == 0;
        if (ok) /* GQ<b>_32, _64, _128 in the enum's order */
            return q->bits == 8 ? KILN_Q8_0
                                : (q->bits == 4 ? KILN_GQ4_32 : q->bits == 3 ? KILN_GQ3_32 : KILN_GQ2_32) + 2 - k;
    }
    kiln_set_error(KILN_ERR_UNSUPPORTED,
                   "%s: %s: group_size %lld with inputs of %lld and %lld: kiln's GPTQ types need groups (and "
                   "inputs) in multiples of 32",
                   who, q->source, (long long)q->group_size, (long long)cols[0], (long long)cols[n > 1 ? 1 : 0]);
    return KILN_DTYPE_COUNT;
}

/* ---- one linear ---- */

/* base.suffix of file st, checked to be dtype (NULL: a float) and [d0, d1]
 * (d1 < 0: 1-d), loaded into tmp. */
static kiln_tensor *part(const char *who, const char *dir, kiln_safetensors *st, kiln_ctx *tmp, const char *base,
                         const char *suffix, const char *dtype, int64_t d0, int64_t d1) {
    char name[300];
    snprintf(name, sizeof name, "%s.%s", base, suffix);
    int i = st ? kiln_safetensors_find(st, name) : -1;
    kiln_safetensors_info in;
    if (i < 0 || kiln_safetensors_info_at(st, i, &in)) {
        kiln_set_error(KILN_ERR_FORMAT, "%s: %s has no tensor '%s'", who, dir, name);
        return NULL;
    }
    const bool is_float = in.kiln_dtype == KILN_F16 || in.kiln_dtype == KILN_BF16 || in.kiln_dtype == KILN_F32;
    if (dtype ? strcmp(in.dtype, dtype) != 0 : !is_float) {
        kiln_set_error(KILN_ERR_FORMAT, "%s: %s: '%s' is %s, not %s", who, dir, name, in.dtype,
                       dtype ? dtype : "F16, BF16 or F32");
        return NULL;
    }
    if (in.ndim != (d1 < 0 ? 1 : 2) || in.shape[0] != d0 || (d1 >= 0 && in.shape[1] != d1)) {
        char have[64] = "";
        for (int k = 0; k < in.ndim && k < 4; k++)
            snprintf(have + strlen(have), sizeof have - strlen(have), "%s%lld", k ? ", " : "", (long long)in.shape[k]);
        if (d1 < 0)
            kiln_set_error(KILN_ERR_SHAPE, "%s: %s: '%s' is [%s], not [%lld]", who, dir, name, have, (long long)d0);
        else
            kiln_set_error(KILN_ERR_SHAPE, "%s: %s: '%s' is [%s], not [%lld, %lld]", who, dir, name, have,
                           (long long)d0, (long long)d1);
        return NULL;
    }
    return kiln_safetensors_load(st, tmp, name);
}

/* Value k of a little-endian stream of b-bit values in 32-bit words w[0],
 * w[stride], ... */
static unsigned stream_at(const int32_t *w, int64_t stride, int b, int64_t k) {
    const int64_t bit = (int64_t)b * k, word = bit / 32;
    const int sh = (int)(bit % 32);
    uint64_t v = (uint32_t)w[word * stride];
    if (sh + b > 32) v |= (uint64_t)(uint32_t)w[(word + 1) * stride] << 32;
    return (unsigned)(v >> sh) & ((1u << b) - 1);
}

kiln_gptq_result *hf_gptq_read(const hf_gptq *q, const char *who, const char *dir, const char *base,
                               const hf_gptq_files *f, int64_t rows, int64_t cols) {
    const int b = q->bits, maxq = (1 << b) - 1;
    const int64_t gs = q->group_size < 0 || q->group_size > cols ? cols : q->group_size, n_groups = (cols + gs - 1) / gs;
    if ((cols * b) % 32 || (rows * b) % 32) {
        kiln_set_error(KILN_ERR_SHAPE, "%s: %s: '%s' is [%lld, %lld]: %d-bit codes fill no whole int32 words", who,
                       dir, base, (long long)rows, (long long)cols, b);
        return NULL;
    }
    kiln_ctx *tmp = kiln_ctx_new();
    kiln_tensor *qw = NULL, *qz = NULL, *sc = NULL, *gi = NULL;
    bool ok = tmp && (qw = part(who, dir, f->qweight, tmp, base, "qweight", "I32", cols * b / 32, rows)) &&
              (qz = part(who, dir, f->qzeros, tmp, base, "qzeros", "I32", n_groups, rows * b / 32)) &&
              (sc = part(who, dir, f->scales, tmp, base, "scales", NULL, n_groups, rows)) &&
              (!f->g_idx || (gi = part(who, dir, f->g_idx, tmp, base, "g_idx", "I32", cols, -1)));
    if (ok && !f->g_idx && q->act_order && gs < cols) {
        kiln_set_error(KILN_ERR_FORMAT, "%s: %s: '%s' has desc_act (%s) but no g_idx", who, dir, base, q->source);
        ok = false;
    }
    kiln_gptq_result *r = ok ? calloc(1, sizeof *r) : NULL;
    if (r) {
        *r = (kiln_gptq_result){.rows = rows, .cols = cols, .group_size = gs, .n_groups = n_groups, .bits = b,
                                .sym = q->sym};
        r->codes = malloc((size_t)(rows * cols));
        r->scales = malloc((size_t)(rows * n_groups) * sizeof *r->scales);
        r->zeros = malloc((size_t)(rows * n_groups));
        r->g_idx = malloc((size_t)cols * sizeof *r->g_idx);
        r->perm = malloc((size_t)cols * sizeof *r->perm);
        ok = r->codes && r->scales && r->zeros && r->g_idx && r->perm;
        if (!ok) kiln_set_error(KILN_ERR_OOM, "%s: out of memory for '%s'", who, base);
    } else if (ok) {
        kiln_set_error(KILN_ERR_OOM, "%s: out of memory for '%s'", who, base);
        ok = false;
    }
    float *s = ok ? malloc((size_t)(rows * n_groups) * sizeof *s) : NULL;
    if (ok && !s) ok = !kiln_set_error(KILN_ERR_OOM, "%s: out of memory for '%s'", who, base);
    if (ok) ok = !kiln_tensor_get_f32(sc, s, rows * n_groups);
    /* groups: g_idx in range, then the columns sorted by group (stable),
     * each group exactly gs columns but the last */
    const int32_t *g = gi ? kiln_tensor_data(gi) : NULL;
    int64_t *count = ok ? calloc((size_t)n_groups + 1, sizeof *count) : NULL;
    if (ok && !count) ok = !kiln_set_error(KILN_ERR_OOM, "%s: out of memory for '%s'", who, base);
    for (int64_t k = 0; ok && k < cols; k++) {
        const int64_t v = g ? g[k] : k / gs;
        if (v < 0 || v >= n_groups)
            ok = !kiln_set_error(KILN_ERR_FORMAT, "%s: %s: %s.g_idx[%lld] = %lld is not a group (0 to %lld)", who,
                                 dir, base, (long long)k, (long long)v, (long long)n_groups - 1);
        else
            r->g_idx[k] = (int32_t)v, count[v + 1]++;
    }
    for (int64_t j = 0; ok && j < n_groups; j++) {
        const int64_t want = j + 1 < n_groups ? gs : cols - j * gs;
        if (count[j + 1] != want)
            ok = !kiln_set_error(KILN_ERR_UNSUPPORTED,
                                 "%s: %s: %s.g_idx puts %lld columns in group %lld, not %lld: kiln's GPTQ layout "
                                 "has groups of group_size (%s) columns",
                                 who, dir, base, (long long)count[j + 1], (long long)j, (long long)want, q->source);
        count[j + 1] += count[j];
    }
    for (int64_t k = 0; ok && k < cols; k++) r->perm[count[r->g_idx[k]]++] = (int32_t)k;
    /* scales, zeros, codes */
    const int32_t *zw = ok ? kiln_tensor_data(qz) : NULL, *ww = ok ? kiln_tensor_data(qw) : NULL;
    for (int64_t j = 0; ok && j < n_groups; j++)
        for (int64_t o = 0; ok && o < rows; o++) {
            const float v = s[j * rows + o];
            const int z = (int)stream_at(zw + j * (rows * b / 32), 1, b, o) + (q->v2 ? 0 : 1);
            if (!(v > 0.0f) || isinf(v))
                ok = !kiln_set_error(KILN_ERR_FORMAT, "%s: %s: %s.scales[%lld, %lld] = %g is not a positive scale",
                                     who, dir, base, (long long)j, (long long)o, (double)v);
            else if (z > maxq)
                ok = !kiln_set_error(KILN_ERR_FORMAT,
                                     "%s: %s: %s.qzeros: zero point %d (group %lld, column %lld) is out of range for "
                                     "%d bits (a 'gptq' file stores zero - 1: a zero of 0 cannot be stored)",
                                     who, dir, base, z, (long long)j, (long long)o, b);
            r->scales[o * n_groups + j] = v;
            r->zeros[o * n_groups + j] = (uint8_t)z;
        }
    for (int64_t o = 0; ok && o < rows; o++)
        for (int64_t k = 0; k < cols; k++) r->codes[o * cols + k] = (uint8_t)stream_at(ww + o, rows, b, k);
    free(count);
    free(s);
    kiln_ctx_free(tmp);
    if (!ok) {
        if (!tmp) kiln_set_error(KILN_ERR_OOM, "%s: out of memory", who);
        kiln_gptq_result_free(r);
        return NULL;
    }
    return r;
}

kiln_status hf_gptq_take_rows(kiln_gptq_result *r, const int64_t *src, int64_t n) {
    const int64_t cols = r->cols, ng = r->n_groups;
    uint8_t *c = malloc((size_t)(n * cols)), *z = malloc((size_t)(n * ng));
    float *s = malloc((size_t)(n * ng) * sizeof *s);
    if (!c || !z || !s) {
        free(c), free(z), free(s);
        return kiln_set_error(KILN_ERR_OOM, "hf_gptq_take_rows: out of memory");
    }
    for (int64_t i = 0; i < n; i++) {
        memcpy(c + i * cols, r->codes + src[i] * cols, (size_t)cols);
        memcpy(z + i * ng, r->zeros + src[i] * ng, (size_t)ng);
        memcpy(s + i * ng, r->scales + src[i] * ng, (size_t)ng * sizeof *s);
    }
    free(r->codes), free(r->zeros), free(r->scales);
    r->codes = c, r->zeros = z, r->scales = s, r->rows = n;
    return KILN_OK;
}

/* 8-bit codes, zero 128, as Q8_0 blocks (f16 d; int8 q[32]): d = the
 * group's scale, q = code - 128, the columns in r's order. */
static kiln_status store_q8_0(const kiln_gptq_result *r, const char *base, uint8_t *out, kiln_ctx *tmp) {
    const int64_t ng = r->n_groups;
    kiln_tensor *h = kiln_new_1d(tmp, KILN_F16, r->rows * ng);
    if (!h || kiln_tensor_set_f32(h, r->scales, r->rows * ng)) return kiln_last_status();
    const uint16_t *d = kiln_tensor_data(h);
    for (int64_t o = 0; o < r->rows; o++) {
        const uint8_t *q = r->codes + o * r->cols;
        for (int64_t k0 = 0; k0 < r->cols; k0 += 32, out += 34) {
            const int64_t j = r->g_idx[r->perm[k0]];
            if (r->zeros[o * ng + j] != 128)
                return kiln_set_error(KILN_ERR_UNSUPPORTED,
                                      "hf_gptq_store: '%s': 8-bit zero point %d (group %lld, column %lld) is not 128: "
                                      "kiln holds 8-bit GPTQ as Q8_0, which has no zero point",
                                      base, r->zeros[o * ng + j], (long long)j, (long long)o);
            out[0] = (uint8_t)(d[o * ng + j] & 0xff);
            out[1] = (uint8_t)(d[o * ng + j] >> 8);
            for (int i = 0; i < 32; i++) out[2 + i] = (uint8_t)(q[r->perm[k0 + i]] - 128);
        }
    }
    return KILN_OK;
}

kiln_status hf_gptq_store(const kiln_gptq_result *r, const char *base, kiln_tensor *dst, kiln_ctx *ctx,
                          kiln_tensor **perm) {
    *perm = NULL;
    const kiln_dtype dt = kiln_tensor_dtype(dst);
    if (kiln_tensor_ndim(dst) != 2 || kiln_tensor_dim(dst, 0) != r->rows || kiln_tensor_dim(dst, 1) != r->cols ||
        !kiln_tensor_is_contiguous(dst) || !kiln_tensor_data(dst) || (dt == KILN_Q8_0) != (r->bits == 8))
        return kiln_set_error(KILN_ERR_ARG, "hf_gptq_store: '%s' does not go into a %s tensor of its shape", base,
                              kiln_dtype_name(dt));
    kiln_ctx *tmp = kiln_ctx_new();
    if (!tmp) return kiln_last_status();
    kiln_status s = KILN_OK;
    kiln_tensor *p = NULL;
    if (dt == KILN_Q8_0) {
        s = store_q8_0(r, base, kiln_tensor_data(dst), tmp);
    } else {
        kiln_tensor *w = kiln_gptq_pack(tmp, r, dt, &p);
        if (!w) {
            char why[512];
            snprintf(why, sizeof why, "%s", kiln_last_error());
            s = kiln_set_error(kiln_last_status(), "hf_gptq_store: '%s': %s", base, why);
        } else {
            memcpy(kiln_tensor_data(dst), kiln_tensor_data(w), kiln_tensor_nbytes(w));
        }
    }
    bool identity = true;
    for (int64_t k = 0; k < r->cols; k++) identity &= r->perm[k] == k;
    if (!s && !identity) {
        kiln_tensor *t = kiln_new_1d(ctx, KILN_I32, r->cols);
        if (!t || kiln_tensor_set_i32(t, r->perm, r->cols)) s = kiln_last_status();
        else *perm = t;
    }
    kiln_ctx_free(tmp);
    return s;
}
