/* nn_attention_flash.h — blocked (FlashAttention-2 style) attention,
 * forward and backward, written once over the element type: included by
 * nn_attention_flash.c with FA_T (float or double), FA_SUF (f32, f64),
 * FA_EXP, FA_LOG and FA_TANH (expf/logf/tanhf or exp/log/tanh) defined.
 *
 * Forward: each task is a block of B_r = KILN_ATTN_BLOCK queries of one
 * head; it walks the keys in blocks of B_c, keeping per query the running
 * maximum m, the running sum l of exp(score - m) and the unnormalized
 * output, rescaled when m grows (online softmax). It stores O and
 * L = m + log(l); no T x S matrix exists, only a B_r x B_c tile per thread
 * (and the keys transposed once, [B, Hkv, D, S], so Q K^T tiles read rows).
 *
 * Backward: with D_i = rowsum(dO_i * O_i), each key block j recomputes
 * P = exp(S - L) for every query block i that sees it, then
 *     dV_j += P^T dO_i,  dP = dO_i V_j^T,  dS = P (dP - D_i) scale,
 *     dK_j += dS^T Q_i,  dQ_i += dS K_j.
 * A task owns (batch, kv head, a share of the key blocks) and loops over
 * the query heads of its group, so dK/dV are summed over those heads
 * without races. When a head's key blocks are split into several shares,
 * each share adds dQ into a copy of its own and the copies are summed in
 * share order at the end (the same sums whichever thread ran which task);
 * otherwise dQ is written in place. P^T dO and dS^T Q read the tiles
 * transposed through the gemm's strides instead of copying them.
 *
 * Each thread of a loop has its own tile buffer, indexed by its pool tid. */

#define FA_CAT_(a, b) a##_##b
#define FA_CAT(a, b) FA_CAT_(a, b)
#define FA_FN(name) FA_CAT(name, FA_SUF)
#define FA_OPS FA_CAT(kiln_attn_ops, FA_SUF)
#define BLK KILN_ATTN_BLOCK

/* dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols, in tiles
 * of 16 x 16: row by row, each element went to another line of dst, and
 * the transpose of a decoding step's keys took longer than its products. */
static void FA_FN(transpose)(const FA_T *src, int64_t lds, FA_T *dst, int64_t ldd, int64_t rows, int64_t cols) {
    enum { TILE = 16 };
    for (int64_t r0 = 0; r0 < rows; r0 += TILE)
        for (int64_t c0 = 0; c0 < cols; c0 += TILE) {
            int64_t r1 = r0 + TILE < rows ? r0 + TILE : rows, c1 = c0 + TILE < cols ? c0 + TILE : cols;
            for (int64_t c = c0; c < c1; c++)
                for (int64_t r = r0; r < r1; r++) dst[c * ldd + r] = src[r * lds + c];
        }
}

/* Keys of block [j0, j0 + bc) that query i sees. */
static inline int64_t FA_FN(visible)(const kiln_attn_geom *g, int64_t i, int64_t j0, int64_t bc) {
    if (!g->causal) return bc;
    int64_t nv = i + (g->s - g->t) + 1 - j0;
    return nv < 0 ? 0 : nv > bc ? bc : nv;
}

/* The first row of the query block at i0 that sees key j (0 without a mask). */
static inline int64_t FA_FN(first_row)(const kiln_attn_geom *g, int64_t i0, int64_t j) {
    int64_t r = j - (g->s - g->t) - i0;
    return g->causal && r > 0 ? r : 0;
}

/* Strips of a block the mask cuts: rows [r0, r0 + *rn) of the query block
 * at i0 and the keys of block j0 its last row sees; keys [c0, c0 + *cn)
 * and the first row that sees one. */
