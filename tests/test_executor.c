/* test_executor.c — the one executor (core/graph_exec.c) and the rewrite
 * (core/fuse.c) on a backend of the test's own: a device backend whose
 * "device" memory is host memory and whose kernels are the CPU backend's,
 * called through its vtable on shadows of the nodes. It claims the fused
 * forms it is told to, refuses the ops it is told to; a training graph
 * (two linear layers, an element-wise chain, weight gradients) then runs
 * on it as on the CPU: the same bits where the fused steps are the same,
 * chains and products adding into gradients only where it claims them,
 * refused nodes on the host with their operands copied across. */
#include "kt.h"

#include "../core/graph.h"

#include <math.h>
#include <stdlib.h>

#define HEAD 64    /* bytes before a buffer's data: its size, and 64-byte alignment */
#define MAX_CHAIN 16

typedef struct mock {
    kiln_backend base;
    kiln_backend_vt vt;
    bool refuse[KILN_OP_COUNT];
    int computes, chains, accumulates;
} mock;

static kiln_backend *cpu(void) { return kiln_backend_get("cpu"); }
static char *bytes(kiln_devbuf *d) { return (char *)d + HEAD; }

static kiln_devbuf *m_alloc(kiln_backend *b, size_t n) {
    (void)b;
    n = (n + 63) / 64 * 64;
    char *p = aligned_alloc(64, HEAD + n);
    if (!p) return kiln__err(KILN_ERR_OOM, "mock: out of memory");
    memset(p, 0, HEAD + n);
    memcpy(p, &n, sizeof n);
    return (kiln_devbuf *)p;
}
static void m_free(kiln_backend *b, kiln_devbuf *d) {
    (void)b;
    free(d);
}
static kiln_status m_upload(kiln_backend *b, kiln_devbuf *d, size_t off, const void *src, size_t n) {
    (void)b;
    memcpy(bytes(d) + off, src, n);
    return KILN_OK;
}
static kiln_status m_download(kiln_backend *b, kiln_devbuf *d, size_t off, void *dst, size_t n) {
    (void)b;
    memcpy(dst, bytes(d) + off, n);
    return KILN_OK;
}
static kiln_status m_zero(kiln_backend *b, kiln_devbuf *d, size_t off, size_t n) {
    (void)b;
    memset(bytes(d) + off, 0, n);
    return KILN_OK;
}
static bool m_supports(kiln_backend *b, const kiln_tensor *t) { return !((mock *)b)->refuse[t->op]; }

/* t as the CPU kernels see it, with its bytes at its device place */
static void shadow(kiln_tensor *sh, const kiln_tensor *t) {
    *sh = *t;
    sh->data = bytes(t->dbuf) + t->doff;
}

static kiln_status m_compute(kiln_backend *b, kiln_tensor *t, const kiln_exec *ex) {
    mock *m = (mock *)b;
    m->computes++;
    m->accumulates += ex->accumulate;
    kiln_tensor sh, srcs[KILN_MAX_SRC];
    shadow(&sh, t);
    for (int k = 0; k < t->nsrc; k++) {
        shadow(&srcs[k], t->src[k]);
        sh.src[k] = &srcs[k];
    }
    return cpu()->vt->compute(cpu(), &sh, ex);
}

static kiln_status m_chain(kiln_backend *b, kiln_tensor *const *nodes, int n, const kiln_exec *ex) {
    ((mock *)b)->chains++;
    if (n > MAX_CHAIN) return kiln__errs(KILN_ERR_UNSUPPORTED, "mock: a chain of %d nodes", n);
    kiln_tensor sh[MAX_CHAIN], srcs[MAX_CHAIN][KILN_MAX_SRC], *list[MAX_CHAIN];
    for (int j = 0; j < n; j++) {
        shadow(&sh[j], nodes[j]);
        for (int k = 0; k < nodes[j]->nsrc; k++) {
            if (j > 0 && nodes[j]->src[k] == nodes[j - 1]) {
                sh[j].src[k] = &sh[j - 1]; /* the link the chain kernel follows */
                continue;
            }
            shadow(&srcs[j][k], nodes[j]->src[k]);
            sh[j].src[k] = &srcs[j][k];
        }
        list[j] = &sh[j];
    }
    return cpu()->vt->compute_chain(cpu(), list, n, ex);
}

