/* nn_vec_body.h — the body of every kiln_nn_vec table (nn_vec.h), written
 * once over a few vector macros that the including file defines for its
 * instruction set, then included once per ISA:
 *
 *   VT, VL                   vector type of f32 and its lane count
 *   VLOAD(p) VSTORE(p, v)    unaligned load/store; VSET1(s) VZERO()
 *   VADD VSUB VMUL VMAX VMIN lane-wise; VFMA(a, b, c) = a*b + c;
 *   VNE01(a, b)              1 where a != b (NaN too), else 0
 *   VFNMA(a, b, c) = c - a*b; VHSUM(v) VHMAX(v) across lanes (float)
 *   VROUND(v)                to the nearest integer value
 *   VPOW2(n)                 2^n for integer-valued n in [-127, 127]
 *   NV_SUF, NV_NAME          function suffix and the table's name
 *
 * Rows are processed in whole vectors and a scalar tail that evaluates the
 * same formulas (exp included), so one table's results do not depend on
 * where a row ends. */
#include <math.h>
#include <string.h>

#define NV_CAT2(a, b) a##_##b
#define NV_CAT(a, b) NV_CAT2(a, b)
#define NVF(name) NV_CAT(nv_##name, NV_SUF)

/* Sums run in f32 lanes over blocks of this many elements, then in double. */
#define NV_BLOCK (32 * VL)

/* exp(x) by range reduction x = n ln2 + r, |r| <= ln2/2, and a degree-7
 * polynomial in r (Cephes' coefficients); below -88 it gives 0. */
static inline VT NVF(vexp)(VT x) {
    x = VMIN(VMAX(x, VSET1(-88.0f)), VSET1(88.0f));
    VT n = VROUND(VMUL(x, VSET1(1.44269504088896341f)));
    VT r = VFNMA(n, VSET1(0.693359375f), x);
    r = VFNMA(n, VSET1(-2.12194440e-4f), r);
    VT p = VSET1(1.9875691500e-4f);
    p = VFMA(p, r, VSET1(1.3981999507e-3f));
    p = VFMA(p, r, VSET1(8.3334519073e-3f));
    p = VFMA(p, r, VSET1(4.1665795894e-2f));
    p = VFMA(p, r, VSET1(1.6666665459e-1f));
    p = VFMA(p, r, VSET1(5.0000001201e-1f));
    p = VFMA(p, VMUL(r, r), VADD(r, VSET1(1.0f)));
    return VMUL(p, VPOW2(n));
}

/* The same in scalar, for the tails. */
static inline float NVF(sexp)(float x) {
    if (x != x) return x; /* NaN: the clamp below lets it through, and (int32_t)NaN is undefined */
    x = x < -88.0f ? -88.0f : x > 88.0f ? 88.0f : x;
    float n = rintf(x * 1.44269504088896341f);
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + (r + 1.0f);
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    return p * s;
}

