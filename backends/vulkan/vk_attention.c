/* vk_attention.c — rope and scaled dot-product attention on the Vulkan
 * backend (see vk.h), f32 with contiguous operands; semantics and packed
 * layouts as backends/cpu/nn_attention.c and ops/nn_attention.c.
 *
 * Attention forward: one invocation per query row, an online softmax over
 * the keys (shaders/attn_fwd.glsl), writing [O | L]; a workgroup takes 64
 * rows of one head, so the grid is (row blocks, heads), and walks the keys
 * a tile at a time through shared memory (as the backward's passes walk
 * theirs). A decoding step (T = 1) has its own kernel, whose 64
 * invocations split the keys of the one query and merge their softmax
 * states (attn_fwd_decode.glsl). Backward, packed
 * [dq | dk | dv], in three dispatches that recompute the probabilities
 * from L instead of storing T x S of them, each output row with one
 * writer: delta = rowsum(dO * O) parked in the dq region, dk/dv per key
 * row (looping over the queries, and query heads of its group, that see
 * it), then dq per query row. Head sizes up to 128 that are multiples of
 * 4 run in shader variants that read rows as vec4 and keep them in
 * registers; the rest, up to 256, in one rolled variant that reads floats;
 * larger ones go to the CPU. Where the driver bounds an invocation's loop
 * iterations (lavapipe: 65535, all loops together), the rolled variant's
 * long loop is split over passes that merge (attn_common.glsl).
 * ATTENTION_CACHED (kiln_attention_cached): the rows' keys and values
 * written into the caches (attn_cache_write.comp), then, for head sizes up
 * to 256, tiles of a kv head's query slots (the group's heads, a prompt's
 * rows) against K/V tiles in shared memory, the keys split over
 * workgroups and merged when few tiles face a long cache
 * (attn_cached_tile.glsl, attn_cached_merge.glsl); else (or past a loop
 * budget or the device's shared memory) a workgroup per (query head, row)
 * whose invocations split the row's keys (attn_cached.comp). f64 where the
 * device has shaderFloat64, head sizes up to 128, in the tiles only
 * (math_f64.glsl: exp and log in double). Positions are read from device
 * memory. */
#include "vk.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static bool f32_ok(const kiln_vk *vk, const kiln_tensor *t) {
    return t->dtype == KILN_F32 && kiln_tensor_is_contiguous(t) && kiln__vk_fits(vk, t);
}

/* ---- rope ---- */

/* src x [..., T, D] [, pos i32 [T]]; ip[0] = mode, ip[1] = inverse,
 * ip[2] = has_pos; fp[0] = theta. */
static bool rope_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *x = t->src[0];
    if (!f32_ok(vk, t) || !f32_ok(vk, x) || kiln_tensor_numel(t) == 0) return false;
    if (t->ip[0] != KILN_ROPE_NEOX && t->ip[0] != KILN_ROPE_INTERLEAVED) return false;
    if (t->ip[2]) {
        const kiln_tensor *pos = t->src[1];
        if (pos->dtype != KILN_I32 || !kiln_tensor_is_contiguous(pos) || !kiln__vk_fits(vk, pos)) return false;
    }
    return true;
}

static kiln_status rope_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0], *pos = t->ip[2] ? t->src[1] : x;
    int64_t d = t->shape[t->ndim - 1], n = kiln_tensor_numel(t) / 2;
    struct {
        uint32_t n, t, d, interleaved, inverse, has_pos;
        float log2_theta;
        uint32_t x0, p0, y0;
    } pc = {(uint32_t)n, (uint32_t)t->shape[t->ndim - 2], (uint32_t)d, t->ip[0] == KILN_ROPE_INTERLEAVED,
            t->ip[1] != 0, t->ip[2] != 0, (float)log2(t->fp[0]), kiln__vk_base(vk, x), kiln__vk_base(vk, pos),
            kiln__vk_base(vk, t)};
    kiln_vk_dispatch dp = {.shader = "attn_rope", .n = 3, .bind = {x, pos, t}, .push = &pc, .push_size = sizeof pc};
    kiln__vk_groups_1d(vk, (uint64_t)n, 256, dp.groups);
    return kiln__vk_dispatch(vk, &dp);
}

/* ---- attention ---- */

