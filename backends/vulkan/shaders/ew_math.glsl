// ew_math.glsl — f32 math for the element-wise kernels, ported from the
// CPU's SIMD tables (backends/cpu/vecmath_body.h) so both backends share
// their approximations: exp (Cody-Waite + degree-7 Taylor, 2^n as two
// factors), log (atanh series), tanh, sigmoid without cancellation, and the
// normal CDF through the Mills ratio (fit error 3e-9), which gives the erf
// form of GELU to f32 accuracy. The device's built-in exp/log/tanh/pow are
// not used: Vulkan allows them errors of several ulp and more; nor is GLSL's
// fma (see ew_fma). Division is computed on the significands and sqrt gets
// a correction step, so they round like the CPU's. Comparisons against NaN
// and min/max are written out: GLSL's min/max leave NaN operands undefined.
#ifndef EW_MATH_GLSL // included by both op tables (ew_chain.comp)
#define EW_MATH_GLSL
#define EW_NAN uintBitsToFloat(0x7fc00000u)
#define EW_INF uintBitsToFloat(0x7f800000u)

bool ew_isnan(float x) { return (floatBitsToUint(x) & 0x7fffffffu) > 0x7f800000u; }
float ew_abs(float x) { return uintBitsToFloat(floatBitsToUint(x) & 0x7fffffffu); }
float ew_neg(float x) { return uintBitsToFloat(floatBitsToUint(x) ^ 0x80000000u); }
float ew_copysign(float mag, float sgn) {
    return uintBitsToFloat((floatBitsToUint(mag) & 0x7fffffffu) | (floatBitsToUint(sgn) & 0x80000000u));
}
// a b + c as two roundings. Not GLSL's fma: Vulkan does not require it to
// be fused, and lavapipe's is off by up to 2^-18 relative for some
// operands; precise keeps drivers from contracting these back into one.
float ew_fma(float a, float b, float c) {
    precise float p = a * b;
    precise float s = p + c;
    return s;
}

float ew_min_c(float x, float c) { return x > c ? c : x; } // x when x is NaN
float ew_max_c(float x, float c) { return x < c ? c : x; }

// a b = hi + lo exactly (Dekker's product: fma is not fused on every
// device, lavapipe's included). |a|, |b| < 2^100.
void ew_two_prod(float a, float b, out float hi, out float lo) {
    precise float h = a * b;
    precise float ca = 4097.0 * a, ah = ca - (ca - a), al = a - ah;
    precise float cb = 4097.0 * b, bh = cb - (cb - b), bl = b - bh;
    precise float l = ((ah * bh - h) + ah * bl + al * bh) + al * bl;
    hi = h;
    lo = l;
}

// e^x = result * s2, both normal until the last product.
float ew_exp_split(float x, out float s2) {
    float xc = ew_max_c(ew_min_c(x, 89.0), -150.0);
    float nf = roundEven(xc * 1.44269504);
    float r = ew_fma(-nf, 0.693359375, xc); // ln2 = 0.693359375 - 2.12194440e-4 (Cody-Waite)
    r = ew_fma(-nf, -2.12194440e-4, r);
    float q = 1.0 / 5040.0;
    q = ew_fma(q, r, 1.0 / 720.0);
    q = ew_fma(q, r, 1.0 / 120.0);
    q = ew_fma(q, r, 1.0 / 24.0);
    q = ew_fma(q, r, 1.0 / 6.0);
    q = ew_fma(q, r, 0.5);
    q = ew_fma(q, r, 1.0);
    q = ew_fma(q, r, 1.0);
    int n = ew_isnan(nf) ? 0 : int(nf), n1 = n >> 1, n2 = n - n1;
    s2 = intBitsToFloat((n2 + 127) << 23);
    return q * intBitsToFloat((n1 + 127) << 23);
}

// NaN is tested on its bits: NVIDIA's compiler turns the clamps' selects
// into min/max, which drop a NaN (e^NaN came out inf).
float ew_exp(float x) {
    float s2, e = ew_exp_split(x, s2);
    return ew_isnan(x) ? uintBitsToFloat(floatBitsToUint(x) | 0x400000u) : e * s2;
}

