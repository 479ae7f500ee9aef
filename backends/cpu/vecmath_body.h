/* vecmath_body.h — the SIMD kiln_vm table written once over a small vector
 * vocabulary. Each vecmath_<isa>.c defines the vocabulary below, then
 * includes this file, which defines `const kiln_vm VM_TABLE`.
 *
 *   V, VM, VI       float vector, lane mask, int32 vector; W lanes
 *   VLD VST VSTNT   unaligned load/store, aligned non-temporal store; VSFENCE()
 *   VDUP VIDUP      broadcast a float / an int
 *   VADD VSUB VMUL VDIV VSQRT, VFMA(a,b,c) = a*b+c, VFNMA(a,b,c) = c-a*b (fused)
 *   VROUND          to the nearest integer (ties to even), as float
 *   VMIN_C VMAX_C   min/max(x, c) that return x when x is NaN
 *   VMAXP VMINP     max/min where a NaN in either operand wins
 *   VLT VLE VGT VGE VEQ (ordered), VNE (true for NaN), VNAN, VSEL(m, a, b) = m ? a : b
 *   VCVT VCVTF      float -> int (of integral values), int -> float
 *   VASI VASF       reinterpret bits; VIADD VISUB VIAND VIOR VIXOR VISHL VISRA; VINZ (lanes != 0)
 *   VANY(m)         true when any lane is set
 *   VD, VDZERO, VDADD, VDLD, VDST, VDLO(v), VDHI(v): double vectors of W/2 lanes,
 *                   the low / high half of a float vector widened
 *
 * Approximations (errors measured by tests/test_simd_elementwise.c):
 *   exp      x = n ln2 + r, |r| <= ln2/2, Taylor series of e^r to r^7 (< 1e-8),
 *            2^n applied as two factors so results reach the subnormals
 *   log      x = m 2^e, m in [√½, √2), log m = 2 atanh(s), s = (m-1)/(m+1), series to s^9
 *   tanh     odd minimax polynomial below 0.6, else 1 - 2/(e^{2|x|} + 1)
 *   Φ, φ     Φ(-v) = φ(v) M(v): the Mills ratio M fitted as t Q(t - 0.6),
 *            t = 1/(1 + v/2), Q of degree 11 (fit error 3e-9 over [0, 14.5]);
 *            φ's exp(-x²/2) takes x² exactly (fma) so the tails keep precision;
 *            vectors whose lanes all lie in |x| <= 4 (almost every vector of
 *            activations) take Φ(-v) = e^{-v²/2} R(v) instead, R a degree-12
 *            polynomial in v: no reciprocal, no clamps, a cheaper exp (half
 *            the instructions of the general path, gelu error <= 3e-7) */
#include <string.h>

/* ---- math on vectors ---- */

static inline V v_abs(V x) { return VASF(VIAND(VASI(x), VIDUP(0x7fffffff))); }
static inline V v_neg(V x) { return VASF(VIXOR(VASI(x), VIDUP((int32_t)0x80000000u))); }
static inline V v_copysign(V mag, V sgn) {
    return VASF(VIOR(VIAND(VASI(mag), VIDUP(0x7fffffff)), VIAND(VASI(sgn), VIDUP((int32_t)0x80000000u))));
}
static inline V v_one_if(VM m) { return VSEL(m, VDUP(1.0f), VDUP(0.0f)); }

/* 1/d for finite d in [1, 16]: the hardware estimate (8 to 14 bits) and two
 * Newton steps, to f32 accuracy at a fraction of a division's cost. */
static inline V v_recip_1_16(V d) {
    V r = VRCP0(d);
    r = VMUL(r, VFNMA(d, r, VDUP(2.0f)));
    return VMUL(r, VFNMA(d, r, VDUP(2.0f)));
}

/* e^x = result * *s2, both normal until the last product: callers that
 * scale the result further multiply by *s2 last, to round into the subnormals once. */
