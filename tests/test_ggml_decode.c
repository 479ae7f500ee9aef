/* test_ggml_decode.c — quant/ggml_decode.h, the element decoding the CUDA
 * kernels compile, against the scalar reference (quant/qints.c) bit for
 * bit: every element of random blocks of every type (any f16 or f32
 * scale, NaN and infinity included), read from an odd address too. */
#include "kt.h"
#include "../quant/ggml_decode.h"
#include "../quant/quant.h"

static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

KT_TEST(ggml_decode_equals_reference) {
    enum { NB = 64 };
    KT_CHECK(KILN_Q4_1 + KILN_QD_IQ4_XS == KILN_IQ4_XS, "the header's types follow kiln_dtype's order");
    uint64_t seed = 23;
    for (int k = 0; k < KILN_QD_COUNT; k++) {
        const kiln_dtype t = (kiln_dtype)(KILN_Q4_1 + k);
        const int blck = kiln__qd_blck(k), bytes = kiln__qd_bytes(k);
        KT_CHECK(blck == kiln_dtype_block(t) && bytes == (int)kiln_dtype_size(t), "%s: block %d of %d bytes",
                 kiln_dtype_name(t), blck, bytes);
        if (blck != kiln_dtype_block(t) || bytes != (int)kiln_dtype_size(t)) continue;
        uint8_t *raw = malloc((size_t)(NB * bytes) + 1);
        float *want = malloc((size_t)(NB * blck) * sizeof *want);
        KT_REQUIRE(raw && want, "memory");
        for (int i = 0; i < NB * bytes + 1; i++) raw[i] = (uint8_t)mix(&seed);
        kiln__qints_to_f32(t, raw, want, (int64_t)NB * blck);
        int bad = 0;
        for (int off = 0; off < 2; off++) {
            if (off) memmove(raw + 1, raw, (size_t)(NB * bytes)); /* the same blocks at an odd address */
            for (int i = 0; i < NB * blck; i++) {
                float got = kiln__qd_get(k, raw + off + (size_t)(i / blck * bytes), i % blck);
                uint32_t a, b;
                memcpy(&a, &got, 4), memcpy(&b, &want[i], 4);
                if (a != b && bad++ < 3)
                    KT_CHECK(false, "%s element %d (at +%d): %a, the reference %a", kiln_dtype_name(t), i, off,
                             (double)got, (double)want[i]);
            }
        }
        KT_CHECK(bad == 0, "%s: %d elements differ", kiln_dtype_name(t), bad);
        free(raw), free(want);
    }
}
