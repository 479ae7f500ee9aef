/* vk_matmul.c — KILN_OP_MATMUL on the Vulkan backend (see vk.h): one
 * dispatch of the register-blocked tile kernel shaders/mm_tile.glsl over
 * every output tile of every batch matrix. The tile is the one that wastes
 * least (see variant_of): 128 x 128 (256 invocations of 8 x 8 outputs) for
 * big outputs, 64 x 64 (64 invocations of 8 x 8) for small ones, 16 x 256
 * or 256 x 16 for outputs of a few rows or columns. Outputs that would
 * leave most of the device idle while their few tiles walk a long K (a
 * convolution's weight gradient) split K across workgroups instead (see
 * split_of): each workgroup computes a partial tile (shaders/mm_tile.glsl
 * with MM_PARTIAL, or for tiny outputs mm_splitk.glsl's 4 x 4 blocks whose
 * invocations split their slice of K again) over one slice of K into
 * scratch memory, and a second dispatch (shaders/mm_sum.glsl) adds the
 * slices up in a fixed order, so a result is the same every run. Where K
 * is too short for that to pay, small outputs over K >= MM_SPLITK_K still
 * run mm_splitk.glsl alone, splitting K within each workgroup.
 *
 * The semantics are backends/cpu/matmul.c's: ip[0]/ip[1] transpose a's/b's
 * last two dims, batch dims broadcast, f16 and bf16 operands accumulate in
 * f32 and round the result to their dtype, f32 operands are rounded to bf16 first under
 * KILN_MATMUL_BF16, and ex->accumulate adds the product into the output.
 * Operands are read through their own strides (non-negative ones), so
 * transposed, sliced and broadcast views need no copy; batch dims that are
 * laid out alike are coalesced, and more than three that are not go to the
 * CPU, as do f64 and sizes beyond 32-bit indexing. */
#include "vk.h"

enum { MM_BATCH_DIMS = 3 };

/* The tile variants (shaders mm_<dtype>_<name>.comp): output tile rows x
 * columns. */
typedef struct mm_variant {
    const char *f32, *f16, *bf16;
    int64_t bm, bn;
} mm_variant;
enum { MM_BIG, MM_SMALL, MM_WIDE, MM_TALL, MM_SPLITK };
static const mm_variant VARIANTS[] = {
    [MM_BIG] = {"mm_f32_128", "mm_f16_128", "mm_bf16_128", 128, 128},
    [MM_SMALL] = {"mm_f32_64", "mm_f16_64", "mm_bf16_64", 64, 64},
    [MM_WIDE] = {"mm_f32_wide", "mm_f16_wide", "mm_bf16_wide", 16, 256},
    [MM_TALL] = {"mm_f32_tall", "mm_f16_tall", "mm_bf16_tall", 256, 16},
    [MM_SPLITK] = {"mm_f32_splitk", "mm_f16_splitk", "mm_bf16_splitk", 4, 4},
};
/* A variant's or part's kernel for C's dtype. */
#define SHADER_OF(v, dt) ((dt) == KILN_F16 ? (v)->f16 : (dt) == KILN_BF16 ? (v)->bf16 : (v)->f32)
/* the fewest rows of a tile among the tiled variants (for folding batches) */
enum { MM_MIN_TILE = 16 };

/* Split K when the tiled kernel would have fewer workgroups than this
 * and K is at least MM_SPLITK_K deep. */
enum { MM_SPLITK_GROUPS = 16, MM_SPLITK_K = 1024 };

/* Split K across workgroups (the MM_PARTIAL variants of mm_splitk.glsl
 * and mm_tile.glsl, then mm_sum.glsl): the partial tiles, what an output
 * of theirs costs relative to the others on lavapipe (padding aside), and
 * the least K a workgroup should take: on lavapipe each workgroup has a
 * fixed cost (about 30 us for the 4 x 4 kernel's tree sum), so there the
 * 4 x 4 blocks of a 16 x 9 output over K = 43264 gain nothing from more
 * than 2 slices. The 4 x 4 blocks, which read their operands straight
 * from memory with no reuse, serve only outputs of at most MM_P4_BLOCKS
 * blocks. */
