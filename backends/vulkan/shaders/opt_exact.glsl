// opt_exact.glsl — float arithmetic that matches the CPU's: Vulkan rounds
// + - * correctly but allows a few ulp for / and sqrt, and may fuse a*b+c;
// the optimizer kernels must give the CPU's bits. Variables are `precise`
// (no fusing, no reordering), quotients and square roots get one
// correction step, and the step scalars the CPU computes in double are
// computed here in float-float (a value hi + lo, |lo| <= ulp(hi) / 2), whose
// hi is that double rounded to float.

// a + b exactly as s + e
vec2 ff_two_sum(float a, float b) {
    precise float s = a + b;
    precise float bb = s - a;
    precise float e = (a - (s - bb)) + (b - bb);
    return vec2(s, e);
}

vec2 ff_fast_two_sum(float a, float b) { // |a| >= |b|
    precise float s = a + b;
    precise float e = b - (s - a);
    return vec2(s, e);
}

// a * b exactly as p + e (Veltkamp's split; |a|, |b| well inside the float range)
vec2 ff_two_prod(float a, float b) {
    precise float ca = 4097.0 * a, cb = 4097.0 * b;
    precise float ah = ca - (ca - a), bh = cb - (cb - b);
    precise float al = a - ah, bl = b - bh;
    precise float p = a * b;
    precise float e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    return vec2(p, e);
}

vec2 ff_mul(vec2 x, vec2 y) {
    vec2 p = ff_two_prod(x.x, y.x);
    precise float e = p.y + (x.x * y.y + x.y * y.x);
    return ff_fast_two_sum(p.x, e);
}

// a - x for a float a
vec2 ff_sub_from(float a, vec2 x) {
    vec2 s = ff_two_sum(a, -x.x);
    precise float e = s.y - x.y;
    return ff_fast_two_sum(s.x, e);
}

// b^t by squaring (t >= 0)
vec2 ff_pow(float b, uint t) {
    vec2 r = vec2(1.0, 0.0), s = vec2(b, 0.0);
    for (; t != 0u; t >>= 1) {
        if ((t & 1u) != 0u) r = ff_mul(r, s);
        s = ff_mul(s, s);
    }
    return r;
}

// a / x, then sqrt(x), for x > 0 (one correction each: the float-float error is far below half an ulp)
vec2 ff_div(float a, vec2 x) {
    precise float q = a / x.x;
    vec2 r = ff_sub_from(a, ff_mul(vec2(q, 0.0), x));
    precise float c = r.x / x.x;
    return ff_fast_two_sum(q, c);
}

vec2 ff_sqrt(vec2 x) {
    precise float s = sqrt(x.x);
    if (s == 0.0) return vec2(0.0);
    vec2 r = ff_sub_from(x.x, ff_two_prod(s, s));
    precise float c = (r.x + x.y) / (2.0 * s);
    return ff_fast_two_sum(s, c);
}

// Where the exact products of the corrections stay normal floats.
bool ff_safe(float a) { return abs(a) > 1e-25 && abs(a) < 1e25; }

// a / b and sqrt(a) rounded as the CPU rounds them (IEEE), for any a and b.
float div_cr(float a, float b) {
    precise float q = a / b;
    if (!ff_safe(q) || !ff_safe(a) || !ff_safe(b)) return q;
    vec2 r = ff_sub_from(a, ff_two_prod(q, b)); // a - q b exactly
    precise float c = r.x / b;
    precise float q2 = q + c;
    return q2;
}

float sqrt_cr(float a) {
    precise float s = sqrt(a);
    if (!ff_safe(a)) return s;
    vec2 r = ff_sub_from(a, ff_two_prod(s, s)); // a - s^2 exactly
    precise float c = r.x / (2.0 * s);
    precise float s2 = s + c;
    return s2;
}
