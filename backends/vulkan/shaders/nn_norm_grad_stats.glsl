// nn_norm_grad_stats.glsl — norm backward, pass 1 of 3 (after
// common.glsl; RMS for rms_norm, x as NN_T elements, nn_rows.glsl): each
// row's rstd (and mean, when c >= 2) is parked in the first entries of
// that row's dx, which pass 3 overwrites; pass 2 reads them to sum dw/db
// per column without a scratch buffer.
#include "nn_rows.glsl"
layout(std430, binding = 0) readonly buffer X { NN_T x[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint rows, c, wd, nq; float eps; uint x0, o0; } p;
#include "nn_norm_stats.glsl"
void main() {
    uint row = nn_row(p.wd);
    bool ok = row < p.rows;
    float mean, rstd;
    nn_norm_stats(p.x0 + row * p.nq, ok, p.c, p.nq, p.eps, mean, rstd);
    if (!ok || nn_lane != 0u) return;
    o[p.o0 + row * p.c] = rstd;
    if (p.c >= 2u) o[p.o0 + row * p.c + 1u] = mean;
}
