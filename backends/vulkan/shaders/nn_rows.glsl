// nn_rows.glsl — the row kernels of the nn family (softmax, norms, cross
// entropy). A 256-invocation workgroup holds 256/W groups of W
// invocations (W a power of two in 1..256 chosen by the host from the row
// length), one row per group, so short rows do not leave most of a
// workgroup idle. Sums and maxima reduce in shared memory within a group.
// Every invocation reaches every barrier: a group past the last row
// computes on nothing and skips its stores.
layout(local_size_x = 256) in;

shared float nn_red[256];
shared vec2 nn_red2[256];
uint nn_W, nn_tid, nn_lane, nn_g0;

float nn_neg_inf() { return uintBitsToFloat(0xff800000u); }
float nn_pos_inf() { return uintBitsToFloat(0x7f800000u); }

// The row of this invocation's group (may be >= the row count); sets
// nn_lane, this invocation's index within its group.
uint nn_row(uint W) {
    nn_W = W;
    nn_tid = gl_LocalInvocationID.x;
    nn_lane = nn_tid & (W - 1u);
    nn_g0 = nn_tid - nn_lane;
    uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    return wg * (256u / W) + nn_tid / W;
}

float nn_sum(float v) {
    nn_red[nn_tid] = v;
    barrier();
    for (uint s = nn_W >> 1; s > 0u; s >>= 1) {
        if (nn_lane < s) nn_red[nn_tid] += nn_red[nn_tid + s];
        barrier();
    }
    float r = nn_red[nn_g0];
    barrier();
    return r;
}

vec2 nn_sum2(vec2 v) {
    nn_red2[nn_tid] = v;
    barrier();
    for (uint s = nn_W >> 1; s > 0u; s >>= 1) {
        if (nn_lane < s) nn_red2[nn_tid] += nn_red2[nn_tid + s];
        barrier();
    }
    vec2 r = nn_red2[nn_g0];
    barrier();
    return r;
}

float nn_max(float v) {
    nn_red[nn_tid] = v;
    barrier();
    for (uint s = nn_W >> 1; s > 0u; s >>= 1) {
        if (nn_lane < s) nn_red[nn_tid] = max(nn_red[nn_tid], nn_red[nn_tid + s]);
        barrier();
    }
    float r = nn_red[nn_g0];
    barrier();
    return r;
}

// Visible columns of row `row` of rows of n: the causal mask lets row i of
// each mrows x n matrix see columns j <= i + n - mrows.
uint nn_visible(uint row, uint n, uint mrows, uint causal) {
    if (causal == 0u) return n;
    int nv = int(row % mrows) + int(n) - int(mrows) + 1;
    return uint(max(nv, 0));
}
