/* test_fused_chan.c — element-wise chains with a per-channel operand
 * ([1, C, 1, 1], a convolution's bias; backends/cpu/fused.c OPND_CHAN) give
 * the bytes of running each node alone ($KILN_FUSE=0): tiles of several
 * planes, of one plane larger than a tile, a last tile with fewer channels,
 * a broadcast row in the same chain, one and two threads. */
#include "test_mov_util.h"

#include "../core/graph.h"

#include <stdlib.h>

/* relu(x + bias) * row - bias, written to out; *fused counts chain nodes
 * other than the last. */
static void run(bool fuse, const int64_t *shape, float *out, int *fused) {
    setenv("KILN_FUSE", fuse ? "1" : "0", 1);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = mt_leaf(ctx, KILN_F32, 4, shape, 1);
    kiln_tensor *bias = mt_leaf(ctx, KILN_F32, 4, (int64_t[]){1, shape[1], 1, 1}, 2);
    kiln_tensor *row = mt_leaf(ctx, KILN_F32, 1, &shape[3], 3);
    kiln_tensor *h = kiln_relu(ctx, kiln_add(ctx, kiln_contiguous(ctx, x), bias));
    h = kiln_sub(ctx, kiln_mul(ctx, h, row), bias);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, h));
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_tensor_get_f32(h, out, kiln_tensor_numel(h)));
    *fused = 0;
    for (int i = 0; i < g->n; i++) *fused += g->chain_end[i] != i;
    kiln_ctx_free(ctx);
}

KT_TEST(fused_chan_matches_unfused) {
    /* planes of 35 elements (many per tile), 117 (a last tile of 5 of 40
     * channels), 4900 (one plane, more than a tile) */
    const int64_t shapes[][4] = {{2, 3, 5, 7}, {3, 40, 9, 13}, {2, 3, 70, 70}};
    for (int t = 1; t <= 2; t++) {
        kiln_set_threads(t);
        for (int s = 0; s < 3; s++) {
            int64_t n = kiln__numel(4, shapes[s]);
            float *f = malloc((size_t)n * sizeof *f), *u = malloc((size_t)n * sizeof *u);
            KT_REQUIRE(f && u, "out of memory");
            int nf, nu;
            run(true, shapes[s], f, &nf);
            run(false, shapes[s], u, &nu);
            KT_CHECK(nf == 3 && nu == 0, "shape %d: %d nodes fused (KILN_FUSE=0: %d), want add, relu, mul before sub", s,
                     nf, nu);
            KT_CHECK(!memcmp(f, u, (size_t)n * sizeof *f), "shape %d threads %d: fused values differ", s, t);
            free(f), free(u);
        }
    }
}
