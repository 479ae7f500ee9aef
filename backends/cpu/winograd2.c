/* winograd2.c — the forward and both gradients of 3x3 stride-1 f32
 * convolutions by Winograd's F(2x2, 3x3) (winograd.h), for the layers
 * whose images are too small or too few for F(4x4, 3x3): ResNet-18's
 * 512-channel 4x4 layers at batch 32 (32 tiles of 4x4, whose 36 kernel
 * matrices, 38 MB, cost more than the GEMMs they save; in 2x2 tiles 128
 * tiles and 16 matrices, 2.25 times fewer multiply-adds than the direct
 * product).
 *
 * A 2x2 block of output pixels is A^T [(G g G^T) . (B^T d B)] A for its
 * 4x4 input patch d: 16 GEMMs over channels per block of tiles, their
 * kernels' transforms U written once a layer straight into the GEMM's
 * packed layout (kiln__sgemm_packed_a: no plain U). The transforms are 16
 * adds per value at most, against the hundreds of multiply-adds of the
 * GEMMs that use it: plain C, one build for every dispatch level (the
 * GEMM dispatches). Threads split the panels of U, then the blocks of
 * tiles; every block is computed alike whatever the thread count.
 * Measured (Zen 5, 1 thread, CPU time): 512 channels 4x4 at batch 32,
 * forward and grad x 1.45x the speed of the tiled path; 256 channels 1.8x;
 * grad w 1.27x. */
#include "winograd.h"
#include "gemm.h"
#include "gemm_kernels.h"
#include "pool.h"
#include "scratch.h"

#include <stdlib.h>
#include <string.h>

enum { XI = 16, LANE = 16 };

bool kiln__wino2_fits(const kiln_conv_geom *g, int64_t n, int64_t c, int64_t o) {
    const char *env = getenv("KILN_CONV_WINOGRAD");
    if ((env && !strcmp(env, "0")) || !kiln__wino_shape_ok(g, c, o)) return false;
    if (env && !strcmp(env, "force2")) return true;
    if (env && !strcmp(env, "force")) return false;
    return !kiln__wino_fits(g, n, c, o) && n * ((g->oh + 1) / 2) * ((g->ow + 1) / 2) >= 128;
}

typedef struct wino2_job {
    kiln_wino_geom g; /* th x tw tiles of 2x2 */
    const float *w;
    float *pu, *scratch;
    kiln__sgemm_packed_layout pl; /* of each of U's 16 matrices */
    int64_t cin, cout, tb;        /* tb tiles per block */
    size_t pus, per_thread;       /* floats of a packed matrix; of V and M */
    bool rot;
} wino2_job;

/* The distance between the 16 matrices of a block (as winograd.c's). */
static int64_t apart(int64_t floats) { return floats + LANE; }

/* The MR-row panels [q0, q1) of U, straight into the GEMM's packed layout
 * (gemm.h): row r, column k is G g G^T of the layer's kernel w[r, k] (rot:
 * of w[k, r] rotated by 180 degrees); a panel's MR rows are the lanes, as
 * they lie side by side there (rows past cout: zeros). */