static inline int64_t FA_FN(strip_keys)(const kiln_attn_geom *g, int64_t i0, int64_t j0, int64_t bc, int64_t br,
                                        int64_t r0, int64_t strip, int64_t *rn) {
    *rn = br - r0 < strip ? br - r0 : strip;
    return FA_FN(visible)(g, i0 + r0 + *rn - 1, j0, bc);
}
static inline int64_t FA_FN(strip_rows)(const kiln_attn_geom *g, int64_t i0, int64_t j0, int64_t bc, int64_t c0,
                                        int64_t strip, int64_t *cn) {
    *cn = bc - c0 < strip ? bc - c0 : strip;
    return FA_FN(first_row)(g, i0, j0 + c0);
}

/* Queries [i0, i0 + br) of one head: qi [br, d] -> oi [br, dv], li [br];
 * kth is the head's keys transposed, [d, S]. With kth NULL, a decoding
 * step (T = 1): the br rows are the one query of each head of a group,
 * kh the group's keys as they are, [S, d]; the tile is then made as its
 * transpose K Q^T from the queries transposed (d x br, for a group of 8
 * an eighth of the keys' size), with the same products in the same order.
 * A key block the causal mask cuts runs in strips of FA_STRIP rows, each
 * over the keys its last row sees: the products left out are the zeros
 * (exp of a masked score is 0) the whole tile would have added. */
#ifndef FA_STRIP
#define FA_STRIP 16
#endif
static void FA_FN(fwd_block)(const kiln_attn_geom *g, const FA_OPS *ops, const FA_T *qi, const FA_T *kth,
                             const FA_T *kh, const FA_T *vh, FA_T *oi, FA_T *li, int64_t i0, int64_t br, FA_T *work) {
    int64_t d = g->d, dv = g->dv, step = kth ? 1 : 0; /* the query index of row r is i0 + r step */
    /* soft-capped scores are scaled and capped in place, then exponentiated unscaled */
    FA_T scale = (FA_T)g->scale, escale = g->softcap > 0 ? 1 : scale;
    FA_T inv_cap = g->softcap > 0 ? (FA_T)(1 / g->softcap) : 0, cap = (FA_T)g->softcap;
    FA_T *sc = work, *acc = sc + BLK * BLK, *m = acc + BLK * dv, *l = m + BLK, *st = l + BLK, *qt = st + BLK * br;
    for (int64_t r = 0; r < br; r++) m[r] = -INFINITY, l[r] = 0;
    for (int64_t e = 0; e < br * dv; e++) acc[e] = 0;
    if (!kth) FA_FN(transpose)(qi, d, qt, br, br, d);
    int64_t kend = g->s;
    if (g->causal && i0 + (br - 1) * step + 1 + g->s - g->t < kend) kend = i0 + (br - 1) * step + 1 + g->s - g->t;
    for (int64_t j0 = 0; j0 < kend; j0 += BLK) {
        int64_t bc = kend - j0 < BLK ? kend - j0 : BLK;
        int64_t strip = kth && FA_FN(visible)(g, i0, j0, bc) < bc ? FA_STRIP : br;
        for (int64_t r0 = 0, rn; kth && r0 < br; r0 += strip) {
            int64_t nv = FA_FN(strip_keys)(g, i0, j0, bc, br, r0, strip, &rn);
            if (nv) ops->gemm(rn, nv, d, qi + r0 * d, d, 1, kth + j0, g->s, sc + r0 * BLK, BLK, false);
        }
        if (!kth) {
            ops->gemm(bc, br, d, kh + j0 * d, d, 1, qt, br, st, br, false);
            FA_FN(transpose)(st, br, sc, BLK, bc, br);
        }
        for (int64_t r = 0; r < br; r++) {
            FA_T *row = sc + r * BLK;
            int64_t nv = FA_FN(visible)(g, i0 + r * step, j0, bc);
            for (int64_t c = nv; c < bc; c++) row[c] = 0;
            if (nv == 0) continue;
            if (g->softcap > 0) /* the order of models/llama.c's ops: (s scale) / cap, tanh, times cap */
                for (int64_t c = 0; c < nv; c++) row[c] = FA_TANH(row[c] * scale * inv_cap) * cap;
            FA_T mx = ops->max(row, nv) * escale, mnew = mx > m[r] ? mx : m[r];
            FA_T sum = ops->exp_sum(row, nv, escale, mnew);
            if (mnew != m[r]) {
                FA_T corr = FA_EXP(m[r] - mnew); /* 0 while m is -inf */
                l[r] *= corr;
#pragma omp simd
                for (int64_t e = 0; e < dv; e++) acc[r * dv + e] *= corr;
                m[r] = mnew;
            }
            l[r] += sum;
        }
        for (int64_t r0 = 0, rn; r0 < br; r0 += strip) {
            int64_t nv = FA_FN(strip_keys)(g, i0, j0, bc, br, r0, strip, &rn);
            if (!kth) nv = bc; /* a decoding step's rows are one query each */
            if (nv) ops->gemm(rn, dv, nv, sc + r0 * BLK, BLK, 1, vh + j0 * dv, dv, acc + r0 * dv, dv, true);
        }
    }
    for (int64_t r = 0; r < br; r++) {
        FA_T inv = l[r] > 0 ? 1 / l[r] : 0;
#pragma omp simd
        for (int64_t e = 0; e < dv; e++) oi[r * dv + e] = acc[r * dv + e] * inv;
        li[r] = l[r] > 0 ? m[r] + FA_LOG(l[r]) : INFINITY;
    }
}