static void mock_init(mock *m, unsigned fuses) {
    memset(m, 0, sizeof *m);
    m->vt = (kiln_backend_vt){.supports = m_supports, .alloc = m_alloc, .free = m_free, .upload = m_upload,
                              .download = m_download, .zero = m_zero, .compute = m_compute, .fuses = fuses,
                              .compute_chain = m_chain};
    m->base.name = "mock";
    m->base.vt = &m->vt;
}

#define NW1 (32 * 16)
#define NW2 (4 * 32)

typedef struct result {
    float loss, gw1[NW1], gb1[32], gw2[NW2];
    int in_chains, adding; /* nodes in fused chains; products adding into a gradient */
    bool chain_refused;    /* a node of a chain is one the backend refuses */
    kiln_graph_stats stats;
} result;

/* Two linear layers with tanh(relu(.)) * 0.5 + 0.25 between them (an
 * element-wise chain from the bias add), mean of squares; forward and
 * backward computed twice, gradients zeroed between. b NULL: the CPU. */
static void train(kiln_backend *b, bool fuse, result *r) {
    setenv("KILN_FUSE", fuse ? "1" : "0", 1);
    memset(r, 0, sizeof *r);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 8, 16);
    kiln_tensor *w1 = kiln_param(ctx, "w1", KILN_F32, 2, (int64_t[]){32, 16});
    kiln_tensor *b1 = kiln_param(ctx, "b1", KILN_F32, 1, (int64_t[]){32});
    kiln_tensor *w2 = kiln_param(ctx, "w2", KILN_F32, 2, (int64_t[]){4, 32});
    KT_OK(kiln_tensor_fill_randn(x, 1, 0, 1));
    KT_OK(kiln_tensor_fill_randn(w1, 2, 0, 0.5));
    KT_OK(kiln_tensor_fill_randn(b1, 3, 0, 0.5));
    KT_OK(kiln_tensor_fill_randn(w2, 4, 0, 0.5));
    kiln_tensor *h = kiln_add_scalar(ctx, kiln_scale(ctx, kiln_tanh(ctx, kiln_relu(ctx, kiln_linear(ctx, x, w1, b1))), 0.5),
                                     0.25);
    kiln_tensor *y = kiln_linear(ctx, h, w2, NULL);
    kiln_tensor *loss = kiln_mean_all(ctx, kiln_mul(ctx, y, y));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_NOTNULL(loss);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    if (b) KT_OK(kiln_graph_set_backend(g, b));
    for (int rep = 0; rep < 2; rep++) {
        kiln_zero_grad(ctx);
        KT_OK(kiln_graph_compute(g));
    }
    r->loss = kiln_tensor_item(loss);
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(w1), r->gw1, NW1));
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(b1), r->gb1, 32));
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(w2), r->gw2, NW2));
    for (int i = 0; i < g->n; i++) {
        bool in_chain = g->chain_end[i] != i || (i > 0 && g->chain_end[i - 1] == i);
        r->in_chains += in_chain;
        r->adding += g->acc_node[i] >= 0;
        if (in_chain && b && !b->vt->supports(b, g->nodes[i])) r->chain_refused = true;
    }
    r->stats = kiln_graph_get_stats(g);
    kiln_ctx_free(ctx);
    unsetenv("KILN_FUSE");
}

static bool same_bits(const result *a, const result *b) {
    return !memcmp(&a->loss, &b->loss, sizeof a->loss) && !memcmp(a->gw1, b->gw1, sizeof a->gw1) &&
           !memcmp(a->gb1, b->gb1, sizeof a->gb1) && !memcmp(a->gw2, b->gw2, sizeof a->gw2);
}

static double max_rel_diff(const float *a, const float *b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / (1e-6 + fabs((double)b[i]));
        if (e > d) d = e;
    }
    return d;
}

/* A device backend claiming both fused forms gets the CPU's fused steps:
 * chains and products adding into gradients run on it, every node on it,
 * and the bits are the CPU's. */
