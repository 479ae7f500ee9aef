/* test_conv_simd.c — col2im's SIMD image planes (backends/cpu/conv_avx512.c,
 * stride 1) against the portable loops, bit for bit: kernels, padding and
 * dilation that put taps off every edge, rows across 16-lane blocks, grids
 * larger than the image (a transposed convolution's), both cols layouts.
 * The tiled path's AVX-512 tile columns (conv_tiled_avx512.c) against the
 * taps read one at a time, and added back against one add at a time. */
#include "../backends/cpu/conv_simd.h"
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

#if defined(__x86_64__)
/* gx += cols at each column's tap, rows kk in [r0, r1) then pixels in
 * order, one add at a time. */
static void tile_add_ref(float *gx, int64_t c, const kiln_conv_geom *g, int64_t p0, int64_t p1, int64_t r0, int64_t r1,
                         const float *cols) {
    int64_t len = p1 - p0;
    for (int64_t kk = r0; kk < r1; kk++)
        for (int64_t p = p0; p < p1; p++) {
            int64_t b = p / (g->oh * g->ow), oi = p / g->ow % g->oh, oj = p % g->ow;
            int64_t ch = kk / (g->kh * g->kw), ki = kk / g->kw % g->kh, kj = kk % g->kw;
            int64_t ii = oi * g->sh - g->ph + ki * g->dh, jj = oj * g->sw - g->pw + kj * g->dw;
            if (ii >= 0 && ii < g->h && jj >= 0 && jj < g->w)
                gx[((b * c + ch) * g->h + ii) * g->w + jj] += cols[kk * len + p - p0];
        }
}

/* Tiles cut mid-row and across images, rows [r0, r1) of K, strides 1 and
 * 2, padding and dilation off every edge, rows of more and fewer than 16
 * output pixels: each column's value is its tap's (0 in padding), and
 * nothing outside the rows asked for is written; the columns added back
 * into an image give the bits of one add at a time in the same order. */
KT_TEST(conv_tile_rows_simd_matches_taps) {
    if (!kiln__cpu_avx512(kiln__cpu_caps())) kt_skip("no AVX-512");
    /* kh, kw, sh, sw, ph, pw, dh, dw, h, w */
    const int64_t geoms[][10] = {{3, 3, 2, 2, 1, 1, 1, 1, 9, 45}, {3, 3, 1, 1, 1, 1, 1, 1, 7, 20},
                                 {1, 1, 2, 2, 0, 0, 1, 1, 8, 8},  {3, 2, 2, 2, 2, 0, 2, 1, 11, 37},
                                 {2, 3, 1, 2, 0, 2, 1, 2, 5, 4},  {3, 3, 2, 1, 1, 2, 1, 1, 6, 33}};
    const int64_t n = 3, c = 2;
    for (int gi = 0; gi < 6; gi++) {
        const int64_t *ge = geoms[gi];
        kiln_conv_geom g = {ge[0], ge[1], ge[2], ge[3], ge[4], ge[5], ge[6], ge[7], ge[8], ge[9], 0, 0};
        g.oh = (g.h + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
        g.ow = (g.w + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
        int64_t k = c * g.kh * g.kw, np = n * g.oh * g.ow, nx = n * c * g.h * g.w;
        float *x = malloc((size_t)nx * 4), *cols = malloc((size_t)(k * np) * 4);
        float *gx[2] = {malloc((size_t)nx * 4), malloc((size_t)nx * 4)};
        KT_REQUIRE(x && cols && gx[0] && gx[1], "out of memory");
        for (int64_t i = 0; i < nx; i++) x[i] = (float)(i % 97) + 0.5f;
        /* tiles: one mid-row to mid-row of another image, and a short last one */
        const int64_t tiles[][4] = {{g.ow / 2 + 1, np - g.ow - 3, 1, k - 1}, {np - 5, np, 0, k}};
        for (int ti = 0; ti < 2; ti++) {
            int64_t p0 = tiles[ti][0], p1 = tiles[ti][1], r0 = tiles[ti][2], r1 = tiles[ti][3], len = p1 - p0;
            for (int64_t i = 0; i < k * len; i++) cols[i] = -1.0f;
            kiln__conv_tile_rows_f32_avx512(x, c, &g, p0, p1, r0, r1, cols);
            int bad = 0;
            for (int64_t kk = 0; kk < k && !bad; kk++)
                for (int64_t i = 0; i < len && !bad; i++) {
                    int64_t p = p0 + i, b = p / (g.oh * g.ow), oi = p / g.ow % g.oh, oj = p % g.ow;
                    int64_t ch = kk / (g.kh * g.kw), ki = kk / g.kw % g.kh, kj = kk % g.kw;
                    int64_t ii = oi * g.sh - g.ph + ki * g.dh, jj = oj * g.sw - g.pw + kj * g.dw;
                    bool pad = ii < 0 || ii >= g.h || jj < 0 || jj >= g.w;
                    float want = kk < r0 || kk >= r1 ? -1.0f : pad ? 0.0f : x[((b * c + ch) * g.h + ii) * g.w + jj];
                    bad = cols[kk * len + i] != want;
                    KT_CHECK(!bad, "geometry %d tile %d: row %lld pixel %lld is %g, not %g", gi, ti, (long long)kk,
                             (long long)p, cols[kk * len + i], want);
                }
            for (int64_t i = 0; i < k * len; i++) cols[i] = (float)(i % 89) * 0.37f - 9.1f;
            for (int64_t i = 0; i < nx; i++) gx[0][i] = gx[1][i] = (float)(i % 31) * 0.11f;
            kiln__conv_tile_add_f32_avx512(gx[0], c, &g, p0, p1, r0, r1, cols);
            tile_add_ref(gx[1], c, &g, p0, p1, r0, r1, cols);
            KT_CHECK(!memcmp(gx[0], gx[1], (size_t)nx * 4), "geometry %d tile %d: the columns added differ", gi, ti);
        }
        free(x), free(cols), free(gx[0]), free(gx[1]);
    }
}
#endif
