/* test_ctx_mark.c — kiln_ctx_get_mark / kiln_ctx_rewind: what was made
 * after the mark is freed (the context's storage and tensor count go back),
 * what was made before keeps its values, an in-place write into an older
 * leaf stays, and a context that got parameters since is refused. */
#include "kt.h"

KT_TEST(ctx_rewind_frees_what_came_after_the_mark) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_new_1d(ctx, KILN_F32, 4), *acc = kiln_new_1d(ctx, KILN_F32, 4);
    KT_OK(kiln_tensor_set_f32(a, (float[]){1, 2, 3, 4}, 4));
    size_t before = kiln_ctx_storage_bytes(ctx);
    for (int step = 0; step < 3; step++) {
        kiln_ctx_mark mark = kiln_ctx_get_mark(ctx);
        kiln_tensor *big = kiln_new_2d(ctx, KILN_F32, 256, 256); /* storage and a node after the mark */
        KT_NOTNULL(big);
        kiln_tensor *y = kiln_slice_assign(ctx, acc, kiln_add(ctx, acc, a), 0, 0);
        kiln_graph *g = kiln_graph_new(ctx);
        KT_OK(kiln_graph_add(g, y));
        KT_OK(kiln_graph_compute(g));
        KT_CHECK(kiln_ctx_storage_bytes(ctx) > before, "storage grew");
        KT_OK(kiln_ctx_rewind(ctx, mark));
        KT_CHECK(kiln_ctx_storage_bytes(ctx) == before, "step %d: storage %zu, was %zu", step,
                 kiln_ctx_storage_bytes(ctx), before);
    }
    float v[4];
    KT_OK(kiln_tensor_get_f32(acc, v, 4)); /* three in-place additions into the older leaf */
    KT_CHECK(v[0] == 3 && v[3] == 12, "acc = %g .. %g", v[0], v[3]);
    kiln_ctx_mark mark = kiln_ctx_get_mark(ctx);
    KT_NOTNULL(kiln_param(ctx, "w", KILN_F32, 1, (int64_t[]){4}));
    KT_CHECK(kiln_ctx_rewind(ctx, mark) == KILN_ERR_STATE, "a new parameter is refused");
    kiln_ctx_free(ctx);
}