KT_TEST(executor_device_runs_the_fused_forms_it_claims) {
    static mock m;
    static result on_cpu, on_mock;
    mock_init(&m, KILN_FUSE_CHAIN | KILN_FUSE_ACC);
    train(NULL, true, &on_cpu);
    train(&m.base, true, &on_mock);
    KT_CHECK(on_cpu.in_chains >= 5 && on_cpu.adding == 2, "the CPU fused %d chain nodes, %d products", on_cpu.in_chains,
             on_cpu.adding);
    KT_CHECK(on_mock.in_chains == on_cpu.in_chains && on_mock.adding == on_cpu.adding,
             "on the device %d chain nodes and %d products adding into gradients, on the CPU %d and %d",
             on_mock.in_chains, on_mock.adding, on_cpu.in_chains, on_cpu.adding);
    KT_CHECK(m.chains > 0 && m.accumulates == 2 * on_mock.adding, "the device ran %d chains, %d products adding",
             m.chains, m.accumulates);
    KT_CHECK(on_mock.stats.nodes_fallback == 0 && on_mock.stats.uploads > 0, "%lld nodes fell back, %lld uploads",
             (long long)on_mock.stats.nodes_fallback, (long long)on_mock.stats.uploads);
    KT_CHECK(same_bits(&on_mock, &on_cpu), "loss %.9g on the device, %.9g on the CPU", (double)on_mock.loss,
             (double)on_cpu.loss);
}

/* A backend that claims no fused form gets every node alone, the bits of
 * the CPU's under $KILN_FUSE=0. */
KT_TEST(executor_device_claiming_no_fused_form_runs_nodes_alone) {
    static mock m;
    static result on_cpu, on_mock;
    mock_init(&m, 0);
    train(NULL, false, &on_cpu);
    train(&m.base, true, &on_mock);
    KT_CHECK(on_mock.in_chains == 0 && on_mock.adding == 0 && m.chains == 0 && m.accumulates == 0,
             "%d chain nodes, %d products adding into gradients; %d chains, %d adding products run",
             on_mock.in_chains, on_mock.adding, m.chains, m.accumulates);
    KT_CHECK(on_mock.stats.nodes_on_backend == m.computes && on_mock.stats.nodes_fallback == 0,
             "%lld nodes counted on the device, %d computed there, %lld fell back",
             (long long)on_mock.stats.nodes_on_backend, m.computes, (long long)on_mock.stats.nodes_fallback);
    KT_CHECK(same_bits(&on_mock, &on_cpu), "loss %.9g on the device, %.9g on the CPU", (double)on_mock.loss,
             (double)on_cpu.loss);
}

/* Nodes the backend refuses run on the host backend, their operands
 * copied across both ways, and no fused step holds one: relu (inside
 * what would be the chain) and the loss's sum. */
KT_TEST(executor_refused_nodes_fall_back_to_the_host) {
    static mock m;
    static result on_cpu, on_mock;
    mock_init(&m, KILN_FUSE_CHAIN | KILN_FUSE_ACC);
    m.refuse[KILN_OP_RELU] = m.refuse[KILN_OP_SUM] = true;
    train(NULL, false, &on_cpu);
    train(&m.base, true, &on_mock);
    KT_CHECK(!on_mock.chain_refused && on_mock.in_chains >= 3 && on_mock.adding == 2,
             "%d chain nodes (a refused one among them: %d), %d products adding into gradients", on_mock.in_chains,
             on_mock.chain_refused, on_mock.adding);
    KT_CHECK(on_mock.stats.nodes_fallback >= 4 && on_mock.stats.downloads > 0 && on_mock.stats.uploads > 0,
             "%lld nodes fell back, %lld downloads, %lld uploads", (long long)on_mock.stats.nodes_fallback,
             (long long)on_mock.stats.downloads, (long long)on_mock.stats.uploads);
    /* chains cut elsewhere than the CPU's: values, not bits */
    double d = fmax(max_rel_diff(on_mock.gw1, on_cpu.gw1, NW1), max_rel_diff(on_mock.gw2, on_cpu.gw2, NW2));
    d = fmax(d, fmax(max_rel_diff(on_mock.gb1, on_cpu.gb1, 32), max_rel_diff(&on_mock.loss, &on_cpu.loss, 1)));
    KT_CHECK(d < 1e-5, "the device's gradients and loss differ from the CPU's by %.3g (relative)", d);
}
