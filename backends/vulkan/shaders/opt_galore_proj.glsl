// opt_galore_proj.glsl — GaLore's projection of the gradient G [m, n] with
// the projector P (optim/galore.c): R = G P^T [m, r] when RIGHT (m >= n,
// P [r, n]), else R = P^T G [r, n] (P [m, r]); one invocation per element
// of R, summed in f32 in index order.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer G { float grad[]; };
layout(std430, binding = 1) readonly buffer Pj { float proj[]; };
layout(std430, binding = 2) writeonly buffer R { float low[]; };
layout(push_constant) uniform P { uint m, n, r, right, g0, p0, r0; } pc;
void main() {
    uint e = kiln_gid(), nr = pc.right != 0u ? pc.m * pc.r : pc.r * pc.n;
    if (e >= nr) return;
    precise float acc = 0.0;
    if (pc.right != 0u) {
        uint i = e / pc.r, a = e % pc.r;
        for (uint j = 0u; j < pc.n; j++) acc += grad[pc.g0 + i * pc.n + j] * proj[pc.p0 + a * pc.n + j];
    } else {
        uint a = e / pc.n, j = e % pc.n;
        for (uint i = 0u; i < pc.m; i++) acc += proj[pc.p0 + i * pc.r + a] * grad[pc.g0 + i * pc.n + j];
    }
    low[pc.r0 + e] = acc;
}