static void weights_panels(void *arg, int64_t q0, int64_t q1, int tid) {
    const wino2_job *j = arg;
    const kiln__sgemm_packed_layout *pl = &j->pl;
    int64_t ls = j->rot ? 9 : j->cin * 9; /* between the lanes' kernels */
    (void)tid;
    for (int64_t q = q0; q < q1; q++) {
        int64_t r0 = q * pl->mr, nl = j->cout - r0 < pl->mr ? j->cout - r0 : pl->mr;
        for (int64_t k = 0; k < j->cin; k++) {
            const float *src = j->rot ? j->w + (k * j->cout + r0) * 9 : j->w + (r0 * j->cin + k) * 9;
            int64_t pc = k / pl->kcb * pl->kcb, kc = j->cin - pc < pl->kcb ? j->cin - pc : pl->kcb;
            float g[9][LANE], t[12][LANE], *d = j->pu + pc * pl->mp + r0 * kc + (k - pc) * pl->mr;
            /* w is read from memory once: its lines 16 kernels ahead of the
             * lanes (mr rows a row of w apart, or a run of mr kernels) */
            if (!j->rot)
                for (int64_t l = 0; l < nl; l++) __builtin_prefetch(src + l * ls + 16 * 9);
            else if (k + 16 < j->cin)
                for (int64_t b = 0; b < nl * 9; b += 16) __builtin_prefetch(src + 16 * j->cout * 9 + b);
            for (int e = 0; e < 9; e++) {
                const float *se = src + (j->rot ? 8 - e : e);
                for (int64_t l = 0; l < nl; l++) g[e][l] = se[l * ls];
                for (int64_t l = nl; l < LANE; l++) g[e][l] = 0;
            }
            for (int b = 0; b < 3; b++) /* t = G g, 4 x 3 */
#pragma omp simd
                for (int l = 0; l < LANE; l++) {
                    t[b][l] = g[b][l];
                    t[3 + b][l] = 0.5f * (g[b][l] + g[3 + b][l] + g[6 + b][l]);
                    t[6 + b][l] = 0.5f * (g[b][l] - g[3 + b][l] + g[6 + b][l]);
                    t[9 + b][l] = g[6 + b][l];
                }
            for (int a = 0; a < 4; a++) { /* t G^T, 4 x 4 */
                const float(*ta)[LANE] = t + 3 * a;
                float *d0 = d + 4 * a * j->pus, *d1 = d0 + j->pus, *d2 = d1 + j->pus, *d3 = d2 + j->pus;
#pragma omp simd
                for (int64_t l = 0; l < pl->mr; l++) {
                    d0[l] = ta[0][l];
                    d1[l] = 0.5f * (ta[0][l] + ta[1][l] + ta[2][l]);
                    d2[l] = 0.5f * (ta[0][l] - ta[1][l] + ta[2][l]);
                    d3[l] = ta[2][l];
                }
            }
        }
    }
}

/* Where 16 tiles [t0 + s, t0 + s + 16) of cnt lie in one channel's planes
 * (h x w, images sn apart), corners less ph, pw: lane l's element (i, k)
 * at off[l] + i w + k, inside the image where bit l of rm[i] & cm[k] is
 * set (lanes past cnt: none). */
typedef struct lanes {
    int64_t off[LANE];
    unsigned rm[4], cm[4];
} lanes;

static lanes lanes_at(const kiln_wino_geom *g, int64_t t0, int64_t s, int64_t cnt, int64_t ph, int64_t pw, int64_t h,
                      int64_t w, int64_t sn) {
    lanes ln = {{0}, {0}, {0}};
    int64_t per = g->th * g->tw;
    for (int l = 0; l < LANE && s + l < cnt; l++) {
        int64_t t = t0 + s + l, r0 = t % per / g->tw * 2 - ph, q0 = t % g->tw * 2 - pw;
        ln.off[l] = t / per * sn + r0 * w + q0;
        for (int i = 0; i < 4; i++) {
            if (r0 + i >= 0 && r0 + i < h) ln.rm[i] |= 1u << l;
            if (q0 + i >= 0 && q0 + i < w) ln.cm[i] |= 1u << l;
        }
    }
    return ln;
}

#define LANES _Pragma("omp simd") for (int l = 0; l < LANE; l++)

/* v[xi vs + c ld + t - t0] = (B^T d B)[xi] of tile t's 4x4 patch of
 * channel c (0 outside the image), tiles [t0, t0 + cnt) and zeros up to
 * cnt rounded up to 16. */
static void input(const kiln_wino_geom *g, int64_t cin, int64_t t0, int64_t cnt, float *v, int64_t ld, int64_t vs) {
    for (int64_t s = 0; s < cnt; s += LANE) {
        lanes ln = lanes_at(g, t0, s, cnt, g->ph, g->pw, g->h, g->w, g->in_sn);
        for (int64_t c = 0; c < cin; c++) {
            const float *p = g->in + c * g->in_sc;
            float d[16][LANE], e[16][LANE];
            for (int i = 0; i < 4; i++)
                for (int k = 0; k < 4; k++)
                    for (int l = 0; l < LANE; l++)
                        d[4 * i + k][l] = (ln.rm[i] & ln.cm[k]) >> l & 1 ? p[ln.off[l] + i * g->w + k] : 0.0f;
            for (int k = 0; k < 4; k++) /* B^T d: rows */
                LANES {
                    e[k][l] = d[k][l] - d[8 + k][l];
                    e[4 + k][l] = d[4 + k][l] + d[8 + k][l];
                    e[8 + k][l] = d[8 + k][l] - d[4 + k][l];
                    e[12 + k][l] = d[4 + k][l] - d[12 + k][l];
                }
            float *o = v + c * ld + s;
            for (int i = 0; i < 4; i++) { /* (B^T d) B: columns */
                float *o0 = o + 4 * i * vs, *o1 = o0 + vs, *o2 = o1 + vs, *o3 = o2 + vs;
                const float(*ei)[LANE] = e + 4 * i;
                LANES {
                    o0[l] = ei[0][l] - ei[2][l];
                    o1[l] = ei[1][l] + ei[2][l];
                    o2[l] = ei[2][l] - ei[1][l];
                    o3[l] = ei[1][l] - ei[3][l];
                }
            }
        }
    }
}

