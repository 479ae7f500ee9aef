/* test_clip.c — global-norm gradient clipping: the norm and the scaled
 * gradients against a hand computation (read back through an SGD step of
 * lr 1 from p = 0), no change below max_norm, a large random case against
 * a double reference, mixed f32/f64 parameters, a NaN or infinite gradient
 * skipping the step (counted, KILN_ERR_NUMERIC naming the parameter,
 * parameters and Adam's moments untouched, gradients zeroed, the next step
 * normal), config errors; on the CPU and on Vulkan. */
#include "kt.h"
#include "kt_device.h"
#include "../optim/optim_impl.h"

#include <math.h>
#include <stdlib.h>

/* a = {3, 4, 0}, b = {0, 12}: norm 13. SGD lr 1 from 0 leaves p = -g'. */
static void check_hand(kiln_backend *be) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, be));
    kiln_tensor *a = kiln_param(ctx, "a", KILN_F32, 1, (int64_t[]){3});
    kiln_tensor *b = kiln_param(ctx, "b", KILN_F32, 1, (int64_t[]){2});
    KT_NOTNULL(a);
    KT_NOTNULL(b);
    kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 1.0f});
    KT_NOTNULL(opt);
    KT_CHECK(kiln_optim_last_grad_norm(opt) == -1.0f, "no norm yet");
    KT_OK(kiln_optim_set_clip_grad_norm(opt, 6.5f));
    const float ga[3] = {3, 4, 0}, gb[2] = {0, 12};
    KT_OK(kiln_tensor_set_f32(kiln_tensor_grad(a), ga, 3));
    KT_OK(kiln_tensor_set_f32(kiln_tensor_grad(b), gb, 2));
    KT_OK(kiln_optim_step(opt));
    KT_CHECK(kiln_optim_last_grad_norm(opt) == 13.0f, "norm %.9g", (double)kiln_optim_last_grad_norm(opt));
    double coef = 6.5 / (13.0 + 1e-6);
    float pa[3], pb[2];
    KT_OK(kiln_tensor_get_f32(a, pa, 3));
    KT_OK(kiln_tensor_get_f32(b, pb, 2));
    for (int i = 0; i < 3; i++)
        KT_CHECK(fabs(-pa[i] - ga[i] * coef) <= 1e-6 * ga[i] * coef, "a[%d]: %.9g, want %.9g", i, (double)-pa[i],
                 ga[i] * coef);
    for (int i = 0; i < 2; i++)
        KT_CHECK(fabs(-pb[i] - gb[i] * coef) <= 1e-6 * gb[i] * coef, "b[%d]: %.9g, want %.9g", i, (double)-pb[i],
                 gb[i] * coef);
    /* below max_norm: gradients untouched (p moves by exactly g) */
    KT_OK(kiln_optim_set_clip_grad_norm(opt, 13.5f));
    KT_OK(kiln_tensor_set_f32(kiln_tensor_grad(a), ga, 3));
    KT_OK(kiln_tensor_set_f32(kiln_tensor_grad(b), gb, 2));
    float qa[3];
    KT_OK(kiln_optim_step(opt));
    KT_OK(kiln_tensor_get_f32(a, qa, 3));
    for (int i = 0; i < 3; i++) KT_CHECK(qa[i] == pa[i] - ga[i], "unclipped a[%d]: %.9g", i, (double)qa[i]);
    /* off */
    KT_OK(kiln_optim_set_clip_grad_norm(opt, 0.0f));
    KT_OK(kiln_tensor_set_f32(kiln_tensor_grad(a), (float[]){1e30f, 0, 0}, 3));
    KT_OK(kiln_optim_step(opt));
    KT_OK(kiln_tensor_get_f32(a, pa, 3));
    KT_CHECK(pa[0] == qa[0] - 1e30f, "clipping off: a[0] %g", (double)pa[0]);
    KT_CHECK(kiln_optim_steps(opt) == 3 && kiln_optim_skipped_steps(opt) == 0, "counts");
    kiln_ctx_free(ctx);
}

KT_TEST(clip_hand_cpu) { check_hand(NULL); }
#ifdef KILN_VULKAN
KT_TEST(clip_hand_vulkan) { check_hand(kt_device("vulkan")); }
#endif

