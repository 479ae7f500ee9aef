/* winograd.h — 3x3 stride-1 convolutions by Winograd's F(4x4, 3x3) in f32,
 * for conv_tiled.c's forward and both gradients (and by F(2x2, 3x3),
 * winograd2.c, the same passes of layers too small for F(4x4)).
 *
 * A 4x4 block of output pixels (a tile) is A^T [(G g G^T) . (B^T d B)] A
 * for its 6x6 input patch d and the 3x3 kernel g: the 36 products of the
 * elementwise "." become 36 GEMMs over channels, each
 *     M[xi] (Cout x T) = U[xi] (Cout x Cin) V[xi] (Cin x T)
 * for a block of T tiles, U the transformed kernels, V the transformed
 * patches; 36 multiply-adds per tile and channel pair where the direct conv
 * needs 144. The input gradient is the same conv of gy (padding 2 - p)
 * with the kernels rotated by 180 degrees and Cin, Cout swapped; the
 * weight gradient is G^T [sum over tiles of (A dy A^T) . (B^T d B)] G, the
 * sums 36 GEMMs too (kiln__wino_grad_w).
 *
 * Scratch: U (36 Cout Cin floats) packed once for the GEMM's kernel
 * (kiln__sgemm_packed_a; packed again for each block, it was about 5% of
 * a ResNet-18 step's CPU time), U itself until then, and, in its room, per
 * thread V and M of one block of tiles (T from the L2, 64 to 256 tiles; V
 * in the kernel's packed panels of B where they are whole sets of lanes):
 * bounded by the block, not the batch (the weight gradient: per thread,
 * the sums of a group of chunks of 64 input channels, at most 8 MiB, and
 * one block's transforms; below 4 groups, the sums of each part of the
 * tiles). Threads split the blocks (the weight gradient: the groups, or
 * their parts) and never meet inside a pass; each block, group or part is
 * computed alike whatever the thread count, so 1 and 2 threads give the
 * same bits.
 *
 *     if (kiln__wino_fits(&g, n, c, o))
 *         st = kiln__wino_conv(false, &g, n, c, o, x, w, y, n_threads);
 *
 * $KILN_CONV_WINOGRAD=0 turns it off (the tiled im2col path runs), =force
 * takes F(4x4) for every layer that fits, however few its tiles, =force2
 * F(2x2) (winograd2.c) for all three passes. */
#ifndef KILN_CPU_WINOGRAD_H
#define KILN_CPU_WINOGRAD_H

#include "conv_simd.h"
#include "internal.h"

/* One pass's planes: the input image (n, c) plane at in + n in_sn + c in_sc,
 * h x w, read with padding ph, pw; the output's at out + n out_sn + c out_sc,
 * oh x ow, cut into th x tw tiles of 4x4 per image, `tiles` in all. */
typedef struct kiln_wino_geom {
    const float *in;
    int64_t in_sn, in_sc, h, w, ph, pw;
    float *out;
    int64_t out_sn, out_sc, oh, ow;
    int64_t th, tw, tiles;
} kiln_wino_geom;

/* The transforms of one dispatch level (winograd_xform.h's body). */
typedef struct kiln_wino_xform {
    /* v[xi xs + (c - c0) ld + t - t0] = (B^T d B)[xi] of tile t's patch in
     * channel c, for c in [c0, c1), t in [t0, t0 + cnt); columns up to cnt
     * rounded up to 16 are written (zeros past the last tile). */
    void (*input)(const kiln_wino_geom *g, int64_t c0, int64_t c1, int64_t t0, int64_t cnt, float *v, int64_t ld,
                  int64_t xs);
    /* The output pixels of tiles [t0, t0 + cnt), channels [o0, o1): A^T P A
     * of P[xi] = m[xi xs + o ld + t - t0]; pixels past oh, ow are not written. */
    void (*output)(const kiln_wino_geom *g, const float *m, int64_t ld, int64_t xs, int64_t o0, int64_t o1,
                   int64_t t0, int64_t cnt);
    /* u[xi O C + p] for p in [p0, p1): (G g G^T)[xi] of g = w[o, c*9 ..
     * c*9 + 8] for p = o C + c; rot: of g rotated by 180 degrees, for
     * p = c O + o (the input gradient's kernels). */
    void (*weights)(const float *w, int64_t o, int64_t c, bool rot, int64_t p0, int64_t p1, float *u);
    /* The weight gradient's halves: z[xi xs + o ld + t - t0] = (A dy A^T)[xi]
     * of the 4x4 output tile t of channel o (zeros past oh, ow), read at
     * g->out, like input's; and gw[o ldg + c*9 .. + 8] = G^T P G (acc:
     * += G^T P G) of P[xi] = m[xi O C + p], p = o C + c in [p0, p1). */
    void (*grad_output)(const kiln_wino_geom *g, int64_t o0, int64_t o1, int64_t t0, int64_t cnt, float *z,
                        int64_t ld, int64_t xs);
    void (*kernel_grad)(const float *m, int64_t o, int64_t c, int64_t p0, int64_t p1, float *gw, int64_t ldg,
                        bool acc);
} kiln_wino_xform;

