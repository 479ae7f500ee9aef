// nn_ce_rows.glsl — the row combine of the cross-entropy kernels, on top
// of nn_rows.glsl's groups of W lanes: the row's maximum M and sum S of
// exp(x - M) from the lanes' partial (m, s). Each lane rescales its own s
// to M (one exp per lane, as nn_softmax_combine also does), with the
// same two barriers; every lane adds the W values in the same order, so
// all lanes hold bit-identical results. The shared slots are not reused
// after, so no third barrier is needed.
shared float nn_ce_m[256], nn_ce_s[256];

vec2 nn_ce_combine(float m, float s) {
    nn_ce_m[nn_tid] = m;
    barrier();
    float M = nn_neg_inf(), S = 0.0;
    for (uint k = 0u; k < nn_W; k++) M = max(M, nn_ce_m[nn_g0 + k]);
    nn_ce_s[nn_tid] = s > 0.0 ? s * exp(m - M) : 0.0;
    barrier();
    for (uint k = 0u; k < nn_W; k++) S += nn_ce_s[nn_g0 + k];
    return vec2(M, S);
}

// NN_LANE_SOFTMAX over n vec4 columns xs[base + j]: the lane's maximum m
// and sum s of exp(x - m) over its vec4 columns' components.
#define NN_CE_LANE_SOFTMAX4(xs, base, n, m, s)                                     \
    m = nn_neg_inf();                                                              \
    s = 0.0;                                                                       \
    for (uint j_ = nn_lane; j_ < (n); j_ += nn_W) {                                \
        vec4 v_ = xs[(base) + j_];                                                 \
        m = max(m, max(max(v_.x, v_.y), max(v_.z, v_.w)));                         \
    }                                                                              \
    if (m > nn_neg_inf())                                                          \
        for (uint j_ = nn_lane; j_ < (n); j_ += nn_W) {                            \
            vec4 e_ = exp(xs[(base) + j_] - m);                                    \
            s += (e_.x + e_.y) + (e_.z + e_.w);                                    \
        }
