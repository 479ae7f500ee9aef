// emu_conv.cpp — k_conv.cu's kernels on the host against the CPU backend,
// bit for bit: IM2COL and COL2IM over several geometries and both cols
// layouts, the max-pool and its backward (interior, padded, tiled, rows of
// more than 256 windows, ties), f32 and f64.
#include "emu.h"
namespace {
#include "k_conv.body"
}
#include "emu_cpu.h"

template <typename T> static void conv_case(kiln_dtype dt, int64_t n, int64_t c, int64_t h, int64_t w, const int64_t g[8], int cn) {
    int64_t oh = (h + 2 * g[4] - g[6] * (g[0] - 1) - 1) / g[2] + 1, ow = (w + 2 * g[5] - g[7] * (g[1] - 1) - 1) / g[3] + 1;
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t xs[4] = {n, c, h, w};
    kiln_tensor *x = emu_input(ctx, dt, 4, xs, -1, 1, false);
    kiln_tensor *cols = cn ? kiln__im2col_cn(ctx, x, g, oh, ow, 0.5) : kiln__im2col(ctx, x, g, oh, ow, 0.5);
    kiln_tensor *cin = emu_input(ctx, dt, 6, kiln_tensor_shape(cols), -1, 1, false);
    kiln_tensor *img = cn ? kiln__col2im_cn(ctx, cin, g, h, w) : kiln__col2im(ctx, cin, g, h, w);
    kiln_graph *gr = kiln_graph_new(ctx);
    if (kiln_graph_add(gr, cols) || kiln_graph_add(gr, img) || kiln_graph_compute(gr)) {
        printf("cpu graph failed: %s\n", kiln_last_error());
        emu_failures++;
        return;
    }
    cu_conv G = {n, c, h, w, oh, ow, g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], cn};
    auto xb = emu_bytes(x), cb = emu_bytes(cin), colsb = emu_bytes(cols), imgb = emu_bytes(img);
    int64_t nc = kiln_tensor_numel(cols), ni = n * c * h * w;
    emu_launch(256, [&] { im2col_k<T>(G, (const T *)xb.data(), (T *)colsb.data(), (T)0.5, nc); });
    emu_launch(256, [&] { col2im_k<T>(G, (const T *)cb.data(), (T *)imgb.data(), ni); });
    char name[96];
    snprintf(name, sizeof name, "im2col k%lldx%lld s%lld,%lld p%lld,%lld d%lld,%lld %s", (long long)g[0], (long long)g[1],
             (long long)g[2], (long long)g[3], (long long)g[4], (long long)g[5], (long long)g[6], (long long)g[7], cn ? "cn" : "nc");
    emu_check(name, cols, colsb, -1);
    emu_check("  col2im", img, imgb, -1);
    kiln_ctx_free(ctx);
}

template <typename T> static void pool_case(kiln_dtype dt, int64_t h, int64_t w, int kh, int kw, int stride, int pad, bool ties) {
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t xs[4] = {2, 3, h, w};
    kiln_tensor *x = emu_input(ctx, dt, 4, xs, -1, 1, true, ties);
    kiln_tensor *y = kiln_max_pool2d(ctx, x, kh, kw, stride, pad);
    kiln_tensor *wt = emu_train(ctx, y);
    int64_t oh = kiln_tensor_dim(y, 2), ow = kiln_tensor_dim(y, 3), ny = kiln_tensor_numel(y), nx = kiln_tensor_numel(x);
    cu_conv G = {2, 3, h, w, oh, ow, kh, kw, stride ? stride : kh, stride ? stride : kw, pad, pad, 1, 1, 0};
    auto xb = emu_bytes(x), yb = emu_bytes(y), wb = emu_bytes(wt), gb = emu_bytes(x);
    emu_launch(256, [&] { pool_max_k<T>(G, (const T *)xb.data(), (T *)yb.data(), (T)-INFINITY, ny); });
    emu_launch(256, [&] { pool_max_grad_k<T>(G, (const T *)xb.data(), (const T *)yb.data(), (const T *)wb.data(), (T *)gb.data(), nx); });
    char name[96];
    snprintf(name, sizeof name, "max_pool %dx%d s%d p%d %lldx%lld%s", kh, kw, stride, pad, (long long)h, (long long)w, ties ? " ties" : "");
    emu_check(name, y, yb, -1);
    emu_check("  backward", kiln_tensor_grad(x), gb, -1);
    kiln_ctx_free(ctx);
}

template <typename T> static void all(kiln_dtype dt) {
    const int64_t geoms[][8] = {{3, 3, 1, 1, 0, 0, 1, 1}, {3, 3, 2, 2, 1, 1, 1, 1}, {3, 2, 1, 2, 1, 0, 1, 1}, {3, 3, 1, 1, 2, 2, 2, 2},
                                {2, 3, 2, 1, 0, 2, 2, 1}, {1, 1, 1, 1, 0, 0, 1, 1}, {5, 4, 3, 2, 2, 1, 1, 2}};
    for (auto &g : geoms)
        for (int cn = 0; cn < 2; cn++) conv_case<T>(dt, 2, 3, 9, 8, g, cn);
    const int pools[][4] = {{2, 2, 0, 0}, {3, 3, 2, 1}, {3, 2, 1, 1}, {3, 3, 3, 0}, {3, 3, 1, 0}, {2, 3, 1, 1}};
    for (auto &p : pools)
        for (int ties = 0; ties < 2; ties++) pool_case<T>(dt, 9, 8, p[0], p[1], p[2], p[3], ties);
    pool_case<T>(dt, 4, 600, 3, 3, 1, 0, true);
    pool_case<T>(dt, 5, 700, 2, 3, 1, 1, true);
}

int main() {
    all<float>(KILN_F32);
    all<double>(KILN_F64);
    printf("emu_conv: %s\n", emu_failures ? "FAIL" : "ok");
    return emu_failures != 0;
}
