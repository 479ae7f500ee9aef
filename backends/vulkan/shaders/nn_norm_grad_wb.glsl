// nn_norm_grad_wb.glsl — norm backward, pass 2 of 3 (after common.glsl;
// RMS for rms_norm): dw[j] = sum over rows of gy * xhat and db[j] = sum
// of gy. A workgroup takes 32 columns: one NN_T element of them per
// x-invocation (with NN_V4, 8 of vec4, which also reads each row's
// statistics once per 4 columns), the rows split over the y-invocations
// and summed in shared memory (one writer per output, no atomics). Row
// statistics come from pass 1 (rstd at dx[r*c], mean at dx[r*c+1]; with
// c = 1 the mean is x itself). Push constants count NN_T elements.
#define NN_TYPES_ONLY
#include "nn_rows.glsl"
#ifdef NN_V4
#define WB_X 8u
#define WB_Y 32u
#else
#define WB_X 32u
#define WB_Y 8u
#endif
layout(local_size_x = WB_X, local_size_y = WB_Y) in;
layout(std430, binding = 0) readonly buffer X { NN_T x[]; };
layout(std430, binding = 1) readonly buffer GY { NN_T gy[]; };
layout(std430, binding = 2) buffer O { NN_T o[]; };
layout(push_constant) uniform P { uint rows, c, nq, has_w, has_b, x0, gy0, o0; } p;
#include "nn_norm_parked.glsl"
shared NN_T part_w[WB_Y][WB_X], part_b[WB_Y][WB_X];
void main() {
    uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
    uint col = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * WB_X + lx;
    NN_T aw = NN_T0, ab = NN_T0;
    if (col < p.nq) {
        for (uint r = ly; r < p.rows; r += WB_Y) {
            uint at = r * p.nq;
            float rstd, mean;
            nn_norm_parked(at, rstd, mean);
            NN_T g = gy[p.gy0 + at + col];
            aw += g * (x[p.x0 + at + col] - mean) * rstd;
            ab += g;
        }
    }
    part_w[ly][lx] = aw;
    part_b[ly][lx] = ab;
    barrier();
    if (ly != 0u || col >= p.nq) return;
    for (uint k = 1u; k < WB_Y; k++) aw += part_w[k][lx], ab += part_b[k][lx];
    uint at = p.o0 + p.rows * p.nq + col;
    if (p.has_w != 0u) o[at] = aw, at += p.nq;
    if (p.has_b != 0u) o[at] = ab;
}
