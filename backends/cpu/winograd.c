/* winograd.c — the F(4x4, 3x3) passes of winograd.h: the kernels'
 * transform, then blocks of tiles (input transform, 36 GEMMs, output
 * transform) split among the threads. */
#include "winograd.h"
#include "cpu_features.h"
#include "gemm.h"
#include "gemm_kernels.h"
#include "pool.h"
#include "scratch.h"

#include <stdlib.h>
#include <string.h>

enum { XI = 36, LANE = 16 };

/* Where it wins, measured one layer at a time (forward, 1 thread, Zen 5,
 * against the tiled path): 2048 tiles of 64 channels 2x, 128 tiles of 128
 * 1.8x, 64 of 256 1.5x, 128 of 512 1.35x but 64 of 512 0.9x: the kernels'
 * transform U (36 O C floats) is paid once per layer, and when it outgrows
 * the core's share of the L3 (38 MB at 512 channels) it costs as much as
 * 64 tiles' GEMMs. */
bool kiln__wino_shape_ok(const kiln_conv_geom *g, int64_t c, int64_t o) {
    return g->kh == 3 && g->kw == 3 && g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1 && g->ph <= 2 &&
           g->pw <= 2 && c >= 16 && o >= 16;
}

/* Whether U (36 C O floats) fits the core's share of the L3. */
static bool u_cached(int64_t c, int64_t o) {
    const kiln__cpu_caches *cc = kiln__cpu_caches_get();
    int64_t l3 = cc->l3_per_core > 0 ? cc->l3_per_core : 4 << 20;
    return XI * c * o * (int64_t)sizeof(float) <= l3;
}

bool kiln__wino_fits(const kiln_conv_geom *g, int64_t n, int64_t c, int64_t o) {
    const char *env = getenv("KILN_CONV_WINOGRAD");
    if (env && (!strcmp(env, "0") || !strcmp(env, "force2"))) return false;
    if (!kiln__wino_shape_ok(g, c, o)) return false;
    int64_t tiles = n * ((g->oh + 3) / 4) * ((g->ow + 3) / 4);
    return (env && !strcmp(env, "force")) || tiles >= (u_cached(c, o) ? 64 : 128);
}

/* The distance between the 36 matrices of a block's transforms: the
 * transforms write one row of each, and at a power of two apart (64
 * channels of 256 tiles: 64 KiB) all 36 rows fall in one set of the L1
 * and of the L2. */
static int64_t apart(int64_t floats) { return floats + LANE; }

typedef struct wino_job {
    kiln_wino_geom g;
    const kiln_wino_xform *x;
    const float *w;
    float *u, *pu, *scratch; /* u: the kernels' transforms, pu: packed for the GEMM */
    int64_t cin, cout, tb;   /* tb tiles per block */
    size_t pus;              /* floats of one packed matrix of pu */
    int64_t nr;              /* V in the GEMM's panels of nr tiles (0: V plain, packed by the GEMM) */
    size_t per_thread;       /* floats of V and M */
    bool rot;
} wino_job;

static void weights_part(void *arg, int64_t p0, int64_t p1, int tid) {
    const wino_job *j = arg;
    (void)tid;
    /* the job's O x C are the layer's: for the input gradient cout is C */
    int64_t o = j->rot ? j->cin : j->cout, c = j->rot ? j->cout : j->cin;
    j->x->weights(j->w, o, c, j->rot, p0, p1, j->u);
}

/* The matrices [xi0, xi1) of u packed once for all the blocks. */
static void pack_part(void *arg, int64_t xi0, int64_t xi1, int tid) {
    const wino_job *j = arg;
    (void)tid;
    for (int64_t xi = xi0; xi < xi1; xi++)
        kiln__sgemm_pack_a(j->cout, j->cin, j->u + xi * j->cout * j->cin, j->cin, j->pu + xi * j->pus);
}

/* V's columns per block: tb, or tb rounded up to whole panels. */
static int64_t v_cols(const wino_job *j) { return j->nr ? (j->tb + j->nr - 1) / j->nr * j->nr : j->tb; }

