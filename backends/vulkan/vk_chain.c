/* vk_chain.c — KILN_FUSE_CHAIN on the Vulkan backend: a chain of f32
 * element-wise nodes (core/fuse.c) runs as one ew_chain dispatch that
 * reads each input once and writes only the last node; the steps are a
 * program (core/chain_prog.c) written into scratch, so one shader, built
 * at build time, runs every chain. A chain with more than six inputs (the
 * bindings left beside the program and the output) runs as pieces, each
 * ending in a scratch tensor the next piece reads. */
#include "vk.h"

#define CHAIN_IN 6 /* bindings 1..6 */

typedef struct chain_pc {
    uint32_t n, y0, n_in, n_steps, kinds, c, mc, lc, inner, mi, li, chans, mh, lh, s0;
    uint32_t base[CHAIN_IN];
} chain_pc;
_Static_assert(sizeof(chain_pc) <= KILN_VK_MAX_PUSH, "ew_chain's push constants");

static uint32_t step_code(const kiln_chain_step *st) {
    bool binary = st->op >= KILN_OP_ADD;
    uint32_t op = (uint32_t)(st->op - (binary ? KILN_OP_ADD : KILN_OP_NEG));
    return op | (uint32_t)st->a << 8 | (uint32_t)(st->b < 0 ? 0 : st->b) << 12 | (uint32_t)st->cmp << 16 |
           (uint32_t)binary << 20;
}

static kiln_status piece(kiln_vk *vk, const kiln_chain_prog *p, const kiln_tensor *prog, uint32_t s0,
                         const kiln_tensor *y) {
    chain_pc pc = {.n = (uint32_t)p->n, .y0 = kiln__vk_base(vk, y), .n_in = (uint32_t)p->n_in,
                   .n_steps = (uint32_t)p->n_steps, .c = (uint32_t)p->c, .inner = (uint32_t)p->inner,
                   .chans = (uint32_t)p->chans, .s0 = s0};
    kiln__vk_magic(pc.c, &pc.mc, &pc.lc);
    kiln__vk_magic(pc.inner, &pc.mi, &pc.li);
    kiln__vk_magic(pc.chans, &pc.mh, &pc.lh);
    kiln_vk_dispatch d = {.shader = "ew_chain", .n = 2 + CHAIN_IN, .push = &pc, .push_size = sizeof pc};
    d.bind[0] = prog;
    for (int k = 0; k < CHAIN_IN; k++) {
        const kiln_chain_input *in = &p->in[k];
        d.bind[1 + k] = k < p->n_in ? in->t : y; /* unused slots: any bound tensor */
        if (k >= p->n_in) continue;
        pc.base[k] = kiln__vk_base(vk, in->t);
        uint32_t kind = in->kind == KILN_OPND_SCALAR ? 1 : in->kind == KILN_OPND_ROW ? 2 : in->kind == KILN_OPND_CHAN ? 3 : 0;
        pc.kinds |= kind << (2 * k);
    }
    d.bind[1 + CHAIN_IN] = y;
    kiln__vk_groups_1d(vk, p->n, 256, d.groups);
    return kiln__vk_dispatch(vk, &d);
}

kiln_status kiln__vk_chain_record(kiln_vk *vk, kiln_tensor *const *nodes, int n) {
    const kiln_tensor *last = nodes[n - 1];
    kiln_chain_prog *progs = kiln__calloc((size_t)n, sizeof *progs);
    uint32_t *words = kiln__calloc((size_t)n * 2, sizeof *words); /* two a step, one step a node */
    if (!progs || !words) {
        free(progs), free(words);
        return kiln__errs(KILN_ERR_OOM, "vulkan: out of memory for a chain of %d nodes", n);
    }
    /* pieces, their results in ping[0], ping[1] in turn (filled once scratch is taken) */
    kiln_tensor ping[2];
    int np = 0, steps = 0;
    for (int at = 0; at < n; np++) {
        at = kiln__chain_compile(nodes, n, at, np ? &ping[(np - 1) & 1] : NULL, CHAIN_IN, KILN_CHAIN_MAX_STEPS, &progs[np]);
        for (int s = 0; s < progs[np].n_steps; s++, steps++) {
            words[2 * steps] = step_code(&progs[np].step[s]);
            float f = (float)progs[np].step[s].p;
            memcpy(&words[2 * steps + 1], &f, 4);
        }
    }
    /* all of the node's scratch in one call: the program, then the pieces' results */
    kiln_tensor sc[3];
    int64_t len[3] = {2 * steps, progs[0].n, progs[0].n};
    kiln_dtype dt[3] = {KILN_I32, KILN_F32, KILN_F32};
    int k = np == 1 ? 1 : np == 2 ? 2 : 3;
    kiln_status s = kiln__vk_scratch_n(vk, k, len, dt, sc);
    if (!s) s = kiln__vk_write(vk, &sc[0], words, (size_t)steps * 8);
    for (int i = 1; i < k; i++) ping[i - 1] = sc[i];
    for (int i = 0, s0 = 0; i < np && !s; s0 += progs[i].n_steps, i++)
        s = piece(vk, &progs[i], &sc[0], (uint32_t)s0, i == np - 1 ? last : &ping[i & 1]);
    free(progs), free(words);
    return s;
}