/* Random gradients over three parameters (one of 5000 elements): norm and
 * scaled gradients against double (relative 1e-5: the sums of squares are
 * f32 reductions, as torch's f32 norms). */
static void check_random(kiln_backend *be) {
    enum { N0 = 5000, N1 = 33, N2 = 7 };
    const int ns[3] = {N0, N1, N2};
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, be));
    kiln_tensor *p[3];
    for (int j = 0; j < 3; j++) {
        char name[8];
        snprintf(name, sizeof name, "p%d", j);
        KT_NOTNULL(p[j] = kiln_param(ctx, name, KILN_F32, 1, (int64_t[]){ns[j]}));
    }
    kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 1.0f});
    KT_NOTNULL(opt);
    KT_OK(kiln_optim_set_clip_grad_norm(opt, 1.0f));
    double *g[3], *got = malloc(N0 * sizeof *got), sq = 0;
    for (int j = 0; j < 3; j++) {
        g[j] = malloc((size_t)ns[j] * sizeof *g[j]);
        KT_OK(kiln_tensor_fill_randn(kiln_tensor_grad(p[j]), 50 + (uint64_t)j, 0.0, 1.0));
        KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(p[j]), g[j], ns[j]));
        for (int i = 0; i < ns[j]; i++) sq += g[j][i] * g[j][i];
    }
    double norm = sqrt(sq), coef = 1.0 / (norm + 1e-6);
    KT_OK(kiln_optim_step(opt));
    KT_CHECK(fabs(kiln_optim_last_grad_norm(opt) - norm) <= 1e-5 * norm, "norm %.9g, reference %.9g",
             (double)kiln_optim_last_grad_norm(opt), norm);
    for (int j = 0; j < 3; j++) {
        KT_OK(kiln_tensor_get_f64(p[j], got, ns[j]));
        for (int i = 0; i < ns[j]; i++) {
            double want = -g[j][i] * coef;
            KT_REQUIRE(fabs(got[i] - want) <= 1e-5 * fabs(want) + 1e-12, "p%d[%d] = %.9g, want %.9g", j, i, got[i],
                       want);
        }
        free(g[j]);
    }
    free(got);
    kiln_graph_stats st = kiln_graph_get_stats(opt->norm_graph);
    if (be) KT_CHECK(st.nodes_fallback == 0, "norm graph: %lld nodes on the CPU", (long long)st.nodes_fallback);
    st = kiln_graph_get_stats(opt->scale_graph);
    if (be) KT_CHECK(st.nodes_fallback == 0, "scale graph: %lld nodes on the CPU", (long long)st.nodes_fallback);
    kiln_ctx_free(ctx);
}

KT_TEST(clip_random_cpu) { check_random(NULL); }
#ifdef KILN_VULKAN
KT_TEST(clip_random_vulkan) { check_random(kt_device("vulkan")); }
#endif

/* f32 and f64 parameters together (one sum of squares read per parameter). */
KT_TEST(clip_mixed_dtypes) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_param(ctx, "a", KILN_F32, 1, (int64_t[]){2});
    kiln_tensor *b = kiln_param(ctx, "b", KILN_F64, 1, (int64_t[]){1});
    KT_NOTNULL(a);
    KT_NOTNULL(b);
    kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 1.0f});
    KT_NOTNULL(opt);
    KT_OK(kiln_optim_set_clip_grad_norm(opt, 1.0f));
    KT_OK(kiln_tensor_set_f32(kiln_tensor_grad(a), (float[]){2, 4}, 2));
    KT_OK(kiln_tensor_set_f64(kiln_tensor_grad(b), (double[]){4}, 1));
    KT_OK(kiln_optim_step(opt));
    KT_CHECK(kiln_optim_last_grad_norm(opt) == 6.0f, "norm %.9g", (double)kiln_optim_last_grad_norm(opt));
    double pb;
    KT_OK(kiln_tensor_get_f64(b, &pb, 1));
    KT_CHECK(fabs(pb + 4.0 / (6.0 + 1e-6)) <= 1e-12, "b %.17g", pb);
    kiln_ctx_free(ctx);
}