/* The 2x2 output pixels A^T P A of P[xi] = m[xi ms + o ld + t - t0]
 * (pixels past oh, ow not written), tiles [t0, t0 + cnt); m's columns up
 * to cnt rounded up to 16 are read. */
static void output(const kiln_wino_geom *g, int64_t cout, const float *m, int64_t ld, int64_t ms, int64_t t0,
                   int64_t cnt) {
    for (int64_t s = 0; s < cnt; s += LANE) {
        lanes ln = lanes_at(g, t0, s, cnt, 0, 0, g->oh, g->ow, g->out_sn);
        for (int64_t o = 0; o < cout; o++) {
            const float *src = m + o * ld + s;
            float h[8][LANE], y[4][LANE];
            for (int k = 0; k < 4; k++) { /* A^T P: 2 x 4 */
                const float *p0 = src + k * ms, *p1 = p0 + 4 * ms, *p2 = p1 + 4 * ms, *p3 = p2 + 4 * ms;
                LANES {
                    h[k][l] = p0[l] + p1[l] + p2[l];
                    h[4 + k][l] = p1[l] - p2[l] - p3[l];
                }
            }
            for (int i = 0; i < 2; i++) /* (A^T P) A */
                LANES {
                    y[2 * i][l] = h[4 * i][l] + h[4 * i + 1][l] + h[4 * i + 2][l];
                    y[2 * i + 1][l] = h[4 * i + 1][l] - h[4 * i + 2][l] - h[4 * i + 3][l];
                }
            float *out = g->out + o * g->out_sc;
            for (int l = 0; l < LANE; l++)
                for (int i = 0; i < 2; i++)
                    for (int k = 0; k < 2; k++)
                        if ((ln.rm[i] & ln.cm[k]) >> l & 1) out[ln.off[l] + i * g->ow + k] = y[2 * i + k][l];
        }
    }
}

static void blocks(void *arg, int64_t b0, int64_t b1, int tid) {
    const wino2_job *j = arg;
    int64_t vs = apart(j->cin * j->tb), ms = apart(j->cout * j->tb);
    float *v = j->scratch + (size_t)tid * j->per_thread, *m = v + XI * vs;
    for (int64_t b = b0; b < b1; b++) {
        int64_t t0 = b * j->tb, cnt = j->g.tiles - t0 < j->tb ? j->g.tiles - t0 : j->tb;
        input(&j->g, j->cin, t0, cnt, v, j->tb, vs);
        for (int xi = 0; xi < XI; xi++)
            kiln__sgemm_packed_a(j->cout, cnt, j->cin, j->pu + xi * j->pus, v + xi * vs, j->tb, m + xi * ms, j->tb);
        output(&j->g, j->cout, m, j->tb, ms, t0, cnt);
    }
}

/* Tiles per block: kiln__wino_l2_tiles, and at least two blocks where
 * there are 128 tiles (a second thread's share). */
static int64_t block_tiles(int64_t cin, int64_t cout, int64_t tiles) {
    int64_t tb = kiln__wino_l2_tiles(XI, cin, cout);
    int64_t half = (tiles + 2 * LANE - 1) / (2 * LANE) * LANE;
    return tb < half ? tb : half > 64 ? half : 64;
}

