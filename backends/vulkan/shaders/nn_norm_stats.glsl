// nn_norm_stats.glsl — one row's statistics for layer_norm / rms_norm,
// included after nn_rows.glsl by a kernel whose input buffer is `x`:
// mean (0 for rms_norm; summed from x[0] so a row far from 0 keeps its
// spread, as the CPU does) and rstd = 1 / sqrt(var + eps), var the biased
// variance (two passes, never cancelling) or mean(x^2) for rms_norm.
// Every invocation must call it (it reduces); ok false reads nothing.
void nn_norm_stats(uint xr, bool ok, uint c, bool rms, float eps, out float mean, out float rstd) {
    mean = 0.0;
    uint cl = ok ? c : 0u;
    if (!rms) {
        float x0 = ok ? x[xr] : 0.0, d = 0.0;
        for (uint j = nn_lane; j < cl; j += nn_W) d += x[xr + j] - x0;
        mean = x0 + nn_sum(d) / float(c);
    }
    float v = 0.0;
    for (uint j = nn_lane; j < cl; j += nn_W) {
        float e = x[xr + j] - mean;
        v += e * e;
    }
    rstd = 1.0 / sqrt(nn_sum(v) / float(c) + eps);
}
