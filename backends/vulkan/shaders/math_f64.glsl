// math_f64.glsl — exp and log in double precision for the f64 variants of
// the attention kernels: GLSL has no double exp or log (GLSL.std.450's Exp
// and Log take 16- and 32-bit floats). Straight-line code, no loops
// (lavapipe bounds an invocation's loop iterations).

// e^x for x <= 0 (the softmax's and the merge's arguments; NaN stays NaN):
// x = k ln2 + r, |r| <= ln2 / 2 (ln2 in two parts, Cody and Waite), e^r by
// its Taylor series to r^13 (the rest under 1e-17), times 2^k; 0 below
// -708, where 2^k would leave the normal range (weights that small add
// nothing next to the largest, 1).
double exp_f64(double x) {
    if (x < -708.0lf) return 0.0lf;
    double k = floor(x * 1.4426950408889634074lf + 0.5lf);
    double r = (x - k * 6.93147180369123816490e-01lf) - k * 1.90821492927058770002e-10lf;
    double e = 1.0lf + r * (1.0lf / 13.0lf);
    e = 1.0lf + r * (1.0lf / 12.0lf) * e;
    e = 1.0lf + r * (1.0lf / 11.0lf) * e;
    e = 1.0lf + r * (1.0lf / 10.0lf) * e;
    e = 1.0lf + r * (1.0lf / 9.0lf) * e;
    e = 1.0lf + r * (1.0lf / 8.0lf) * e;
    e = 1.0lf + r * (1.0lf / 7.0lf) * e;
    e = 1.0lf + r * (1.0lf / 6.0lf) * e;
    e = 1.0lf + r * (1.0lf / 5.0lf) * e;
    e = 1.0lf + r * (1.0lf / 4.0lf) * e;
    e = 1.0lf + r * (1.0lf / 3.0lf) * e;
    e = 1.0lf + r * 0.5lf * e;
    e = 1.0lf + r * e;
    return x != x ? x : ldexp(e, int(k));
}

// log x for finite x > 0 (the online softmax's sums, >= 1): x = 2^k m,
// m in [sqrt(1/2), sqrt(2)), log m = 2 atanh s, s = (m - 1) / (m + 1),
// |s| <= 0.172, by its series to s^23 (the rest under 1e-19).
double log_f64(double x) {
    int k;
    double m = frexp(x, k);
    if (m < 0.70710678118654752440lf) m *= 2.0lf, k--;
    double s = (m - 1.0lf) / (m + 1.0lf), s2 = s * s;
    double a = 1.0lf / 23.0lf;
    a = 1.0lf / 21.0lf + s2 * a;
    a = 1.0lf / 19.0lf + s2 * a;
    a = 1.0lf / 17.0lf + s2 * a;
    a = 1.0lf / 15.0lf + s2 * a;
    a = 1.0lf / 13.0lf + s2 * a;
    a = 1.0lf / 11.0lf + s2 * a;
    a = 1.0lf / 9.0lf + s2 * a;
    a = 1.0lf / 7.0lf + s2 * a;
    a = 1.0lf / 5.0lf + s2 * a;
    a = 1.0lf / 3.0lf + s2 * a;
    a = 1.0lf + s2 * a;
    return double(k) * 6.93147180369123816490e-01lf + (double(k) * 1.90821492927058770002e-10lf + 2.0lf * s * a);
}

// tanh x by e^(-2|x|) (the soft-cap's scores): its absolute error, what
// a score carries into the softmax, stays near 1e-16.
double tanh_f64(double x) {
    double e = exp_f64(-2.0lf * abs(x));
    return x != x ? x : sign(x) * ((1.0lf - e) / (1.0lf + e));
}

// What the f64 variants' bodies use in place of float, exp and log.
#define KILN_F64
#define T double
#define EXP exp_f64
#define LOG log_f64
#define TANH tanh_f64