/* Rows (queries or keys) of one head per workgroup (attn_common.glsl). */
#define ATTN_BLOCK 64
/* The shared memory of the kernels that stage tiles (attn_common.glsl's ATTN_TILE). */
#define ATTN_SHARED (16384 + 128)

/* The grid: blocks of ATTN_BLOCK rows of n, times heads. */
static void head_groups(int64_t n, int64_t heads, uint32_t g[3]) {
    g[0] = (uint32_t)((n + ATTN_BLOCK - 1) / ATTN_BLOCK);
    g[1] = (uint32_t)heads;
    g[2] = 1;
}

/* The push constants of every attention shader (attn_common.glsl). */
typedef struct attn_push {
    uint32_t rows, hq, hkv, t, s, d, dv, causal;
    float scale;
    uint32_t q0, k0, v0;
    uint32_t o0, l0;
    uint32_t do0;
    uint32_t dq0, dk0, dv0;
    uint32_t r0, r1;
} attn_push;

/* The shader variant for head sizes d, dv: rows read as vec4 and kept in
 * registers when both are multiples of 4 up to 128 and every row-read
 * buffer starts on a multiple of 4 floats; else read as floats (any size
 * up to 256); NULL beyond. */
static const char *head_variant(const attn_push *pc) {
    uint32_t m = pc->d > pc->dv ? pc->d : pc->dv;
    bool v4 = pc->d % 4 == 0 && pc->dv % 4 == 0 && (pc->q0 | pc->k0 | pc->v0 | pc->do0) % 4 == 0;
    if (v4 && m <= 128) return m <= 32 ? "d32v4" : m <= 64 ? "d64v4" : "d128v4";
    return m <= 256 ? "any" : NULL;
}

/* The rows of its long loop one pass of a kernel may walk under the
 * device's loop budget, when each row runs `loops` loops over a row's
 * vectors and `per_inv` rows fall to each invocation: the rolled variant's
 * loops run 256 times (its NV), an unrolled variant's are no loops. The
 * loads, stores and merges outside the long loop take fewer than 12 NV.
 * A kernel that stages its rows in shared memory (ATTN_STAGE) adds, per
 * tile of n rows, at most 2 (n NV / 64 + 1) staging iterations and its
 * tile loop's (NV up to 32 in the unrolled variants): fewer than
 * 2 NV / 64 + 3 per row. */
static uint32_t pass_rows(const kiln_vk *vk, const char *var, uint32_t loops, uint32_t per_inv, bool staged) {
    uint32_t budget = kiln__vk_caps(vk)->loop_budget, nv = strcmp(var, "any") ? 1 : 256;
    uint32_t stage = staged ? 2 * (nv == 1 ? 32 : nv) / 64 + 3 : 0;
    return budget ? (budget - 12 * nv) / (loops * nv + 1 + stage) * per_inv : UINT32_MAX;
}

/* Dispatch dp once per pass of at most `step` of the n rows of its long loop. */
static kiln_status dispatch_passes(kiln_vk *vk, kiln_vk_dispatch *dp, attn_push *pc, uint32_t n, uint32_t step) {
    kiln_status s = KILN_OK;
    pc->r0 = 0;
    do {
        pc->r1 = n - pc->r0 > step ? pc->r0 + step : n;
        s = kiln__vk_dispatch(vk, dp);
        pc->r0 = pc->r1;
    } while (!s && pc->r0 < n);
    return s;
}

/* ATTENTION src q, k, v; ATTENTION_GRAD src q, k, v, the forward, dO. */
static bool attention_supports(const kiln_vk *vk, const kiln_tensor *t) {
    if (!f32_ok(vk, t)) return false;
    for (int i = 0; i < t->nsrc; i++)
        if (!f32_ok(vk, t->src[i])) return false;
    const kiln_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2];
    if (kiln_tensor_numel(q) == 0 || kiln_tensor_numel(k) == 0 || kiln_tensor_numel(v) == 0) return false;
    const uint32_t *mg = kiln__vk_caps(vk)->max_groups;
    if (kiln__vk_caps(vk)->max_shared_bytes < ATTN_SHARED) return false;
    int64_t tb = (q->shape[2] + ATTN_BLOCK - 1) / ATTN_BLOCK, sb = (k->shape[2] + ATTN_BLOCK - 1) / ATTN_BLOCK;
    if (tb > mg[0] || sb > mg[0] || q->shape[0] * q->shape[1] > mg[1]) return false;
    return q->shape[3] <= 256 && v->shape[3] <= 256 && t->fp[0] > 0 && isfinite(t->fp[0]);
}