kiln_status kiln__wino2_conv(bool grad_x, const kiln_conv_geom *cg, int64_t n, int64_t c, int64_t o, const float *src,
                             const float *w, float *out, int n_threads) {
    wino2_job j = {0};
    j.g = kiln__wino_geom_of(grad_x, cg, n, c, src, out, 2);
    j.cin = grad_x ? o : c, j.cout = grad_x ? c : o, j.rot = grad_x, j.w = w;
    if (j.g.tiles == 0 || c == 0 || o == 0) return KILN_OK;
    j.tb = block_tiles(j.cin, j.cout, j.g.tiles);
    j.pl = kiln__sgemm_packed_a_layout(j.cout, j.cin);
    int64_t nblocks = (j.g.tiles + j.tb - 1) / j.tb, panels = j.pl.mp / j.pl.mr;
    int nt = n_threads < 1 ? 1 : n_threads;
    if (nt > nblocks) nt = (int)nblocks;
    int wt = n_threads < 1 ? 1 : n_threads;
    j.per_thread = (size_t)(XI * (apart(j.cin * j.tb) + apart(j.cout * j.tb)));
    j.pus = (j.pl.mp * j.cin + LANE - 1) / LANE * LANE;
    size_t bytes = ((XI * j.pus + j.per_thread * (size_t)nt) * sizeof(float) + 63) & ~(size_t)63;
    bool owned;
    j.pu = kiln__scratch_get(bytes, &owned);
    if (!j.pu)
        return kiln__errs(KILN_ERR_OOM, "%s: out of memory for Winograd's transformed kernels and tiles (%zu bytes)",
                          grad_x ? "conv2d_grad_x" : "conv2d", bytes);
    j.scratch = j.pu + XI * j.pus;
    kiln__pool_for(panels, 1, wt, weights_panels, &j);
    kiln__pool_for(nblocks, 1, nt, blocks, &j);
    if (owned) free(j.pu);
    return KILN_OK;
}

/* ---- the weight gradient ---------------------------------------------- */

/* G^T [sum over tiles of (A dy A^T) . (B^T d B)] G, a block of tiles at a
 * time: the block's input transforms V (threads split the channels), V's
 * 16 matrices packed once as the GEMM's A in chunks of CC channels
 * (threads split them), then units of OS output channels, each its dy
 * transforms Z, and for each chunk 16 GEMMs M[xi]^T (CC x OS) = V[xi]
 * Z[xi]^T over the block's tiles and G^T M G added into its part of gw
 * (a chunk's sums, 512 KiB, still in the L2: all 512 channels' sums came
 * back from the L3 at a quarter of the layer's time). Every unit and block
 * is computed alike whatever the thread count. */
enum { OS = 64, CC = 128 };

typedef struct wgrad2_job {
    kiln_wino_geom g; /* in: x, out: gy (read) */
    float *gw, *v, *pv, *scratch;
    int64_t c, o, tb, t0, cnt;
    int64_t chunks;    /* of CC channels */
    size_t pvs;        /* floats of one packed chunk of a matrix of pv */
    size_t per_thread; /* floats of Z, Z^T and M^T */
    bool acc;          /* add into gw (this block: any block after the first) */
} wgrad2_job;

/* zt[xi zs + (t - t0) ow + o - o0] = (A dy A^T)[xi] of tile t's 2x2 pixels
 * of gy's channel o in [o0, o1) (0 past oh, ow), through z (OS x tb a
 * matrix, tiles as lanes). */
static void grad_output(const kiln_wino_geom *g, int64_t o0, int64_t o1, int64_t t0, int64_t cnt, int64_t tb,
                        float *z, float *zt) {
    int64_t zs = apart(OS * tb), ow = o1 - o0;
    for (int64_t s = 0; s < cnt; s += LANE) {
        lanes ln = lanes_at(g, t0, s, cnt, 0, 0, g->oh, g->ow, g->out_sn);
        for (int64_t o = o0; o < o1; o++) {
            const float *p = g->out + o * g->out_sc;
            float d[4][LANE], e[8][LANE];
            for (int i = 0; i < 2; i++)
                for (int k = 0; k < 2; k++)
                    for (int l = 0; l < LANE; l++)
                        d[2 * i + k][l] = (ln.rm[i] & ln.cm[k]) >> l & 1 ? p[ln.off[l] + i * g->ow + k] : 0.0f;
            for (int k = 0; k < 2; k++) /* A dy: 4 x 2 */
                LANES {
                    e[k][l] = d[k][l];
                    e[2 + k][l] = d[k][l] + d[2 + k][l];
                    e[4 + k][l] = d[k][l] - d[2 + k][l];
                    e[6 + k][l] = -d[2 + k][l];
                }
            float *q = z + (o - o0) * tb + s;
            for (int i = 0; i < 4; i++) { /* (A dy) A^T: 4 x 4 */
                float *q0 = q + 4 * i * zs, *q1 = q0 + zs, *q2 = q1 + zs, *q3 = q2 + zs;
                LANES {
                    q0[l] = e[2 * i][l];
                    q1[l] = e[2 * i][l] + e[2 * i + 1][l];
                    q2[l] = e[2 * i][l] - e[2 * i + 1][l];
                    q3[l] = -e[2 * i + 1][l];
                }
            }
        }
    }
    for (int xi = 0; xi < XI; xi++) /* the GEMM's B: tiles down, channels across */
        for (int64_t o = 0; o < ow; o++)
            for (int64_t t = 0; t < cnt; t++) zt[xi * zs + t * ow + o] = z[xi * zs + o * tb + t];
}

