// ew_index.glsl — strided reads for the element-wise kernels: the host
// coalesces the output's dims (kiln_bcast_coalesce) and passes, per source,
// its element strides aligned to them (0 on broadcast dims); the output is
// contiguous, so its flat index i gives every source's offset.
#define EW_MAX_DIMS 6

// Offset of flat index i in a source with strides st over shape sh (nd dims).
#define EW_OFFSET(i, nd, sh, st, off)                   \
    {                                                   \
        uint r_ = (i);                                  \
        off = 0u;                                       \
        for (int d_ = int(nd) - 1; d_ >= 0; d_--) {     \
            uint c_ = r_ % sh[d_];                      \
            r_ /= sh[d_];                               \
            off += c_ * st[d_];                         \
        }                                               \
    }