typedef struct mm_part {
    const char *f32, *f16, *bf16;
    int64_t bm, bn;
    double cost;
    int64_t kmin;
} mm_part;
enum { MM_P4 = 0, MM_P4_BLOCKS = 16 };
static const mm_part PARTS[] = {
    [MM_P4] = {"mm_f32_p4", "mm_f16_p4", "mm_bf16_p4", 4, 4, 1.0, 16384},
    {"mm_f32_p16", "mm_f16_p16", "mm_bf16_p16", 16, 16, 2.5, 512},
    {"mm_f32_p32", "mm_f16_p32", "mm_bf16_p32", 32, 32, 2.0, 512},
    {"mm_f32_p64", "mm_f16_p64", "mm_bf16_p64", 64, 64, 1.4, 512},
    {"mm_f32_p128", "mm_f16_p128", "mm_bf16_p128", 128, 128, 1.0, 512},
};
/* Split when the tiled kernel would have fewer workgroups than
 * MM_SPLIT_BELOW; aim for MM_SPLIT_TARGET workgroups (a GPU's few hundred;
 * lavapipe does as well with them as with a few, within its workgroups'
 * fixed cost, which kmin bounds). */
enum { MM_SPLIT_BELOW = 64, MM_SPLIT_TARGET = 256 };
enum { N_PARTS = sizeof PARTS / sizeof *PARTS };

/* mm_tile.glsl's flags */
enum { MM_ACCUMULATE = 1, MM_BF16 = 2, MM_A_KFAST = 4, MM_B_KFAST = 8 };

/* Matches the push-constant block of mm_tile.glsl. */
typedef struct mm_push {
    uint32_t m, n, k;
    uint32_t a0, b0, c0;
    uint32_t sam, sak, sbk, sbn;
    uint32_t bd1, bd2;
    uint32_t as[MM_BATCH_DIMS], bs[MM_BATCH_DIMS];
    uint32_t flags;
    uint32_t z0;
    uint32_t ksplit, nsplit;
} mm_push;

/* Matches the push-constant block of mm_sum.glsl. */
typedef struct mm_sum_push {
    uint32_t total, mn, nsplit, p0, c0, flags;
} mm_sum_push;

/* What a node needs to run: sizes, strides, coalesced batch dims. */
typedef struct mm_plan {
    int64_t m, n, k, batch;
    int64_t sam, sak, sbk, sbn;
    int nbd;                             /* coalesced batch dims, outer first */
    int64_t bd[KILN_MAX_DIMS], as[KILN_MAX_DIMS], bs[KILN_MAX_DIMS];
} mm_plan;

/* Stride of x's dim i (from the right end of out's batch dims: x has
 * fewer dims when it is broadcast), 0 where x has no such dim or a 1. */
static int64_t batch_stride(const kiln_tensor *x, int nb, int i) {
    int ix = i - (nb - (x->ndim - 2));
    return ix >= 0 && x->shape[ix] != 1 ? x->stride[ix] : 0;
}

/* The stride of dim d of x, or 0 when that dim has size 1 (its stride
 * is never used, and may be anything). */
static int64_t dim_stride(const kiln_tensor *x, int d) { return x->shape[d] == 1 ? 0 : x->stride[d]; }

static int64_t tiles(int64_t n, int64_t t) { return (n + t - 1) / t; }

