// nn_norm_stats.glsl — one row's statistics for layer_norm / rms_norm,
// included after nn_rows.glsl by a kernel whose input buffer is `x`:
// mean (0 for rms_norm) and rstd = 1 / sqrt(var + eps), var the biased
// variance or mean(x^2) for rms_norm. Each lane takes two passes over its
// columns, shifted by the row's first value as the CPU does (a row far
// from 0 keeps its spread): their sum d and the sum of squared deviations
// from their own mean q; the lanes' (d, q) combine as in Chan et al.'s
// parallel variance, so nothing cancels. Every invocation must call it
// (it reduces); ok false reads nothing.
void nn_norm_stats(uint xr, bool ok, uint c, bool rms, float eps, out float mean, out float rstd) {
    uint cl = ok ? c : 0u;
    if (rms) {
        float v = 0.0;
        for (uint j = nn_lane; j < cl; j += nn_W) v += x[xr + j] * x[xr + j];
        mean = 0.0;
        rstd = 1.0 / sqrt(nn_sum(v) / float(c) + eps);
        return;
    }
    float x0 = ok ? x[xr] : 0.0, d = 0.0, q = 0.0;
    uint nl = nn_lane < cl ? (cl - nn_lane + nn_W - 1u) / nn_W : 0u;
    for (uint j = nn_lane; j < cl; j += nn_W) d += x[xr + j] - x0;
    float ml = nl > 0u ? d / float(nl) : 0.0;
    for (uint j = nn_lane; j < cl; j += nn_W) {
        float e = x[xr + j] - x0 - ml;
        q += e * e;
    }
    nn_publish(vec2(d, q));
    float dsum = 0.0, m2 = 0.0;
    for (uint k = 0u; k < nn_W; k++) dsum += nn_red[nn_g0 + k].x;
    float ms = dsum / float(c);
    for (uint k = 0u; k < nn_W; k++) {
        uint nk = k < c ? (c - k + nn_W - 1u) / nn_W : 0u;
        vec2 e = nn_red[nn_g0 + k];
        float dm = nk > 0u ? e.x / float(nk) - ms : 0.0;
        m2 += e.y + float(nk) * dm * dm;
    }
    nn_done();
    mean = x0 + ms;
    rstd = 1.0 / sqrt(m2 / float(c) + eps);
}