static inline V v_exp_split(V x, V *s2) {
    V xc = VMAX_C(VMIN_C(x, VDUP(89.0f)), VDUP(-150.0f)); /* both factors of 2^n stay normal */
    V nf = VROUND(VMUL(xc, VDUP(1.44269504f)));
    V r = VFNMA(nf, VDUP(0.693359375f), xc); /* ln2 = 0.693359375 - 2.12194440e-4 (Cody-Waite) */
    r = VFNMA(nf, VDUP(-2.12194440e-4f), r);
    V p = VDUP(1.0f / 5040);
    p = VFMA(p, r, VDUP(1.0f / 720));
    p = VFMA(p, r, VDUP(1.0f / 120));
    p = VFMA(p, r, VDUP(1.0f / 24));
    p = VFMA(p, r, VDUP(1.0f / 6));
    p = VFMA(p, r, VDUP(0.5f));
    p = VFMA(p, r, VDUP(1.0f));
    p = VFMA(p, r, VDUP(1.0f));
    VI n = VCVT(nf), n1 = VISRA(n, 1), n2 = VISUB(n, n1);
    *s2 = VASF(VISHL(VIADD(n2, VIDUP(127)), 23));
    return VMUL(p, VASF(VISHL(VIADD(n1, VIDUP(127)), 23)));
}

static inline V v_exp(V x) {
    V s2, e = v_exp_split(x, &s2);
    return VMUL(e, s2);
}

static inline V v_log(V x) {
    VM sub = VLT(x, VDUP(1.17549435e-38f)); /* subnormals: scale by 2^23 first */
    V xs = VSEL(sub, VMUL(x, VDUP(8388608.0f)), x);
    VI bits = VASI(xs);
    VI e = VISUB(VISRA(bits, 23), VIDUP(127));
    V m = VASF(VIOR(VIAND(bits, VIDUP(0x7fffff)), VIDUP(0x3f800000)));
    VM big = VGT(m, VDUP(1.41421356f));
    m = VSEL(big, VMUL(m, VDUP(0.5f)), m);
    V ef = VADD(VCVTF(e), v_one_if(big));
    ef = VSUB(ef, VSEL(sub, VDUP(23.0f), VDUP(0.0f)));
    V s = VDIV(VSUB(m, VDUP(1.0f)), VADD(m, VDUP(1.0f)));
    V z = VMUL(s, s);
    V q = VFMA(VDUP(1.0f / 9), z, VDUP(1.0f / 7));
    q = VFMA(q, z, VDUP(1.0f / 5));
    q = VFMA(q, z, VDUP(1.0f / 3));
    V s2 = VADD(s, s);
    V lm = VFMA(VMUL(s2, z), q, s2);
    V y = VFMA(ef, VDUP(0.693359375f), VFMA(ef, VDUP(-2.12194440e-4f), lm));
    y = VSEL(VLT(x, VDUP(0.0f)), VDUP(NAN), y);
    y = VSEL(VEQ(x, VDUP(0.0f)), VDUP(-INFINITY), y);
    y = VSEL(VEQ(x, VDUP(INFINITY)), x, y);
    return VSEL(VNAN(x), x, y);
}

static inline V v_tanh(V x) {
    V ax = v_abs(x);
    V e = v_exp(VADD(ax, ax));
    V big = VSUB(VDUP(1.0f), VDIV(VDUP(2.0f), VADD(e, VDUP(1.0f))));
    V z = VMUL(ax, ax);
    V q = VFMA(VDUP(-0.005852323956787586f), z, VDUP(0.020753782242536545f));
    q = VFMA(q, z, VDUP(-0.053768761456012726f));
    q = VFMA(q, z, VDUP(0.13331690430641174f));
    q = VFMA(q, z, VDUP(-0.3333328366279602f));
    V small = VFMA(VMUL(ax, z), q, ax);
    return v_copysign(VSEL(VLT(ax, VDUP(0.6f)), small, big), x);
}

