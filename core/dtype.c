/* dtype.c — the dtype traits table: size, name and conversions of each
 * plain element type, and the rows that the quantized formats register
 * (quant/, one file per format), knowing none of them. */
#include "internal.h"

#include <math.h>

/* IEEE half: round to nearest even, overflow to inf, subnormals kept. */
uint16_t kiln__f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
    if (e == 0xff) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));
    int32_t he = (int32_t)e - 127 + 15;
    if (he >= 31) return (uint16_t)(sign | 0x7c00u);
    if (he <= 0) {
        if (he < -10) return (uint16_t)sign;
        m |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - he);
        uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (hm & 1))) hm++;
        return (uint16_t)(sign | hm);
    }
    uint32_t hm = m >> 13, rem = m & 0x1fffu;
    uint32_t h = sign | ((uint32_t)he << 10) | hm;
    if (rem > 0x1000u || (rem == 0x1000u && (hm & 1))) h++; /* may carry into the exponent: correct */
    return (uint16_t)h;
}

float kiln__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0x1f) x = sign | 0x7f800000u | (m << 13);
    else if (e) x = sign | ((e - 15 + 127) << 23) | (m << 13);
    else if (!m) x = sign;
    else { /* subnormal: normalize */
        e = 127 - 15 + 1;
        while (!(m & 0x400u)) { m <<= 1; e--; }
        x = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

uint16_t kiln__f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float kiln__bf16_to_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static double get_f32(const void *b, int64_t i) { return ((const float *)b)[i]; }
static double get_f64(const void *b, int64_t i) { return ((const double *)b)[i]; }
static double get_f16(const void *b, int64_t i) { return kiln__f16_to_f32(((const uint16_t *)b)[i]); }
static double get_bf16(const void *b, int64_t i) { return kiln__bf16_to_f32(((const uint16_t *)b)[i]); }
static double get_i32(const void *b, int64_t i) { return ((const int32_t *)b)[i]; }

static void set_f32(void *b, int64_t i, double v) { ((float *)b)[i] = (float)v; }
static void set_f64(void *b, int64_t i, double v) { ((double *)b)[i] = v; }
static void set_f16(void *b, int64_t i, double v) { ((uint16_t *)b)[i] = kiln__f32_to_f16((float)v); }
static void set_bf16(void *b, int64_t i, double v) { ((uint16_t *)b)[i] = kiln__f32_to_bf16((float)v); }
/* Saturating round-to-nearest; NaN becomes 0. */
static void set_i32(void *b, int64_t i, double v) {
    ((int32_t *)b)[i] = v != v ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)lrint(v);
}

#define ROW_CONVERTERS(name, T, to, from)                                                                  \
    static void name##_to_f32(const void *s, float *d, int64_t n) {                                        \
        for (int64_t i = 0; i < n; i++) d[i] = to(((const T *)s)[i]);                                       \
    }                                                                                                      \
    static void name##_from_f32(const float *s, void *d, int64_t n) {                                      \
        for (int64_t i = 0; i < n; i++) ((T *)d)[i] = from(s[i]);                                          \
    }
#define ID(x) (x)
#define TO_F64(x) ((double)(x))
#define TO_F32(x) ((float)(x))
static int32_t f32_to_i32(float v) { int32_t r; set_i32(&r, 0, v); return r; }
ROW_CONVERTERS(f32, float, ID, ID)
ROW_CONVERTERS(f64, double, TO_F32, TO_F64)
ROW_CONVERTERS(f16, uint16_t, kiln__f16_to_f32, kiln__f32_to_f16)
ROW_CONVERTERS(bf16, uint16_t, kiln__bf16_to_f32, kiln__f32_to_bf16)
ROW_CONVERTERS(i32, int32_t, TO_F32, f32_to_i32)

#define PLAIN(nm, sz, fl, t) {nm, sz, fl, get_##t, set_##t, t##_to_f32, t##_from_f32, 1, 1}

static kiln_type_traits table[KILN_DTYPE_COUNT] = {
    [KILN_F32] = PLAIN("f32", 4, true, f32),
    [KILN_F64] = PLAIN("f64", 8, true, f64),
    [KILN_F16] = PLAIN("f16", 2, true, f16),
    [KILN_BF16] = PLAIN("bf16", 2, true, bf16),
    [KILN_I32] = PLAIN("i32", 4, false, i32),
};
const kiln_type_traits *const kiln__types = table;

