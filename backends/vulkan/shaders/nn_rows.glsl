// nn_rows.glsl — the row kernels of the nn family (softmax, norms, cross
// entropy). A 256-invocation workgroup holds 256/W groups of W
// invocations (W a power of two in 1..256 chosen by the host from the row
// length, the row count and the device), one row per group; lane l of a
// group takes elements l, l + W, ..., so neighbouring lanes read
// neighbouring memory. Each lane reduces its own elements first; the
// group then combines its W partial results through shared memory
// (nn_sum2, nn_softmax_combine). Barriers are few because they are what
// costs most on lavapipe, where a workgroup's invocations run as
// coroutines that switch at each barrier. Every invocation reaches every
// barrier: a group past the last row computes on nothing and skips its
// stores.

// Row elements as NN_T: vec4 with NN_V4 (the host checks that the row
// length and every operand's base are multiples of 4; a quarter of the
// loads, which lavapipe gathers one by one, and 16-byte reads on a GPU),
// float otherwise. NN_VW columns per element.
#ifdef NN_V4
#define NN_T vec4
#define NN_VW 4u
float nn_hsum(vec4 v) { return (v.x + v.y) + (v.z + v.w); }
float nn_hmax(vec4 v) { return max(max(v.x, v.y), max(v.z, v.w)); }
float nn_first(vec4 v) { return v.x; }
// Which columns of element j come before column nv (the visible ones).
bvec4 nn_vis(uint j, uint nv) { return lessThan(uvec4(4u * j) + uvec4(0u, 1u, 2u, 3u), uvec4(nv)); }
#else
#define NN_T float
#define NN_VW 1u
float nn_hsum(float v) { return v; }
float nn_hmax(float v) { return v; }
float nn_first(float v) { return v; }
bool nn_vis(uint j, uint nv) { return j < nv; }
#endif
#define NN_T0 NN_T(0.0)

// A kernel with its own workgroup shape (nn_norm_grad_wb.glsl) takes only
// the element types above.
#ifndef NN_TYPES_ONLY
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

// Combining a group's W partial results: each lane writes its slot of
// nn_red, one barrier, and every lane adds the W slots in the same order
// (so all lanes hold bit-identical results). A kernel reduces once, so the
// slots are never reused and no second barrier is needed. With W = 1
// there is nothing to combine and no barrier at all (W is uniform, so the
// barriers stay in uniform control flow): lavapipe then runs the
// workgroup without switching between its invocations.
vec2 nn_sum2(vec2 v) {
    if (nn_W == 1u) return v;
    nn_red[nn_tid] = v;
    barrier();
    vec2 r = vec2(0.0);
    for (uint k = 0u; k < nn_W; k++) r += nn_red[nn_g0 + k];
    return r;
}

float nn_sum(float v) { return nn_sum2(vec2(v, 0.0)).x; }

// Softmax partials: lane maxima m and sums s of exp(x - m), combined into
// the row's maximum M and sum S of exp(x - M). Lanes without a visible
// column have m = -inf and s = 0. Each lane rescales its own s to M (one
// exp per lane), so this takes two barriers: the maxima, then the sums
// (written to the other half of the lane's own slot, which no lane reads
// for the maxima).
vec2 nn_softmax_combine(float m, float s) {
    if (nn_W == 1u) return vec2(m, s);
    nn_red[nn_tid].x = m;
    barrier();
    float M = nn_neg_inf(), S = 0.0;
    for (uint k = 0u; k < nn_W; k++) M = max(M, nn_red[nn_g0 + k].x);
    nn_red[nn_tid].y = s > 0.0 ? s * exp(m - M) : 0.0;
    barrier();
    for (uint k = 0u; k < nn_W; k++) S += nn_red[nn_g0 + k].y;
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
#endif
