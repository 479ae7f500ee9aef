// emu_rows.cpp — k_nn.cu's row kernels on the host against the CPU
// backend, f32 and f64: softmax and log_softmax (causal or not) and their
// backward, layer_norm and rms_norm and their backward, cross-entropy and
// its backward, rope (forward and inverse). Sums run in another order than
// the CPU's: a tolerance (f32 2e-6, f64 1e-12 of the largest value).
#include "emu.h"
namespace {
#include "k_nn.body"
}
#include "emu_cpu.h"

static kiln_dtype DT;
static double tol() { return DT == KILN_F64 ? 1e-12 : 2e-6; }
static std::vector<char> zeros(int64_t n) { return std::vector<char>((size_t)n * (DT == KILN_F64 ? 8 : 4)); }
#define LAUNCH_T(KERNEL, ...)                                                                       \
    emu_launch(256, [&] {                                                                           \
        if (DT == KILN_F64) KERNEL<double>(__VA_ARGS__);                                            \
        else KERNEL<float>(__VA_ARGS__);                                                            \
    })

static void softmax_case(bool lg, bool causal) {
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t sh[3] = {2, 5, causal ? 7 : 300}, n = sh[2], rows = sh[0] * sh[1], mrows = causal ? sh[1] : 1;
    kiln_tensor *x = emu_input(ctx, DT, 3, sh, -4, 4, true);
    kiln_tensor *y = lg ? kiln_log_softmax(ctx, x, causal) : kiln_softmax(ctx, x, causal);
    /* a causal log_softmax has -inf entries: the loss W * y is NaN, its gradient (gy = W, nonzero where
     * masked) is not */
    kiln_tensor *w = emu_train(ctx, y);
    auto xb = emu_bytes(x), yb = zeros(rows * n), gb = zeros(rows * n);
    LAUNCH_T(softmax_k, rows, n, mrows, causal, lg, xb.data(), yb.data());
    emu_check(lg ? (causal ? "log_softmax causal" : "log_softmax") : (causal ? "softmax causal" : "softmax"), y, yb, tol());
    auto wb = emu_bytes(w);
    LAUNCH_T(softmax_grad_k, rows, n, mrows, causal, lg, yb.data(), wb.data(), gb.data());
    emu_check("  backward", kiln_tensor_grad(x), gb, tol());
    kiln_ctx_free(ctx);
}

static void norm_case(bool rms) {
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t sh[2] = {6, 700}, c = 700, rows = 6;
    kiln_tensor *x = emu_input(ctx, DT, 2, sh, -2, 3, true), *wt = emu_input(ctx, DT, 1, &c, 0.5, 1.5, true);
    kiln_tensor *b = rms ? NULL : emu_input(ctx, DT, 1, &c, -1, 1, true);
    kiln_tensor *y = rms ? kiln_rms_norm(ctx, x, wt, 1e-5) : kiln_layer_norm(ctx, x, wt, b, 1e-5);
    kiln_tensor *w = emu_train(ctx, y);
    auto xb = emu_bytes(x), wtb = emu_bytes(wt), bb = b ? emu_bytes(b) : std::vector<char>(), wb = emu_bytes(w);
    auto yb = zeros(rows * c), dx = zeros(rows * c), dw = zeros(c), db = zeros(c);
    std::vector<double> stats(2 * rows);
    const void *bp = b ? bb.data() : nullptr;
    void *dbp = b ? db.data() : nullptr;
    LAUNCH_T(norm_k, rows, c, 1e-5, rms, xb.data(), wtb.data(), bp, yb.data());
    LAUNCH_T(norm_grad_dx_k, rows, c, 1e-5, rms, xb.data(), wtb.data(), wb.data(), dx.data(), stats.data());
    LAUNCH_T(norm_grad_dwb_k, rows, c, xb.data(), wb.data(), stats.data(), dw.data(), dbp);
    emu_check(rms ? "rms_norm" : "layer_norm", y, yb, tol());
    emu_check("  dx", kiln_tensor_grad(x), dx, tol());
    emu_check("  dw", kiln_tensor_grad(wt), dw, tol());
    if (b) emu_check("  db", kiln_tensor_grad(b), db, tol());
    kiln_ctx_free(ctx);
}

static void ce_case() {
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t sh[2] = {9, 600}, rows = 9, c = 600;
    kiln_tensor *x = emu_input(ctx, DT, 2, sh, -5, 5, true);
    kiln_tensor *lab = kiln_tensor_new(ctx, KILN_I32, 1, &rows);
    std::vector<double> lv(rows);
    for (int64_t r = 0; r < rows; r++) lv[r] = r % 4 == 3 ? -1 : rand() % c; /* -1: ignored */
    kiln_tensor_set_f64(lab, lv.data(), rows);
    kiln_tensor *y = kiln_cross_entropy(ctx, x, lab, -1);
    kiln_tensor *w = emu_train(ctx, y);
    std::vector<int32_t> labels(lv.begin(), lv.end());
    std::vector<double> loss(rows), cnt(1);
    auto xb = emu_bytes(x), yb = zeros(1), wb = emu_bytes(w), gx = zeros(rows * c);
    LAUNCH_T(ce_rows_k, rows, c, -1, xb.data(), labels.data(), loss.data());
    LAUNCH_T(ce_total_k, rows, c, -1, labels.data(), loss.data(), yb.data(), nullptr);
    LAUNCH_T(ce_total_k, rows, c, -1, labels.data(), nullptr, nullptr, cnt.data());
    LAUNCH_T(ce_grad_k, rows, c, -1, xb.data(), labels.data(), wb.data(), cnt.data(), gx.data());
    emu_check("cross_entropy", y, yb, tol());
    emu_check("  backward", kiln_tensor_grad(x), gx, tol());
    kiln_ctx_free(ctx);
}

static void rope_case(bool inter) {
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t sh[4] = {2, 3, 6, 16}, t = 6, d = 16, rows = 36;
    kiln_tensor *x = emu_input(ctx, DT, 4, sh, -1, 1, true), *pos = kiln_tensor_new(ctx, KILN_I32, 1, &t);
    std::vector<double> pv(t);
    for (auto &p : pv) p = rand() % 40;
    kiln_tensor_set_f64(pos, pv.data(), t);
    kiln_tensor *y = kiln_rope(ctx, x, pos, 500.0, inter ? KILN_ROPE_INTERLEAVED : KILN_ROPE_NEOX);
    kiln_tensor *w = emu_train(ctx, y);
    std::vector<int32_t> p32(pv.begin(), pv.end());
    auto xb = emu_bytes(x), yb = zeros(rows * d), wb = emu_bytes(w), gx = zeros(rows * d);
    LAUNCH_T(rope_k, xb.data(), yb.data(), rows, t, d, inter, p32.data(), 500.0, 1.0);
    LAUNCH_T(rope_k, wb.data(), gx.data(), rows, t, d, inter, p32.data(), 500.0, -1.0);
    emu_check(inter ? "rope interleaved" : "rope neox", y, yb, tol());
    emu_check("  backward (inverse rope)", kiln_tensor_grad(x), gx, tol());
    kiln_ctx_free(ctx);
}

int main() {
    for (int f = 0; f < 2; f++) {
        DT = f ? KILN_F64 : KILN_F32;
        softmax_case(false, false), softmax_case(true, false), softmax_case(false, true), softmax_case(true, true);
        norm_case(false), norm_case(true), ce_case(), rope_case(false), rope_case(true);
    }
    printf("emu_rows: %s\n", emu_failures ? "FAIL" : "ok");
    return emu_failures != 0;
}