/* gw[o c_n 9 + c 9 ..] (acc: +=) G^T P G of P[xi] = mt[xi ms + (c - c0) ow
 * + o - o0], rows o in [o0, o1) (ow of them), channels [c0, c1), 16 rows a
 * step. */
static void kernel_grad(const float *mt, int64_t ms, int64_t o0, int64_t o1, int64_t c0, int64_t c1, int64_t c_n,
                        float *gw, bool acc) {
    int64_t ow = o1 - o0;
    for (int64_t c = c0; c < c1; c++)
        for (int64_t b = 0; b < ow; b += LANE) {
            int64_t nl = ow - b < LANE ? ow - b : LANE;
            float p[16][LANE], t[12][LANE], k9[9][LANE];
            for (int xi = 0; xi < 16; xi++) {
                const float *src = mt + xi * ms + (c - c0) * ow + b;
                if (nl == LANE) memcpy(p[xi], src, sizeof p[xi]);
                else
                    for (int l = 0; l < LANE; l++) p[xi][l] = l < nl ? src[l] : 0.0f;
            }
            for (int k = 0; k < 4; k++) /* G^T P: 3 x 4 */
                LANES {
                    t[k][l] = p[k][l] + 0.5f * (p[4 + k][l] + p[8 + k][l]);
                    t[4 + k][l] = 0.5f * (p[4 + k][l] - p[8 + k][l]);
                    t[8 + k][l] = 0.5f * (p[4 + k][l] + p[8 + k][l]) + p[12 + k][l];
                }
            for (int i = 0; i < 3; i++) /* (G^T P) G: 3 x 3 */
                LANES {
                    const float *ti = t[4 * i];
                    k9[3 * i][l] = ti[l] + 0.5f * (ti[LANE + l] + ti[2 * LANE + l]);
                    k9[3 * i + 1][l] = 0.5f * (ti[LANE + l] - ti[2 * LANE + l]);
                    k9[3 * i + 2][l] = 0.5f * (ti[LANE + l] + ti[2 * LANE + l]) + ti[3 * LANE + l];
                }
            for (int64_t l = 0; l < nl; l++) {
                float *d = gw + ((o0 + b + l) * c_n + c) * 9;
                if (acc)
                    for (int k = 0; k < 9; k++) d[k] += k9[k][l];
                else
                    for (int k = 0; k < 9; k++) d[k] = k9[k][l];
            }
        }
}

/* The block's input transforms, channels [c0, c1). */
static void grad_w_input(void *arg, int64_t c0, int64_t c1, int tid) {
    const wgrad2_job *j = arg;
    kiln_wino_geom g = j->g;
    (void)tid;
    g.in += c0 * g.in_sc;
    input(&g, c1 - c0, j->t0, j->cnt, j->v + c0 * j->tb, j->tb, apart(j->c * j->tb));
}

/* Chunk q of channels: [*c0, *c1). */
static void chunk_of(const wgrad2_job *j, int64_t q, int64_t *c0, int64_t *c1) {
    *c0 = q * CC, *c1 = *c0 + CC < j->c ? *c0 + CC : j->c;
}

