// emu_dfp.cpp — k_dfp.cu's kernels on the host against the CPU backend's
// DFP_MATMUL, bit for bit: the quantizer, then the product (transposes,
// k over many INT32 chunks, an all-zero operand, the convolution's
// implicit columns and their transpose).
#include "emu.h"
namespace {
#include "k_dfp.body"
}
#include "emu_cpu.h"

// conv: g[8] kh kw sh sw ph pw dh dw, then oh ow; ish: the image's shape
static void dfp_case(int64_t m, int64_t n, int64_t k, bool ta, bool tb, const int64_t *conv, const int64_t *ish, double sa,
                     double sb) {
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t ash[2] = {ta ? k : m, ta ? m : k}, bsh[2] = {tb ? n : k, tb ? k : n};
    kiln_tensor *a = emu_input(ctx, KILN_F32, 2, ash, -sa, sa, false);
    kiln_tensor *b = conv ? emu_input(ctx, KILN_F32, 4, ish, -sb, sb, false) : emu_input(ctx, KILN_F32, 2, bsh, -sb, sb, false);
    kiln_tensor *y = conv ? kiln__dfp_matmul_im2col(ctx, a, b, tb, conv, conv[8], conv[9]) : kiln_dfp_matmul_t(ctx, a, ta, b, tb);
    kiln_graph *g = kiln_graph_new(ctx);
    if (!y || kiln_graph_add(g, y) || kiln_graph_compute(g)) {
        printf("cpu graph failed: %s\n", kiln_last_error());
        emu_failures++;
        return;
    }
    auto ab = emu_bytes(a), bb = emu_bytes(b), cb = emu_bytes(y);
    int64_t na = kiln_tensor_numel(a), nb = kiln_tensor_numel(b);
    std::vector<int16_t> qa(na), qb(nb);
    uint32_t amax[2] = {0, 0};
    const float *af = (const float *)ab.data(), *bf = (const float *)bb.data();
    emu_launch(256, [&] { amax_k(af, na, &amax[0]); });
    emu_launch(256, [&] { round_k(af, na, &amax[0], qa.data()); });
    emu_launch(256, [&] { amax_k(bf, nb, &amax[1]); });
    emu_launch(256, [&] { round_k(bf, nb, &amax[1], qb.data()); });
    cu_conv G{};
    if (conv)
        G = cu_conv{ish[0], ish[1], ish[2], ish[3], conv[8], conv[9], conv[0], conv[1], conv[2], conv[3], conv[4], conv[5], conv[6], conv[7], 1};
    emu_launch(TILE * TILE, [&] { dfp_gemm_k(m, n, k, qa.data(), ta, qb.data(), tb, G, conv != nullptr, amax, (float *)cb.data(), 0); });
    char name[96];
    snprintf(name, sizeof name, "dfp_matmul %lldx%lldx%lld%s%s%s", (long long)m, (long long)n, (long long)k, ta ? " ta" : "",
             tb ? " tb" : "", conv ? " conv" : "");
    emu_check(name, y, cb, -1);
    kiln_ctx_free(ctx);
}

int main() {
    dfp_case(5, 7, 37, false, false, nullptr, nullptr, 1, 1);
    dfp_case(33, 19, 300, false, false, nullptr, nullptr, 3, 1);
    dfp_case(6, 9, 41, true, false, nullptr, nullptr, 1, 1e-3);
    dfp_case(6, 9, 70, false, true, nullptr, nullptr, 1e4, 1);
    dfp_case(17, 20, 1000, true, true, nullptr, nullptr, 1, 1);
    dfp_case(3, 4, 5, false, false, nullptr, nullptr, 0, 1); /* an all-zero operand */
    const int64_t g1[10] = {3, 3, 2, 1, 1, 1, 1, 1, 4, 6}, x1[4] = {2, 3, 7, 6};
    dfp_case(4, 2 * 4 * 6, 27, false, false, g1, x1, 1, 1); /* forward: B = cols */
    dfp_case(4, 27, 2 * 4 * 6, false, true, g1, x1, 1, 1);  /* weight gradient: B = cols^T */
    const int64_t g2[10] = {2, 3, 1, 1, 0, 2, 2, 2, 7, 8}, x2[4] = {1, 2, 9, 8};
    dfp_case(3, 7 * 8, 12, false, false, g2, x2, 1, 1);
    printf("emu_dfp: %s\n", emu_failures ? "FAIL" : "ok");
    return emu_failures != 0;
}