/* σ(x) and σ(-x), both without cancellation. */
static inline V v_sigmoid2(V x, V *neg) {
    V e = v_exp(v_neg(v_abs(x)));
    V r = v_recip_1_16(VADD(VDUP(1.0f), e)), er = VMUL(e, r);
    VM pos = VGE(x, VDUP(0.0f));
    if (neg) *neg = VSEL(pos, er, r);
    return VSEL(pos, r, er);
}

/* x σ(z); for z < 0 the product is formed before e^z's last scaling, so
 * it reaches the subnormals where e^z alone would underflow. */
static inline V v_mul_sigmoid(V x, V z) {
    V s2, e1 = v_exp_split(v_neg(v_abs(z)), &s2), e = VMUL(e1, s2);
    V r = v_recip_1_16(VADD(VDUP(1.0f), e));
    V y = VSEL(VGE(z, VDUP(0.0f)), VMUL(x, r), VMUL(VMUL(VMUL(x, e1), r), s2));
    return VSEL(VLT(z, VDUP(-150.0f)), VMUL(x, VDUP(0.0f)), y); /* e^z's clamp; -inf * 0 is NaN, as the reference */
}

/* log(1 + u) for u >= 0: log(w) u / (w - 1) with w = 1 + u corrects w's rounding. */
static inline V v_log1p_pos(V u) {
    V w = VADD(VDUP(1.0f), u), d = VSUB(w, VDUP(1.0f));
    V y = VMUL(v_log(w), VDIV(u, VSEL(VEQ(d, VDUP(0.0f)), VDUP(1.0f), d)));
    return VSEL(VEQ(d, VDUP(0.0f)), u, y);
}

/* exp(-x²/2) with x² = h + l exactly (fma). |x| <= 14.5. */
static inline V v_exp_mhalf_sq(V x) {
    V h = VMUL(x, x), l = VFMA(x, x, v_neg(h));
    V e = v_exp(VMUL(h, VDUP(-0.5f)));
    return VFNMA(VMUL(e, VDUP(0.5f)), l, e);
}

/* Φ(x); *pdf = φ(x) (0 beyond |x| = 14.5, where it underflows anyway). */
static inline V v_normal_cdf(V x, V *pdf) {
    V v = VMIN_C(v_abs(x), VDUP(14.5f));
    V phi = VMUL(v_exp_mhalf_sq(v), VDUP(0.398942280f));
    V t = v_recip_1_16(VFMA(v, VDUP(0.5f), VDUP(1.0f)));
    V u = VSUB(t, VDUP(0.6f));
    V q = VFMA(VDUP(0.16963152587413788f), u, VDUP(-0.004607030656188726f));
    q = VFMA(q, u, VDUP(-0.1843329221010208f));
    q = VFMA(q, u, VDUP(0.1325196921825409f));
    q = VFMA(q, u, VDUP(0.03437182679772377f));
    q = VFMA(q, u, VDUP(-0.1841871291399002f));
    q = VFMA(q, u, VDUP(0.16199038922786713f));
    q = VFMA(q, u, VDUP(0.09925331920385361f));
    q = VFMA(q, u, VDUP(-0.3483788073062897f));
    q = VFMA(q, u, VDUP(0.035798802971839905f));
    q = VFMA(q, u, VDUP(0.8486238121986389f));
    q = VFMA(q, u, VDUP(0.9268863797187805f));
    V tail = VMUL(phi, VMUL(q, t)); /* Φ(-|x|) */
    *pdf = phi;
    return VSEL(VLT(x, VDUP(0.0f)), tail, VSUB(VDUP(1.0f), tail));
}

/* e^{-v²/2} for |v| <= 4: no clamps, one 2^n factor (n in [-12, 0]) taken
 * from the low bits of a shifted sum, v² = h - l split exactly (fma) and the
 * low part folded into the reduced argument, minimax degree 6 for e^r. */
