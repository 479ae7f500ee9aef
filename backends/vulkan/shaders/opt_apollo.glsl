// opt_apollo.glsl — the passes of the APOLLO / APOLLO-Mini step
// (optim/apollo.c has the formula, backends/vulkan/vk_optim_apollo.c
// records them in order). PASS picks one:
//   0 projector P (opt_apollo_rng.glsl), one invocation per element
//   1 R = G P^T [m, rank] (right) or P^T G [rank, n], 64 x 64 tiles
//   2 moments of R in place, and per channel the sums of squares of Rt, R
//     and G's row/column (double), one invocation per channel
//   3 one workgroup: the scaling factors, the norm of u, the norm-growth
//     limiter (prev_norm, f64) and each channel's factor of G for pass 4
//   4 p = p * decay + f_c * g, one invocation per element
// Scratch operands (P, R, S, F) are bound from element 0.
layout(push_constant) uniform PC {
    uint m, n, rank, right, mini, np, nch, p0, g0, m0, v0, pv0, h0;
    uint hs_lo, hs_hi, inv_lo, inv_hi, sq_lo, sq_hi;
} pc;

#if PASS == 0
layout(local_size_x = 256) in;
layout(std430, binding = 0) writeonly buffer Pj { float P[]; };
void main() {
    uint j = kiln_gid();
    if (j >= pc.np) return;
    double inv = packDouble2x32(uvec2(pc.inv_lo, pc.inv_hi));
    precise double x = kiln_normal(uvec2(pc.hs_lo, pc.hs_hi), j) * inv;
    P[j] = float(x);
}

#elif PASS == 1
// a 64 x 64 tile of R = A B per workgroup, 4 x 4 outputs per invocation,
// over 16-deep slices of K staged in shared memory, each operand loaded
// along its contiguous dim:
//   right: A = G [m, n], B = P^T (P [rank, n])
//   left:  A = P^T (P [m, rank]), B = G [m, n]
layout(local_size_x = 16, local_size_y = 16) in;
layout(std430, binding = 0) readonly buffer G { float grad[]; };
layout(std430, binding = 1) readonly buffer Pj { float P[]; };
layout(std430, binding = 2) writeonly buffer Rb { float R[]; };
shared float As[16][65], Bs[16][65]; // [k][row], [k][col]
void main() {
    bool right = pc.right != 0u;
    uint M = right ? pc.m : pc.rank, N = right ? pc.rank : pc.n, K = right ? pc.n : pc.m;
    uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, l = ty * 16u + tx;
    uint row0 = gl_WorkGroupID.y * 64u, col0 = gl_WorkGroupID.x * 64u;
    float acc[4][4];
    [[unroll]] for (uint i = 0u; i < 4u; i++)
        [[unroll]] for (uint j = 0u; j < 4u; j++) acc[i][j] = 0.0;
    for (uint k0 = 0u; k0 < K; k0 += 16u) {
        [[unroll]] for (uint q = 0u; q < 4u; q++) {
            uint e = l + 256u * q;
            if (right) { // both along k
                uint kk = e & 15u, rc = e >> 4u, k = k0 + kk, r = row0 + rc, c = col0 + rc;
                As[kk][rc] = r < M && k < K ? grad[pc.g0 + r * pc.n + k] : 0.0;
                Bs[kk][rc] = c < N && k < K ? P[c * pc.n + k] : 0.0;
            } else { // both along the row / column
                uint rc = e & 63u, kk = e >> 6u, k = k0 + kk, r = row0 + rc, c = col0 + rc;
                As[kk][rc] = r < M && k < K ? P[k * pc.rank + r] : 0.0;
                Bs[kk][rc] = c < N && k < K ? grad[pc.g0 + k * pc.n + c] : 0.0;
            }
        }
        barrier();
        [[unroll]] for (uint kk = 0u; kk < 16u; kk++) {
            float a[4], b[4];
            [[unroll]] for (uint i = 0u; i < 4u; i++) a[i] = As[kk][ty + 16u * i], b[i] = Bs[kk][tx + 16u * i];
            [[unroll]] for (uint i = 0u; i < 4u; i++)
                [[unroll]] for (uint j = 0u; j < 4u; j++) acc[i][j] += a[i] * b[j];
        }
        barrier();
    }
    [[unroll]] for (uint i = 0u; i < 4u; i++)
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            uint row = row0 + ty + 16u * i, col = col0 + tx + 16u * j;
            if (row < M && col < N) R[row * N + col] = acc[i][j];
        }
}