/* Packed chunks [p0, p1) of V's matrices, p = chunk XI + xi, as the GEMM's A. */
static void grad_w_pack(void *arg, int64_t p0, int64_t p1, int tid) {
    const wgrad2_job *j = arg;
    (void)tid;
    for (int64_t p = p0; p < p1; p++) {
        int64_t c0, c1;
        chunk_of(j, p / XI, &c0, &c1);
        kiln__sgemm_pack_a(c1 - c0, j->cnt, j->v + p % XI * apart(j->c * j->tb) + c0 * j->tb, j->tb,
                           j->pv + p * j->pvs);
    }
}

/* Units [u0, u1) of OS output channels: Z, M^T and their rows of gw. */
static void grad_w_units(void *arg, int64_t u0, int64_t u1, int tid) {
    const wgrad2_job *j = arg;
    int64_t zs = apart(OS * j->tb), ms = apart(OS * CC);
    float *z = j->scratch + (size_t)tid * j->per_thread, *zt = z + XI * zs, *mt = zt + XI * zs;
    for (int64_t u = u0; u < u1; u++) {
        int64_t o0 = u * OS, o1 = o0 + OS < j->o ? o0 + OS : j->o;
        grad_output(&j->g, o0, o1, j->t0, j->cnt, j->tb, z, zt);
        for (int64_t q = 0; q < j->chunks; q++) {
            int64_t c0, c1;
            chunk_of(j, q, &c0, &c1);
            for (int xi = 0; xi < XI; xi++)
                kiln__sgemm_packed_a(c1 - c0, o1 - o0, j->cnt, j->pv + (q * XI + xi) * j->pvs, zt + xi * zs, o1 - o0,
                                     mt + xi * ms, o1 - o0);
            kernel_grad(mt, ms, o0, o1, c0, c1, j->c, j->gw, j->acc);
        }
    }
}

kiln_status kiln__wino2_grad_w(const kiln_conv_geom *cg, int64_t n, int64_t c, int64_t o, const float *x,
                               const float *gy, float *gw, bool acc, int n_threads) {
    wgrad2_job j = {0};
    j.g = kiln__wino_geom_of(false, cg, n, c, x, (float *)gy, 2); /* the forward's, gy read as its output */
    j.c = c, j.o = o, j.gw = gw;
    if (j.g.tiles == 0 || c == 0 || o == 0) {
        if (!acc) memset(gw, 0, (size_t)(o * c * 9) * sizeof(float));
        return KILN_OK;
    }
    /* blocks deep for the GEMMs, whose depth they are (256 tiles: V 8 MiB at 512 channels) */
    j.tb = j.g.tiles < 256 ? (j.g.tiles + LANE - 1) / LANE * LANE : 256;
    int64_t units = (o + OS - 1) / OS, nblocks = (j.g.tiles + j.tb - 1) / j.tb;
    int nt = n_threads < 1 ? 1 : n_threads;
    int ut = nt < units ? nt : (int)units, ct = nt < (c + LANE - 1) / LANE ? nt : 1;
    j.chunks = (c + CC - 1) / CC;
    j.per_thread = (size_t)(XI * (2 * apart(OS * j.tb) + apart(OS * CC)));
    j.pvs = (kiln__sgemm_packed_a_floats(CC, j.tb) + LANE - 1) / LANE * LANE;
    size_t v_floats = (size_t)(XI * apart(c * j.tb)), pv_floats = (size_t)(j.chunks * XI) * j.pvs;
    size_t bytes = ((v_floats + pv_floats + j.per_thread * (size_t)ut) * sizeof(float) + 63) & ~(size_t)63;
    bool owned;
    j.v = kiln__scratch_get(bytes, &owned);
    if (!j.v)
        return kiln__errs(KILN_ERR_OOM, "conv2d_grad_w: out of memory for Winograd's sums and tiles (%zu bytes)",
                          bytes);
    j.pv = j.v + v_floats, j.scratch = j.pv + pv_floats;
    for (int64_t b = 0; b < nblocks; b++) {
        j.t0 = b * j.tb, j.cnt = j.g.tiles - j.t0 < j.tb ? j.g.tiles - j.t0 : j.tb;
        j.acc = acc || b > 0;
        kiln__pool_for(c, LANE, ct, grad_w_input, &j);
        kiln__pool_for(j.chunks * XI, 1, nt, grad_w_pack, &j);
        kiln__pool_for(units, 1, ut, grad_w_units, &j);
    }
    if (owned) free(j.v);
    return KILN_OK;
}
