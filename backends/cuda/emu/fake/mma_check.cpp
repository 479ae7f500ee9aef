// mma_check.cpp — setup.sh runs it before it installs mma.h: the fake warp
// matrix functions round and sum as the CUDA Programming Guide says, one
// warp of host threads (prelude.h) storing its tiles element by element.
#include "prelude.h"

#include <mma.h>

#include <cstdio>

using namespace nvcuda;

static int bad;

static void want(bool ok, const char *what, float got) {
    if (!ok) fprintf(stderr, "mma_check: %s (got %.9g)\n", what, got), bad++;
}

int main() {
    // cvt.rna: the nearest tf32, ties away from zero
    want(wmma::__float_to_tf32(1.0f + 0x1p-12f) == 1.0f, "1 + 2^-12 rounds to 1", wmma::__float_to_tf32(1.0f + 0x1p-12f));
    want(wmma::__float_to_tf32(1.0f + 0x1p-11f) == 1.0f + 0x1p-10f, "a tie rounds away from 0",
         wmma::__float_to_tf32(1.0f + 0x1p-11f));
    want(wmma::__float_to_tf32(-1.0f - 0x1p-11f) == -1.0f - 0x1p-10f, "a negative tie too",
         wmma::__float_to_tf32(-1.0f - 0x1p-11f));
    want(std::isinf(wmma::__float_to_tf32(INFINITY)), "infinity stays", wmma::__float_to_tf32(INFINITY));
    // a 16 x 8 (tf32) or 16 x 16 (bf16) row of x times a column of y on the diagonal
    alignas(32) static float a[16 * 16], b[16 * 16], c[16 * 16];
    alignas(32) static __nv_bfloat16 ah[16 * 16], bh[16 * 16];
    const float x = 1.0f + 0x1p-10f, y = 1.0f + 0x1p-12f;
    for (int i = 0; i < 256; i++) {
        a[i] = i % 16 == i / 16 ? x : 0.0f, b[i] = i % 16 == i / 16 ? y : 0.0f;
        ah[i] = __float2bfloat16(a[i] == x ? 1.0f + 0x1p-7f : 0.0f), bh[i] = __float2bfloat16(b[i] == y ? 3.0f : 0.0f);
    }
    emu_go(32, [&] {
        wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> fb;
        wmma::fragment<wmma::accumulator, 16, 16, 8, float> f;
        wmma::fill_fragment(f, 0.5f);
        for (int k = 0; k < 16; k += 8) {
            wmma::load_matrix_sync(fa, a + k, 16);
            wmma::load_matrix_sync(fb, b + k, 16); // col_major: b's rows are the columns
            wmma::mma_sync(f, fa, fb, f);
        }
        wmma::store_matrix_sync(c, f, 16, wmma::mem_row_major);
        emu_syncwarp();
        // y's low bits unread (not rounded by __float_to_tf32): x * 1 + 0.5, exactly
        want(c[17] == x + 0.5f && c[1] == 0.5f, "tf32 inputs: the 13 low bits ignored", c[17]);
        emu_syncwarp();
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> ha;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> hb;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> g;
        wmma::fill_fragment(g, 0.0f);
        wmma::load_matrix_sync(ha, ah, 16);
        wmma::load_matrix_sync(hb, bh, 16);
        wmma::mma_sync(g, ha, hb, g);
        wmma::store_matrix_sync(c, g, 16, wmma::mem_col_major);
        emu_syncwarp();
        // (1 + 2^-7) 3 = 3 + 3 2^-7: exact in f32, not in bf16
        want(c[34] == 3.0f + 3 * 0x1p-7f && c[2] == 0.0f, "bf16 products exact, summed in f32", c[34]);
    });
    if (!bad) printf("mma_check: the fake mma.h rounds and sums as wmma does\n");
    return bad != 0;
}
