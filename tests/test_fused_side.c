/* test_fused_side.c — a chain with a side link (KILN_FUSE_SIDE): a
 * residual gradient's add after a link, the ReLU's mask beside it, the mul
 * reading both, then links after it with a per-channel operand, gives the
 * bytes of running each node alone ($KILN_FUSE=0): f32 and f64, tiles of
 * several planes, of one plane larger than a tile, one and two threads,
 * every SIMD level. */
#include "test_mov_util.h"

#include "../core/graph.h"
#include "kt_simd.h"

#include <stdlib.h>

/* (2a + b) * (relu(x) != 0) * 0.5 - bias into out; *side: the add, the
 * cmp and the mul ran in one chain (of six, from the scale). */
static void run(bool fuse, kiln_dtype dt, const int64_t *shape, double *out, bool *side) {
    setenv("KILN_FUSE", fuse ? "1" : "0", 1);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_scale(ctx, kiln_contiguous(ctx, mt_leaf(ctx, dt, 4, shape, 1)), 2.0);
    kiln_tensor *b = mt_leaf(ctx, dt, 4, shape, 2);
    kiln_tensor *y = kiln_relu(ctx, mt_leaf(ctx, dt, 4, shape, 3));
    kiln_tensor *bias = mt_leaf(ctx, dt, 4, (int64_t[]){1, shape[1], 1, 1}, 4);
    kiln_tensor *sum = kiln_add(ctx, a, b), *mask = kiln_cmp(ctx, y, kiln_scalar(ctx, dt, 0.0), KILN_CMP_NE);
    kiln_tensor *h = kiln_sub(ctx, kiln_scale(ctx, kiln_mul(ctx, sum, mask), 0.5), bias);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y)); /* the forward's ReLU, computed before */
    KT_OK(kiln_graph_add(g, h));
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_tensor_get_f64(h, out, kiln_tensor_numel(h)));
    *side = false;
    for (int i = 1; i + 2 < g->n; i++)
        *side |= g->nodes[i] == sum && g->nodes[i + 1] == mask && g->chain_end[i - 1] == g->chain_end[i + 2] &&
                 g->chain_end[i] == i + 4;
    kiln_ctx_free(ctx);
}

KT_TEST(fused_side_link_matches_unfused) {
    /* planes of 35 elements (many per tile), 117 (a last tile of 5 of 40 channels), 4900 (more than a tile) */
    const int64_t shapes[][4] = {{2, 3, 5, 7}, {3, 40, 9, 13}, {2, 3, 70, 70}};
    int threads = kiln_get_threads();
    KT_FOR_EACH_SIMD(simd) {
        for (int v = 0; v < 12; v++) {
            int t = 1 + v % 2, s = v / 2 % 3;
            kiln_dtype dt = v < 6 ? KILN_F32 : KILN_F64;
            KT_OK(kiln_set_threads(t));
            int64_t n = kiln__numel(4, shapes[s]);
            double *f = malloc((size_t)n * sizeof *f), *u = malloc((size_t)n * sizeof *u);
            KT_REQUIRE(f && u, "out of memory");
            bool fused, apart;
            run(true, dt, shapes[s], f, &fused);
            run(false, dt, shapes[s], u, &apart);
            KT_CHECK(fused && !apart, "%s case %d: side link fused %d (KILN_FUSE=0: %d)", simd.name, v, fused, apart);
            KT_CHECK(!memcmp(f, u, (size_t)n * sizeof *f), "%s case %d (shape %d, %d threads): fused values differ",
                     simd.name, v, s, t);
            free(f), free(u);
        }
    }
    KT_OK(kiln_set_threads(threads));
}
