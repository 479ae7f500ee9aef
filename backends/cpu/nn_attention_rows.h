/* nn_attention_rows.h — kiln_attention_cached's attention (its cache
 * writes done), included by nn_attention_flash.h with its FA_ macros and
 * tile routines: rows of q [T, Hq, D], each over its own sequence of the
 * caches k, v [B, Hkv, S, D/Dv] up to its position.
 *
 * The rows come in runs (one sequence at consecutive positions). A run of
 * ROWS_RUN_MIN rows or more, a prompt chunk, runs as kiln_attention's
 * causal blocked forward: a task is BLK of its queries of one head,
 * gathered from q's rows, over the keys up to the run's last position,
 * transposed once per (run, kv head); one query a task over untransposed
 * keys took 6x longer on a 256-token prompt. Every other row is a task
 * per (row, kv head), as a decoding step's group of heads (and every row
 * is, with a window). */

#define ROWS_RUN_MIN 8

/* A task: rows [r0, r0 + len) of a run, queries [i0, i0 + BLK) of query
 * head h, its keys transposed at kt[kt_at]; or len 0: row r0, kv head h. */
typedef struct FA_FN(rows_task) {
    int64_t r0, len, h, i0, kt_at;
} FA_FN(rows_task);

typedef struct FA_FN(rows_job) {
    const kiln_attn_geom *g;
    const FA_OPS *ops;
    const FA_T *q, *k, *v;
    FA_T *o, *kt, *work;
    const int32_t *seq, *pos;
    int64_t window, group, n_runs;
    size_t work_len;
    FA_FN(rows_task) *task, *runs; /* runs: one per (long run, kv head), h the kv head */
} FA_FN(rows_job);

/* (run, kv head) [r0, r1): its keys 0 .. last transposed, [D, last + 1] */
static void FA_FN(rows_transpose)(void *arg, int64_t r0, int64_t r1, int tid) {
    const FA_FN(rows_job) *j = arg;
    const kiln_attn_geom *g = j->g;
    (void)tid;
    for (int64_t r = r0; r < r1; r++) {
        const FA_FN(rows_task) *u = &j->runs[r];
        int64_t s = j->pos[u->r0 + u->len - 1] + 1, at = (j->seq[u->r0] * g->hkv + u->h) * g->s;
        FA_FN(transpose)(j->k + at * g->d, g->d, j->kt + u->kt_at, s, s, g->d);
    }
}

static void FA_FN(rows_tasks)(void *arg, int64_t t0, int64_t t1, int tid) {
    const FA_FN(rows_job) *j = arg;
    const kiln_attn_geom *g = j->g;
    const int64_t group = j->group, d = g->d, dv = g->dv;
    FA_T *w = j->work + (size_t)tid * j->work_len, *qi = w + j->work_len - BLK * (d + dv + 1), *oi = qi + BLK * d;
    FA_T *lse = oi + BLK * dv;
    for (int64_t it = t0; it < t1; it++) {
        const FA_FN(rows_task) *u = &j->task[it];
        kiln_attn_geom rg = *g;
        if (u->len) { /* queries i0.. of head h of a run, causal over its keys */
            int64_t br = u->len - u->i0 < BLK ? u->len - u->i0 : BLK, kv = u->h / group;
            rg.t = u->len, rg.s = j->pos[u->r0 + u->len - 1] + 1, rg.causal = true;
            for (int64_t r = 0; r < br; r++)
                memcpy(qi + r * d, j->q + ((u->r0 + u->i0 + r) * g->hq + u->h) * d, (size_t)d * sizeof *qi);
            FA_FN(fwd_block)(&rg, j->ops, qi, j->kt + u->kt_at, NULL, j->v + (j->seq[u->r0] * g->hkv + kv) * g->s * dv,
                             oi, lse, u->i0, br, w);
            for (int64_t r = 0; r < br; r++)
                memcpy(j->o + ((u->r0 + u->i0 + r) * g->hq + u->h) * dv, oi + r * dv, (size_t)dv * sizeof *oi);
            continue;
        }
        int64_t i = u->r0, last = j->pos[i] + 1, first = j->window > 0 && last > j->window ? last - j->window : 0;
        rg.t = 1, rg.s = last - first, rg.causal = false;
        int64_t at = (j->seq[i] * g->hkv + u->h) * g->s + first;
        for (int64_t h0 = 0; h0 < group; h0 += BLK) { /* the group's query heads, BLK at a time */
            int64_t br = group - h0 < BLK ? group - h0 : BLK, row = i * g->hq + u->h * group + h0;
            FA_FN(fwd_block)(&rg, j->ops, j->q + row * d, NULL, j->k + at * d, j->v + at * dv, j->o + row * dv, lse,
                             0, br, w);
        }
    }
}