static attn_push attention_push(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2];
    return (attn_push){.rows = (uint32_t)(q->shape[0] * q->shape[1] * q->shape[2]),
                       .hq = (uint32_t)q->shape[1],
                       .hkv = (uint32_t)k->shape[1],
                       .t = (uint32_t)q->shape[2],
                       .s = (uint32_t)k->shape[2],
                       .d = (uint32_t)q->shape[3],
                       .dv = (uint32_t)v->shape[3],
                       .causal = t->ip[0] != 0,
                       .scale = (float)t->fp[0],
                       .q0 = kiln__vk_base(vk, q),
                       .k0 = kiln__vk_base(vk, k),
                       .v0 = kiln__vk_base(vk, v)};
}

static kiln_status attention_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2];
    attn_push pc = attention_push(vk, t);
    pc.o0 = kiln__vk_base(vk, t);
    pc.l0 = pc.o0 + pc.rows * pc.dv;
    const char *var = head_variant(&pc);
    char name[32];
    snprintf(name, sizeof name, "attn_fwd%s_%s", pc.t == 1 ? "1" : "", var);
    kiln_vk_dispatch dp = {.shader = name, .n = 4, .bind = {q, k, v, t}, .push = &pc, .push_size = sizeof pc};
    head_groups(pc.t == 1 ? 1 : pc.t, (int64_t)q->shape[0] * pc.hq, dp.groups); /* T = 1: a workgroup per head */
    return dispatch_passes(vk, &dp, &pc, pc.s, pass_rows(vk, var, 3, pc.t == 1 ? ATTN_BLOCK : 1, pc.t != 1));
}

static kiln_status attention_grad_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2], *fwd = t->src[3], *dout = t->src[4];
    attn_push pc = attention_push(vk, t);
    uint32_t qrows = pc.rows, krows = (uint32_t)(k->shape[0] * k->shape[1] * k->shape[2]);
    pc.o0 = kiln__vk_base(vk, fwd);
    pc.l0 = pc.o0 + qrows * pc.dv;
    pc.do0 = kiln__vk_base(vk, dout);
    pc.dq0 = kiln__vk_base(vk, t);
    pc.dk0 = pc.dq0 + qrows * pc.d;
    pc.dv0 = pc.dk0 + krows * pc.d;
    const char *var = head_variant(&pc);
    char name[32];
    kiln_vk_dispatch dp = {.shader = "attn_bwd_delta", .n = 3, .bind = {fwd, dout, t}, .push = &pc,
                           .push_size = sizeof pc};
    kiln__vk_groups_1d(vk, qrows, 64, dp.groups);
    kiln_status s = kiln__vk_dispatch(vk, &dp);
    if (s) return s;
    snprintf(name, sizeof name, "attn_bwd_dkv_%s", var);
    dp = (kiln_vk_dispatch){.shader = name, .n = 6, .bind = {q, k, v, fwd, dout, t}, .push = &pc,
                            .push_size = sizeof pc};
    head_groups(pc.s, (int64_t)k->shape[0] * pc.hkv, dp.groups);
    if ((s = dispatch_passes(vk, &dp, &pc, pc.hq / pc.hkv * pc.t, pass_rows(vk, var, 4, 1, true)))) return s;
    snprintf(name, sizeof name, "attn_bwd_dq_%s", var);
    head_groups(pc.t, (int64_t)q->shape[0] * pc.hq, dp.groups);
    return dispatch_passes(vk, &dp, &pc, pc.s, pass_rows(vk, var, 3, 1, true));
}

/* ---- attention over a KV cache ---- */

/* The tile kernels of attn_cached_tile.glsl (variants.txt): head sizes up
 * to hd, nt invocations, br query slots against bc keys; f64 ones in
 * fewer keys or invocations, for 32 KiB of shared memory (lavapipe's). */