/* A block's V[xi] (cin x cnt) as the GEMM packs B: panels of nr tiles,
 * channel c's nr values at panel + c nr (the input transform writes a
 * panel's tiles as rows nr apart; columns past the tiles are zeros). */
static void input_panels(const wino_job *j, int64_t t0, int64_t cnt, float *v, int64_t vs) {
    for (int64_t p0 = 0; p0 < cnt; p0 += j->nr) {
        int64_t n = cnt - p0 < j->nr ? cnt - p0 : j->nr, done = (n + LANE - 1) / LANE * LANE;
        float *panel = v + p0 * j->cin;
        j->x->input(&j->g, 0, j->cin, t0 + p0, n, panel, j->nr, vs);
        for (int64_t xi = 0; done < j->nr && xi < XI; xi++)
            for (int64_t c = 0; c < j->cin; c++)
                memset(panel + xi * vs + c * j->nr + done, 0, (size_t)(j->nr - done) * sizeof(float));
    }
}

/* M[xi] (cout x cnt, tb apart) = U[xi] V[xi] on packed U and V's panels:
 * kiln__sgemm_packed_a's tiles and kc blocks (the same sums) without its
 * packing of B (a copy of V: about 2% of a ResNet-18 b32 step). */
static void gemm_panels(const wino_job *j, const float *pu, const float *v, int64_t cnt, float *m) {
    const int64_t kcb = kiln__sgemm_packed_a_layout(j->cout, j->cin).kcb;
    for (int64_t pc = 0; pc < j->cin; pc += kcb)
        kiln__sgemm_packed_a_block(j->cout, cnt, pc, j->cin - pc < kcb ? j->cin - pc : kcb, pu, v + pc * j->nr, j->cin,
                                   m, j->tb);
}

static void blocks(void *arg, int64_t b0, int64_t b1, int tid) {
    const wino_job *j = arg;
    int64_t vs = apart(j->cin * v_cols(j)), ms = apart(j->cout * j->tb);
    float *v = j->scratch + (size_t)tid * j->per_thread, *m = v + XI * vs;
    for (int64_t b = b0; b < b1; b++) {
        int64_t t0 = b * j->tb, cnt = j->g.tiles - t0 < j->tb ? j->g.tiles - t0 : j->tb;
        if (j->nr) input_panels(j, t0, cnt, v, vs);
        else j->x->input(&j->g, 0, j->cin, t0, cnt, v, j->tb, vs);
        for (int xi = 0; xi < XI; xi++)
            if (j->nr)
                gemm_panels(j, j->pu + xi * j->pus, v + xi * vs, cnt, m + xi * ms);
            else if (j->pus)
                kiln__sgemm_packed_a(j->cout, cnt, j->cin, j->pu + xi * j->pus, v + xi * vs, j->tb, m + xi * ms,
                                     j->tb);
            else
                kiln__sgemm_own(false, false, j->cout, cnt, j->cin, 1.0f, j->u + xi * j->cout * j->cin, j->cin,
                                v + xi * vs, j->tb, 0.0f, m + xi * ms, j->tb, 1);
        j->x->output(&j->g, m, j->tb, ms, 0, j->cout, t0, cnt);
    }
}

/* (narrower GEMMs pay their packing of U more than they gain) */
int64_t kiln__wino_l2_tiles(int64_t xi, int64_t cin, int64_t cout) {
    const kiln__cpu_caches *c = kiln__cpu_caches_get();
    int64_t l2 = c->l2 > 0 ? c->l2 : 1 << 20;
    int64_t tb = l2 / (xi * (cin + cout) * (int64_t)sizeof(float)) / LANE * LANE;
    return tb < 64 ? 64 : tb > 256 ? 256 : tb;
}

/* Tiles per block: kiln__wino_l2_tiles, at most the layer's. */
static int64_t block_tiles(int64_t cin, int64_t cout, int64_t tiles) {
    int64_t tb = kiln__wino_l2_tiles(XI, cin, cout);
    int64_t all = (tiles + LANE - 1) / LANE * LANE;
    return tb < all ? tb : all;
}

