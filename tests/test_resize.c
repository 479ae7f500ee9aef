/* test_resize.c — kiln_adaptive_avg_pool2d and kiln_upsample: values and
 * gradients against PyTorch (F.adaptive_avg_pool2d, F.interpolate nearest
 * and bilinear, by size and by scale, align_corners), gradient checks,
 * errors. */
#include "test_nn_util.h"

static const char *const RESIZE = "tests/fixtures/resize.txt";

static kiln_tensor *build_pool_fixture(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    return kiln_adaptive_avg_pool2d(ctx, in[0], (int64_t)fx_param(c, "oh", 0), (int64_t)fx_param(c, "ow", 0));
}

static kiln_upsample_params fx_upsample(const fx_case *c) {
    double s = fx_param(c, "scale", 0);
    return (kiln_upsample_params){.size = {(int64_t)fx_param(c, "oh", 0), (int64_t)fx_param(c, "ow", 0)},
                                  .scale = {s, s},
                                  .mode = fx_param(c, "bilinear", 0) ? KILN_UPSAMPLE_BILINEAR : KILN_UPSAMPLE_NEAREST,
                                  .align_corners = fx_param(c, "align_corners", 0) != 0};
}

static kiln_tensor *build_upsample_fixture(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    kiln_upsample_params p = fx_upsample(c);
    return kiln_upsample(ctx, in[0], &p);
}

KT_TEST(resize_adaptive_avg_pool_fixture) {
    const char *cases[] = {"adaptive_avg_pool2d", "adaptive_avg_pool2d_up", "adaptive_avg_pool2d_global"};
    const char *inputs[] = {"x", NULL};
    for (int i = 0; i < 3; i++) {
        nnt_fixture(RESIZE, cases[i], inputs, build_pool_fixture, KILN_F64, 1e-10, 1e-10);
        nnt_fixture(RESIZE, cases[i], inputs, build_pool_fixture, KILN_F32, 1e-5, 1e-5);
    }
}

KT_TEST(resize_upsample_fixture) {
    const char *cases[] = {"upsample_nearest_scale", "upsample_nearest_size", "upsample_nearest_frac",
                           "upsample_bilinear_scale", "upsample_bilinear_ac", "upsample_bilinear_down",
                           "upsample_bilinear_frac"};
    const char *inputs[] = {"x", NULL};
    for (int i = 0; i < 7; i++) {
        nnt_fixture(RESIZE, cases[i], inputs, build_upsample_fixture, KILN_F64, 1e-10, 1e-10);
        nnt_fixture(RESIZE, cases[i], inputs, build_upsample_fixture, KILN_F32, 1e-5, 1e-5);
    }
}

typedef struct {
    bool pool, transpose;
    int64_t oh, ow;
    kiln_upsample_params p;
} rs_case;

static kiln_tensor *build(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    const rs_case *c = arg;
    kiln_tensor *x = c->transpose ? kiln_transpose(ctx, in[0], 2, 3) : in[0];
    return c->pool ? kiln_adaptive_avg_pool2d(ctx, x, c->oh, c->ow) : kiln_upsample(ctx, x, &c->p);
}

KT_TEST(resize_grad) {
    const rs_case cases[] = {
        {.pool = true, .oh = 2, .ow = 3},
        {.pool = true, .transpose = true, .oh = 4, .ow = 1},
        {.pool = true, .oh = 1, .ow = 1},
        {false, false, 0, 0, {.scale = {2, 1.5}}},
        {false, true, 0, 0, {.size = {7, 3}, .mode = KILN_UPSAMPLE_BILINEAR}},
        {false, false, 0, 0, {.size = {6, 8}, .mode = KILN_UPSAMPLE_BILINEAR, .align_corners = true}},
    };
    for (int i = 0; i < 6; i++) {
        gc_input in[1] = {GC_IN(4, 2, 2, 5, 4)};
        char what[64];
        snprintf(what, sizeof what, "resize case %d", i);
        gc_check(what, build, (void *)&cases[i], 1, in, (uint64_t)(171 + i));
    }
}

KT_TEST(resize_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_4d(ctx, KILN_F32, 1, 2, 4, 4), *x3 = kiln_new_3d(ctx, KILN_F32, 2, 4, 4);
    KT_NOTNULL(x && x3);
    NNT_FAILS(kiln_adaptive_avg_pool2d(ctx, x, 0, 2), KILN_ERR_SHAPE, "kiln_adaptive_avg_pool2d");
    NNT_FAILS(kiln_adaptive_avg_pool2d(ctx, x3, 2, 2), KILN_ERR_SHAPE, "kiln_adaptive_avg_pool2d");
    const char *op = "kiln_upsample";
    NNT_FAILS(kiln_upsample(ctx, x, &(kiln_upsample_params){.size = {8, 8}, .scale = {2, 2}}), KILN_ERR_ARG, op);
    NNT_FAILS(kiln_upsample(ctx, x, &(kiln_upsample_params){0}), KILN_ERR_ARG, op);
    NNT_FAILS(kiln_upsample(ctx, x, &(kiln_upsample_params){.scale = {2, -1}}), KILN_ERR_ARG, op);
    NNT_FAILS(kiln_upsample(ctx, x, &(kiln_upsample_params){.scale = {2, 2}, .align_corners = true}), KILN_ERR_ARG, op);
    NNT_FAILS(kiln_upsample(ctx, x, &(kiln_upsample_params){.size = {8, 8}, .mode = 7}), KILN_ERR_ARG, op);
    NNT_FAILS(kiln_upsample(ctx, x, &(kiln_upsample_params){.scale = {0.1, 0.1}}), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_upsample(ctx, x3, &(kiln_upsample_params){.scale = {2, 2}}), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_upsample(ctx, x, &(kiln_upsample_params){.size = {(int64_t)1 << 30, 4}}), KILN_ERR_SHAPE, op);
    kiln_ctx_free(ctx);
}

/* nearest by whole factors copies pixels (no product); another factor
 * takes the maps' matmuls */
KT_TEST(resize_nearest_whole_factor_is_a_copy) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_4d(ctx, KILN_F32, 1, 2, 3, 4);
    KT_NOTNULL(x);
    for (int k = 0; k < 2; k++) {
        kiln_upsample_params p = {.scale = {k ? 1.5 : 2, 3}};
        kiln_graph *g = kiln_graph_new(ctx);
        KT_OK(kiln_graph_add(g, kiln_upsample(ctx, x, &p)));
        int matmuls = 0;
        for (int i = 0; i < kiln_graph_n_nodes(g); i++) matmuls += !strcmp(kiln_op_name_of(kiln_graph_node(g, i)), "matmul");
        KT_CHECK((matmuls > 0) == (k == 1), "scale %gx%g: %d matmuls", p.scale[0], p.scale[1], matmuls);
    }
    kiln_ctx_free(ctx);
}
