/* optim_threaded.h — one check every optimizer's step kernel shares: a
 * parameter large enough for the threaded path gives, element by element,
 * what the same values give in a small parameter (which runs serially). */
#ifndef OPTIM_THREADED_H
#define OPTIM_THREADED_H

#include "kt.h"

/* make(ctx) builds the optimizer over all of ctx's parameters. */
static inline void ot_threaded_matches_small(kiln_optim *(*make)(kiln_ctx *ctx)) {
    enum { BIG = 300007, SMALL = 7 };
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *big = kiln_param(ctx, "big", KILN_F32, 1, (int64_t[]){BIG});
    kiln_tensor *small = kiln_param(ctx, "small", KILN_F32, 1, (int64_t[]){SMALL});
    KT_NOTNULL(big);
    KT_NOTNULL(small);
    KT_OK(kiln_tensor_fill_randn(big, 1, 0.0, 1.0));
    kiln_optim *opt = make(ctx);
    KT_NOTNULL(opt);
    float *pb = malloc(BIG * sizeof *pb), *gb = malloc(BIG * sizeof *gb), ps[SMALL];
    KT_NOTNULL(pb);
    KT_NOTNULL(gb);
    const int64_t at[SMALL] = {0, 1, 16383, 16384, 150000, BIG - 2, BIG - 1};
    KT_OK(kiln_tensor_get_f32(big, pb, BIG));
    for (int i = 0; i < SMALL; i++) ps[i] = pb[at[i]];
    KT_OK(kiln_tensor_set_f32(small, ps, SMALL));
    for (int k = 0; k < 3; k++) {
        KT_OK(kiln_tensor_fill_randn(kiln_tensor_grad(big), 10 + (uint64_t)k, 0.0, 1.0));
        KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(big), gb, BIG));
        float gs[SMALL];
        for (int i = 0; i < SMALL; i++) gs[i] = gb[at[i]];
        KT_OK(kiln_tensor_set_f32(kiln_tensor_grad(small), gs, SMALL));
        KT_OK(kiln_optim_step(opt));
    }
    KT_OK(kiln_tensor_get_f32(big, pb, BIG));
    KT_OK(kiln_tensor_get_f32(small, ps, SMALL));
    for (int i = 0; i < SMALL; i++)
        KT_CHECK(pb[at[i]] == ps[i], "big[%lld] = %.9g, small[%d] = %.9g", (long long)at[i], pb[at[i]], i, ps[i]);
    free(pb);
    free(gb);
    kiln_ctx_free(ctx);
}

#endif