// log x = hi + lo for finite x > 0: hi = e ln2_hi exactly, lo the rest
// (pow scales both, so its error does not grow with |p log x|).
void ew_log_split(float x, out float hi, out float lo) {
    bool sub = x < 1.17549435e-38; // subnormals: scale by 2^23 first
    float xs = sub ? x * 8388608.0 : x;
    int bits = floatBitsToInt(xs);
    int e = (bits >> 23) - 127;
    float m = intBitsToFloat((bits & 0x7fffff) | 0x3f800000);
    bool big = m > 1.41421356;
    m = big ? m * 0.5 : m;
    float ef = float(e) + (big ? 1.0 : 0.0) - (sub ? 23.0 : 0.0);
    float s = (m - 1.0) / (m + 1.0);
    float z = s * s;
    float q = ew_fma(1.0 / 9.0, z, 1.0 / 7.0);
    q = ew_fma(q, z, 1.0 / 5.0);
    q = ew_fma(q, z, 1.0 / 3.0);
    float s2 = s + s;
    float lm = ew_fma(s2 * z, q, s2);
    hi = ef * 0.693359375;
    lo = ew_fma(ef, -2.12194440e-4, lm);
}

float ew_log(float x) {
    float hi, lo;
    ew_log_split(x, hi, lo);
    float y = hi + lo;
    if (x < 0.0) y = EW_NAN;
    if (x == 0.0) y = -EW_INF;
    if (x == EW_INF) y = x;
    return ew_isnan(x) ? x : y;
}

float ew_tanh(float x) {
    float ax = ew_abs(x);
    float e = ew_exp(ax + ax);
    float big = 1.0 - 2.0 / (e + 1.0);
    float z = ax * ax;
    float q = ew_fma(-0.005852323956787586, z, 0.020753782242536545);
    q = ew_fma(q, z, -0.053768761456012726);
    q = ew_fma(q, z, 0.13331690430641174);
    q = ew_fma(q, z, -0.3333328366279602);
    float small_ = ew_fma(ax * z, q, ax);
    return ew_isnan(x) ? x : ew_copysign(ax < 0.6 ? small_ : big, x);
}

// σ(x), and σ(-x) in neg, both without cancellation.
float ew_sigmoid2(float x, out float neg) {
    float e = ew_exp(-ew_abs(x));
    float r = 1.0 / (1.0 + e), er = e * r;
    bool pos = x >= 0.0;
    neg = pos ? er : r;
    return pos ? r : er;
}

// x σ(z); for z < 0 the product is formed before e^z's last scaling. A NaN
// x comes back quieted with its sign and payload, as on the CPU (left to
// the arithmetic, its sign depended on how the driver ordered operands).
float ew_mul_sigmoid(float x, float z) {
    if (ew_isnan(x)) return uintBitsToFloat(floatBitsToUint(x) | 0x400000u);
    float s2, e1 = ew_exp_split(-ew_abs(z), s2), e = e1 * s2;
    float r = 1.0 / (1.0 + e);
    float y = z >= 0.0 ? x * r : ((x * e1) * r) * s2;
    // e^z's clamp: x * 0, written out (drivers fold x * 0.0 to 0; the reference gives NaN for inf)
    if (z < -150.0) return ew_isnan(x) || ew_abs(x) == EW_INF ? EW_NAN : ew_copysign(0.0, x);
    return y;
}

// log(1 + u) for u >= 0: log(w) u / (w - 1) with w = 1 + u corrects w's rounding.
float ew_log1p_pos(float u) {
    precise float w = 1.0 + u, d = w - 1.0;
    return d == 0.0 ? u : ew_log(w) * (u / d);
}

// exp(-x²/2) with x² = h + l exactly. |x| <= 14.5.
float ew_exp_mhalf_sq(float x) {
    float h, l;
    ew_two_prod(x, x, h, l);
    float e = ew_exp(h * -0.5);
    return e - (e * 0.5) * l;
}

