/* cu_chain.c — KILN_FUSE_CHAIN on the CUDA backend: a chain of f32 or f64
 * element-wise nodes (core/fuse.c) as one kernel (k_elementwise.cu's
 * chain_k) that reads each input once and writes only the last node; the
 * program (core/chain_prog.c) travels in the launch's parameters. A chain
 * with more inputs or steps than a program holds runs as pieces, each
 * ending in a scratch buffer the next piece reads. */
#include "cu.h"

static kiln_status piece(kiln_cu *cu, const kiln_chain_prog *p, kiln_dtype dt, void *y) {
    cu_chain c = {.dt = kiln__cu_dtype(dt), .n_in = p->n_in, .n_steps = p->n_steps, .n = p->n, .c = p->c,
                  .inner = p->inner, .chans = p->chans};
    for (int k = 0; k < p->n_in; k++) {
        kiln_fuse_operand kind = p->in[k].kind;
        c.in[k] = kiln__cu_ptr(p->in[k].t);
        c.kind[k] = kind == KILN_OPND_SCALAR ? 1 : kind == KILN_OPND_ROW ? 2 : kind == KILN_OPND_CHAN ? 3 : 0;
    }
    for (int s = 0; s < p->n_steps; s++) {
        const kiln_chain_step *st = &p->step[s];
        bool binary = st->op >= KILN_OP_ADD;
        c.op[s] = binary ? 32 + (int)(st->op - KILN_OP_ADD) : (int)(st->op - KILN_OP_NEG);
        c.a[s] = (signed char)st->a, c.b[s] = (signed char)st->b, c.cmp[s] = (signed char)st->cmp;
        c.p[s] = st->p;
    }
    return kiln__cu_launched(kiln__cu_chain(cu->stream, &c, y), "chain kernel");
}

kiln_status kiln__cu_chain_record(kiln_cu *cu, kiln_tensor *const *nodes, int n) {
    const kiln_tensor *last = nodes[n - 1];
    kiln_tensor ping[2]; /* the pieces' results in turn: their dbuf is all the kernels read */
    kiln_devbuf *buf[2] = {NULL, NULL};
    kiln_status s = KILN_OK;
    kiln_chain_prog p;
    for (int at = 0, np = 0; at < n && !s; np++) {
        const kiln_tensor *prev = np ? &ping[(np - 1) & 1] : NULL;
        at = kiln__chain_compile(nodes, n, at, prev, CU_CHAIN_IN, CU_CHAIN_STEPS, &p);
        if (at == n) {
            s = piece(cu, &p, last->dtype, kiln__cu_ptr(last));
            break;
        }
        kiln_tensor *out = &ping[np & 1];
        if (!buf[np & 1] && !(buf[np & 1] = kiln__cu_buffer_new(cu, (size_t)p.n * kiln__types[last->dtype].size, false))) {
            s = kiln_last_status() ? kiln_last_status() : KILN_ERR_OOM;
            break;
        }
        *out = (kiln_tensor){.dtype = last->dtype, .dbuf = buf[np & 1]};
        s = piece(cu, &p, last->dtype, kiln__cu_ptr(out));
    }
    /* their next users are queued after the chain (one stream) */
    kiln__cu_buffer_free(cu, buf[0]);
    kiln__cu_buffer_free(cu, buf[1]);
    return s;
}