typedef struct cached_tiles {
    const char *shader;
    uint32_t hd, nt, br, bc;
} cached_tiles;
static const cached_tiles DECODE64 = {"attn_cached_dec_d64", 64, 64, 8, 16},
                          TILES64 = {"attn_cached_tile_d64", 64, 64, 16, 16},
                          TILES128 = {"attn_cached_tile_d128", 128, 128, 8, 16},
                          /* 25 KiB of shared memory: under lavapipe's 32 KiB */
                          TILES256 = {"attn_cached_tile_d256", 256, 64, 8, 8},
                          DECODE64_F64 = {"attn_cached_dec_d64_f64", 64, 64, 8, 16},
                          TILES64_F64 = {"attn_cached_tile_d64_f64", 64, 64, 16, 16},
                          TILES128_F64 = {"attn_cached_tile_d128_f64", 128, 64, 8, 8};
#define CACHED_SPLITS 32  /* key splits at most */
#define CACHED_GROUPS 256 /* workgroups enough to fill a device */

/* The geometry of an ATTENTION_CACHED node and its tile plan: the
 * variant (NULL: the per-row kernel), its splits and its grid. */
typedef struct cached_plan {
    uint32_t n, hq, hkv, b, s, d, dv, window, keys, nq, qtiles, nsplit;
    const cached_tiles *tl;
} cached_plan;

/* The loop iterations of one invocation of the tile kernel under plan c
 * (lavapipe's budget counts them all): per key tile its staging, dot, max,
 * sum and output loops; per pass (a sequence of the tile's rows, at most
 * the rows its br slots span) the pick of the sequence; the q gather and
 * NaN stores once. */
static uint64_t tile_loops(const cached_plan *c) {
    const cached_tiles *tl = c->tl;
    uint32_t group = c->hq / c->hkv, spans = (tl->br + group - 2) / group + 1;
    uint64_t per_tile = tl->bc * tl->hd / tl->nt + c->d + 3 * tl->bc + 1;
    uint64_t tiles = ((c->keys + c->nsplit - 1) / c->nsplit + tl->bc - 1) / tl->bc + 1;
    return (uint64_t)tl->br * (tl->hd + c->dv) / tl->nt + 2 +
           (spans < tl->br ? spans : tl->br) * (2 * tl->br + 2 + tiles * per_tile);
}

/* KILN_ATTN_CACHED=rows: the per-row kernel for every shape (tests reach it). */
static bool rows_forced(void) {
    const char *e = getenv("KILN_ATTN_CACHED");
    return e && !strcmp(e, "rows");
}

static cached_plan cached_plan_of(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2], *kc = t->src[3];
    cached_plan c = {.n = (uint32_t)q->shape[0], .hq = (uint32_t)q->shape[1], .hkv = (uint32_t)k->shape[1],
                     .b = (uint32_t)kc->shape[0], .s = (uint32_t)kc->shape[2], .d = (uint32_t)k->shape[2],
                     .dv = (uint32_t)v->shape[2]};
    c.window = t->ip[0] > 0 && t->ip[0] < c.s ? (uint32_t)t->ip[0] : 0;
    c.keys = c.window ? c.window : c.s;
    c.nq = c.n * (c.hq / c.hkv);
    uint32_t m = c.d > c.dv ? c.d : c.dv;
    bool f64 = t->dtype == KILN_F64, dec = c.nq <= DECODE64.br;
    if (rows_forced() || (f64 && m > 128)) c.tl = NULL;
    else if (m <= 64) c.tl = f64 ? (dec ? &DECODE64_F64 : &TILES64_F64) : dec ? &DECODE64 : &TILES64;
    else c.tl = f64 ? &TILES128_F64 : m <= 128 ? &TILES128 : &TILES256;
    const kiln_vk_caps *caps = kiln__vk_caps(vk);
    if (!c.tl) return c;
    const cached_tiles *tl = c.tl;
    uint32_t es = f64 ? 8 : 4; /* qs, ks, vs, ps, m_s, l_s, c_s in the dtype; 3 words a slot, 3 a pass */
    uint32_t shared = es * (tl->br * (tl->hd + 1) + tl->bc * (2 * tl->hd + 1) + tl->br * (tl->bc + 1) + 3 * tl->br) +
                      4 * (3 * tl->br + 3);
    c.qtiles = (c.nq + tl->br - 1) / tl->br;
    uint64_t blocks = (uint64_t)c.qtiles * c.hkv, most = c.keys / (8 * tl->bc);
    uint64_t ns = (CACHED_GROUPS + blocks - 1) / blocks;
    ns = ns < most ? ns : most;
    c.nsplit = ns < 1 ? 1 : ns > CACHED_SPLITS ? CACHED_SPLITS : (uint32_t)ns;
    while (caps->loop_budget && tile_loops(&c) >= caps->loop_budget && c.nsplit < CACHED_SPLITS) c.nsplit++;
    if (caps->max_shared_bytes < shared || (caps->loop_budget && tile_loops(&c) >= caps->loop_budget) ||
        (uint64_t)c.qtiles * c.nsplit > caps->max_groups[0] || c.hkv > caps->max_groups[1])
        c.tl = NULL;
    return c;
}