// Φ(x), and φ(x) in pdf.
float ew_normal_cdf(float x, out float pdf) {
    float v = ew_min_c(ew_abs(x), 14.5);
    float phi = ew_exp_mhalf_sq(v) * 0.398942280;
    float t = 1.0 / ew_fma(v, 0.5, 1.0);
    float u = t - 0.6;
    float q = ew_fma(0.16963152587413788, u, -0.004607030656188726);
    q = ew_fma(q, u, -0.1843329221010208);
    q = ew_fma(q, u, 0.1325196921825409);
    q = ew_fma(q, u, 0.03437182679772377);
    q = ew_fma(q, u, -0.1841871291399002);
    q = ew_fma(q, u, 0.16199038922786713);
    q = ew_fma(q, u, 0.09925331920385361);
    q = ew_fma(q, u, -0.3483788073062897);
    q = ew_fma(q, u, 0.035798802971839905);
    q = ew_fma(q, u, 0.8486238121986389);
    q = ew_fma(q, u, 0.9268863797187805);
    float tail = phi * (q * t); // Φ(-|x|)
    pdf = phi;
    return x < 0.0 ? tail : 1.0 - tail;
}

const float EW_GELU_K = 0.797884561, EW_GELU_C = 0.044715;

float ew_gelu_tanh_arg2(float x) { return (x * (2.0 * EW_GELU_K)) * ew_fma(x * x, EW_GELU_C, 1.0); } // 2u

float ew_gelu(float x) {
    float pdf;
    return x * ew_normal_cdf(x, pdf);
}

float ew_gelu_grad(float x) { // Φ(x) + x φ(x)
    float pdf, cdf = ew_normal_cdf(x, pdf);
    return ew_fma(x, pdf, cdf);
}

float ew_gelu_tanh_grad(float x) { // s + 2 x s σ(-2u) k (1 + 3c x²), s = σ(2u)
    float xc = ew_max_c(ew_min_c(x, 20.0), -20.0);
    float sm, s = ew_sigmoid2(ew_gelu_tanh_arg2(xc), sm);
    float du = ew_fma(xc * xc, 3.0 * EW_GELU_C, 1.0);
    float y = ew_fma((xc * s) * (sm * (2.0 * EW_GELU_K)), du, s);
    return ew_isnan(x) || ew_abs(x) == EW_INF ? EW_NAN : y; // NaN by its bits, as in ew_exp
}

// x = m 2^e, m in [1, 2), from x's bits (finite, nonzero, subnormals too:
// a device that flushes them would read them as 0).
float ew_split_exp(uint x, out int e) {
    if (x < 0x00800000u) {
        int sh = 23 - findMSB(x);
        x <<= uint(sh);
        e = -126 - sh;
    } else e = int(x >> 23) - 127;
    return uintBitsToFloat((x & 0x7fffffu) | 0x3f800000u);
}

// a / b correctly rounded over the whole range, as the CPU's. The device's
// own division is not: Vulkan allows 2.5 ulp, and NVIDIA's flushes a
// subnormal quotient to 0 and is an ulp off for 3 / 1e-30. So the
// significands' quotient q (in [0.5, 2)) is corrected with its exact
// residual r (Dekker's product), checked against the neighbours, and the
// exponents are added as integers: a subnormal result is rounded once,
// from q's bits and r's sign (a quotient is never a midpoint at 24 bits,
// but can be one below). precise keeps drivers from folding r away.
float ew_div(float a, float b) {
    uint ua = floatBitsToUint(a), ub = floatBitsToUint(b), xa = ua & 0x7fffffffu, xb = ub & 0x7fffffffu;
    uint sign = (ua ^ ub) & 0x80000000u;
    if (xa > 0x7f800000u) return uintBitsToFloat(ua | 0x400000u); // NaN, quieted
    if (xb > 0x7f800000u) return uintBitsToFloat(ub | 0x400000u);
    if ((xa == 0x7f800000u && xb == 0x7f800000u) || (xa == 0u && xb == 0u)) return EW_NAN;
    if (xa == 0x7f800000u || xb == 0u) return uintBitsToFloat(sign | 0x7f800000u);
    if (xa == 0u || xb == 0x7f800000u) return uintBitsToFloat(sign);
    int ea, eb;
    float ma = ew_split_exp(xa, ea), mb = ew_split_exp(xb, eb), h, l;
    precise float q = ma / mb;
    ew_two_prod(q, mb, h, l);
    precise float r = (ma - h) - l;
    precise float q1 = q + r / mb;
    ew_two_prod(q1, mb, h, l);
    r = (ma - h) - l;
    uint qb = floatBitsToUint(q1);
    precise float up = uintBitsToFloat(qb + 1u) - q1, down = q1 - uintBitsToFloat(qb - 1u);
    precise float r2 = r + r;
    if (r > 0.0 && r2 > up * mb) qb += 1u;
    else if (r < 0.0 && -r2 > down * mb) qb -= 1u;
    if (qb != floatBitsToUint(q1)) { // the residual of the neighbour taken, for its sign
        ew_two_prod(uintBitsToFloat(qb), mb, h, l);
        r = (ma - h) - l;
    }
    int e = int(qb >> 23) - 127 + ea - eb;
    uint m = (qb & 0x7fffffu) | 0x800000u;
    if (e > 127) return uintBitsToFloat(sign | 0x7f800000u);
    if (e >= -126) return uintBitsToFloat(sign | (uint(e + 127) << 23) | (m & 0x7fffffu));
    int s = -126 - e; // bits dropped to the subnormal grid
    if (s > 24) return uintBitsToFloat(sign);
    uint half_ = 1u << uint(s - 1), rest = m & ((half_ << 1) - 1u), mr = m >> uint(s);
    if (rest > half_ || (rest == half_ && (r > 0.0 || (r == 0.0 && (mr & 1u) != 0u)))) mr += 1u;
    return uintBitsToFloat(sign | mr);
}