/* Coders preferred over the registered ones, kept apart so that the order
 * of the registrations (constructors in link order) does not matter. */
static struct {
    kiln_to_f32_fn *to_f32;
    kiln_from_f32_fn *from_f32;
} preferred[KILN_DTYPE_COUNT];

static void apply_preferred(kiln_dtype t) {
    if (!table[t].blck) return; /* not registered yet: its registration applies them */
    if (preferred[t].to_f32) table[t].to_f32 = preferred[t].to_f32;
    if (preferred[t].from_f32) table[t].from_f32 = preferred[t].from_f32;
}

kiln_status kiln__dtype_register(kiln_dtype t, const kiln_type_traits *tr) {
    static const char who[] = "kiln__dtype_register";
    if ((unsigned)t >= KILN_DTYPE_COUNT) return kiln__errs(KILN_ERR_DTYPE, "%s: dtype %d is out of range", who, (int)t);
    const char *short_of = !tr ? "traits" : !tr->name ? "a name" : !tr->size ? "a block size in bytes"
                         : tr->blck < 2 ? "blocks of 2 or more elements"
                         : tr->row_blck < 1 || tr->blck % tr->row_blck ? "a row block dividing the block"
                         : !tr->get ? "get" : !tr->to_f32 ? "to_f32" : !tr->from_f32 ? "from_f32"
                         : tr->set ? "set NULL (blocks are written whole)" : NULL;
    if (short_of) return kiln__errs(KILN_ERR_ARG, "%s: dtype %d: the traits need %s", who, (int)t, short_of);
    if (table[t].blck)
        return kiln__errs(KILN_ERR_STATE, "%s: dtype %d is %s already, not %s", who, (int)t, table[t].name, tr->name);
    table[t] = *tr;
    apply_preferred(t);
    return KILN_OK;
}

kiln_status kiln__dtype_prefer_coders(kiln_dtype t, kiln_to_f32_fn *to_f32, kiln_from_f32_fn *from_f32) {
    if ((unsigned)t >= KILN_DTYPE_COUNT)
        return kiln__errs(KILN_ERR_DTYPE, "kiln__dtype_prefer_coders: dtype %d is out of range", (int)t);
    if (to_f32) preferred[t].to_f32 = to_f32;
    if (from_f32) preferred[t].from_f32 = from_f32;
    apply_preferred(t);
    return KILN_OK;
}

const char *kiln_dtype_name(kiln_dtype t) {
    return (unsigned)t < KILN_DTYPE_COUNT && kiln__types[t].name ? kiln__types[t].name : "?";
}
size_t kiln_dtype_size(kiln_dtype t) { return (unsigned)t < KILN_DTYPE_COUNT ? kiln__types[t].size : 0; }
int64_t kiln_dtype_block(kiln_dtype t) { return (unsigned)t < KILN_DTYPE_COUNT ? kiln__types[t].blck : 0; }
kiln_dtype kiln_dtype_dot_type(kiln_dtype t) { return (unsigned)t < KILN_DTYPE_COUNT ? kiln__types[t].dot_type : KILN_F32; }
bool kiln_dtype_is_quantized(kiln_dtype t) { return (unsigned)t < KILN_DTYPE_COUNT && kiln__is_quant(t); }

bool kiln__quant_shape_ok(const char *who, kiln_dtype t, int ndim, const int64_t *shape) {
    char buf[96];
    const kiln_type_traits *tr = &kiln__types[t];
    if (ndim < 1 || shape[ndim - 1] % tr->row_blck || kiln__numel(ndim, shape) % tr->blck) {
        if (tr->row_blck == tr->blck)
            kiln__err(KILN_ERR_SHAPE, "%s: a %s tensor needs its last dimension a multiple of %lld, not %s", who,
                      tr->name, (long long)tr->blck, kiln__dims_str(ndim, shape, buf));
        else
            kiln__err(KILN_ERR_SHAPE,
                      "%s: a %s tensor needs its last dimension a multiple of %lld and its size a multiple of %lld, "
                      "not %s", who, tr->name, (long long)tr->row_blck, (long long)tr->blck,
                      kiln__dims_str(ndim, shape, buf));
        return false;
    }
    return true;
}