/* The plan of node t; max_rows: the most row tiles a dispatch may have. */
static void plan_of(const kiln_tensor *t, int64_t max_rows, mm_plan *pl) {
    const kiln_tensor *a = t->src[0], *b = t->src[1];
    bool ta = t->ip[0], tb = t->ip[1];
    int nb = t->ndim - 2;
    pl->m = t->shape[nb];
    pl->n = t->shape[nb + 1];
    pl->k = a->shape[a->ndim - (ta ? 2 : 1)];
    pl->batch = kiln__numel(nb, t->shape);
    int64_t a_r = dim_stride(a, a->ndim - 2), a_c = dim_stride(a, a->ndim - 1);
    int64_t b_r = dim_stride(b, b->ndim - 2), b_c = dim_stride(b, b->ndim - 1);
    pl->sam = ta ? a_c : a_r, pl->sak = ta ? a_r : a_c;
    pl->sbk = tb ? b_c : b_r, pl->sbn = tb ? b_r : b_c;
    /* batch dims, size-1 ones dropped, neighbours merged where both
     * operands step through them as through one dim */
    pl->nbd = 0;
    for (int i = 0; i < nb; i++) {
        int64_t d = t->shape[i], sa = batch_stride(a, nb, i), sb = batch_stride(b, nb, i);
        if (d == 1) continue;
        int j = pl->nbd - 1;
        if (j >= 0 && pl->as[j] == sa * d && pl->bs[j] == sb * d) {
            pl->bd[j] *= d, pl->as[j] = sa, pl->bs[j] = sb;
            continue;
        }
        pl->bd[pl->nbd] = d, pl->as[pl->nbd] = sa, pl->bs[pl->nbd] = sb;
        pl->nbd++;
    }
    /* b shared by the batch and a's matrices one after another (rows
     * continuing at the same stride): one tall [batch*m, k] matrix, whose
     * tiles fill up where each batch matrix alone would leave most of a
     * tile empty (C's rows continue the same way) */
    if (pl->nbd == 1 && pl->bs[0] == 0 && (pl->m == 1 || pl->as[0] == pl->m * pl->sam) &&
        tiles(pl->m * pl->bd[0], MM_MIN_TILE) <= max_rows) { /* whichever tile it gets */
        if (pl->m == 1) pl->sam = pl->as[0];
        pl->m *= pl->bd[0];
        pl->batch = 1;
        pl->nbd = 0;
    }
}

/* The tile for an m x n output: a thin one where a 64-row (-column) tile
 * would be at least 3/4 padding; else the big tiles unless the small
 * ones' work, padding included, is less (on lavapipe a small tile takes
 * about 1.4 times as long per output, a thin one 2 to 4 times). */
static int tile_of(int64_t m, int64_t n) {
    if (m <= 16 && n > 64) return MM_WIDE;
    if (n <= 16 && m > 64) return MM_TALL;
    double big = (double)(tiles(m, 128) * tiles(n, 128)) * 128 * 128;
    double small = 1.4 * (double)(tiles(m, 64) * tiles(n, 64)) * 64 * 64;
    return small < big ? MM_SMALL : MM_BIG;
}

/* The kernel for plan pl: its tile, or split K (see the top). */
static int variant_of(const mm_plan *pl) {
    int v = tile_of(pl->m, pl->n);
    int64_t groups = tiles(pl->m, VARIANTS[v].bm) * tiles(pl->n, VARIANTS[v].bn) * pl->batch;
    return groups < MM_SPLITK_GROUPS && pl->k >= MM_SPLITK_K ? MM_SPLITK : v;
}

static bool u32(int64_t v) { return v >= 0 && v <= (int64_t)UINT32_MAX; }

/* A split of K across workgroups: the partial tile, the splits per batch
 * matrix and the K each takes (a multiple of the tiles' BK, 8). */
typedef struct mm_split {
    int part;
    int64_t nsplit, ksplit;
} mm_split;

/* Should plan pl split K across workgroups, and how (false: no)? When the
 * tiled kernel would leave the device idle while K is deep: the output is
 * cut into the partial tiles that cost least, K into about enough slices
 * for MM_SPLIT_TARGET workgroups, none shorter than the tile's kmin; the
 * partial tiles must fit one binding and 32-bit indexing. */
