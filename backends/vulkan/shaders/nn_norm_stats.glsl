// nn_norm_stats.glsl — one row's statistics for layer_norm / rms_norm
// (RMS), included after nn_rows.glsl by a kernel whose input buffer is
// `x` of NN_T: mean (0 for rms_norm) and rstd = 1 / sqrt(var + eps), var
// the biased variance or mean(x^2) for rms_norm. The row is nq elements
// of c / nq columns each from xr. Each lane takes two passes over its
// elements, shifted by the row's first value as the CPU does (a row far
// from 0 keeps its spread): their sum d and the sum of squared deviations
// from their own mean q; the lanes' (d, q) combine as in Chan et al.'s
// parallel variance, so nothing cancels. Every invocation must call it
// (it reduces); ok false reads nothing.
void nn_norm_stats(uint xr, bool ok, uint c, uint nq, float eps, out float mean, out float rstd) {
    uint ql = ok ? nq : 0u;
#ifdef RMS
    float v = 0.0;
    for (uint j = nn_lane; j < ql; j += nn_W) {
        NN_T e = x[xr + j];
        v += nn_hsum(e * e);
    }
    mean = 0.0;
    rstd = 1.0 / sqrt(nn_sum(v) / float(c) + eps);
#else
    float x0 = 0.0, d = 0.0, q = 0.0;
    if (ok) x0 = nn_first(x[xr]);
    uint nl = nn_lane < ql ? (ql - nn_lane + nn_W - 1u) / nn_W * NN_VW : 0u; // this lane's columns
    for (uint j = nn_lane; j < ql; j += nn_W) d += nn_hsum(x[xr + j] - x0);
    float ml = nl > 0u ? d / float(nl) : 0.0;
    for (uint j = nn_lane; j < ql; j += nn_W) {
        NN_T e = x[xr + j] - x0 - ml;
        q += nn_hsum(e * e);
    }
    if (nn_W == 1u) { // one lane: its own mean and spread
        mean = x0 + ml;
        rstd = 1.0 / sqrt(q / float(c) + eps);
        return;
    }
    nn_red[nn_tid] = vec2(d, q);
    barrier();
    float dsum = 0.0, m2 = 0.0;
    for (uint k = 0u; k < nn_W; k++) dsum += nn_red[nn_g0 + k].x;
    float ms = dsum / float(c);
    for (uint k = 0u; k < nn_W; k++) {
        uint nk = k < nq ? (nq - k + nn_W - 1u) / nn_W * NN_VW : 0u;
        vec2 e = nn_red[nn_g0 + k];
        float dm = nk > 0u ? e.x / float(nk) - ms : 0.0;
        m2 += e.y + float(nk) * dm * dm;
    }
    mean = x0 + ms;
    rstd = 1.0 / sqrt(m2 / float(c) + eps);
#endif
}
