/* optim_8bit_avx512.c — the 8-bit optimizers' block kernels on AVX-512
 * (optim_8bit.h): 16 lanes per step; dequantize and the table coder's
 * lookups by gathers, Adam's update with the scalar loop's f32 operations
 * in its order (no FMA), so codes, absmax and parameters are the scalar
 * path's bit for bit. */
#include "cpu_features.h"
#include "optim_8bit.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512BW__)
#include <immintrin.h>
#include <string.h>

#define Q KILN__QBLOCK

static void dequant256(const uint8_t *q, float absmax, const float *map, float *out) {
    const __m512 a = _mm512_set1_ps(absmax);
    for (int i = 0; i < Q; i += 16) {
        __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + i)));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_i32gather_ps(idx, map, 4), a));
    }
}

/* The coder's rule for lanes outside its table (|x| > 1, Inf, NaN): the
 * scalar function, one lane at a time (never taken after x / absmax except
 * for NaN). */
static __m512i slow_codes(const kiln__qcoder *c, __m512 x) {
    float xs[16];
    int32_t p[16];
    _mm512_storeu_ps(xs, x);
    for (int j = 0; j < 16; j++) p[j] = kiln__qcoder_code(c, xs[j]);
    return _mm512_loadu_si512(p);
}

static void quant256(const float *x, const kiln__qcoder *c, const uint32_t *packed, uint8_t *q, float *absmax) {
    /* absmax: vmaxps returns its second operand when either is NaN, so a NaN
     * x is skipped, as fmaxf does; max is exact in any order */
    __m512 amax = _mm512_setzero_ps();
    for (int i = 0; i < Q; i += 16) amax = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), amax);
    float am = _mm512_reduce_max_ps(amax);
    *absmax = am;
    if (am == 0.0f) {
        memset(q, c->zero_code, Q);
        return;
    }
    const __m512 va = _mm512_set1_ps(am);
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff), keys = _mm512_set1_epi32(KILN__QKEYS - 1),
                  sign_off = _mm512_set1_epi32(KILN__QKEYS), bytemask = _mm512_set1_epi32(0xff);
    const char *start = (const char *)c->start[0]; /* start[1] follows start[0]; the 3 bytes a dword
                                                     gather reads past the last key are the struct's */
    if (packed) { /* one lookup per value (kiln__q8_pack) */
        const __m512i low16 = _mm512_set1_epi32(0xffff), one = _mm512_set1_epi32(1);
        for (int i = 0; i < Q; i += 16) {
            __m512 xv = _mm512_div_ps(_mm512_loadu_ps(x + i), va);
            __m512i u = _mm512_castps_si512(xv), key = _mm512_srli_epi32(_mm512_and_si512(u, absmask), 16);
            __mmask16 out = _mm512_cmpgt_epu32_mask(key, keys);
            __m512i row = _mm512_mullo_epi32(_mm512_srli_epi32(u, 31), sign_off);
            __m512i e = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), (__mmask16)~out, _mm512_add_epi32(row, key),
                                                    (const int *)packed, 4);
            __m512i lowp = _mm512_and_si512(_mm512_xor_si512(u, _mm512_srai_epi32(u, 31)), low16);
            __mmask16 ge = _mm512_cmpge_epu32_mask(lowp, _mm512_srli_epi32(e, 8));
            __m512i p = _mm512_mask_add_epi32(_mm512_and_si512(e, bytemask), ge, _mm512_and_si512(e, bytemask), one);
            if (out) p = _mm512_mask_blend_epi32(out, p, slow_codes(c, xv));
            _mm_storeu_si128((__m128i *)(q + i), _mm512_cvtepi32_epi8(p));
        }
        return;
    }
    for (int i = 0; i < Q; i += 16) {
        __m512 xv = _mm512_div_ps(_mm512_loadu_ps(x + i), va);
        __m512i u = _mm512_castps_si512(xv), key = _mm512_srli_epi32(_mm512_and_si512(u, absmask), 16);
        __mmask16 out = _mm512_cmpgt_epu32_mask(key, keys);
        __m512i row = _mm512_mullo_epi32(_mm512_srli_epi32(u, 31), sign_off);
        __m512i p = _mm512_and_si512(
            _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), (__mmask16)~out, _mm512_add_epi32(row, key), start, 1),
            bytemask);
        for (int j = 0; j < c->extra; j++) {
            __m512 t = _mm512_i32gather_ps(p, c->thr, 4);
            __mmask16 ge = _mm512_cmp_ps_mask(xv, t, _CMP_GE_OQ);
            p = _mm512_mask_add_epi32(p, ge, p, _mm512_set1_epi32(1));
        }
        if (out) p = _mm512_mask_blend_epi32(out, p, slow_codes(c, xv));
        _mm_storeu_si128((__m128i *)(q + i), _mm512_cvtepi32_epi8(p));
    }
}