/* ATTENTION_CACHED src q, k, v, k_cache, v_cache, seq, pos (see
 * kiln_attention_cached): f32 contiguous (f64 with shaderFloat64, in the
 * tiles only), seq and pos i32; the tile
 * kernels' head sizes, or the per-row kernel's (attn_cached.comp, up to
 * its HD), whose keys one invocation walks (all S of them, or the window:
 * pos is read on the device) must fit a loop budget with its loops over D
 * and Dv, its merge's and its stores'. */
#define CACHED_HD 256
static bool cached_supports(const kiln_vk *vk, const kiln_tensor *t) {
    bool f64 = t->dtype == KILN_F64 && kiln__vk_caps(vk)->f64;
    for (int i = 0; i < 7; i++) {
        const kiln_tensor *x = t->src[i];
        kiln_dtype dt = i < 5 ? (f64 ? KILN_F64 : KILN_F32) : KILN_I32;
        if (x->dtype != dt || !kiln_tensor_is_contiguous(x) || !kiln__vk_fits(vk, x)) return false;
    }
    const kiln_tensor *q = t->src[0], *kc = t->src[3];
    int64_t d = q->shape[2], dv = t->shape[2], s = kc->shape[2], n = q->shape[0] * q->shape[1];
    if (!(f64 || f32_ok(vk, t)) || !kiln_tensor_is_contiguous(t) || !kiln__vk_fits(vk, t) || d > CACHED_HD ||
        dv > CACHED_HD || !(t->fp[0] > 0 && isfinite(t->fp[0])))
        return false;
    const uint32_t *mg = kiln__vk_caps(vk)->max_groups, budget = kiln__vk_caps(vk)->loop_budget;
    if ((uint64_t)n * (uint64_t)(d > dv ? d : dv) > UINT32_MAX) return false;
    if (n && cached_plan_of(vk, t).tl) return true;
    if (f64 && n) return false; /* the per-row kernel is f32 */
    if (q->shape[1] > mg[0] || q->shape[0] > mg[1]) return false;
    int64_t keys = t->ip[0] > 0 && t->ip[0] < s ? t->ip[0] : s;
    return !budget || (keys + 63) / 64 * (d + 2 * dv + 1) + dv + 2 * 64 + (dv + 31) / 32 * (2 * 32 + 64) < budget;
}

/* The rows' keys and values into the caches, before any read (the
 * runtime's barrier); the kernel copies words: an f64 element is two. */
static kiln_status cached_write(kiln_vk *vk, const kiln_tensor *t, const cached_plan *c) {
    const kiln_tensor *k = t->src[1], *v = t->src[2], *kc = t->src[3], *vc = t->src[4];
    const kiln_tensor *seq = t->src[5], *pos = t->src[6];
    kiln_tensor rows_word;
    kiln_status st = kiln__vk_rows_word(vk, &rows_word);
    if (st) return st;
    struct {
        uint32_t n, hkv, b, s, d, dv, k0, v0, s0, p0, kc0, vc0;
    } wc = {c->n, c->hkv, c->b, c->s, c->d, c->dv, kiln__vk_base(vk, k), kiln__vk_base(vk, v), kiln__vk_base(vk, seq),
            kiln__vk_base(vk, pos), kiln__vk_base(vk, kc), kiln__vk_base(vk, vc)};
    uint32_t w = t->dtype == KILN_F64 ? 2 : 1;
    wc.d *= w, wc.dv *= w, wc.k0 *= w, wc.v0 *= w, wc.kc0 *= w, wc.vc0 *= w;
    kiln_vk_dispatch dp = {.shader = "attn_cache_write", .n = 7, .bind = {k, v, seq, pos, kc, vc, &rows_word},
                           .push = &wc, .push_size = sizeof wc};
    kiln__vk_groups_1d(vk, (uint64_t)c->n * c->hkv * (wc.d + wc.dv), 256, dp.groups);
    return kiln__vk_dispatch(vk, &dp);
}

