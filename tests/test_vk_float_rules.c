/* test_vk_float_rules.c — f32 on the Vulkan device as the CPU has it,
 * whatever the driver's own shortcuts: division correctly rounded over the
 * whole range (subnormal quotients, their ties, overflow), and the
 * float-controls execution modes vk_spirv.c adds to every shader for the
 * devices that offer them (NaN and infinities kept, subnormals kept). */
#include "kt_device.h"

#include "../backends/vulkan/vk.h"

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 16;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* a / b on the device against the CPU's division, bit for bit (any NaN
 * for a NaN): random bit patterns (every exponent: about a quarter of the
 * quotients are subnormal or zero), quotients exactly halfway between two
 * subnormals and just either side of one, the cases NVIDIA's driver got
 * wrong (1 / 1e38, 3 / 1e-30), overflow, zeros, infinities, NaN. */
KT_TEST(vk_div_whole_range_exact) {
    kiln_backend *vk = kt_device("vulkan");
    if (!vk) return;
    enum { N = 6000 };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *y = malloc(N * sizeof *y);
    uint64_t s = 7;
    int k = 0;
    static const float fixed[][2] = {{1, 1e38f}, {3, 1e-30f}, {1e30f, 1e-30f}, {-1e-45f, 3}, {1e-45f, 2}, {3e-45f, 2},
                                     {0.0f, 0.0f}, {-0.0f, 5}, {5, -0.0f}, {1.0f / 0.0f, 2}, {2, -1.0f / 0.0f},
                                     {1.0f / 0.0f, 1.0f / 0.0f}, {0.0f / 0.0f, 1}, {1, -(0.0f / 0.0f)}, {3.4e38f, 0.5f},
                                     {1.17549435e-38f, 1.0000001f}, {1.17549435e-38f, 0.99999994f}};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) a[k] = fixed[i][0], b[k++] = fixed[i][1];
    for (uint32_t m = 1; k < 1000; m += 2) { /* odd subnormals over 2: ties; over 2(1 +- ulp): near ties */
        a[k] = from_bits(m * 977u % 0x800000u | 1u), b[k++] = 2;
        a[k] = a[k - 1], b[k++] = from_bits(0x40000001u);
        a[k] = a[k - 1], b[k++] = from_bits(0x3fffffffu);
        a[k] = from_bits(0x00800000u | (m * 7919u % 0x800000u)), b[k++] = from_bits(0x4b000000u | (m * 31u % 0x800000u));
    }
    while (k < N) {
        a[k] = from_bits((uint32_t)lcg(&s));
        b[k++] = from_bits((uint32_t)lcg(&s));
    }
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t msgs0 = kiln_backend_validation_messages(vk);
    KT_OK(kiln_ctx_set_backend(ctx, vk));
    kiln_tensor *ta = kiln_new_1d(ctx, KILN_F32, N), *tb = kiln_new_1d(ctx, KILN_F32, N);
    KT_OK(kiln_tensor_set_f32(ta, a, N));
    KT_OK(kiln_tensor_set_f32(tb, b, N));
    kiln_tensor *q = kiln_div(ctx, ta, tb);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, q));
    KT_OK(kiln_graph_compute(g));
    KT_CHECK(kiln_graph_get_stats(g).nodes_fallback == 0, "the division ran on the CPU");
    KT_OK(kiln_tensor_get_f32(q, y, N));
    int bad = 0;
    for (int i = 0; i < N; i++) {
        volatile float want = a[i] / b[i]; /* volatile: rounded to f32 here, once */
        bool same = want != want ? y[i] != y[i] : bits(y[i]) == bits(want);
        if (!same && bad++ < 5)
            kt_fail(__FILE__, __LINE__, "%.9g / %.9g (%08x / %08x): vulkan %.9g (%08x), cpu %.9g (%08x)", a[i], b[i],
                    bits(a[i]), bits(b[i]), y[i], bits(y[i]), want, bits(want));
    }
    KT_CHECK(bad == 0, "%d of %d quotients differ", bad, N);
    KT_CHECK(kiln_backend_validation_messages(vk) == msgs0, "validation messages");
    kiln_ctx_free(ctx);
    free(a), free(b), free(y);
}