static inline V v_exp_mhalf_sq_central(V v) {
    V h = VMUL(v, v), l = VFNMA(v, v, h);
    V z = VFMA(h, VDUP(-0.721347520f), VDUP(12583039.0f)); /* 1.5·2^23 + 127 + n, n = round(-h/2 log2 e) */
    V nf = VSUB(z, VDUP(12583039.0f));
    V r = VFNMA(nf, VDUP(0.693147182f), VMUL(h, VDUP(-0.5f)));
    r = VFMA(l, VDUP(0.5f), r);
    V p = VFMA(VDUP(0.0013843380147591233f), r, VDUP(0.008374389261007309f));
    p = VFMA(p, r, VDUP(0.04166801646351814f));
    p = VFMA(p, r, VDUP(0.16666428744792938f));
    p = VFMA(p, r, VDUP(0.4999999403953552f));
    p = VFMA(p, r, VDUP(1.0f));
    p = VFMA(p, r, VDUP(1.0f));
    return VMUL(p, VASF(VISHL(VASI(z), 23)));
}

/* Φ(-v) = e^{-v²/2} R(v) on |v| <= 4, R a relative-minimax polynomial of
 * degree 12 in u = v/2 - 1 (fit error 1e-7 with f32 coefficients). No
 * reciprocal and no clamps: the path vectors take when every lane is central. */
#define NCDF_CENTRAL 4.0f
static inline V v_normal_tail_central(V v, V *e) {
    V u = VFMA(v, VDUP(0.5f), VDUP(-1.0f));
    V q = VFMA(VDUP(0.00014668838412035257f), u, VDUP(-0.0003838620032183826f));
    q = VFMA(q, u, VDUP(0.0004343127948231995f));
    q = VFMA(q, u, VDUP(-0.0008512478671036661f));
    q = VFMA(q, u, VDUP(0.002317906590178609f));
    q = VFMA(q, u, VDUP(-0.004870314616709948f));
    q = VFMA(q, u, VDUP(0.0093391677364707f));
    q = VFMA(q, u, VDUP(-0.017573732882738113f));
    q = VFMA(q, u, VDUP(0.0316140279173851f));
    q = VFMA(q, u, VDUP(-0.053639110177755356f));
    q = VFMA(q, u, VDUP(0.08525120466947556f));
    q = VFMA(q, u, VDUP(-0.1254763901233673f));
    q = VFMA(q, u, VDUP(0.16810199618339539f));
    *e = v_exp_mhalf_sq_central(v);
    return q;
}

/* x Φ(x) = max(x, 0) - |x| Φ(-|x|). */
static inline V v_gelu(V x) {
    V v = v_abs(x), e, t_;
    if (VANY(VGT(v, VDUP(NCDF_CENTRAL)))) return VMUL(x, v_normal_cdf(x, &t_));
    V q = v_normal_tail_central(v, &e);
    return VFNMA(v, VMUL(e, q), VMAX_C(x, VDUP(0.0f)));
}

static const float GELU_KF = 0.797884561f, GELU_CF = 0.044715f;

static inline V v_gelu_tanh_arg2(V x) { /* 2u = 2k (x + c x³) */
    return VMUL(VMUL(x, VDUP(2 * GELU_KF)), VFMA(VMUL(x, x), VDUP(GELU_CF), VDUP(1.0f)));
}

/* Φ(x) + x φ(x); centrally s = e^{-v²/2} (R(v) - v/√(2π)) = Φ(-v) - v φ(v),
 * and the result is s for x < 0, 1 - s otherwise. */
static inline V v_gelu_grad(V x) {
    V v = v_abs(x), e;
    if (VANY(VGT(v, VDUP(NCDF_CENTRAL)))) {
        V pdf, cdf = v_normal_cdf(x, &pdf);
        return VFMA(x, pdf, cdf);
    }
    V q = v_normal_tail_central(v, &e);
    V s = VMUL(e, VFNMA(v, VDUP(0.398942280f), q));
    return VSEL(VLT(x, VDUP(0.0f)), s, VSUB(VDUP(1.0f), s));
}

