// ew_fast.glsl — index math for the fast element-wise kernels. Divisions
// by the walk's dims are multiplications by magic numbers the host
// computes (ew_magic in vk_elementwise.c): llvmpipe and many GPUs have no
// vector integer division, and a udiv per dim and element cost more than
// the op itself. The shift of dim d sits in bits 5d..5d+4 of one word.
#define EW_MAX_DIMS 6

// floor(i / d) for i < 2^31, given m = floor(2^(31+l) / d) + 1 and
// l = ceil(log2 d) (Granlund-Montgomery with a 31-bit numerator).
uint ew_udiv(uint i, uint m, uint l) {
    uint hi, lo;
    umulExtended(i << 1, m, hi, lo);
    return hi >> l;
}

// Offsets in one or two sources of flat index i of the contiguous output.
#define EW_WALK1(i, nd, sh, mg, sl, st, off)                        \
    {                                                               \
        uint r_ = (i);                                              \
        off = 0u;                                                   \
        for (int d_ = int(nd) - 1; d_ >= 0; d_--) {                 \
            uint q_ = ew_udiv(r_, mg[d_], (sl >> (5 * d_)) & 31u);  \
            off += (r_ - q_ * sh[d_]) * st[d_];                     \
            r_ = q_;                                                \
        }                                                           \
    }
#define EW_WALK2(i, nd, sh, mg, sl, sa, sb, oa, ob)                 \
    {                                                               \
        uint r_ = (i);                                              \
        oa = 0u;                                                    \
        ob = 0u;                                                    \
        for (int d_ = int(nd) - 1; d_ >= 0; d_--) {                 \
            uint q_ = ew_udiv(r_, mg[d_], (sl >> (5 * d_)) & 31u);  \
            uint c_ = r_ - q_ * sh[d_];                             \
            oa += c_ * sa[d_];                                      \
            ob += c_ * sb[d_];                                      \
            r_ = q_;                                                \
        }                                                           \
    }