kiln_wino_geom kiln__wino_geom_of(bool grad_x, const kiln_conv_geom *cg, int64_t n, int64_t c, const float *src,
                                  float *out, int64_t tile) {
    kiln_wino_geom g;
    int64_t plane_in = cg->h * cg->w, plane_out = cg->oh * cg->ow;
    if (!grad_x)
        g = (kiln_wino_geom){src, c * plane_in, plane_in, cg->h, cg->w, cg->ph, cg->pw,
                             out, plane_out, n * plane_out, cg->oh, cg->ow, 0, 0, 0};
    else /* gy [O, N, OH, OW] padded by 2 - p gives gx [N, C, H, W] */
        g = (kiln_wino_geom){src, plane_out, n * plane_out, cg->oh, cg->ow, 2 - cg->ph, 2 - cg->pw,
                             out, c * plane_in, plane_in, cg->h, cg->w, 0, 0, 0};
    g.th = (g.oh + tile - 1) / tile, g.tw = (g.ow + tile - 1) / tile, g.tiles = n * g.th * g.tw;
    return g;
}

kiln_status kiln__wino_conv(bool grad_x, const kiln_conv_geom *cg, int64_t n, int64_t c, int64_t o, const float *src,
                            const float *w, float *out, int n_threads) {
    wino_job j = {0};
    j.g = kiln__wino_geom_of(grad_x, cg, n, c, src, out, 4);
    j.cin = grad_x ? o : c, j.cout = grad_x ? c : o, j.rot = grad_x, j.w = w;
    j.x = kiln__wino_xform();
    if (j.g.tiles == 0 || c == 0 || o == 0) return KILN_OK;
    j.tb = block_tiles(j.cin, j.cout, j.g.tiles);
    int64_t nblocks = (j.g.tiles + j.tb - 1) / j.tb;
    int nt = n_threads < 1 ? 1 : n_threads;
    if (nt > nblocks) nt = (int)nblocks;
    /* U packed once where more than one block multiplies it, but for 2
     * blocks of a U past the L3 (a 512-channel U, 38 MB, is not held
     * twice): the packed kernels, then the plain ones, whose room the
     * blocks' V and M take once they are packed; else the plain kernels,
     * then V and M. ResNet-18 b32's 256-channel 8x8 layers (2 blocks)
     * packed U[xi] in each block's GEMMs: 6% of a step's CPU time by
     * rdtsc (1 thread); packed once, the step took 0.98x the CPU time. */
    bool u_once = nblocks > 2 || (nblocks == 2 && u_cached(c, o));
    j.pus = u_once ? (kiln__sgemm_packed_a_floats(j.cout, j.cin) + LANE - 1) / LANE * LANE : 0;
    /* with U packed, V in the GEMM's panels where they are whole sets of lanes */
    int64_t nr = kiln__sgemm_kernel_pick()->nr;
    j.nr = j.pus && nr % LANE == 0 ? nr : 0;
    j.per_thread = (size_t)(XI * (apart(j.cin * v_cols(&j)) + apart(j.cout * j.tb)));
    size_t u_floats = (size_t)(XI * c * o), blocks_floats = j.per_thread * (size_t)nt;
    size_t rest = j.pus ? (u_floats > blocks_floats ? u_floats : blocks_floats) : u_floats + blocks_floats;
    size_t bytes = ((XI * j.pus + rest) * sizeof(float) + 63) & ~(size_t)63;
    bool owned;
    j.pu = kiln__scratch_get(bytes, &owned);
    if (!j.pu)
        return kiln__errs(KILN_ERR_OOM, "%s: out of memory for Winograd's transformed kernels and tiles (%zu bytes)",
                          grad_x ? "conv2d_grad_x" : "conv2d", bytes);
    j.u = j.pu + XI * j.pus;
    j.scratch = j.pus ? j.u : j.u + u_floats;
    int64_t pairs = c * o;
    int wt = n_threads > 1 && pairs >= 4096 ? n_threads : 1;
    kiln__pool_for(pairs, (pairs + 4 * wt - 1) / (4 * wt) / LANE * LANE + LANE, wt, weights_part, &j);
    if (j.pus) kiln__pool_for(XI, 1, wt, pack_part, &j);
    kiln__pool_for(nblocks, 1, nt, blocks, &j);
    if (owned) free(j.pu);
    return KILN_OK;
}

