// nn_ce_kahan.glsl — compensated (Kahan) summation for the cross-entropy
// reductions, so a sum over many rows in float stays close to the CPU's
// double one. `precise` keeps the compiler from folding the compensation
// away; an infinite running sum leaves the compensation at 0 (inf - inf
// would turn it, and then the sum, into NaN where the CPU gives inf).
struct nn_ce_acc { float sum, err; };

void nn_ce_add(inout nn_ce_acc a, float v) {
    precise float y = v - a.err;
    precise float t = a.sum + y;
    precise float e = (t - a.sum) - y;
    a.err = isinf(t) ? 0.0 : e;
    a.sum = t;
}