/* What the range functions of one forward or backward read. */
typedef struct FA_FN(fa_job) {
    const kiln_attn_geom *g;
    const FA_OPS *ops;
    const FA_T *q, *k, *v, *o, *lse_in, *dout;
    FA_T *out, *lse, *kt, *dq, *dk, *dv, *di, *dqs, *work;
    size_t work_len;
    int64_t nqb, group, nkb, shares, nq;
    bool decode;
} FA_FN(fa_job);

/* heads [h0, h1): the keys transposed, [D, S] each */
static void FA_FN(transpose_heads)(void *arg, int64_t h0, int64_t h1, int tid) {
    const FA_FN(fa_job) *j = arg;
    const kiln_attn_geom *g = j->g;
    (void)tid;
    for (int64_t hd = h0; hd < h1; hd++)
        FA_FN(transpose)(j->k + hd * g->s * g->d, g->d, j->kt + hd * g->s * g->d, g->s, g->s, g->d);
}

static void FA_FN(fwd_tasks)(void *arg, int64_t t0, int64_t t1, int tid) {
    const FA_FN(fa_job) *j = arg;
    const kiln_attn_geom *g = j->g;
    const int64_t nqb = j->nqb, group = j->group;
    FA_T *w = j->work + (size_t)tid * j->work_len;
    for (int64_t it = t0; it < t1; it++) {
        if (j->decode) {
            int64_t bh = it / g->hkv * g->hq + it % g->hkv * group; /* the group's first query head */
            FA_FN(fwd_block)(g, j->ops, j->q + bh * g->d, NULL, j->k + it * g->s * g->d, j->v + it * g->s * g->dv,
                             j->out + bh * g->dv, j->lse + bh, 0, group, w);
            continue;
        }
        int64_t bh = it / nqb, i0 = it % nqb * BLK, br = g->t - i0 < BLK ? g->t - i0 : BLK;
        int64_t kv = bh / g->hq * g->hkv + bh % g->hq / group;
        FA_FN(fwd_block)(g, j->ops, j->q + (bh * g->t + i0) * g->d, j->kt + kv * g->s * g->d, NULL,
                         j->v + kv * g->s * g->dv, j->out + (bh * g->t + i0) * g->dv, j->lse + bh * g->t + i0, i0, br,
                         w);
    }
}

/* A task is a block of B_r queries of one head; in a decoding step (one
 * query a head) it is a kv head with its group of query heads, whose rows
 * lie together in q, o and lse, and no keys are transposed (at a
 * 128-token context that copy took longer than the products). */