static inline V v_gelu_tanh_grad(V x) { /* s + 2 x s σ(-2u) k (1 + 3c x²), s = σ(2u) */
    V xc = VMAX_C(VMIN_C(x, VDUP(20.0f)), VDUP(-20.0f)); /* exactly 1 and 0 beyond; keeps x² finite */
    V sm, s = v_sigmoid2(v_gelu_tanh_arg2(xc), &sm);
    V du = VFMA(VMUL(xc, xc), VDUP(3 * GELU_CF), VDUP(1.0f));
    V y = VFMA(VMUL(VMUL(xc, s), VMUL(sm, VDUP(2 * GELU_KF))), du, s);
    return VSEL(VEQ(v_abs(x), VDUP(INFINITY)), VDUP(NAN), y); /* inf * 0, as the reference */
}

/* ---- runs: head (until y is 64-byte aligned, for non-temporal stores),
 * whole vectors, tail; partial vectors go through small buffers ---- */

static inline V ld_run(const float *p, int s, int64_t i) {
    if (!s) {
        float v;
        memcpy(&v, p, sizeof v);
        return VDUP(v);
    }
    return VLD(p + i);
}

/* A vocabulary with masked loads and stores defines VLD_PART / VST_PART
 * (the first len lanes; the loaded rest reads 0, as the buffer gives):
 * short rows, a conv bias's 196-wide planes, then cost no memcpy calls. */
static inline V ld_part(const float *p, int s, int64_t i, int64_t len) {
    if (!s) return ld_run(p, 0, 0);
#ifdef VLD_PART
    return VLD_PART(p + i, len);
#else
    float b[W] = {0};
    memcpy(b, p + i, (size_t)len * sizeof(float));
    return VLD(b);
#endif
}

static inline void st_part(float *y, V v, int64_t len) {
#ifdef VST_PART
    VST_PART(y, v, len);
#else
    float b[W];
    VST(b, v);
    memcpy(y, b, (size_t)len * sizeof(float));
#endif
}

static inline int64_t head_len(const float *y, int64_t n, bool nt) {
    if (!nt) return 0;
    int64_t h = (int64_t)(((64 - ((uintptr_t)y & 63)) & 63) / sizeof(float));
    return h < n ? h : n;
}

/* MAP(EXPR): y[i] = EXPR over the run, with va, vb, vc the sources' vectors. */
#define MAP(EXPR)                                                                                    \
    do {                                                                                             \
        int64_t i = 0, h = head_len(y, n, nt);                                                       \
        for (int64_t len; i < h; i += len) {                                                         \
            len = h - i < W ? h - i : W;                                                             \
            V va = ld_part(a, sa, i, len), vb = ld_part(b, sb, i, len), vc = ld_part(c, sc, i, len); \
            (void)va, (void)vb, (void)vc;                                                            \
            st_part(y + i, (EXPR), len);                                                             \
        }                                                                                            \
        for (; i + W <= n; i += W) {                                                                 \
            V va = ld_run(a, sa, i), vb = ld_run(b, sb, i), vc = ld_run(c, sc, i);                   \
            (void)va, (void)vb, (void)vc;                                                            \
            V r_ = (EXPR);                                                                           \
            if (nt) VSTNT(y + i, r_);                                                                \
            else VST(y + i, r_);                                                                     \
        }                                                                                            \
        if (i < n) {                                                                                 \
            int64_t len = n - i;                                                                     \
            V va = ld_part(a, sa, i, len), vb = ld_part(b, sb, i, len), vc = ld_part(c, sc, i, len); \
            (void)va, (void)vb, (void)vc;                                                            \
            st_part(y + i, (EXPR), len);                                                             \
        }                                                                                            \
        if (nt) VSFENCE();                                                                           \
    } while (0)

