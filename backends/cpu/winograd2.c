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
 * packed layout (kiln__sgemm_packed_a: no plain U); the tiles'
 * transforms are winograd2_xform.h's, built for each dispatch level (the
 * kernels' is plain C, one build for all). Threads split the panels of U,
 * then the blocks of tiles; every block is computed alike whatever the
 * thread count.
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
    const kiln_wino2_xform *x;
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

static void blocks(void *arg, int64_t b0, int64_t b1, int tid) {
    const wino2_job *j = arg;
    int64_t vs = apart(j->cin * j->tb), ms = apart(j->cout * j->tb);
    float *v = j->scratch + (size_t)tid * j->per_thread, *m = v + XI * vs;
    for (int64_t b = b0; b < b1; b++) {
        int64_t t0 = b * j->tb, cnt = j->g.tiles - t0 < j->tb ? j->g.tiles - t0 : j->tb;
        j->x->input(&j->g, j->cin, t0, cnt, v, j->tb, vs);
        for (int xi = 0; xi < XI; xi++)
            kiln__sgemm_packed_a(j->cout, cnt, j->cin, j->pu + xi * j->pus, v + xi * vs, j->tb, m + xi * ms, j->tb);
        j->x->output(&j->g, j->cout, m, j->tb, ms, t0, cnt);
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
    j.cin = grad_x ? o : c, j.cout = grad_x ? c : o, j.rot = grad_x, j.w = w, j.x = kiln__wino2_xform();
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
    const kiln_wino2_xform *x;
    float *gw, *v, *pv, *scratch;
    int64_t c, o, tb, t0, cnt;
    int64_t chunks;    /* of CC channels */
    size_t pvs;        /* floats of one packed chunk of a matrix of pv */
    size_t per_thread; /* floats of Z, Z^T and M^T */
    bool acc;          /* add into gw (this block: any block after the first) */
} wgrad2_job;

/* The block's input transforms, channels [c0, c1). */
static void grad_w_input(void *arg, int64_t c0, int64_t c1, int tid) {
    const wgrad2_job *j = arg;
    kiln_wino_geom g = j->g;
    (void)tid;
    g.in += c0 * g.in_sc;
    j->x->input(&g, c1 - c0, j->t0, j->cnt, j->v + c0 * j->tb, j->tb, apart(j->c * j->tb));
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
        j->x->grad_output(&j->g, o0, o1, j->t0, j->cnt, j->tb, zs, z, zt);
        for (int64_t q = 0; q < j->chunks; q++) {
            int64_t c0, c1;
            chunk_of(j, q, &c0, &c1);
            for (int xi = 0; xi < XI; xi++)
                kiln__sgemm_packed_a(c1 - c0, o1 - o0, j->cnt, j->pv + (q * XI + xi) * j->pvs, zt + xi * zs, o1 - o0,
                                     mt + xi * ms, o1 - o0);
            j->x->kernel_grad(mt, ms, o0, o1, c0, c1, j->c, j->gw, j->acc);
        }
    }
}

kiln_status kiln__wino2_grad_w(const kiln_conv_geom *cg, int64_t n, int64_t c, int64_t o, const float *x,
                               const float *gy, float *gw, bool acc, int n_threads) {
    wgrad2_job j = {0};
    j.g = kiln__wino_geom_of(false, cg, n, c, x, (float *)gy, 2); /* the forward's, gy read as its output */
    j.c = c, j.o = o, j.gw = gw, j.x = kiln__wino2_xform();
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
