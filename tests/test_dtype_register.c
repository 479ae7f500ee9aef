/* test_dtype_register.c — the dtype table's rows for the quantized
 * formats, which each format registers from its own file in quant/ when
 * the library loads (core/internal.h, kiln__dtype_register): all there
 * before the first context (a safetensors file of quantized tensors opens
 * first thing), registrations that would break the table refused, and the
 * CPU backend's faster coders preferred (kiln__dtype_prefer_coders). */
#include "kt.h"
#include "../quant/quant.h"
#include "../quant/dfp.h"

#include <unistd.h>

/* Every quantized dtype with its name, block and block bytes. */
static const struct {
    kiln_dtype t;
    const char *name;
    int64_t blck;
    size_t size;
} formats[] = {
    {KILN_Q8_0, "q8_0", 32, 34},      {KILN_Q4_0, "q4_0", 32, 18},      {KILN_NF4, "nf4", 64, 36},
    {KILN_NF4_DQ, "nf4_dq", 16384, 8456}, {KILN_GQ4_32, "gq4_32", 32, 19}, {KILN_GQ4_64, "gq4_64", 64, 35},
    {KILN_GQ4_128, "gq4_128", 128, 67}, {KILN_GQ3_32, "gq3_32", 32, 15}, {KILN_GQ3_64, "gq3_64", 64, 27},
    {KILN_GQ3_128, "gq3_128", 128, 51}, {KILN_GQ2_32, "gq2_32", 32, 11}, {KILN_GQ2_64, "gq2_64", 64, 19},
    {KILN_GQ2_128, "gq2_128", 128, 35}, {KILN_DFP16, "dfp16", 64, 130},  {KILN_Q4_1, "q4_1", 32, 20},
    {KILN_Q5_0, "q5_0", 32, 22},        {KILN_Q5_1, "q5_1", 32, 24},      {KILN_Q8_1, "q8_1", 32, 36},
    {KILN_Q2_K, "q2_K", 256, 84},       {KILN_Q3_K, "q3_K", 256, 110},    {KILN_Q4_K, "q4_K", 256, 144},
    {KILN_Q5_K, "q5_K", 256, 176},      {KILN_Q6_K, "q6_K", 256, 210},    {KILN_Q8_K, "q8_K", 256, 292},
    {KILN_IQ4_NL, "iq4_nl", 32, 18},    {KILN_IQ4_XS, "iq4_xs", 256, 136},
};
#define N_FORMATS (int)(sizeof formats / sizeof formats[0])

/* No kiln_ctx_new in this test: the rows come from the formats' own
 * constructors, not from anything a context sets up. */
KT_TEST(dtype_formats_registered_before_any_context) {
    KT_CHECK(N_FORMATS == KILN_DTYPE_COUNT - KILN_Q8_0, "the table above misses a dtype");
    for (int i = 0; i < N_FORMATS; i++) {
        kiln_dtype t = formats[i].t;
        const kiln_type_traits *tr = &kiln__types[t];
        KT_CHECK(kiln_dtype_is_quantized(t) && !strcmp(kiln_dtype_name(t), formats[i].name) &&
                     kiln_dtype_block(t) == formats[i].blck && kiln_dtype_size(t) == formats[i].size,
                 "%s: is '%s', block %lld of %zu bytes", formats[i].name, kiln_dtype_name(t),
                 (long long)kiln_dtype_block(t), kiln_dtype_size(t));
        KT_CHECK(tr->get && tr->to_f32 && tr->from_f32 && !tr->set && !tr->is_float, "%s: coders", formats[i].name);
    }
    /* a file holding a q4_0 [2, 32] (two blocks: U8 [36] and its metadata) */
    static const char hdr[] = "{\"__metadata__\":{\"kiln.quantized.w\":\"{\\\"dtype\\\":\\\"q4_0\\\",\\\"shape\\\":[2,32]}\"},"
                              "\"w\":{\"dtype\":\"U8\",\"shape\":[36],\"data_offsets\":[0,36]}}";
    char path[] = "/tmp/kiln_dtype_reg_XXXXXX";
    int fd = mkstemp(path);
    KT_REQUIRE(fd >= 0, "mkstemp");
    uint64_t len = sizeof hdr - 1;
    unsigned char blocks[36] = {0};
    bool written = write(fd, &len, 8) == 8 && write(fd, hdr, len) == (ssize_t)len && write(fd, blocks, 36) == 36;
    close(fd);
    kiln_safetensors *st = written ? kiln_safetensors_open(path) : NULL;
    unlink(path);
    KT_REQUIRE(st, "open: %s", written ? kiln_last_error() : "short write");
    kiln_safetensors_info in;
    KT_OK(kiln_safetensors_info_at(st, kiln_safetensors_find(st, "w"), &in));
    KT_CHECK(in.kiln_dtype == KILN_Q4_0 && in.ndim == 2 && in.shape[0] == 2 && in.shape[1] == 32,
             "w: dtype %d, %d dims", in.kiln_dtype, in.ndim);
    kiln_safetensors_close(st);
}