/* A non-finite gradient in b: the Adam step is skipped. */
static void check_nonfinite(kiln_backend *be, float bad) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, be));
    kiln_tensor *a = kiln_param(ctx, "weight", KILN_F32, 1, (int64_t[]){3});
    kiln_tensor *b = kiln_param(ctx, "bias", KILN_F32, 1, (int64_t[]){2});
    KT_NOTNULL(a);
    KT_NOTNULL(b);
    KT_OK(kiln_tensor_set_f32(a, (float[]){1, 2, 3}, 3));
    KT_OK(kiln_tensor_set_f32(b, (float[]){4, 5}, 2));
    kiln_optim *opt = kiln_adam_new(ctx, NULL);
    KT_NOTNULL(opt);
    KT_OK(kiln_optim_set_clip_grad_norm(opt, 1.0f));
    KT_OK(kiln_tensor_set_f32(kiln_tensor_grad(a), (float[]){1, 1, 1}, 3));
    KT_OK(kiln_tensor_set_f32(kiln_tensor_grad(b), (float[]){1, bad}, 2));
    kiln_clear_error();
    kiln_status s = kiln_optim_step(opt);
    KT_CHECK(s == KILN_ERR_NUMERIC, "status %s", kiln_status_name(s));
    KT_CHECK(strstr(kiln_last_error(), "'bias'") != NULL, "message: %s", kiln_last_error());
    KT_CHECK(kiln_optim_skipped_steps(opt) == 1 && kiln_optim_steps(opt) == 0, "skipped %lld, steps %lld",
             (long long)kiln_optim_skipped_steps(opt), (long long)kiln_optim_steps(opt));
    KT_CHECK(!isfinite(kiln_optim_last_grad_norm(opt)), "norm %g", (double)kiln_optim_last_grad_norm(opt));
    float pa[3], pb[2], ga[3], gb[2], m[3];
    KT_OK(kiln_tensor_get_f32(a, pa, 3));
    KT_OK(kiln_tensor_get_f32(b, pb, 2));
    KT_CHECK(pa[0] == 1 && pa[1] == 2 && pa[2] == 3 && pb[0] == 4 && pb[1] == 5, "parameters moved");
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(a), ga, 3));
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(b), gb, 2));
    KT_CHECK(ga[0] == 0 && ga[2] == 0 && gb[0] == 0 && gb[1] == 0, "gradients not zeroed");
    KT_OK(kiln_tensor_get_f32(opt->nodes[0]->src[2], m, 3));
    KT_CHECK(m[0] == 0 && m[1] == 0 && m[2] == 0, "exp_avg moved");
    /* the next, finite step is the first Adam step */
    KT_OK(kiln_tensor_set_f32(kiln_tensor_grad(a), (float[]){0.1f, 0.1f, 0.1f}, 3));
    KT_OK(kiln_optim_step(opt));
    KT_CHECK(kiln_optim_steps(opt) == 1, "steps %lld", (long long)kiln_optim_steps(opt));
    KT_OK(kiln_tensor_get_f32(a, pa, 3));
    KT_CHECK(fabs(pa[0] - (1 - 1e-3)) < 1e-6, "first Adam step: a[0] %.9g", (double)pa[0]);
    kiln_ctx_free(ctx);
}

KT_TEST(clip_nonfinite_skips_cpu) {
    check_nonfinite(NULL, NAN);
    check_nonfinite(NULL, INFINITY);
}
#ifdef KILN_VULKAN
KT_TEST(clip_nonfinite_skips_vulkan) {
    kiln_backend *vk = kt_device("vulkan");
    check_nonfinite(vk, NAN);
    check_nonfinite(vk, -INFINITY);
}
#endif

KT_TEST(clip_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_NOTNULL(kiln_param(ctx, "p", KILN_F32, 1, (int64_t[]){2}));
    kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 1.0f});
    KT_NOTNULL(opt);
    KT_CHECK(kiln_optim_set_clip_grad_norm(opt, -1.0f) == KILN_ERR_ARG, "negative");
    KT_CHECK(kiln_optim_set_clip_grad_norm(opt, NAN) == KILN_ERR_ARG, "NaN");
    KT_CHECK(kiln_optim_set_clip_grad_norm(opt, INFINITY) == KILN_ERR_ARG, "inf");
    KT_CHECK(kiln_optim_set_clip_grad_norm(NULL, 1.0f) == KILN_ERR_ARG, "NULL");
    KT_CHECK(kiln_optim_skipped_steps(NULL) == 0 && kiln_optim_last_grad_norm(NULL) == -1.0f, "NULL accessors");
    kiln_ctx_free(ctx);
}