// sqrt corrected the same way (Vulkan derives sqrt from inversesqrt).
float ew_sqrt(float x) {
    precise float s = sqrt(x);
    if (!(x > 1e-30 && x < 1e30)) return s;
    float h, l;
    ew_two_prod(s, s, h, l);
    precise float r = (x - h) - l;
    precise float s2 = s + r * (0.5 / s);
    return s2;
}

// x^p as the CPU's reference pow(x, p), with its special cases; small
// integral powers by repeated squaring (a few roundings), the rest as
// exp(p log |x|) with log |x| and the product carried in two parts, so the
// error does not grow with |p log x|.
float ew_pow(float x, float p) {
    if (p == 1.0) return x;
    if (p == 2.0) return x * x;
    if (p == 3.0) return x * x * x;
    if (p == -1.0) return ew_div(1.0, x);
    if (p == 0.0 || x == 1.0) return 1.0;
    if (ew_isnan(x) || ew_isnan(p)) return EW_NAN;
    if (p == 0.5 && x != -EW_INF) return x == 0.0 ? 0.0 : ew_sqrt(x);
    bool integral = p == floor(p), odd = integral && ew_abs(p) < 16777216.0 && mod(p, 2.0) == 1.0;
    bool neg = (floatBitsToUint(x) >> 31) != 0u; // -0 included
    float ax = ew_abs(x);
    if (neg && !integral && ax != 0.0 && ax != EW_INF) return EW_NAN;
    float mag;
    if (ax == 0.0) mag = p > 0.0 ? 0.0 : EW_INF;
    else if (ax == EW_INF) mag = p > 0.0 ? EW_INF : 0.0;
    else if (integral && ew_abs(p) <= 64.0) {
        float b = ax, r = 1.0;
        for (uint k = uint(ew_abs(p)); k != 0u; k >>= 1) {
            if ((k & 1u) != 0u) r *= b;
            b *= b;
        }
        mag = p < 0.0 ? ew_div(1.0, r) : r;
    } else { // e^(p (hi + lo)) = e^y (1 + t), y + t = p (hi + lo) to about 2^-48
        float hi, lo, ph, pl;
        ew_log_split(ax, hi, lo);
        if (ew_abs(p) > 1e20) return ew_exp(p * (hi + lo)); // over- or underflows (p is even)
        ew_two_prod(p, hi, ph, pl);
        precise float c = pl + p * lo, y = ph + c, t = (ph - y) + c;
        mag = ew_exp(y);
        if (ew_abs(y) < 100.0) mag += mag * t;
    }
    return neg && odd ? ew_neg(mag) : mag;
}
#endif