/* A registration refused with status st and a message holding text. */
#define REFUSED(expr, st, text)                                                                                  \
    do {                                                                                                         \
        kiln_status s_ = (expr);                                                                                 \
        KT_CHECK(s_ == (st) && strstr(kiln_last_error(), text), "%s: %s: %s", #expr, kiln_status_name(s_),      \
                 kiln_last_error());                                                                             \
    } while (0)

/* Each refused registration says why and leaves the table as it was. */
KT_TEST(dtype_register_refuses_what_would_break_the_table) {
    const kiln_type_traits q8 = kiln__types[KILN_Q8_0], f32 = kiln__types[KILN_F32];
    REFUSED(kiln__dtype_register(KILN_Q8_0, &q8), KILN_ERR_STATE, "q8_0 already");
    REFUSED(kiln__dtype_register(KILN_F32, &q8), KILN_ERR_STATE, "f32 already");
    REFUSED(kiln__dtype_register(KILN_DTYPE_COUNT, &q8), KILN_ERR_DTYPE, "out of range");
    REFUSED(kiln__dtype_register((kiln_dtype)-1, &q8), KILN_ERR_DTYPE, "out of range");
    REFUSED(kiln__dtype_register(KILN_Q8_0, NULL), KILN_ERR_ARG, "need traits");
    /* traits short of one thing each, named before the taken row is */
    static const char *const want[] = {"a name", "a block size", "blocks of 2", "a row block", "need get",
                                       "need to_f32", "need from_f32", "set NULL"};
    for (int i = 0; i < 8; i++) {
        kiln_type_traits bad = q8;
        if (i == 0) bad.name = NULL;
        if (i == 1) bad.size = 0;
        if (i == 2) bad.blck = 1;
        if (i == 3) bad.row_blck = 5; /* 32 is not a multiple of it */
        if (i == 4) bad.get = NULL;
        if (i == 5) bad.to_f32 = NULL;
        if (i == 6) bad.from_f32 = NULL;
        if (i == 7) bad.set = f32.set;
        REFUSED(kiln__dtype_register(KILN_Q8_0, &bad), KILN_ERR_ARG, want[i]);
    }
    KT_CHECK(!memcmp(&kiln__types[KILN_Q8_0], &q8, sizeof q8) && !memcmp(&kiln__types[KILN_F32], &f32, sizeof f32),
             "a refused registration changed the table");
}

static void zeros_to_f32(const void *blocks, float *y, int64_t n) {
    (void)blocks;
    memset(y, 0, (size_t)n * sizeof *y);
}

/* The CPU backend's SIMD coders are the rows' coders from load on, in
 * place of the formats' references (what kiln_tensor_get_f32 and the file
 * loaders run); a later preference replaces what it names, nothing else. */
KT_TEST(dtype_preferred_coders) {
    KT_CHECK(kiln__types[KILN_Q8_0].to_f32 != kiln__dequantize_q8_0_ref &&
                 kiln__types[KILN_Q4_0].to_f32 != kiln__dequantize_q4_0_ref &&
                 kiln__types[KILN_NF4].to_f32 != kiln__dequantize_nf4_ref &&
                 kiln__types[KILN_NF4_DQ].to_f32 != kiln__dequantize_nf4_dq_ref,
             "a block dtype decodes through its scalar reference");
    KT_CHECK(kiln__types[KILN_DFP16].from_f32 != kiln__quantize_dfp16_ref &&
                 kiln__types[KILN_DFP16].to_f32 == kiln__dequantize_dfp16,
             "dfp16: the CPU's quantizer, the reference's decoder");
    kiln_from_f32_fn *q8 = kiln__types[KILN_Q8_0].from_f32; /* the reference, or NEON's (test_qmatmul_ggml.c) */
    KT_OK(kiln__dtype_prefer_coders(KILN_Q8_0, zeros_to_f32, NULL));
    KT_CHECK(kiln__types[KILN_Q8_0].to_f32 == zeros_to_f32 && kiln__types[KILN_Q8_0].from_f32 == q8,
             "the preference did not take, or took more than it named");
    REFUSED(kiln__dtype_prefer_coders(KILN_DTYPE_COUNT, zeros_to_f32, NULL), KILN_ERR_DTYPE, "out of range");
}