static void vm_unary(kiln_op op, float p, const float *x, float *y, int64_t n, bool nt) {
    const float *a = x, *b = x, *c = x;
    const int sa = 1, sb = 0, sc = 0;
    V vp = VDUP(p), t_;
    (void)t_;
    switch (op) {
    case KILN_OP_NEG: MAP(v_neg(va)); break;
    case KILN_OP_SCALE: MAP(VMUL(va, vp)); break;
    case KILN_OP_ADD_SCALAR: MAP(VADD(va, vp)); break;
    case KILN_OP_EXP: MAP(v_exp(va)); break;
    case KILN_OP_LOG: MAP(v_log(va)); break;
    case KILN_OP_SQRT: MAP(VSQRT(va)); break;
    case KILN_OP_RSQRT: MAP(VDIV(VDUP(1.0f), VSQRT(va))); break;
    case KILN_OP_ABS: MAP(v_abs(va)); break;
    case KILN_OP_SIGN: MAP(VSUB(v_one_if(VGT(va, VDUP(0.0f))), v_one_if(VLT(va, VDUP(0.0f))))); break;
    case KILN_OP_POW:
        if (p == 1.0f) MAP(va);
        else if (p == 2.0f) MAP(VMUL(va, va));
        else if (p == 3.0f) MAP(VMUL(VMUL(va, va), va));
        else if (p == -1.0f) MAP(VDIV(VDUP(1.0f), va));
        else
            for (int64_t i = 0; i < n; i++) y[i] = (float)kiln__unary_ref(op, x[i], p);
        break;
    case KILN_OP_TANH: MAP(v_tanh(va)); break;
    case KILN_OP_SIGMOID: MAP(v_sigmoid2(va, NULL)); break;
    case KILN_OP_RELU: MAP(VSEL(VLT(va, VDUP(0.0f)), VDUP(0.0f), va)); break; /* NaN stays NaN */
    case KILN_OP_LEAKY_RELU: MAP(VSEL(VGT(va, VDUP(0.0f)), va, VMUL(va, vp))); break;
    case KILN_OP_GELU: MAP(v_gelu(va)); break;
    case KILN_OP_GELU_TANH: MAP(v_mul_sigmoid(va, v_gelu_tanh_arg2(va))); break;
    case KILN_OP_SILU: MAP(v_mul_sigmoid(va, va)); break;
    case KILN_OP_SOFTPLUS:
        MAP(VSEL(VNAN(va), va, VADD(VMAX_C(va, VDUP(0.0f)), v_log1p_pos(v_exp(v_neg(v_abs(va)))))));
        break;
    case KILN_OP_GELU_GRAD: MAP(v_gelu_grad(va)); break;
    case KILN_OP_GELU_TANH_GRAD: MAP(v_gelu_tanh_grad(va)); break;
    default:
        for (int64_t i = 0; i < n; i++) y[i] = (float)kiln__unary_ref(op, x[i], p);
        break;
    }
}

static void vm_binary(kiln_op op, int cmp, const float *a, int sa, const float *b, int sb, float *y, int64_t n, bool nt) {
    const float *c = a;
    const int sc = 0;
    switch (op) {
    case KILN_OP_ADD: MAP(VADD(va, vb)); break;
    case KILN_OP_SUB: MAP(VSUB(va, vb)); break;
    case KILN_OP_MUL: MAP(VMUL(va, vb)); break;
    case KILN_OP_DIV: MAP(VDIV(va, vb)); break;
    default:
        switch (cmp) {
        case KILN_CMP_EQ: MAP(v_one_if(VEQ(va, vb))); break;
        case KILN_CMP_NE: MAP(v_one_if(VNE(va, vb))); break;
        case KILN_CMP_LT: MAP(v_one_if(VLT(va, vb))); break;
        case KILN_CMP_LE: MAP(v_one_if(VLE(va, vb))); break;
        case KILN_CMP_GT: MAP(v_one_if(VGT(va, vb))); break;
        default: MAP(v_one_if(VGE(va, vb))); break;
        }
    }
}

static void vm_where(const void *cond, bool c_i32, int sc, const float *a, int sa, const float *b, int sb, float *y,
                     int64_t n, bool nt) {
    const float *c = cond;
    if (c_i32) MAP(VSEL(VINZ(VASI(vc)), va, vb));
    else MAP(VSEL(VNE(vc, VDUP(0.0f)), va, vb));
}

/* ---- reductions ---- */

