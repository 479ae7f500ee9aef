/* test_conv_simd.c — col2im's SIMD image planes (backends/cpu/conv_avx512.c,
 * stride 1) against the portable loops, bit for bit: kernels, padding and
 * dilation that put taps off every edge, rows across 16-lane blocks, grids
 * larger than the image (a transposed convolution's), both cols layouts. */
#include "../backends/cpu/cpu_features.h"
#include "internal.h"
#include "kt.h"

#include <stdint.h>
#include <string.h>

/* col2im of the given cols values at the SIMD level in force. */
static void col2im_run(const float *cv, const int64_t *cshape, const int64_t *g, int64_t h, int64_t w, bool cn,
                       float *out) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *cols = kiln_tensor_new(ctx, KILN_F32, 6, cshape);
    KT_REQUIRE(cols, "cols");
    memcpy(kiln_tensor_data(cols), cv, (size_t)kiln_tensor_numel(cols) * sizeof *cv);
    kiln_tensor *img = (cn ? kiln__col2im_cn : kiln__col2im)(ctx, cols, g, h, w);
    KT_REQUIRE(img, "col2im: %s", kiln_last_error());
    kiln_graph *gr = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(gr, img));
    KT_OK(kiln_graph_compute(gr));
    KT_OK(kiln_tensor_get_f32(img, out, kiln_tensor_numel(img)));
    kiln_ctx_free(ctx);
}

KT_TEST(conv_col2im_simd_matches_scalar) {
    kiln_cpu_caps saved = *kiln__cpu_caps(), scalar = *kiln__cpu_caps_detected();
    kiln__cpu_caps_limit(&scalar, KILN_SIMD_SCALAR);
    /* kh, kw, ph, pw, dh, dw; then image sizes */
    const int64_t geoms[][6] = {{3, 3, 1, 1, 1, 1}, {1, 1, 0, 0, 1, 1}, {2, 3, 0, 2, 1, 2}, {3, 2, 2, 0, 2, 1}};
    const int64_t sizes[][2] = {{14, 14}, {5, 1}, {3, 17}, {6, 33}, {4, 40}};
    uint64_t seed = 5;
    int cases = 0;
    for (int gi = 0; gi < 4; gi++)
        for (int si = 0; si < 5; si++)
            for (int cn = 0; cn < 2; cn++)
                for (int grow = 0; grow < 2; grow++) {
                    const int64_t *ge = geoms[gi];
                    int64_t h = sizes[si][0], w = sizes[si][1], n = 2, c = 3;
                    int64_t g[8] = {ge[0], ge[1], 1, 1, ge[2], ge[3], ge[4], ge[5]};
                    int64_t oh = h + 2 * g[4] - g[6] * (g[0] - 1), ow = w + 2 * g[5] - g[7] * (g[1] - 1);
                    if (grow) oh += 2, ow += 3; /* taps past the far edges, as a transposed conv's grid */
                    if (oh < 1 || ow < 1) continue;
                    int64_t cs[6] = {cn ? c : n, cn ? g[0] : c, cn ? g[1] : g[0], cn ? n : g[1], oh, ow};
                    int64_t nc = kiln__numel(6, cs), ni = n * c * h * w;
                    float *cv = malloc((size_t)nc * 4), *out[2] = {malloc((size_t)ni * 4), malloc((size_t)ni * 4)};
                    KT_REQUIRE(cv && out[0] && out[1], "out of memory");
                    for (int64_t j = 0; j < nc; j++) {
                        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                        cv[j] = (float)((double)(seed >> 40) / (double)(1ull << 24)) - 0.5f;
                    }
                    for (int v = 0; v < 2; v++) {
                        kiln__cpu_caps_set(v ? &saved : &scalar);
                        col2im_run(cv, cs, g, h, w, cn, out[v]);
                    }
                    kiln__cpu_caps_set(&saved);
                    KT_CHECK(!memcmp(out[0], out[1], (size_t)ni * 4), "geometry %d image %lldx%lld cn %d grow %d differs",
                             gi, (long long)h, (long long)w, cn, grow);
                    free(cv), free(out[0]), free(out[1]);
                    cases++;
                }
    KT_CHECK(cases > 60, "only %d cases ran", cases);
}
