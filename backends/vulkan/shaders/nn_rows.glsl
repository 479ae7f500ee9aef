// nn_rows.glsl — the row kernels of the nn family (softmax, norms, cross
// entropy). A 256-invocation workgroup holds 256/W groups of W
// invocations (W a power of two in 1..32 chosen by the host from the row
// length), one row per group; lane l of a group takes columns l, l + W,
// ..., so neighbouring lanes read neighbouring floats. Each lane reduces
// its own columns first; the group then combines its W partial results
// through shared memory with two barriers, every lane adding the W
// values in the same order (so all lanes hold bit-identical results).
// Barriers are few because they are what costs most on lavapipe, where a
// workgroup's invocations run as coroutines that switch at each barrier.
// Every invocation reaches every barrier: a group past the last row
// computes on nothing and skips its stores.
layout(local_size_x = 256) in;

shared vec2 nn_red[256];
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

// Publish this lane's partial values; nn_done() before the slots are reused.
void nn_publish(vec2 v) {
    nn_red[nn_tid] = v;
    barrier();
}
void nn_done() { barrier(); }

vec2 nn_sum2(vec2 v) {
    nn_publish(v);
    vec2 r = vec2(0.0);
    for (uint k = 0u; k < nn_W; k++) r += nn_red[nn_g0 + k];
    nn_done();
    return r;
}

float nn_sum(float v) { return nn_sum2(vec2(v, 0.0)).x; }

// Softmax partials: lane maxima m and sums s of exp(x - m), combined into
// the row's maximum M and sum S of exp(x - M). Lanes without a visible
// column have m = -inf and s = 0.
vec2 nn_softmax_combine(float m, float s) {
    nn_publish(vec2(m, s));
    float M = nn_neg_inf(), S = 0.0;
    for (uint k = 0u; k < nn_W; k++) M = max(M, nn_red[nn_g0 + k].x);
    for (uint k = 0u; k < nn_W; k++) {
        vec2 e = nn_red[nn_g0 + k];
        if (e.y > 0.0) S += e.y * exp(e.x - M);
    }
    nn_done();
    return vec2(M, S);
}

// This lane's maximum and sum of exp(x - max) over xs[base + j] for its
// columns j < n (nested in a macro: GLSL functions cannot take buffers).
#define NN_LANE_SOFTMAX(xs, base, n, m, s)                                         \
    m = nn_neg_inf();                                                              \
    s = 0.0;                                                                       \
    for (uint j_ = nn_lane; j_ < (n); j_ += nn_W) m = max(m, xs[(base) + j_]);     \
    if (m > nn_neg_inf())                                                          \
        for (uint j_ = nn_lane; j_ < (n); j_ += nn_W) s += exp(xs[(base) + j_] - m);

// Visible columns of row `row` of rows of n: the causal mask lets row i of
// each mrows x n matrix see columns j <= i + n - mrows.
uint nn_visible(uint row, uint n, uint mrows, uint causal) {
    if (causal == 0u) return n;
    int nv = int(row % mrows) + int(n) - int(mrows) + 1;
    return uint(max(nv, 0));
}
