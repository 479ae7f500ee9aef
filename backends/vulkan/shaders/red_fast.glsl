// red_fast.glsl — the accumulator of the fast reduce kernels (red_row,
// red_col, red_fin), built once per op (RED_OP: 0 sum, 1 max, 2 min,
// 3 argmax) because llvmpipe runs every side of a branch. An accumulator
// is (v, c, i): for sums v + c, a float-float (TwoSum) that comes close to
// the CPU's double accumulation; for the others the extreme v at index i.
// Rules as the CPU's: a NaN wins (the first one), ties keep the lower index.
// Within one walk indices only grow, so the element step (red_step) needs
// no index compare; merges of walks (red_merge) compare indices.
//
// Sums skip the "non-finite" test per element: once v is inf or NaN it stays
// so, and red_value then returns v alone (c may hold NaN by then).
// Max/min start at -inf/+inf with i = RED_EMPTY, which an element replaces
// only by beating it, so a walk of nothing but -inf (max) stays empty: it
// loses every merge and, if all are empty, the result is -inf at index 0.
#define RED_SUM 0
#define RED_MAX 1
#define RED_MIN 2
#define RED_ARGMAX 3
#define RED_EMPTY 0xffffffffu

struct red_acc {
    float v, c;
    uint i;
};

#if RED_OP == RED_SUM
#define RED_INIT 0.0
#elif RED_OP == RED_MIN
#define RED_INIT uintBitsToFloat(0x7f800000u)
#else
#define RED_INIT uintBitsToFloat(0xff800000u)
#endif

bool red_finite(float v) { return (floatBitsToUint(v) & 0x7f800000u) != 0x7f800000u; }

red_acc red_empty() { return red_acc(RED_INIT, 0.0, RED_EMPTY); }

// s + e = a + b exactly while s is finite.
#define RED_TWO_SUM(T)                                   \
    void red_two_sum(T a, T b, out T s, out T e) {       \
        precise T s_ = a + b;                            \
        precise T bb = s_ - a;                           \
        precise T e_ = (a - (s_ - bb)) + (b - bb);       \
        s = s_;                                          \
        e = e_;                                          \
    }
RED_TWO_SUM(float)
RED_TWO_SUM(vec4)

// Does x beat a (x later in the walk than a)? RED_BEATS4 for vec4 walks
// (GLSL has no || on bvec4).
#if RED_OP == RED_MIN
#define RED_BEATS1(x, a) ((x) < (a) || ((x) != (x) && (a) == (a)))
#define RED_BEATS4(x, a) bvec4(uvec4(lessThan(x, a)) | (uvec4(notEqual(x, x)) & uvec4(equal(a, a))))
#else
#define RED_BEATS1(x, a) ((x) > (a) || ((x) != (x) && (a) == (a)))
#define RED_BEATS4(x, a) bvec4(uvec4(greaterThan(x, a)) | (uvec4(notEqual(x, x)) & uvec4(equal(a, a))))
#endif

void red_step(inout red_acc a, float x, uint k) {
#if RED_OP == RED_SUM
    float s, e;
    red_two_sum(a.v, x, s, e);
    a.v = s;
    a.c += e;
#else
    bool b = RED_BEATS1(x, a.v);
    a.v = b ? x : a.v;
    a.i = b ? k : a.i;
#endif
}

// Does b beat a, wherever they are in the walk?
bool red_beats(float bv, uint bi, red_acc a) {
    if (bi == RED_EMPTY) return false;
    if (a.i == RED_EMPTY) return true;
    bool nb = bv != bv, na = a.v != a.v;
    if (nb || na) return nb && (!na || bi < a.i);
    if (bv == a.v) return bi < a.i;
#if RED_OP == RED_MIN
    return bv < a.v;
#else
    return bv > a.v;
#endif
}

red_acc red_merge(red_acc a, red_acc b) {
#if RED_OP == RED_SUM
    float s, e, s2, e2;
    red_two_sum(a.v, b.v, s, e);
    if (!red_finite(s)) return red_acc(s, 0.0, 0u); // c may be NaN: keep it out of s
    precise float c = e + (a.c + b.c);
    red_two_sum(s, c, s2, e2);
    return red_acc(s2, e2, 0u);
#else
    return red_beats(b.v, b.i, a) ? b : a;
#endif
}

// The walk of 4 lanes (element k*4+j in component j) as one accumulator.
struct red_acc4 {
    vec4 v, c;
    uvec4 i;
};
red_acc4 red_empty4() { return red_acc4(vec4(RED_INIT), vec4(0.0), uvec4(RED_EMPTY)); }
void red_step4(inout red_acc4 a, vec4 x, uvec4 k) {
#if RED_OP == RED_SUM
    vec4 s, e;
    red_two_sum(a.v, x, s, e);
    a.v = s;
    a.c += e;
#else
    bvec4 b = RED_BEATS4(x, a.v);
    a.v = mix(a.v, x, b);
    a.i = mix(a.i, k, b);
#endif
}
red_acc red_lane(red_acc4 a, int j) { return red_acc(a.v[j], a.c[j], a.i[j]); }

// The result of an accumulator (argmax: its index, as float bits).
float red_value(red_acc a) {
#if RED_OP == RED_SUM
    return red_finite(a.v) ? a.v + a.c : a.v;
#elif RED_OP == RED_ARGMAX
    return uintBitsToFloat(a.i == RED_EMPTY ? 0u : a.i);
#else
    return a.v;
#endif
}