kiln_status FA_FN(kiln__flash_rows)(const kiln_attn_geom *g, const FA_OPS *ops, const FA_T *q, const FA_T *k,
                                    const FA_T *v, const int32_t *seq, const int32_t *pos, int64_t window, FA_T *o) {
    const int64_t n = g->t, group = g->hq / g->hkv;
    if (n == 0) return KILN_OK;
    FA_FN(rows_job) j = {.g = g, .ops = ops, .q = q, .k = k, .v = v, .o = o, .seq = seq, .pos = pos,
                         .window = window, .group = group};
    /* at most a task per (row, query head); runs and transposed keys counted first */
    int64_t n_tasks = 0, kt_len = 0;
    double flops = 0;
    j.task = kiln__malloc((size_t)(n * g->hq + n * g->hkv) * sizeof *j.task);
    j.runs = j.task ? j.task + n * g->hq : NULL;
    for (int64_t r0 = 0, len; j.task && r0 < n; r0 += len) {
        for (len = 1; r0 + len < n && seq[r0 + len] == seq[r0] && pos[r0 + len] == pos[r0 + len - 1] + 1; len++) {}
        int64_t s = pos[r0 + len - 1] + 1;
        flops += 2.0 * (double)(len * g->hq) * (double)s * (double)(g->d + g->dv);
        if (len >= ROWS_RUN_MIN && window == 0) {
            for (int64_t kv = 0; kv < g->hkv; kv++, kt_len += s * g->d)
                j.runs[j.n_runs++] = (FA_FN(rows_task)){r0, len, kv, 0, kt_len};
            for (int64_t h = 0; h < g->hq; h++)
                for (int64_t i0 = 0; i0 < len; i0 += BLK)
                    j.task[n_tasks++] = (FA_FN(rows_task)){r0, len, h, i0, j.runs[j.n_runs - g->hkv + h / group].kt_at};
        } else {
            for (int64_t i = r0; i < r0 + len; i++)
                for (int64_t kv = 0; kv < g->hkv; kv++) j.task[n_tasks++] = (FA_FN(rows_task)){i, 0, kv, 0, 0};
        }
    }
    const int nt = flops > 4e6 && n_tasks > 1 ? g->n_threads : 1;
    int64_t br = group < BLK ? group : BLK;
    j.work_len = (size_t)(BLK * BLK + BLK * g->dv + 2 * BLK + (BLK + g->d) * br + BLK * (g->d + g->dv + 1));
    j.work = j.task ? kiln__malloc((size_t)nt * j.work_len * sizeof *j.work) : NULL;
    j.kt = kt_len ? kiln__malloc((size_t)kt_len * sizeof *j.kt) : NULL;
    if (!j.task || !j.work || (kt_len && !j.kt)) {
        free(j.task), free(j.work), free(j.kt);
        return kiln__errs(KILN_ERR_OOM, "attention_cached: out of memory for %lld rows' tasks and keys", (long long)n);
    }
    if (j.n_runs) kiln__pool_for(j.n_runs, 1, nt, FA_FN(rows_transpose), &j);
    kiln__pool_for(n_tasks, 1, nt, FA_FN(rows_tasks), &j);
    free(j.task), free(j.work), free(j.kt);
    return KILN_OK;
}

#undef ROWS_RUN_MIN