typedef struct wgrad_job {
    kiln_wino_geom g;
    const kiln_wino_xform *x;
    float *gw, *scratch, *parts;
    int64_t c, o, tb, cs;  /* cs: channels a chunk */
    int64_t chunks, gs;    /* chunks of cs channels, gs of them a group */
    int64_t np, nb;        /* parts of a group's tiles, blocks of tiles in all */
    size_t per_thread;     /* floats of Z and V, and when np is 1, of a group's sums */
    bool acc;              /* add into gw */
} wgrad_job;

/* The sums of one chunk: 36 O x cs floats, a group's chunks one after another. */
static int64_t chunk_sums(const wgrad_job *j) { return XI * j->o * j->cs; }

/* Chunk k's channels [*c0, *c0 + *cw). */
static void chunk_at(const wgrad_job *j, int64_t k, int64_t *c0, int64_t *cw) {
    *c0 = k * j->cs;
    *cw = j->c - *c0 < j->cs ? j->c - *c0 : j->cs;
}

/* Units [u0, u1), unit u the part u % np of group u / np's chunks: for
 * each of its blocks of tiles in order, dy's transform once, then each
 * chunk's input transform and sums; then (np = 1) their columns of gw. */
static void grad_w_units(void *arg, int64_t u0, int64_t u1, int tid) {
    const wgrad_job *j = arg;
    int64_t zs = apart(j->o * j->tb), vs = apart(j->cs * j->tb), sums = chunk_sums(j);
    float *z = j->scratch + (size_t)tid * j->per_thread, *v = z + XI * zs, *m = v + XI * vs;
    for (int64_t u = u0; u < u1; u++) {
        int64_t k0 = u / j->np * j->gs, k1 = k0 + j->gs < j->chunks ? k0 + j->gs : j->chunks, p = u % j->np;
        int64_t b0 = p * j->nb / j->np, b1 = (p + 1) * j->nb / j->np;
        float *mu = j->np > 1 ? j->parts + u * j->gs * sums : m;
        for (int64_t t0 = b0 * j->tb; t0 < j->g.tiles && t0 < b1 * j->tb; t0 += j->tb) {
            int64_t cnt = j->g.tiles - t0 < j->tb ? j->g.tiles - t0 : j->tb;
            j->x->grad_output(&j->g, 0, j->o, t0, cnt, z, j->tb, zs);
            for (int64_t k = k0; k < k1; k++) {
                int64_t c0, cw;
                chunk_at(j, k, &c0, &cw);
                j->x->input(&j->g, c0, c0 + cw, t0, cnt, v, j->tb, vs);
                float *mk = mu + (k - k0) * sums;
                for (int xi = 0; xi < XI; xi++)
                    kiln__sgemm_own(false, true, j->o, cw, cnt, 1.0f, z + xi * zs, j->tb, v + xi * vs, j->tb,
                                    t0 > b0 * j->tb ? 1.0f : 0.0f, mk + xi * j->o * cw, cw, 1);
            }
        }
        for (int64_t k = k0; j->np == 1 && k < k1; k++) {
            int64_t c0, cw;
            chunk_at(j, k, &c0, &cw);
            j->x->kernel_grad(mu + (k - k0) * sums, j->o, cw, 0, j->o * cw, j->gw + c0 * 9, j->c * 9, j->acc);
        }
    }
}

/* Chunks [k0, k1) of groups split in parts: their parts' sums added in
 * order, then their columns of gw. */