kiln_status FA_FN(kiln__flash_fwd)(const kiln_attn_geom *g, const FA_OPS *ops, const FA_T *q, const FA_T *k,
                                   const FA_T *v, FA_T *o, FA_T *lse) {
    int64_t nqb = (g->t + BLK - 1) / BLK, group = g->hq / g->hkv, heads = g->b * g->hkv;
    const bool decode = g->t == 1 && group <= BLK;
    int64_t tasks = decode ? heads : g->b * g->hq * nqb;
    size_t work = (size_t)(BLK * BLK + BLK * g->dv + 2 * BLK + (decode ? (BLK + g->d) * group : 0));
    double flops = 2.0 * (double)(g->b * g->hq * g->t) * (double)g->s * (double)(g->d + g->dv);
    const int nt = flops > 4e6 && tasks > 1 ? g->n_threads : 1;
    FA_FN(fa_job) j = {.g = g, .ops = ops, .q = q, .k = k, .v = v, .out = o, .lse = lse, .work_len = work,
                       .nqb = nqb, .group = group, .decode = decode};
    /* the keys transposed once, [B * Hkv, D, S]: tiles of Q K^T read rows */
    j.kt = decode ? NULL : kiln__malloc((size_t)(heads * g->s * g->d) * sizeof *j.kt);
    j.work = kiln__malloc((size_t)nt * work * sizeof *j.work);
    if ((!decode && !j.kt) || !j.work) {
        free(j.kt);
        free(j.work);
        return kiln__errs(KILN_ERR_OOM, "attention: out of memory for the transposed keys and %d threads' tiles", nt);
    }
    if (!decode) kiln__pool_for(heads, 1, nt, FA_FN(transpose_heads), &j);
    kiln__pool_for(tasks, 1, nt, FA_FN(fwd_tasks), &j);
    free(j.kt);
    free(j.work);
    return KILN_OK;
}

/* Key block [j0, j0 + bc) of kv head (bi, kv) against every query block
 * of every query head in its group; adds into dqh (dq or a private copy)
 * and writes dk, dv of the block. */
