// attn_cached_merge.glsl — the nsplit partial (O, L) of each of kiln_attention_cached's
// N Hq output rows (attn_cached_tile.glsl: part holds O [nsplit][rows][Dv]
// at po0 and L [nsplit][rows] at pl0) merged by their logsumexps, an
// invocation per output element; L = +inf: a split that saw no key,
// weight 0; a row no split saw (outside the caches) gets NaN. f32, or
// f64 after math_f64.glsl (T double).
#ifndef T
#define T float
#define EXP exp
#endif
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer PART { T part[]; };
layout(std430, binding = 1) writeonly buffer O { T o[]; };
layout(push_constant) uniform P { uint rows, dv, nsplit, po0, pl0, o0; } p;

void main() {
    uint id = kiln_gid();
    if (id >= p.rows * p.dv) return;
    uint r = id / p.dv, col = id % p.dv;
    T inf = uintBitsToFloat(0x7f800000u), mx = -inf, lt = 0.0, a = 0.0;
    for (uint s = 0u; s < p.nsplit; s++) {
        T l = part[p.pl0 + s * p.rows + r];
        if (l != inf) mx = max(mx, l);
    }
    for (uint s = 0u; s < p.nsplit; s++) {
        T l = part[p.pl0 + s * p.rows + r];
        if (l == inf) continue;
        T w = EXP(l - mx);
        lt += w;
        a += w * part[p.po0 + (s * p.rows + r) * p.dv + col];
    }
    o[p.o0 + id] = lt > 0.0 ? a / lt : uintBitsToFloat(0x7fc00000u);
}