#elif PASS == 2
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer G { float grad[]; };
layout(std430, binding = 1) readonly buffer Rb { float R[]; };
layout(std430, binding = 2) buffer M { float em[]; };
layout(std430, binding = 3) buffer V { float ev[]; };
layout(std430, binding = 4) readonly buffer H { float hyper[]; };
layout(std430, binding = 5) writeonly buffer S { double S_[]; };
void main() {
    uint c = kiln_gid();
    if (c >= pc.nch) return;
    float b1 = hyper[pc.h0 + 1u], b2 = hyper[pc.h0 + 2u], eps = hyper[pc.h0 + 3u];
    precise float one_b1 = 1.0 - b1, one_b2 = 1.0 - b2; // the CPU's (float)(1.0 - (double)b)
    double a = 0.0LF, b = 0.0LF, gs = 0.0LF;
    for (uint r = 0u; r < pc.rank; r++) {
        uint k = pc.right != 0u ? c * pc.rank + r : r * pc.n + c;
        precise float g = R[k];
        precise float mi = em[pc.m0 + k] * b1 + g * one_b1;
        precise float vi = ev[pc.v0 + k] * b2 + one_b2 * g * g;
        em[pc.m0 + k] = mi;
        ev[pc.v0 + k] = vi;
        precise float rt = div_cr(mi, sqrt_cr(vi) + eps);
        a += double(rt) * double(rt);
        b += double(g) * double(g);
    }
    uint len = pc.right != 0u ? pc.n : pc.m;
    for (uint j = 0u; j < len; j++) {
        double g = double(grad[pc.g0 + (pc.right != 0u ? c * pc.n + j : j * pc.n + c)]);
        gs += g * g;
    }
    S_[c] = a;
    S_[pc.nch + c] = b;
    S_[2u * pc.nch + c] = gs;
}

#elif PASS == 3
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer S { double S_[]; };
layout(std430, binding = 1) readonly buffer H { float hyper[]; };
layout(std430, binding = 2) buffer Pv { double prev[]; };
layout(std430, binding = 3) writeonly buffer F { float fac[]; };
shared double red[256];
shared double s_step, s_limit;

// the sum of x over the workgroup (every invocation gets it)
double wg_sum(double x) {
    uint l = gl_LocalInvocationIndex;
    red[l] = x;
    barrier();
    for (uint w = 128u; w > 0u; w >>= 1) {
        if (l < w) red[l] += red[l + w];
        barrier();
    }
    double s = red[0];
    barrier();
    return s;
}

double pow_d(double b, uint t) { // b^t by squaring
    double r = 1.0LF;
    for (; t != 0u; t >>= 1) {
        if ((t & 1u) != 0u) r *= b;
        b *= b;
    }
    return r;
}

void main() {
    uint l = gl_LocalInvocationIndex, nch = pc.nch;
    double sq = packDouble2x32(uvec2(pc.sq_lo, pc.sq_hi));
    double mini_s = 0.0LF;
    if (pc.mini != 0u) {
        double a = 0.0LF, b = 0.0LF;
        for (uint c = l; c < nch; c += 256u) a += S_[c], b += S_[nch + c];
        a = wg_sum(a);
        b = wg_sum(b);
        mini_s = sq * sqrt(a) / (sqrt(b) + 1e-8LF);
    }
    double u2 = 0.0LF;
    for (uint c = l; c < nch; c += 256u) {
        double s = pc.mini != 0u ? mini_s : sq * sqrt(S_[c]) / (sqrt(S_[nch + c]) + 1e-8LF);
        u2 += s * s * S_[2u * nch + c];
    }
    u2 = wg_sum(u2);
    if (l == 0u) {
        uint t = uint(hyper[pc.h0 + 5u]) * 65536u + uint(hyper[pc.h0 + 6u]); // the step number (optim/optim.c)
        double norm = sqrt(u2), limit = 1.0LF;
        if (t > 1u) {
            double f = norm / (prev[pc.pv0] + 1e-8LF);
            limit = max(f, 1.01LF) / 1.01LF;
        }
        prev[pc.pv0] = norm / limit;
        double lr = double(hyper[pc.h0]), b1 = double(hyper[pc.h0 + 1u]), b2 = double(hyper[pc.h0 + 2u]),
               wd = double(hyper[pc.h0 + 4u]);
        precise double st = lr * sqrt(1.0LF - pow_d(b2, t)) / (1.0LF - pow_d(b1, t));
        s_step = -st;
        s_limit = limit;
        precise double decay = 1.0LF - lr * wd;
        fac[nch] = float(decay);
    }
    barrier();
    for (uint c = l; c < nch; c += 256u) {
        double s = pc.mini != 0u ? mini_s : sq * sqrt(S_[c]) / (sqrt(S_[nch + c]) + 1e-8LF);
        fac[c] = float(s_step * s / s_limit); // the CPU's order
    }
}

#else
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Prm { float prm[]; };
layout(std430, binding = 1) readonly buffer G { float grad[]; };
layout(std430, binding = 2) readonly buffer F { float fac[]; };
void main() {
    uint idx = kiln_gid();
    if (idx >= pc.m * pc.n) return;
    uint i = idx / pc.n, j = idx - i * pc.n;
    precise float w = prm[pc.p0 + idx] * fac[pc.nch] + fac[pc.right != 0u ? i : j] * grad[pc.g0 + idx];
    prm[pc.p0 + idx] = w;
}
#endif