static bool split_of(const kiln_vk_caps *caps, const mm_plan *pl, mm_split *sp) {
    int v = tile_of(pl->m, pl->n);
    int64_t groups = tiles(pl->m, VARIANTS[v].bm) * tiles(pl->n, VARIANTS[v].bn) * pl->batch;
    if (groups >= MM_SPLIT_BELOW || pl->batch > caps->max_groups[2] / 2) return false;
    double best = 0;
    sp->part = -1;
    for (int i = 0; i < N_PARTS; i++) {
        int64_t area = tiles(pl->m, PARTS[i].bm) * PARTS[i].bm * tiles(pl->n, PARTS[i].bn) * PARTS[i].bn;
        if (i == MM_P4 && area > MM_P4_BLOCKS * 16) continue;
        double c = PARTS[i].cost * (double)area;
        if (sp->part < 0 || c < best) best = c, sp->part = i;
    }
    const mm_part *pv = &PARTS[sp->part];
    groups = tiles(pl->m, pv->bm) * tiles(pl->n, pv->bn) * pl->batch;
    int64_t n = tiles(MM_SPLIT_TARGET, groups), most = pl->k / pv->kmin;
    if (n > most) n = most;
    if (n > caps->max_groups[2] / pl->batch) n = caps->max_groups[2] / pl->batch;
    if (n < 2) return false;
    sp->ksplit = tiles(tiles(pl->k, n), 8) * 8;
    sp->nsplit = tiles(pl->k, sp->ksplit);
    int64_t elems = pl->batch * sp->nsplit * pl->m * pl->n;
    return sp->nsplit >= 2 && u32(elems) && (uint64_t)elems * 4 + 256 <= caps->max_range &&
           tiles(pl->n, pv->bn) <= caps->max_groups[0] && tiles(pl->m, pv->bm) <= caps->max_groups[1];
}

static bool matmul_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *a = t->src[0], *b = t->src[1];
    const kiln_vk_caps *caps = kiln__vk_caps(vk);
    if (t->dtype != KILN_F32 && !((t->dtype == KILN_F16 || t->dtype == KILN_BF16) && caps->f16)) return false;
    if (a->dtype != t->dtype || b->dtype != t->dtype || a->ndim < 2 || b->ndim < 2) return false;
    if (!kiln_tensor_is_contiguous(t)) return false;
    if (!kiln__vk_fits(vk, a) || !kiln__vk_fits(vk, b) || !kiln__vk_fits(vk, t)) return false;
    mm_plan pl;
    plan_of(t, caps->max_groups[1], &pl);
    if (pl.nbd > MM_BATCH_DIMS) return false;
    int64_t v[] = {pl.m, pl.n, pl.k, pl.sam, pl.sak, pl.sbk, pl.sbn, pl.batch * pl.m * pl.n};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        if (!u32(v[i])) return false;
    for (int i = 0; i < pl.nbd; i++)
        if (!u32(pl.as[i]) || !u32(pl.bs[i])) return false;
    const mm_variant *var = &VARIANTS[variant_of(&pl)];
    return tiles(pl.n, var->bn) <= caps->max_groups[0] && tiles(pl.m, var->bm) <= caps->max_groups[1];
}

/* Split K across workgroups: the partial tiles into scratch, then their
 * sums (in split order) into C. pc: the push constants as for one pass. */
static kiln_status record_split(kiln_vk *vk, kiln_tensor *t, const mm_plan *pl, const mm_split *sp, mm_push *pc) {
    const mm_part *pv = &PARTS[sp->part];
    int64_t mn = pl->m * pl->n;
    kiln_tensor part;
    kiln_status s = kiln__vk_scratch(vk, pl->batch * sp->nsplit * mn, KILN_F32, &part);
    if (s) return s;
    pc->c0 = kiln__vk_base(vk, &part);
    pc->ksplit = (uint32_t)sp->ksplit, pc->nsplit = (uint32_t)sp->nsplit;
    pc->z0 = 0;
    kiln_vk_dispatch d = {
        .shader = SHADER_OF(pv, t->dtype),
        .n = 3,
        .bind = {t->src[0], t->src[1], &part},
        .push = pc,
        .push_size = sizeof *pc,
        .groups = {(uint32_t)tiles(pl->n, pv->bn), (uint32_t)tiles(pl->m, pv->bm), (uint32_t)(pl->batch * sp->nsplit)},
    };
    if ((s = kiln__vk_dispatch(vk, &d))) return s;
    mm_sum_push sc = {.total = (uint32_t)(pl->batch * mn), .mn = (uint32_t)mn, .nsplit = (uint32_t)sp->nsplit,
                      .p0 = kiln__vk_base(vk, &part), .c0 = kiln__vk_base(vk, t), .flags = pc->flags & MM_ACCUMULATE};
    kiln_vk_dispatch ds = {
        .shader = t->dtype == KILN_F16 ? "mm_f16_sum" : t->dtype == KILN_BF16 ? "mm_bf16_sum" : "mm_f32_sum",
        .n = 2,
        .bind = {&part, t},
        .push = &sc,
        .push_size = sizeof sc,
    };
    kiln__vk_groups_1d(vk, (uint64_t)(pl->batch * mn), 256, ds.groups);
    return kiln__vk_dispatch(vk, &ds);
}