static void FA_FN(bwd_block)(const kiln_attn_geom *g, const FA_OPS *ops, const FA_T *q, const FA_T *k, const FA_T *v,
                             const FA_T *lse, const FA_T *dout, const FA_T *di, FA_T *dqh, FA_T *dk, FA_T *dv,
                             int64_t bi, int64_t kv, int64_t j0, int64_t bc, FA_T *work) {
    int64_t d = g->d, dvn = g->dv, t = g->t, off = g->s - g->t, group = g->hq / g->hkv;
    FA_T scale = (FA_T)g->scale;
    FA_T *kt = work, *vt = kt + d * BLK, *p = vt + dvn * BLK, *ds = p + BLK * BLK;
    FA_T *dka = ds + BLK * BLK, *dva = dka + BLK * d;
    const FA_T *kj = k + ((bi * g->hkv + kv) * g->s + j0) * d, *vj = v + ((bi * g->hkv + kv) * g->s + j0) * dvn;
    FA_FN(transpose)(kj, d, kt, BLK, bc, d);
    FA_FN(transpose)(vj, dvn, vt, BLK, bc, dvn);
    for (int64_t e = 0; e < bc * d; e++) dka[e] = 0;
    for (int64_t e = 0; e < bc * dvn; e++) dva[e] = 0;
    /* the first query that sees key j0 */
    int64_t first = g->causal && j0 - off > 0 ? (j0 - off) / BLK * BLK : 0;
    for (int64_t h = 0; h < group; h++) {
        int64_t bh = bi * g->hq + kv * group + h;
        for (int64_t i0 = first; i0 < t; i0 += BLK) {
            int64_t br = t - i0 < BLK ? t - i0 : BLK, row0 = bh * t + i0;
            const FA_T *qi = q + row0 * d, *doi = dout + row0 * dvn;
            /* a block the mask cuts: strips of rows over the keys their
             * last row sees, strips of keys over the rows that see them */
            int64_t strip = g->causal && FA_FN(visible)(g, i0, j0, bc) < bc ? FA_STRIP : BLK;
            for (int64_t r0 = 0, rn; r0 < br; r0 += strip) {
                int64_t nv = FA_FN(strip_keys)(g, i0, j0, bc, br, r0, strip, &rn);
                if (nv) ops->gemm(rn, nv, d, qi + r0 * d, d, 1, kt, BLK, p + r0 * BLK, BLK, false);
            }
            for (int64_t r = 0; r < br; r++) {
                FA_T *row = p + r * BLK;
                int64_t nv = FA_FN(visible)(g, i0 + r, j0, bc);
                if (nv) ops->exp_sum(row, nv, scale, lse[row0 + r]);
                for (int64_t c = nv; c < bc; c++) row[c] = 0;
            }
            for (int64_t c0 = 0; c0 < bc; c0 += strip) { /* P^T dO */
                int64_t cn, rf = FA_FN(strip_rows)(g, i0, j0, bc, c0, strip, &cn);
                if (rf < br)
                    ops->gemm(cn, dvn, br - rf, p + rf * BLK + c0, 1, BLK, doi + rf * dvn, dvn, dva + c0 * dvn, dvn,
                              true);
            }
            for (int64_t r0 = 0, rn; r0 < br; r0 += strip) {
                int64_t nv = FA_FN(strip_keys)(g, i0, j0, bc, br, r0, strip, &rn);
                if (nv) ops->gemm(rn, nv, dvn, doi + r0 * dvn, dvn, 1, vt, BLK, ds + r0 * BLK, BLK, false);
            }
            for (int64_t r = 0; r < br; r++) {
                FA_T dr = di[row0 + r], *pr = p + r * BLK, *sr = ds + r * BLK;
                int64_t nv = FA_FN(visible)(g, i0 + r, j0, bc);
#pragma omp simd
                for (int64_t c = 0; c < nv; c++) sr[c] = pr[c] * (sr[c] - dr) * scale;
                for (int64_t c = nv; c < bc; c++) sr[c] = 0;
            }
            for (int64_t r0 = 0, rn; r0 < br; r0 += strip) {
                int64_t nv = FA_FN(strip_keys)(g, i0, j0, bc, br, r0, strip, &rn);
                if (nv) ops->gemm(rn, d, nv, ds + r0 * BLK, BLK, 1, kj, d, dqh + (row0 + r0) * d, d, true);
            }
            for (int64_t c0 = 0; c0 < bc; c0 += strip) { /* dS^T Q */
                int64_t cn, rf = FA_FN(strip_rows)(g, i0, j0, bc, c0, strip, &cn);
                if (rf < br)
                    ops->gemm(cn, d, br - rf, ds + rf * BLK + c0, 1, BLK, qi + rf * d, d, dka + c0 * d, d, true);
            }
        }
    }
    memcpy(dk + ((bi * g->hkv + kv) * g->s + j0) * d, dka, (size_t)(bc * d) * sizeof *dka);
    memcpy(dv + ((bi * g->hkv + kv) * g->s + j0) * dvn, dva, (size_t)(bc * dvn) * sizeof *dva);
}

/* rows [r0, r1): D_i = rowsum(dO_i * O_i) */
static void FA_FN(bwd_di)(void *arg, int64_t r0, int64_t r1, int tid) {
    const FA_FN(fa_job) *j = arg;
    const int64_t dv = j->g->dv;
    (void)tid;
    for (int64_t r = r0; r < r1; r++) {
        FA_T s = 0;
        for (int64_t e = 0; e < dv; e++) s += j->dout[r * dv + e] * j->o[r * dv + e];
        j->di[r] = s;
    }
}