static float NVF(max)(const float *x, int64_t n) {
    int64_t i = 0;
    float m = -INFINITY;
    if (n >= VL) {
        VT a = VLOAD(x);
        for (i = VL; i + VL <= n; i += VL) a = VMAX(a, VLOAD(x + i));
        m = VHMAX(a);
    }
    for (; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}

static double NVF(exp_sum)(const float *x, float *y, int64_t n, float m) {
    double total = 0.0;
    int64_t i = 0;
    VT vm = VSET1(m);
    while (i + VL <= n) {
        VT acc = VZERO();
        int64_t end = i + NV_BLOCK < n ? i + NV_BLOCK : n;
        if (y)
            for (; i + VL <= end; i += VL) {
                VT e = NVF(vexp)(VSUB(VLOAD(x + i), vm));
                VSTORE(y + i, e);
                acc = VADD(acc, e);
            }
        else
            for (; i + VL <= end; i += VL) acc = VADD(acc, NVF(vexp)(VSUB(VLOAD(x + i), vm)));
        total += VHSUM(acc);
    }
    for (; i < n; i++) {
        float e = NVF(sexp)(x[i] - m);
        if (y) y[i] = e;
        total += e;
    }
    return total;
}

static void NVF(scale)(float *y, int64_t n, float s) {
    int64_t i = 0;
    VT vs = VSET1(s);
    for (; i + VL <= n; i += VL) VSTORE(y + i, VMUL(VLOAD(y + i), vs));
    for (; i < n; i++) y[i] *= s;
}

static void NVF(add_const)(const float *x, float *y, int64_t n, float c, float c_lo) {
    int64_t i = 0;
    VT vc = VSET1(c), vcl = VSET1(c_lo);
    for (; i + VL <= n; i += VL) VSTORE(y + i, VADD(VADD(VLOAD(x + i), vc), vcl));
    for (; i < n; i++) y[i] = (x[i] + c) + c_lo;
}

static void NVF(exp_scale)(const float *x, float *y, int64_t n, float m, float m_lo, float s) {
    int64_t i = 0;
    VT vm = VSET1(m), vml = VSET1(m_lo), vs = VSET1(s);
    for (; i + VL <= n; i += VL) VSTORE(y + i, VMUL(NVF(vexp)(VSUB(VSUB(VLOAD(x + i), vm), vml)), vs));
    for (; i < n; i++) y[i] = NVF(sexp)((x[i] - m) - m_lo) * s;
}

/* sum over i of f(i), f given as an expression of vector/scalar loads. */
#define NV_SUM_LOOP(VEXPR, SEXPR)                                  \
    double total = 0.0;                                            \
    int64_t i = 0;                                                 \
    while (i + VL <= n) {                                          \
        VT acc = VZERO();                                          \
        int64_t end = i + NV_BLOCK < n ? i + NV_BLOCK : n;         \
        for (; i + VL <= end; i += VL) acc = VEXPR;                \
        total += VHSUM(acc);                                       \
    }                                                              \
    for (; i < n; i++) total += SEXPR;                             \
    return total

static double NVF(sum)(const float *x, int64_t n) { NV_SUM_LOOP(VADD(acc, VLOAD(x + i)), x[i]); }

static double NVF(dot)(const float *a, const float *b, int64_t n) {
    NV_SUM_LOOP(VFMA(VLOAD(a + i), VLOAD(b + i), acc), a[i] * b[i]);
}

static double NVF(sum_dev)(const float *x, int64_t n, float c) {
    VT vc = VSET1(c);
    NV_SUM_LOOP(VADD(acc, VSUB(VLOAD(x + i), vc)), x[i] - c);
}

static double NVF(sum_sq_dev)(const float *x, int64_t n, float c) {
    VT vc = VSET1(c);
    NV_SUM_LOOP((VFMA(VSUB(VLOAD(x + i), vc), VSUB(VLOAD(x + i), vc), acc)), (x[i] - c) * (x[i] - c));
}

static void NVF(softmax_bwd)(const float *y, const float *gy, float *gx, int64_t n, float s) {
    int64_t i = 0;
    VT vs = VSET1(s);
    for (; i + VL <= n; i += VL) VSTORE(gx + i, VMUL(VLOAD(y + i), VSUB(VLOAD(gy + i), vs)));
    for (; i < n; i++) gx[i] = y[i] * (gy[i] - s);
}

static void NVF(log_softmax_bwd)(const float *y, const float *gy, float *gx, int64_t n, float s) {
    int64_t i = 0;
    VT vs = VSET1(s);
    for (; i + VL <= n; i += VL) VSTORE(gx + i, VFNMA(NVF(vexp)(VLOAD(y + i)), vs, VLOAD(gy + i)));
    for (; i < n; i++) gx[i] = gy[i] - NVF(sexp)(y[i]) * s;
}

static void NVF(norm_fwd)(const float *x, const float *w, const float *b, float *y, int64_t n, float mean,
                          float mean_lo, float rstd) {
    int64_t i = 0;
    VT vm = VSET1(mean), vml = VSET1(mean_lo), vr = VSET1(rstd);
    for (; i + VL <= n; i += VL) {
        VT v = VMUL(VSUB(VSUB(VLOAD(x + i), vm), vml), vr);
        if (w) v = VMUL(v, VLOAD(w + i));
        if (b) v = VADD(v, VLOAD(b + i));
        VSTORE(y + i, v);
    }
    for (; i < n; i++) {
        float v = ((x[i] - mean) - mean_lo) * rstd;
        if (w) v *= w[i];
        if (b) v += b[i];
        y[i] = v;
    }
}

static void NVF(norm_bwd_sums)(const float *x, const float *gy, const float *w, int64_t n, float mean, float mean_lo,
                               float rstd, float *dw, float *db, double *sg, double *sgx) {
    double tg = 0.0, tgx = 0.0;
    int64_t i = 0;
    VT vm = VSET1(mean), vml = VSET1(mean_lo), vr = VSET1(rstd);
    while (i + VL <= n) {
        VT ag = VZERO(), agx = VZERO();
        int64_t end = i + NV_BLOCK < n ? i + NV_BLOCK : n;
        for (; i + VL <= end; i += VL) {
            VT xh = VMUL(VSUB(VSUB(VLOAD(x + i), vm), vml), vr), gv = VLOAD(gy + i);
            VT g = w ? VMUL(gv, VLOAD(w + i)) : gv;
            ag = VADD(ag, g);
            agx = VFMA(g, xh, agx);
            if (dw) VSTORE(dw + i, VFMA(gv, xh, VLOAD(dw + i)));
            if (db) VSTORE(db + i, VADD(VLOAD(db + i), gv));
        }
        tg += VHSUM(ag);
        tgx += VHSUM(agx);
    }
    for (; i < n; i++) {
        float xh = ((x[i] - mean) - mean_lo) * rstd, g = w ? gy[i] * w[i] : gy[i];
        tg += g;
        tgx += g * xh;
        if (dw) dw[i] += gy[i] * xh;
        if (db) db[i] += gy[i];
    }
    *sg = tg;
    *sgx = tgx;
}

static void NVF(norm_bwd_dx)(const float *x, const float *gy, const float *w, float *dx, int64_t n, float mean,
                             float mean_lo, float rstd, float ca, float cb) {
    int64_t i = 0;
    VT vm = VSET1(mean), vml = VSET1(mean_lo), vr = VSET1(rstd), va = VSET1(ca), vb = VSET1(cb);
    for (; i + VL <= n; i += VL) {
        VT xh = VMUL(VSUB(VSUB(VLOAD(x + i), vm), vml), vr), g = VLOAD(gy + i);
        if (w) g = VMUL(g, VLOAD(w + i));
        VSTORE(dx + i, VMUL(vr, VFNMA(xh, vb, VSUB(g, va))));
    }
    for (; i < n; i++) {
        float xh = ((x[i] - mean) - mean_lo) * rstd, g = w ? gy[i] * w[i] : gy[i];
        dx[i] = rstd * ((g - ca) - xh * cb);
    }
}

/* One pass for batch norm's statistics: *s1 = sum(x - c), *s2 = sum((x - c)^2). */
static void NVF(sums_dev)(const float *x, int64_t n, float c, double *s1, double *s2) {
    double t1 = 0.0, t2 = 0.0;
    int64_t i = 0;
    VT vc = VSET1(c);
    while (i + VL <= n) {
        VT a1 = VZERO(), a2 = VZERO();
        int64_t end = i + NV_BLOCK < n ? i + NV_BLOCK : n;
        for (; i + VL <= end; i += VL) {
            VT d = VSUB(VLOAD(x + i), vc);
            a1 = VADD(a1, d);
            a2 = VFMA(d, d, a2);
        }
        t1 += VHSUM(a1);
        t2 += VHSUM(a2);
    }
    for (; i < n; i++) {
        float d = x[i] - c;
        t1 += d;
        t2 += d * d;
    }
    *s1 += t1;
    *s2 += t2;
}

/* y = (x - c) * a + b, then the ReLU's y < 0 ? 0 : y if relu (x86 maxps(0, y)
 * keeps NaN and -0 as that does; NEON's vmaxq gives +0 for -0) */
static void NVF(affine)(const float *x, float *y, int64_t n, float c, float a, float b, int relu) {
    int64_t i = 0;
    VT vc = VSET1(c), va = VSET1(a), vb = VSET1(b), z = VZERO();
    if (relu)
        for (; i + VL <= n; i += VL) VSTORE(y + i, VMAX(z, VFMA(VSUB(VLOAD(x + i), vc), va, vb)));
    else
        for (; i + VL <= n; i += VL) VSTORE(y + i, VFMA(VSUB(VLOAD(x + i), vc), va, vb));
    for (; i < n; i++) {
        float v = (x[i] - c) * a + b;
        y[i] = relu && v < 0.0f ? 0.0f : v;
    }
}

/* y = relu((x - c) * a + b + r): a norm, the add of r (r first when r_first,
 * the add's own order) and a ReLU as affine's, in one pass */
static void NVF(affine_add_relu)(const float *x, const float *r, float *y, int64_t n, float c, float a, float b,
                                 int r_first) {
    int64_t i = 0;
    VT vc = VSET1(c), va = VSET1(a), vb = VSET1(b), z = VZERO();
    if (r_first)
        for (; i + VL <= n; i += VL) VSTORE(y + i, VMAX(z, VADD(VLOAD(r + i), VFMA(VSUB(VLOAD(x + i), vc), va, vb))));
    else
        for (; i + VL <= n; i += VL) VSTORE(y + i, VMAX(z, VADD(VFMA(VSUB(VLOAD(x + i), vc), va, vb), VLOAD(r + i))));
    for (; i < n; i++) {
        float v = (x[i] - c) * a + b;
        v = r_first ? r[i] + v : v + r[i];
        y[i] = v < 0.0f ? 0.0f : v;
    }
}

/* y = g * (m != s ? 1 : 0): a ReLU's gradient mask, the values of a cmp
 * and a mul, without a branch on the data */
static void NVF(mask_mul)(const float *g, const float *m, float s, float *y, int64_t n) {
    int64_t i = 0;
    VT vs = VSET1(s);
    for (; i + VL <= n; i += VL) VSTORE(y + i, VMUL(VLOAD(g + i), VNE01(VLOAD(m + i), vs)));
    for (; i < n; i++) y[i] = g[i] * (m[i] != s ? 1.0f : 0.0f);
}

/* One pass for batch norm's backward: s[0] += sum(x - c), s[1] += sum((x - c)^2),
 * s[2] += sum(gy), s[3] += sum(gy * (x - c)). */
static void NVF(bn_bwd_sums)(const float *x, const float *gy, int64_t n, float c, double *s) {
    double t[4] = {0.0, 0.0, 0.0, 0.0};
    int64_t i = 0;
    VT vc = VSET1(c);
    while (i + VL <= n) {
        VT a1 = VZERO(), a2 = VZERO(), a3 = VZERO(), a4 = VZERO();
        int64_t end = i + NV_BLOCK < n ? i + NV_BLOCK : n;
        for (; i + VL <= end; i += VL) {
            VT d = VSUB(VLOAD(x + i), vc), g = VLOAD(gy + i);
            a1 = VADD(a1, d);
            a2 = VFMA(d, d, a2);
            a3 = VADD(a3, g);
            a4 = VFMA(g, d, a4);
        }
        t[0] += VHSUM(a1), t[1] += VHSUM(a2), t[2] += VHSUM(a3), t[3] += VHSUM(a4);
    }
    for (; i < n; i++) {
        float d = x[i] - c;
        t[0] += d, t[1] += d * d, t[2] += gy[i], t[3] += gy[i] * d;
    }
    for (int k = 0; k < 4; k++) s[k] += t[k];
}

/* dx = gy * a + (x - c) * b + k */
static void NVF(bn_bwd_dx)(const float *x, const float *gy, float *dx, int64_t n, float c, float a, float b, float k) {
    int64_t i = 0;
    VT vc = VSET1(c), va = VSET1(a), vb = VSET1(b), vk = VSET1(k);
    for (; i + VL <= n; i += VL) VSTORE(dx + i, VFMA(VLOAD(gy + i), va, VFMA(VSUB(VLOAD(x + i), vc), vb, vk)));
    for (; i < n; i++) dx[i] = gy[i] * a + ((x[i] - c) * b + k);
}

static void NVF(add)(float *acc, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + VL <= n; i += VL) VSTORE(acc + i, VADD(VLOAD(acc + i), VLOAD(x + i)));
    for (; i < n; i++) acc[i] += x[i];
}

static const kiln_nn_vec NVF(table) = {
    NV_NAME,          NVF(max),     NVF(exp_sum),     NVF(scale),       NVF(add_const),
    NVF(exp_scale),   NVF(sum),     NVF(dot),         NVF(sum_dev),     NVF(sum_sq_dev),
    NVF(softmax_bwd), NVF(log_softmax_bwd), NVF(norm_fwd), NVF(norm_bwd_sums), NVF(norm_bwd_dx),
    NVF(add),         NVF(sums_dev), NVF(affine),     NVF(affine_add_relu), NVF(mask_mul),
    NVF(bn_bwd_sums), NVF(bn_bwd_dx),
};