/* Node t; may_split: K may be split across workgroups (scratch). */
static kiln_status record(kiln_vk *vk, kiln_tensor *t, bool accumulate, bool may_split) {
    const kiln_tensor *a = t->src[0], *b = t->src[1];
    mm_plan pl;
    plan_of(t, kiln__vk_caps(vk)->max_groups[1], &pl);
    if (pl.m == 0 || pl.n == 0 || pl.batch == 0) return KILN_OK; /* nothing to write */
    /* the batch dims, right-aligned in three slots (size 1, stride 0 pads them) */
    int64_t bd[MM_BATCH_DIMS] = {1, 1, 1}, as[MM_BATCH_DIMS] = {0}, bs[MM_BATCH_DIMS] = {0};
    for (int i = 0; i < pl.nbd; i++) {
        int s = MM_BATCH_DIMS - pl.nbd + i;
        bd[s] = pl.bd[i], as[s] = pl.as[i], bs[s] = pl.bs[i];
    }
    uint32_t flags = 0;
    if (accumulate) flags |= MM_ACCUMULATE;
    if (t->dtype == KILN_F32 && kiln_get_matmul_precision() == KILN_MATMUL_BF16) flags |= MM_BF16;
    /* stage each operand along its unit-stride dim (coalesced loads) */
    if (pl.sak == 1 && pl.sam != 1) flags |= MM_A_KFAST;
    if (pl.sbk == 1 && pl.sbn != 1) flags |= MM_B_KFAST;
    mm_push pc = {
        .m = (uint32_t)pl.m, .n = (uint32_t)pl.n, .k = (uint32_t)pl.k,
        .a0 = kiln__vk_base(vk, a), .b0 = kiln__vk_base(vk, b), .c0 = kiln__vk_base(vk, t),
        .sam = (uint32_t)pl.sam, .sak = (uint32_t)pl.sak, .sbk = (uint32_t)pl.sbk, .sbn = (uint32_t)pl.sbn,
        .bd1 = (uint32_t)bd[1], .bd2 = (uint32_t)bd[2],
        .flags = flags,
    };
    for (int i = 0; i < MM_BATCH_DIMS; i++) pc.as[i] = (uint32_t)as[i], pc.bs[i] = (uint32_t)bs[i];
    mm_split sp;
    if (may_split && split_of(kiln__vk_caps(vk), &pl, &sp)) return record_split(vk, t, &pl, &sp, &pc);
    const mm_variant *v = &VARIANTS[variant_of(&pl)];
    /* batches beyond the device's grid limit in z: more dispatches, each
     * starting at batch z0 */
    int64_t zmax = kiln__vk_caps(vk)->max_groups[2];
    for (int64_t z0 = 0; z0 < pl.batch; z0 += zmax) {
        pc.z0 = (uint32_t)z0;
        kiln_vk_dispatch d = {
            .shader = SHADER_OF(v, t->dtype),
            .n = 3,
            .bind = {a, b, t},
            .push = &pc,
            .push_size = sizeof pc,
            .groups = {(uint32_t)tiles(pl.n, v->bn), (uint32_t)tiles(pl.m, v->bm),
                       (uint32_t)(pl.batch - z0 < zmax ? pl.batch - z0 : zmax)},
        };
        kiln_status s = kiln__vk_dispatch(vk, &d);
        if (s) return s;
    }
    return KILN_OK;
}

static kiln_status matmul_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    return record(vk, t, ex->accumulate, true);
}

bool kiln__vk_matmul_ok(const kiln_vk *vk, const kiln_tensor *t) { return matmul_supports(vk, t); }

kiln_status kiln__vk_matmul_unsplit(kiln_vk *vk, kiln_tensor *t) { return record(vk, t, false, false); }

void kiln__vk_register_matmul(kiln_vk_kernel *tab) {
    tab[KILN_OP_MATMUL] = (kiln_vk_kernel){matmul_supports, matmul_record};
}
