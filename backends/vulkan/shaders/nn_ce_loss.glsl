// nn_ce_loss.glsl — cross_entropy forward, pass 1 of 2 (after
// common.glsl): a group of W lanes per row, rows in parallel over as many
// workgroups as they fill; the group's first lane writes the row's
// (loss, kept) pair to scratch: (m + log(sum exp(x - m)) - x[label], 1),
// or (0, 0) when the label is ignore_index or outside [0, c) (which fails
// the CPU compute; a shader cannot, so the row counts as ignored and its
// label is never read). nn_ce_sum.comp adds the pairs up. With CE_V4 the
// logits are read as vec4 (the host checks that c and the base are
// multiples of 4) and a lane's columns are vec4 columns: a quarter of the
// loads (lavapipe gathers each one) and 16-byte reads on a GPU.
#include "nn_rows.glsl"
#include "nn_ce_rows.glsl"
#ifdef CE_V4
layout(std430, binding = 0) readonly buffer X { vec4 x[]; };
#else
layout(std430, binding = 0) readonly buffer X { float x[]; };
#endif
layout(std430, binding = 1) readonly buffer L { int lab[]; };
layout(std430, binding = 2) writeonly buffer R { float part[]; };
layout(push_constant) uniform P { uint rows, c, wd; int ignore; uint x0, l0, s0; } p;
void main() {
    uint row = nn_row(p.wd);
    bool ok = row < p.rows;
    int l = ok ? lab[p.l0 + row] : p.ignore;
    bool kept = l != p.ignore && l >= 0 && uint(l) < p.c;
    uint xr = p.x0 + row * p.c;
    float m, s;
#ifdef CE_V4
    NN_CE_LANE_SOFTMAX4(x, xr / 4u, kept ? p.c / 4u : 0u, m, s)
#else
    NN_LANE_SOFTMAX(x, xr, kept ? p.c : 0u, m, s)
#endif
    vec2 ms = nn_ce_combine(m, s);
    if (!ok || nn_lane != 0u) return;
    float loss = 0.0;
    if (kept) {
#ifdef CE_V4
        float xl = x[(xr + uint(l)) / 4u][uint(l) % 4u];
#else
        float xl = x[xr + uint(l)];
#endif
        loss = ms.x + log(ms.y) - xl;
    }
    part[p.s0 + 2u * row] = loss;
    part[p.s0 + 2u * row + 1u] = kept ? 1.0 : 0.0;
}
