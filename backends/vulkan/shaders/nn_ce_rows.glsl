// nn_ce_rows.glsl — the row combine of the cross-entropy kernels, on top
// of nn_rows.glsl's groups of W lanes: the row's maximum M and sum S of
// exp(x - M) from the lanes' partial (m, s). Each lane rescales its own s
// to M (one exp per lane, where nn_softmax_combine takes W), with the
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