const kiln_wino_xform *kiln__wino_xform(void); /* for kiln__cpu_caps() */
const kiln_wino_xform *kiln__wino_xform_scalar(void);
const kiln_wino_xform *kiln__wino_xform_avx2(void);
const kiln_wino_xform *kiln__wino_xform_avx512(void);

/* F(2x2, 3x3)'s tile transforms of one dispatch level (winograd2_xform.h's
 * body, the lanes 16 tiles; winograd2.c says what each computes). */
typedef struct kiln_wino2_xform {
    void (*input)(const kiln_wino_geom *g, int64_t cin, int64_t t0, int64_t cnt, float *v, int64_t ld, int64_t vs);
    void (*output)(const kiln_wino_geom *g, int64_t cout, const float *m, int64_t ld, int64_t ms, int64_t t0,
                   int64_t cnt);
    void (*grad_output)(const kiln_wino_geom *g, int64_t o0, int64_t o1, int64_t t0, int64_t cnt, int64_t tb,
                        int64_t zs, float *z, float *zt);
    void (*kernel_grad)(const float *mt, int64_t ms, int64_t o0, int64_t o1, int64_t c0, int64_t c1, int64_t c_n,
                        float *gw, bool acc);
} kiln_wino2_xform;

const kiln_wino2_xform *kiln__wino2_xform(void); /* for kiln__cpu_caps() */
const kiln_wino2_xform *kiln__wino2_xform_scalar(void);
const kiln_wino2_xform *kiln__wino2_xform_avx2(void);
const kiln_wino2_xform *kiln__wino2_xform_avx512(void);

/* Whether the layer (geometry g, batch n, c input and o output channels)
 * runs by Winograd: 3x3, stride 1, dilation 1, padding at most 2, 16
 * channels or more, 64 tiles or more (128 where U outgrows the core's
 * share of the L3),
 * or $KILN_CONV_WINOGRAD=force (tests); not where it is 0 or force2. */
bool kiln__wino_fits(const kiln_conv_geom *g, int64_t n, int64_t c, int64_t o);

/* What both Winograd forms need of a layer: 3x3, stride 1, dilation 1,
 * padding at most 2, 16 channels or more each side. */
bool kiln__wino_shape_ok(const kiln_conv_geom *g, int64_t c, int64_t o);

/* Tiles per block for xi transformed matrices: V and M of a block (cin +
 * cout channels) in the L2, a multiple of 16 from 64 to 256. */
int64_t kiln__wino_l2_tiles(int64_t xi, int64_t cin, int64_t cout);

/* The planes of the forward (src x, out y) or grad x (src gy, out gx),
 * cut in tiles of tile x tile output pixels. */
kiln_wino_geom kiln__wino_geom_of(bool grad_x, const kiln_conv_geom *g, int64_t n, int64_t c, const float *src,
                                  float *out, int64_t tile);

/* The forward y [O, N, OH, OW] of x [N, C, H, W] and w [O, C*9], or
 * (grad_x) gx [N, C, H, W] of gy [O, N, OH, OW] and w; src is x or gy. */
kiln_status kiln__wino_conv(bool grad_x, const kiln_conv_geom *g, int64_t n, int64_t c, int64_t o, const float *src,
                            const float *w, float *out, int n_threads);

/* The same by F(2x2, 3x3) (winograd2.c), for 3x3 stride-1 layers that
 * F(4x4) does not take and that have 128 tiles of 2x2 or more (ResNet-18's
 * 4x4 layers at batch 32), or every layer that fits where
 * $KILN_CONV_WINOGRAD=force2 (tests; =force takes F(4x4) alone). */
bool kiln__wino2_fits(const kiln_conv_geom *g, int64_t n, int64_t c, int64_t o);
kiln_status kiln__wino2_conv(bool grad_x, const kiln_conv_geom *g, int64_t n, int64_t c, int64_t o,
                             const float *src, const float *w, float *out, int n_threads);

/* The weight gradient (as kiln__wino_grad_w) by F(2x2, 3x3): blocks of up
 * to 256 tiles, each's input transforms V for all channels (packed once
 * for the GEMM), then units of 64 output channels, each 16 GEMMs per 128
 * input channels (128 x 64, the block deep) and G^T M G added into gw;
 * threads split the channels, then the units. */
kiln_status kiln__wino2_grad_w(const kiln_conv_geom *g, int64_t n, int64_t c, int64_t o, const float *x,
                               const float *gy, float *gw, bool acc, int n_threads);

/* The weight gradient gw [O, C*9] (acc: added into gw) of x [N, C, H, W]
 * and gy [O, N, OH, OW]: G^T [sum over tiles of (A dy A^T) . (B^T d B)] G,
 * the sums as 36 GEMMs (O x 64 channels, a block of tiles deep) added
 * block after block, 64 input channels a chunk, dy's transform made once a
 * block for a group of chunks (their sums, 36 O 64 floats each, in the
 * scratch); threads split the groups. Fewer than 4 groups are cut into
 * parts of the blocks of tiles (4 units in all), whose sums are added in
 * order: one group no longer leaves the second thread idle. */
kiln_status kiln__wino_grad_w(const kiln_conv_geom *g, int64_t n, int64_t c, int64_t o, const float *x,
                              const float *gy, float *gw, bool acc, int n_threads);

#endif