static kiln_status cached_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *q = t->src[0], *kc = t->src[3], *vc = t->src[4], *seq = t->src[5], *pos = t->src[6];
    cached_plan c = cached_plan_of(vk, t);
    if (!c.n) return KILN_OK;
    kiln_status st = cached_write(vk, t, &c);
    if (st) return st;
    uint32_t rows = c.n * c.hq;
    struct {
        uint32_t n, hq, hkv, b, s, d, dv, window;
        float scale, softcap;
        uint32_t q0, k0, v0, s0, p0, o0, nsplit, po0, pl0;
        uint32_t pad, scale64[2], softcap64[2]; /* GLSL puts a uvec2 at a multiple of 8 bytes */
    } pc = {c.n, c.hq, c.hkv, c.b, c.s, c.d, c.dv, c.window, (float)t->fp[0], (float)t->fp[1],
            kiln__vk_base(vk, q), kiln__vk_base(vk, kc), kiln__vk_base(vk, vc), kiln__vk_base(vk, seq),
            kiln__vk_base(vk, pos), kiln__vk_base(vk, t), c.nsplit, 0, 0, 0, {0, 0}, {0, 0}};
    /* the f64 kernels' scale and cap: low word, high word */
    memcpy(pc.scale64, &t->fp[0], sizeof pc.scale64);
    memcpy(pc.softcap64, &t->fp[1], sizeof pc.softcap64);
    if (!c.tl) { /* the per-row kernel: a workgroup per (query head, row) */
        kiln_vk_dispatch dp = {.shader = "attn_cached", .n = 6, .bind = {q, kc, vc, seq, pos, t}, .push = &pc,
                               .push_size = 16 * sizeof(uint32_t), .groups = {c.hq, c.n, 1}};
        return kiln__vk_dispatch(vk, &dp);
    }
    kiln_tensor part;
    if (c.nsplit > 1 && (st = kiln__vk_scratch(vk, (int64_t)c.nsplit * rows * (c.dv + 1), t->dtype, &part))) return st;
    if (c.nsplit > 1) pc.po0 = kiln__vk_base(vk, &part), pc.pl0 = pc.po0 + c.nsplit * rows * c.dv;
    kiln_vk_dispatch dp = {.shader = c.tl->shader, .n = 7, .bind = {q, kc, vc, seq, pos, t, c.nsplit > 1 ? &part : t},
                           .push = &pc, .push_size = sizeof pc, .groups = {c.qtiles * c.nsplit, c.hkv, 1}};
    if ((st = kiln__vk_dispatch(vk, &dp)) || c.nsplit == 1) return st;
    struct {
        uint32_t rows, dv, nsplit, po0, pl0, o0;
    } mc = {rows, c.dv, c.nsplit, pc.po0, pc.pl0, pc.o0};
    dp = (kiln_vk_dispatch){.shader = t->dtype == KILN_F64 ? "attn_cached_merge_f64" : "attn_cached_merge",
                            .n = 2, .bind = {&part, t}, .push = &mc, .push_size = sizeof mc};
    kiln__vk_groups_1d(vk, (uint64_t)rows * c.dv, 256, dp.groups);
    return kiln__vk_dispatch(vk, &dp);
}

void kiln__vk_register_attention(kiln_vk_kernel *tab) {
    tab[KILN_OP_ROPE] = (kiln_vk_kernel){rope_supports, rope_record};
    tab[KILN_OP_ATTENTION] = (kiln_vk_kernel){attention_supports, attention_record};
    tab[KILN_OP_ATTENTION_GRAD] = (kiln_vk_kernel){attention_supports, attention_grad_record};
    tab[KILN_OP_ATTENTION_CACHED] = (kiln_vk_kernel){cached_supports, cached_record};
}