/* adam8_block's loop: elements whose gradient is not finite keep p, m, v */
static void adam256(float *p, const float *g, float *m, float *v, const kiln__adam8_scalars *s) {
    const __m512 decay = _mm512_set1_ps(s->decay), wd = _mm512_set1_ps(s->wd), b1 = _mm512_set1_ps(s->b1),
                 b2 = _mm512_set1_ps(s->b2), one_b1 = _mm512_set1_ps(s->one_b1),
                 one_b2 = _mm512_set1_ps(s->one_b2), neg_step = _mm512_set1_ps(s->neg_step),
                 bc2s = _mm512_set1_ps(s->bc2s), eps = _mm512_set1_ps(s->eps);
    for (int i = 0; i < Q; i += 16) {
        __m512 gi = _mm512_loadu_ps(g + i), p0 = _mm512_loadu_ps(p + i), m0 = _mm512_loadu_ps(m + i),
               v0 = _mm512_loadu_ps(v + i);
        __mmask16 ok = (__mmask16)~_mm512_fpclass_ps_mask(gi, 0x99); /* QNaN, +Inf, -Inf, SNaN */
        __m512 pi = _mm512_mul_ps(p0, decay);
        if (s->l2) gi = _mm512_add_ps(gi, _mm512_mul_ps(wd, pi));
        __m512 mi = _mm512_add_ps(_mm512_mul_ps(m0, b1), _mm512_mul_ps(gi, one_b1));
        __m512 vi = _mm512_add_ps(_mm512_mul_ps(v0, b2), _mm512_mul_ps(_mm512_mul_ps(one_b2, gi), gi));
        __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2s), eps);
        __m512 pn = _mm512_add_ps(pi, _mm512_div_ps(_mm512_mul_ps(neg_step, mi), denom));
        _mm512_storeu_ps(m + i, _mm512_mask_blend_ps(ok, m0, mi));
        _mm512_storeu_ps(v + i, _mm512_mask_blend_ps(ok, v0, vi));
        _mm512_storeu_ps(p + i, _mm512_mask_blend_ps(ok, p0, pn));
    }
}

/* lion8_step's loop: sign(c) as the float (c > 0) - (c < 0), then as scalar */
static void lion256(float *p, const float *g, float *m, const kiln__lion8_scalars *s) {
    const __m512 neg_lr = _mm512_set1_ps(s->neg_lr), b1 = _mm512_set1_ps(s->b1), b2 = _mm512_set1_ps(s->b2),
                 one_b1 = _mm512_set1_ps(s->one_b1), one_b2 = _mm512_set1_ps(s->one_b2),
                 decay = _mm512_set1_ps(s->decay), zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f),
                 minus_one = _mm512_set1_ps(-1.0f);
    for (int i = 0; i < Q; i += 16) {
        __m512 gi = _mm512_loadu_ps(g + i), p0 = _mm512_loadu_ps(p + i), m0 = _mm512_loadu_ps(m + i);
        __mmask16 ok = (__mmask16)~_mm512_fpclass_ps_mask(gi, 0x99);
        __m512 pi = _mm512_mul_ps(p0, decay);
        __m512 c = _mm512_add_ps(_mm512_mul_ps(m0, b1), _mm512_mul_ps(gi, one_b1));
        __m512 sgn = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(c, zero, _CMP_GT_OQ), zero, one);
        sgn = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(c, zero, _CMP_LT_OQ), sgn, minus_one);
        __m512 pn = _mm512_add_ps(pi, _mm512_mul_ps(neg_lr, sgn));
        __m512 mn = _mm512_add_ps(_mm512_mul_ps(m0, b2), _mm512_mul_ps(gi, one_b2));
        _mm512_storeu_ps(p + i, _mm512_mask_blend_ps(ok, p0, pn));
        _mm512_storeu_ps(m + i, _mm512_mask_blend_ps(ok, m0, mn));
    }
}

/* sgd8_step's loop */
static void sgd256(float *p, const float *g, float *buf, const kiln__sgd8_scalars *s) {
    const __m512 lr = _mm512_set1_ps(s->lr), mom = _mm512_set1_ps(s->mom), keep = _mm512_set1_ps(s->keep),
                 wd = _mm512_set1_ps(s->wd);
    for (int i = 0; i < Q; i += 16) {
        __m512 gi = _mm512_loadu_ps(g + i), p0 = _mm512_loadu_ps(p + i), b0 = _mm512_loadu_ps(buf + i);
        __mmask16 ok = (__mmask16)~_mm512_fpclass_ps_mask(gi, 0x99);
        if (s->wd != 0) gi = _mm512_add_ps(gi, _mm512_mul_ps(wd, p0));
        __m512 bi = s->first ? gi : _mm512_add_ps(_mm512_mul_ps(mom, b0), _mm512_mul_ps(keep, gi));
        gi = s->nesterov ? _mm512_add_ps(gi, _mm512_mul_ps(mom, bi)) : bi;
        __m512 pn = _mm512_sub_ps(p0, _mm512_mul_ps(lr, gi));
        _mm512_storeu_ps(buf + i, _mm512_mask_blend_ps(ok, b0, bi));
        _mm512_storeu_ps(p + i, _mm512_mask_blend_ps(ok, p0, pn));
    }
}

static const kiln__q8_kernels kernels = {dequant256, quant256, adam256, lion256, sgd256};

const kiln__q8_kernels *kiln__q8_kernels_avx512(void) {
    return kiln__cpu_avx512(kiln__cpu_caps()) ? &kernels : 0;
}
#else
const kiln__q8_kernels *kiln__q8_kernels_avx512(void) { return 0; }
#endif
