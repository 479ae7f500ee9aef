// ew_where.glsl — y = cond != 0 ? a : b with broadcasting (three strided
// sources). cond is f32 (-0 counts as zero, NaN as true) or i32, told by
// c_i32; a and b are moved as bits in their storage type (EW_T16: f16, EW_TB16: bf16).
// EW_MAGIC: walks of up to 4 dims, divided by magic numbers (ew_fast.glsl)
// instead of udiv; the host takes the plain kernel for more dims.
#ifdef EW_MAGIC
#include "ew_fast.glsl"
#define EW_WHERE_DIMS 4
#else
#include "ew_index.glsl"
#define EW_WHERE_DIMS EW_MAX_DIMS
#endif
#if defined(EW_TB16)
#extension GL_EXT_shader_16bit_storage : require
#define EW_STORE_T uint16_t
#elif defined(EW_T16)
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define EW_STORE_T float16_t
#else
#define EW_STORE_T uint
#endif
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer C { uint c[]; };
layout(std430, binding = 1) readonly buffer A { EW_STORE_T a[]; };
layout(std430, binding = 2) readonly buffer B { EW_STORE_T b[]; };
layout(std430, binding = 3) writeonly buffer Y { EW_STORE_T y[]; };
layout(push_constant) uniform P {
    uint n, c0, a0, b0, y0, nd, c_i32;
#ifdef EW_MAGIC
    uint sl, i0, mg[EW_WHERE_DIMS]; // i0: the first flat index (the tail of ew_where_v4)
#endif
    uint shape[EW_WHERE_DIMS], sc[EW_WHERE_DIMS], sa[EW_WHERE_DIMS], sb[EW_WHERE_DIMS];
} p;

void main() {
    uint i = kiln_gid();
    if (i >= p.n) return;
#ifdef EW_MAGIC
    i += p.i0;
#endif
    uint oc = 0u, oa = 0u, ob = 0u, r = i;
    for (int d = int(p.nd) - 1; d >= 0; d--) {
#ifdef EW_MAGIC
        uint q = ew_udiv(r, p.mg[d], (p.sl >> (5 * d)) & 31u), k = r - q * p.shape[d];
        r = q;
#else
        uint k = r % p.shape[d];
        r /= p.shape[d];
#endif
        oc += k * p.sc[d];
        oa += k * p.sa[d];
        ob += k * p.sb[d];
    }
    uint cb = c[p.c0 + oc];
    bool on = (p.c_i32 != 0u ? cb : cb & 0x7fffffffu) != 0u;
    y[p.y0 + i] = on ? a[p.a0 + oa] : b[p.b0 + ob];
}