static void FA_FN(bwd_tasks)(void *arg, int64_t t0, int64_t t1, int tid) {
    const FA_FN(fa_job) *j = arg;
    const kiln_attn_geom *g = j->g;
    FA_T *w = j->work + (size_t)tid * j->work_len;
    for (int64_t it = t0; it < t1; it++) {
        int64_t hd = it / j->shares, share = it % j->shares, bi = hd / g->hkv, kv = hd % g->hkv;
        FA_T *dqh = j->dqs ? j->dqs + (size_t)share * (size_t)j->nq : j->dq;
        for (int64_t kb = share; kb < j->nkb; kb += j->shares) {
            int64_t j0 = kb * BLK, bc = g->s - j0 < BLK ? g->s - j0 : BLK;
            FA_FN(bwd_block)(g, j->ops, j->q, j->k, j->v, j->lse_in, j->dout, j->di, dqh, j->dk, j->dv, bi, kv, j0,
                             bc, w);
        }
    }
}

/* elements [e0, e1) of dq: the shares' copies summed in share order */
static void FA_FN(bwd_sum_dq)(void *arg, int64_t e0, int64_t e1, int tid) {
    const FA_FN(fa_job) *j = arg;
    (void)tid;
    for (int64_t e = e0; e < e1; e++) {
        FA_T s = 0;
        for (int64_t i = 0; i < j->shares; i++) s += j->dqs[(size_t)i * (size_t)j->nq + (size_t)e];
        j->dq[e] = s;
    }
}

kiln_status FA_FN(kiln__flash_bwd)(const kiln_attn_geom *g, const FA_OPS *ops, const FA_T *q, const FA_T *k,
                                   const FA_T *v, const FA_T *o, const FA_T *lse, const FA_T *dout, FA_T *dq,
                                   FA_T *dk, FA_T *dv) {
    int64_t rows = g->b * g->hq * g->t, nq = rows * g->d, nkb = (g->s + BLK - 1) / BLK, heads = g->b * g->hkv;
    double flops = 4.0 * (double)rows * (double)g->s * (double)(g->d + g->dv);
    int nt = flops > 4e6 ? g->n_threads : 1;
    /* shares of each head's key blocks: enough tasks to keep nt threads busy */
    int64_t shares = heads >= nt ? 1 : (nt + heads - 1) / heads;
    if (shares > nkb) shares = nkb;
    int64_t tasks = heads * shares;
    if (tasks < nt) nt = (int)tasks;
    if (nt <= 1) shares = 1; /* one thread: dq in place */
    size_t work = (size_t)((g->d + g->dv) * BLK + 2 * BLK * BLK + BLK * (g->d + g->dv));
    FA_FN(fa_job) j = {.g = g, .ops = ops, .q = q, .k = k, .v = v, .o = o, .lse_in = lse, .dout = dout, .dq = dq,
                       .dk = dk, .dv = dv, .work_len = work, .nkb = nkb, .shares = shares, .nq = nq};
    j.di = kiln__malloc((size_t)rows * sizeof *j.di);
    j.dqs = shares > 1 ? kiln__calloc((size_t)shares * (size_t)nq, sizeof *j.dqs) : NULL;
    j.work = kiln__malloc((size_t)nt * work * sizeof *j.work);
    if (!j.di || (shares > 1 && !j.dqs) || !j.work) {
        free(j.di);
        free(j.dqs);
        free(j.work);
        return kiln__errs(KILN_ERR_OOM, "attention backward: out of memory for %lld rows", (long long)rows);
    }
    kiln__pool_for(rows, 1, nt, FA_FN(bwd_di), &j);
    if (!j.dqs) memset(dq, 0, (size_t)nq * sizeof *dq);
    kiln__pool_for(tasks, 1, nt, FA_FN(bwd_tasks), &j);
    if (j.dqs) kiln__pool_for(nq, 4096, nt, FA_FN(bwd_sum_dq), &j);
    free(j.di);
    free(j.dqs);
    free(j.work);
    return KILN_OK;
}

#include "nn_attention_rows.h"

#undef FA_CAT_
#undef FA_CAT
#undef FA_FN
#undef FA_OPS
#undef BLK