static void grad_w_gather(void *arg, int64_t k0, int64_t k1, int tid) {
    const wgrad_job *j = arg;
    int64_t sums = chunk_sums(j), gsums = j->gs * sums;
    (void)tid;
    for (int64_t k = k0; k < k1; k++) {
        int64_t c0, cw;
        chunk_at(j, k, &c0, &cw);
        int64_t len = XI * j->o * cw;
        float *m = j->parts + k / j->gs * j->np * gsums + k % j->gs * sums;
        for (int64_t p = 1; p < j->np; p++) {
            const float *q = m + p * gsums;
#pragma omp simd
            for (int64_t i = 0; i < len; i++) m[i] += q[i];
        }
        j->x->kernel_grad(m, j->o, cw, 0, j->o * cw, j->gw + c0 * 9, j->c * 9, j->acc);
    }
}

/* Parts of each group's tiles: at least 4 units of work in all when there
 * are blocks enough (one group alone left a second thread idle), from the
 * shape alone, so that the sums are added alike whatever the thread count. */
static int64_t tile_parts(int64_t groups, int64_t blocks) {
    int64_t np = (4 + groups - 1) / groups;
    return np < blocks ? np : blocks;
}

/* Chunks a group: as many as keep a group's sums within GROUP_SUMS floats
 * (8 MiB), in groups of equal size. dy's transform is made once a block
 * for a group, not once per chunk (ResNet-18's 128- and 256-channel layers
 * at batch 32 made it 2 and 4 times). */
#define GROUP_SUMS ((int64_t)2 << 20)
static int64_t group_chunks(int64_t chunks, int64_t sums) {
    int64_t most = GROUP_SUMS / sums > 1 ? GROUP_SUMS / sums : 1, groups = (chunks + most - 1) / most;
    return (chunks + groups - 1) / groups;
}

kiln_status kiln__wino_grad_w(const kiln_conv_geom *cg, int64_t n, int64_t c, int64_t o, const float *x,
                              const float *gy, float *gw, bool acc, int n_threads) {
    wgrad_job j = {0};
    j.g = kiln__wino_geom_of(false, cg, n, c, x, (float *)gy, 4); /* the forward's, gy read by grad_output */
    j.c = c, j.o = o, j.gw = gw, j.acc = acc, j.x = kiln__wino_xform();
    if (j.g.tiles == 0 || c == 0 || o == 0) {
        if (!acc) memset(gw, 0, (size_t)(o * c * 9) * sizeof(float));
        return KILN_OK;
    }
    j.cs = c < 64 ? c : 64;
    j.tb = block_tiles(j.cs, o, j.g.tiles);
    j.nb = (j.g.tiles + j.tb - 1) / j.tb;
    j.chunks = (c + j.cs - 1) / j.cs;
    int64_t sums = chunk_sums(&j);
    j.gs = group_chunks(j.chunks, sums);
    int64_t groups = (j.chunks + j.gs - 1) / j.gs, gsums = j.gs * sums;
    j.np = tile_parts(groups, j.nb);
    int64_t units = groups * j.np;
    int nt = n_threads < 1 ? 1 : n_threads;
    if (nt > units) nt = (int)units;
    j.per_thread = (size_t)(XI * (apart(o * j.tb) + apart(j.cs * j.tb)) + (j.np == 1 ? gsums : 0));
    size_t parts = j.np > 1 ? (size_t)(units * gsums) : 0;
    size_t bytes = ((j.per_thread * (size_t)nt + parts) * sizeof(float) + 63) & ~(size_t)63;
    bool owned;
    j.scratch = kiln__scratch_get(bytes, &owned);
    if (!j.scratch)
        return kiln__errs(KILN_ERR_OOM, "conv2d_grad_w: out of memory for Winograd's sums and tiles (%zu bytes)",
                          bytes);
    j.parts = j.scratch + j.per_thread * (size_t)nt;
    kiln__pool_for(units, 1, nt, grad_w_units, &j);
    if (j.np > 1) kiln__pool_for(j.chunks, 1, nt < j.chunks ? nt : (int)j.chunks, grad_w_gather, &j);
    if (owned) free(j.scratch);
    return KILN_OK;
}
