// emu_attention.cpp — k_attention.cu's kernels on the host against the CPU
// backend, f32 and f64: the forward (O) and the backward (dq, dk, dv), GQA,
// causal with T < S, a long causal one; tolerance as emu_rows.cpp.
#include "emu.h"
namespace {
#include "k_attention.body"
}
#include "emu_cpu.h"

template <typename T>
static void attn_case(kiln_dtype dt, int64_t B, int64_t hq, int64_t hk, int64_t Tq, int64_t S, int64_t D, int64_t Dv,
                      bool causal) {
    double tl = dt == KILN_F64 ? 1e-12 : 2e-6;
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t qs[4] = {B, hq, Tq, D}, ks[4] = {B, hk, S, D}, vs[4] = {B, hk, S, Dv};
    kiln_tensor *q = emu_input(ctx, dt, 4, qs, -2, 2, true), *k = emu_input(ctx, dt, 4, ks, -2, 2, true);
    kiln_tensor *v = emu_input(ctx, dt, 4, vs, -1, 1, true);
    kiln_tensor *o = kiln_attention(ctx, q, k, v, causal, 0);
    kiln_tensor *w = emu_train(ctx, o);
    const kiln_tensor *node = o->view_src ? o->view_src : o; /* the packed [O | L] node holds the scale */
    int64_t sh[7] = {B, hq, hk, Tq, S, D, Dv}, no = B * hq * Tq * Dv, nl = B * hq * Tq;
    geom g = make_geom(sh, causal, node->fp[0]);
    auto qb = emu_bytes(q), kb = emu_bytes(k), vb = emu_bytes(v), wb = emu_bytes(w);
    std::vector<char> ob((size_t)(no + nl) * sizeof(T)), dq = emu_bytes(q), dk = emu_bytes(k), dv = emu_bytes(v);
    std::vector<double> di(nl);
    char *lse = ob.data() + no * sizeof(T);
    emu_launch(256, [&] { attn_fwd_k<T>(g, qb.data(), kb.data(), vb.data(), ob.data(), lse); });
    emu_launch(256, [&] { attn_di_k<T>(nl, Dv, ob.data(), wb.data(), di.data()); });
    emu_launch(256, [&] { attn_dq_k<T>(g, qb.data(), kb.data(), vb.data(), lse, wb.data(), di.data(), dq.data()); });
    emu_launch(256, [&] { attn_dkv_k<T>(g, qb.data(), kb.data(), vb.data(), lse, wb.data(), di.data(), dk.data(), dv.data()); });
    char name[96];
    snprintf(name, sizeof name, "attention %lldx%lld hq %lld hk %lld%s", (long long)Tq, (long long)S, (long long)hq,
             (long long)hk, causal ? " causal" : "");
    emu_check(name, o, ob, tl);
    emu_check("  dq", kiln_tensor_grad(q), dq, tl);
    emu_check("  dk", kiln_tensor_grad(k), dk, tl);
    emu_check("  dv", kiln_tensor_grad(v), dv, tl);
    kiln_ctx_free(ctx);
}

template <typename T> static void all(kiln_dtype dt) {
    attn_case<T>(dt, 2, 4, 2, 4, 6, 8, 4, true);
    attn_case<T>(dt, 1, 2, 2, 300, 300, 32, 32, true);
    attn_case<T>(dt, 1, 3, 1, 3, 7, 16, 8, false);
}

int main() {
    all<float>(KILN_F32);
    all<double>(KILN_F64);
    printf("emu_attention: %s\n", emu_failures ? "FAIL" : "ok");
    return emu_failures != 0;
}