/* Sums widen every f32 vector to double lanes: as exact as the reference's
 * double accumulation, and the loads, not the converts, set the pace. */
static double vm_sum(const float *x, int64_t n) {
    VD s0 = VDZERO, s1 = VDZERO, s2 = VDZERO, s3 = VDZERO;
    int64_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {
        V a = VLD(x + i), b = VLD(x + i + W);
        s0 = VDADD(s0, VDLO(a));
        s1 = VDADD(s1, VDHI(a));
        s2 = VDADD(s2, VDLO(b));
        s3 = VDADD(s3, VDHI(b));
    }
    double b[W / 2], t = 0;
    VDST(b, VDADD(VDADD(s0, s1), VDADD(s2, s3)));
    for (int k = 0; k < W / 2; k++) t += b[k];
    for (; i < n; i++) t += x[i];
    return t;
}

static inline float pick(bool is_max, float best, float v) {
    return best != best || v != v ? (best != best ? best : v) : (is_max ? (v > best ? v : best) : (v < best ? v : best));
}

static float vm_maxmin(bool is_max, const float *x, int64_t n) {
    float best = x[0];
    int64_t i = 0;
    if (n >= W) {
        V acc = VLD(x);
        if (is_max)
            for (i = W; i + W <= n; i += W) acc = VMAXP(acc, VLD(x + i));
        else
            for (i = W; i + W <= n; i += W) acc = VMINP(acc, VLD(x + i));
        float b[W];
        VST(b, acc);
        best = b[0];
        for (int k = 1; k < W; k++) best = pick(is_max, best, b[k]);
    }
    for (; i < n; i++) best = pick(is_max, best, x[i]);
    return best;
}

static int64_t vm_argmax(const float *x, int64_t n) {
    float m = vm_maxmin(true, x, n);
    bool nan = m != m;
    int64_t i = 0;
    V vm = VDUP(m);
    for (; i + W <= n; i += W) {
        V v = VLD(x + i);
        if (VANY(nan ? VNAN(v) : VEQ(v, vm))) break;
    }
    for (; i < n; i++)
        if (nan ? x[i] != x[i] : x[i] == m) return i;
    return 0;
}

/* Column strips of 1024 walked row by row (the strip's accumulator stays in L1). */
enum { STRIP = 1024 };

static void vm_col_sum(const float *x, int64_t ld, int64_t rows, int64_t n, double *acc) {
    for (int64_t j0 = 0; j0 < n; j0 += STRIP) {
        int64_t m = n - j0 < STRIP ? n - j0 : STRIP;
        double *f = acc + j0;
        for (int64_t r = 0; r < rows; r++) {
            const float *p = x + r * ld + j0;
            int64_t j = 0;
            for (; j + W <= m; j += W) {
                V v = VLD(p + j);
                VDST(f + j, VDADD(VDLD(f + j), VDLO(v)));
                VDST(f + j + W / 2, VDADD(VDLD(f + j + W / 2), VDHI(v)));
            }
            for (; j < m; j++) f[j] += p[j];
        }
    }
}

static void vm_col_maxmin(bool is_max, const float *x, int64_t ld, int64_t rows, int64_t n, float *acc) {
    for (int64_t j0 = 0; j0 < n; j0 += STRIP) {
        int64_t m = n - j0 < STRIP ? n - j0 : STRIP;
        float *f = acc + j0;
        for (int64_t r = 0; r < rows; r++) {
            const float *p = x + r * ld + j0;
            int64_t j = 0;
            if (is_max)
                for (; j + W <= m; j += W) VST(f + j, VMAXP(VLD(f + j), VLD(p + j)));
            else
                for (; j + W <= m; j += W) VST(f + j, VMINP(VLD(f + j), VLD(p + j)));
            for (; j < m; j++) f[j] = pick(is_max, f[j], p[j]);
        }
    }
}

const kiln_vm VM_TABLE = {VM_NAME, vm_unary, vm_binary, vm_where, vm_sum, vm_maxmin, vm_argmax, vm_col_sum, vm_col_maxmin};

#undef MAP
