/* chain_prog.c — a fused element-wise chain (core/fuse.c) as a small
 * program for the device backends' chain kernels (backend.h says what
 * the program holds). The kernels run one element per thread: they load
 * each input once at the element's index for its kind, then run the steps
 * in order, each reading the previous step's value or an input. */
#include "backend.h"

/* Input slot of external operand s (added when new), or -1 when the
 * segment has no room for it. */
static int input_slot(kiln_chain_prog *p, const kiln_tensor *s, const kiln_tensor *t, int max_in) {
    for (int k = 0; k < p->n_in; k++)
        if (p->in[k].t == s) return k;
    if (p->n_in == max_in) return -1;
    p->in[p->n_in] = (kiln_chain_input){s, kiln__fuse_operand(s, t)};
    return p->n_in++;
}

int kiln__chain_compile(kiln_tensor *const *nodes, int n, int at, const kiln_tensor *prev, int max_in, int max_steps,
                        kiln_chain_prog *p) {
    const kiln_tensor *last = nodes[n - 1];
    memset(p, 0, sizeof *p);
    p->n = kiln_tensor_numel(last);
    p->c = last->shape[last->ndim - 1];
    p->chans = last->ndim >= 3 ? last->shape[1] : 1;
    p->inner = last->ndim >= 3 ? p->n / last->shape[0] / p->chans : 1;
    if (max_in > KILN_CHAIN_MAX_IN) max_in = KILN_CHAIN_MAX_IN;
    if (max_steps > KILN_CHAIN_MAX_STEPS) max_steps = KILN_CHAIN_MAX_STEPS;
    /* a later segment starts from the earlier one's result, an input of the node's shape */
    if (prev) p->in[p->n_in++] = (kiln_chain_input){prev, KILN_OPND_FULL};
    int i = at;
    for (; i < n && p->n_steps < max_steps; i++) {
        const kiln_tensor *t = nodes[i];
        kiln_chain_prog saved = *p; /* undone when the node's inputs do not fit */
        kiln_chain_step st = {.op = t->op, .cmp = t->op == KILN_OP_CMP ? (int)t->ip[0] : 0, .p = t->fp[0], .b = -1};
        bool fits = true;
        for (int k = 0; k < t->nsrc && fits; k++) {
            const kiln_tensor *s = t->src[k];
            int ref = i > at && s == nodes[i - 1] ? 0 : i == at && prev && s == nodes[i - 1] ? 1 : -1;
            if (ref < 0) {
                int slot = input_slot(p, s, t, max_in);
                fits = slot >= 0;
                ref = 1 + slot;
            }
            *(k == 0 ? &st.a : &st.b) = ref;
        }
        if (!fits) {
            *p = saved;
            break;
        }
        p->step[p->n_steps++] = st;
    }
    return i;
}