/* Does w hold the instruction {op, args...} (exact words)? */
static bool has_insn(const uint32_t *w, size_t n, uint32_t op, const uint32_t *args, uint32_t nargs) {
    for (size_t i = 5; i < n && w[i] >> 16; i += w[i] >> 16)
        if ((w[i] & 0xffff) == op && (w[i] >> 16) == nargs + 1 && !memcmp(&w[i + 1], args, nargs * 4)) return true;
    return false;
}

/* The index of the first instruction with opcode op, or n. */
static size_t first(const uint32_t *w, size_t n, uint32_t op) {
    size_t i = 5;
    while (i < n && w[i] >> 16 && (w[i] & 0xffff) != op) i += w[i] >> 16;
    return i;
}

static const kiln_vk_shader *shader(const char *name) {
    for (int i = 0; i < kiln__vk_n_shaders; i++)
        if (!strcmp(kiln__vk_shaders[i].name, name)) return &kiln__vk_shaders[i];
    return NULL;
}

/* The patch adds each mode with its capability for the entry point, in the
 * sections SPIR-V requires (capabilities first, modes after the entry
 * points), keeps every other word, and adds nothing a second time; a
 * module whose instruction runs past its end is an error. The device
 * itself checks the patched modules it runs (the suite runs under the
 * validation layer), with the modes it offers. */
KT_TEST(vk_spirv_float_modes_patch) {
    const kiln_vk_shader *sh = shader("ew_b_div_s");
    KT_CHECK(sh != NULL, "shader ew_b_div_s embedded");
    if (!sh) return;
    size_t n = sh->bytes / 4, n1 = 0, n2 = 0;
    uint32_t *p1 = NULL, *p2 = NULL;
    KT_OK(kiln__vk_spirv_float_modes(sh->words, n, KILN_VK_SZ_INF_NAN_PRESERVE_32 | KILN_VK_DENORM_PRESERVE_32, &p1, &n1));
    size_t ep = first(p1, n1, 15);
    KT_CHECK(ep < n1, "entry point kept");
    uint32_t entry = p1[ep + 2];
    KT_CHECK(has_insn(p1, n1, 17, (uint32_t[]){4466}, 1) && has_insn(p1, n1, 17, (uint32_t[]){4464}, 1),
             "capabilities SignedZeroInfNanPreserve and DenormPreserve");
    KT_CHECK(has_insn(p1, n1, 16, (uint32_t[]){entry, 4461, 32}, 3) && has_insn(p1, n1, 16, (uint32_t[]){entry, 4459, 32}, 3),
             "execution modes for the entry point, 32-bit");
    KT_CHECK(first(p1, n1, 16) > ep && first(p1, n1, 17) < first(p1, n1, 14), "modes after the entry point, capabilities first");
    KT_CHECK(n1 == n + 2 * 2 + 2 * 4 + (sh->words[1] >= 0x00010400u ? 0 : 7), "%zu words from %zu", n1, n);
    size_t tail = n - first(sh->words, n, 15) - (sh->words[first(sh->words, n, 15)] >> 16); /* after the entry point */
    KT_CHECK(!memcmp(p1 + n1 - tail, sh->words + n - tail, tail * 4), "the words after the entry point kept");
    KT_OK(kiln__vk_spirv_float_modes(p1, n1, KILN_VK_SZ_INF_NAN_PRESERVE_32 | KILN_VK_DENORM_PRESERVE_32, &p2, &n2));
    KT_CHECK(n2 == n1 && !memcmp(p1, p2, n1 * 4), "patching twice adds nothing");
    free(p2);
    KT_OK(kiln__vk_spirv_float_modes(sh->words, n, 0, &p2, &n2));
    KT_CHECK(n2 == n && !memcmp(p2, sh->words, n * 4), "no modes: the module unchanged");
    free(p2);
    p1[ep] = (uint32_t)(n1 - ep + 1) << 16 | 15; /* the entry point now runs past the end */
    kiln_status st = kiln__vk_spirv_float_modes(p1, n1, KILN_VK_SZ_INF_NAN_PRESERVE_32, &p2, &n2);
    KT_CHECK(st == KILN_ERR_FORMAT && !p2 && strstr(kiln_last_error(), "runs past"), "truncated: %s", kiln_last_error());
    free(p1);
}
