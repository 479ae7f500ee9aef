/* test_gguf.c — the GGUF reader and writer (core/gguf.c, gguf_write.c):
 * a round trip of every metadata type and F32/F16/raw Q8_0 tensors, a
 * header built byte by byte from the spec, every truncation of a small
 * file, and corrupt or hostile headers (absurd counts, lengths, dims,
 * offsets) that must fail with a message, never crash or allocate. */
#include "kt.h"

#include <unistd.h>

static char *tmp_path(const char *name) {
    static char p[4][128];
    static int k;
    char *s = p[k++ % 4];
    /* /dev/shm where there is one: the truncation test writes a thousand files */
    snprintf(s, 128, "%s/kiln_gguf_%d_%s", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid(), name);
    return s;
}

/* ---- a little byte builder for hand-made headers ---- */
typedef struct bb {
    unsigned char b[4096];
    size_t n;
} bb;
static void b_raw(bb *b, const void *p, size_t n) {
    memcpy(b->b + b->n, p, n);
    b->n += n;
}
static void b_u(bb *b, uint64_t v, int k) {
    for (int i = 0; i < k; i++) b->b[b->n++] = i < 8 ? (unsigned char)(v >> (8 * i)) : 0;
}
static void b_str(bb *b, const char *s) {
    b_u(b, strlen(s), 8);
    b_raw(b, s, strlen(s));
}
static void b_pad(bb *b, size_t a) {
    while (b->n % a) b->b[b->n++] = 0;
}
static void b_head(bb *b, uint32_t version, uint64_t n_t, uint64_t n_kv) {
    b->n = 0;
    b_raw(b, "GGUF", 4);
    b_u(b, version, 4);
    b_u(b, n_t, 8);
    b_u(b, n_kv, 8);
}
static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(p, 1, n, f);
    fclose(f);
}

KT_TEST(gguf_hand_built_header) {
    bb b;
    b_head(&b, 2, 1, 1);
    b_str(&b, "answer");
    b_u(&b, KILN_GGUF_INT32, 4);
    b_u(&b, (uint32_t)-7, 4);
    b_str(&b, "w");
    b_u(&b, 2, 4);
    b_u(&b, 2, 8); /* ne[0] = 2: kiln shape [3, 2] */
    b_u(&b, 3, 8);
    b_u(&b, KILN_GGML_F32, 4);
    b_u(&b, 0, 8);
    b_pad(&b, 32);
    size_t data_at = b.n;
    for (int i = 0; i < 6; i++) {
        float f = (float)i + 0.5f;
        b_raw(&b, &f, 4);
    }
    const char *p = tmp_path("hand.gguf");
    write_bytes(p, b.b, b.n);
    kiln_gguf *g = kiln_gguf_open(p);
    KT_NOTNULL(g);
    KT_CHECK(kiln_gguf_version(g) == 2 && kiln_gguf_alignment(g) == 32, "version/alignment");
    int64_t v = 0;
    KT_OK(kiln_gguf_get_int(g, "answer", &v));
    KT_CHECK(v == -7, "answer %lld", (long long)v);
    kiln_gguf_tensor_info ti;
    KT_OK(kiln_gguf_tensor_info_at(g, 0, &ti));
    KT_CHECK(ti.ndim == 2 && ti.shape[0] == 3 && ti.shape[1] == 2 && ti.ne[0] == 2 && ti.nbytes == 24 &&
                 !strcmp(ti.type_name, "F32") && ti.kiln_dtype == KILN_F32,
             "info");
    KT_CHECK(ti.data != NULL && ti.offset == 0, "data");
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *t = kiln_gguf_load(g, ctx, "w");
    KT_NOTNULL(t);
    float out[6];
    KT_OK(kiln_tensor_get_f32(t, out, 6));
    for (int i = 0; i < 6; i++) KT_CHECK(out[i] == (float)i + 0.5f, "w[%d] = %g", i, out[i]);
    (void)data_at;
    kiln_gguf_close(g);
    kiln_ctx_free(ctx);
    unlink(p);
}

/* A small file through the writer with every metadata type. */
static kiln_status write_small(const char *path, kiln_ctx *ctx, uint32_t align) {
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    if (!w) return kiln_last_status();
    kiln_tensor *a = kiln_new_2d(ctx, KILN_F32, 3, 5), *h = kiln_new_2d(ctx, KILN_F16, 2, 8);
    float av[15], hv[16];
    for (int i = 0; i < 15; i++) av[i] = (float)i * 0.25f - 1;
    for (int i = 0; i < 16; i++) hv[i] = (float)i - 8;
    kiln_tensor_set_f32(a, av, 15);
    kiln_tensor_set_f32(h, hv, 16);
    static unsigned char q8[2 * 34];
    for (int i = 0; i < 68; i++) q8[i] = (unsigned char)(i * 7);
    const int32_t ia[3] = {1, -2, 3};
    const float fa[2] = {0.5f, -1.5f};
    const char *sa[3] = {"a", "", "h\xc3\xa9llo"};
    const uint8_t ba[2] = {1, 0};
    kiln_status s = KILN_OK;
    if (align) s = kiln_gguf_set_int(w, "general.alignment", KILN_GGUF_UINT32, align);
    if (!s) s = kiln_gguf_set_int(w, "u8", KILN_GGUF_UINT8, 200);
    if (!s) s = kiln_gguf_set_int(w, "i8", KILN_GGUF_INT8, -100);
    if (!s) s = kiln_gguf_set_int(w, "u16", KILN_GGUF_UINT16, 60000);
    if (!s) s = kiln_gguf_set_int(w, "i16", KILN_GGUF_INT16, -30000);
    if (!s) s = kiln_gguf_set_int(w, "u32", KILN_GGUF_UINT32, 4000000000ll);
    if (!s) s = kiln_gguf_set_int(w, "i32", KILN_GGUF_INT32, -2000000000);
    if (!s) s = kiln_gguf_set_int(w, "u64", KILN_GGUF_UINT64, 1ll << 40);
    if (!s) s = kiln_gguf_set_int(w, "i64", KILN_GGUF_INT64, -(1ll << 50));
    if (!s) s = kiln_gguf_set_int(w, "b", KILN_GGUF_BOOL, 1);
    if (!s) s = kiln_gguf_set_float(w, "f32", KILN_GGUF_FLOAT32, 0.1);
    if (!s) s = kiln_gguf_set_float(w, "f64", KILN_GGUF_FLOAT64, 0.1);
    if (!s) s = kiln_gguf_set_string(w, "general.architecture", "llama");
    if (!s) s = kiln_gguf_set_array(w, "ia", KILN_GGUF_INT32, ia, 3);
    if (!s) s = kiln_gguf_set_array(w, "fa", KILN_GGUF_FLOAT32, fa, 2);
    if (!s) s = kiln_gguf_set_array(w, "sa", KILN_GGUF_STRING, sa, 3);
    if (!s) s = kiln_gguf_set_array(w, "ba", KILN_GGUF_BOOL, ba, 2);
    if (!s) s = kiln_gguf_add_tensor(w, "a", a);
    if (!s) s = kiln_gguf_add_tensor(w, "h", h);
    if (!s) s = kiln_gguf_add_raw(w, "q", KILN_GGML_Q8_0, 2, (int64_t[]){2, 32}, q8, sizeof q8);
    if (!s) s = kiln_gguf_writer_save(w, path);
    kiln_gguf_writer_free(w);
    return s;
}

/* IEEE half to double, from the format's definition. */
static double half_to_double(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    if (b && fread(b, 1, *n, f) != *n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

KT_TEST(gguf_round_trip) {
    kiln_ctx *ctx = kiln_ctx_new();
    const char *p = tmp_path("rt.gguf");
    KT_OK(write_small(p, ctx, 64));
    kiln_gguf *g = kiln_gguf_open(p);
    KT_NOTNULL(g);
    KT_CHECK(kiln_gguf_version(g) == 3 && kiln_gguf_alignment(g) == 64, "version %u alignment %u",
             kiln_gguf_version(g), kiln_gguf_alignment(g));
    KT_CHECK(kiln_gguf_kv_count(g) == 17 && kiln_gguf_tensor_count(g) == 3, "counts");
    const char *keys[] = {"u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "b"};
    const int64_t want[] = {200, -100, 60000, -30000, 4000000000ll, -2000000000, 1ll << 40, -(1ll << 50), 1};
    for (int i = 0; i < 9; i++) {
        int64_t v = 0;
        KT_OK(kiln_gguf_get_int(g, keys[i], &v));
        KT_CHECK(v == want[i], "%s = %lld", keys[i], (long long)v);
    }
    KT_CHECK(kiln_gguf_kv_type(g, kiln_gguf_find_key(g, "i16")) == KILN_GGUF_INT16, "type");
    double f = 0;
    KT_OK(kiln_gguf_get_float(g, "f32", &f));
    KT_CHECK(f == (double)0.1f, "f32 %g", f);
    KT_OK(kiln_gguf_get_float(g, "f64", &f));
    KT_CHECK(f == 0.1, "f64 %g", f);
    int64_t iv;
    KT_CHECK(kiln_gguf_get_int(g, "f64", &iv) == KILN_ERR_FORMAT, "a float is not an int");
    KT_CHECK(kiln_gguf_get_int(g, "nope", &iv) == KILN_ERR_FORMAT && strstr(kiln_last_error(), "nope"), "missing");
    size_t len;
    const char *arch = kiln_gguf_get_string(g, "general.architecture", &len);
    KT_CHECK(arch && !strcmp(arch, "llama") && len == 5, "arch");
    kiln_gguf_type et;
    uint64_t n;
    KT_OK(kiln_gguf_get_array(g, "ia", &et, &n));
    KT_CHECK(et == KILN_GGUF_INT32 && n == 3, "ia");
    KT_OK(kiln_gguf_array_int(g, "ia", 1, &iv));
    KT_CHECK(iv == -2, "ia[1]");
    KT_CHECK(kiln_gguf_array_int(g, "ia", 3, &iv) == KILN_ERR_ARG, "past the end");
    KT_OK(kiln_gguf_array_float(g, "fa", 1, &f));
    KT_CHECK(f == -1.5, "fa[1]");
    KT_OK(kiln_gguf_array_int(g, "ba", 0, &iv));
    KT_CHECK(iv == 1, "ba[0]");
    const char *s2 = kiln_gguf_array_string(g, "sa", 2, &len);
    KT_CHECK(s2 && !strcmp(s2, "h\xc3\xa9llo") && len == 6, "sa[2]");
    KT_CHECK(kiln_gguf_array_string(g, "sa", 1, &len) && len == 0, "sa[1]");
    KT_CHECK(!kiln_gguf_array_string(g, "ia", 0, NULL), "not strings");

    kiln_gguf_tensor_info ti;
    for (int i = 0; i < 3; i++) {
        KT_OK(kiln_gguf_tensor_info_at(g, i, &ti));
        KT_CHECK(ti.offset % 64 == 0, "offset %llu", (unsigned long long)ti.offset);
    }
    int qi = kiln_gguf_find_tensor(g, "q");
    KT_OK(kiln_gguf_tensor_info_at(g, qi, &ti));
    KT_CHECK(ti.ggml_type == KILN_GGML_Q8_0 && ti.nbytes == 68 && ti.shape[0] == 2 && ti.shape[1] == 32 &&
                 !strcmp(ti.type_name, "Q8_0"),
             "q info");
    for (int i = 0; i < 68; i++) KT_CHECK(((const unsigned char *)ti.data)[i] == (unsigned char)(i * 7), "q byte %d", i);
    kiln_tensor *a = kiln_gguf_load(g, ctx, "a");
    KT_NOTNULL(a);
    float av[15];
    KT_OK(kiln_tensor_get_f32(a, av, 15));
    for (int i = 0; i < 15; i++) KT_CHECK(av[i] == (float)i * 0.25f - 1, "a[%d]", i);
    kiln_tensor *h32 = kiln_new_2d(ctx, KILN_F32, 2, 8);
    KT_OK(kiln_gguf_read_into(g, "h", h32)); /* F16 converted */
    float hv[16];
    KT_OK(kiln_tensor_get_f32(h32, hv, 16));
    for (int i = 0; i < 16; i++) KT_CHECK(hv[i] == (float)i - 8, "h[%d]", i);
    KT_CHECK(kiln_gguf_read_into(g, "a", h32) == KILN_ERR_SHAPE, "shape mismatch");
    /* Q8_0 is kiln's KILN_Q8_0 byte for byte: x = d * q with d an f16 */
    kiln_tensor *q = kiln_gguf_load(g, ctx, "q");
    KT_NOTNULL(q);
    KT_CHECK(kiln_tensor_dtype(q) == KILN_Q8_0 && kiln_tensor_nbytes(q) == 68 && kiln_tensor_dim(q, 1) == 32, "q8");
    float qv[64], qf[64];
    KT_OK(kiln_tensor_get_f32(q, qv, 64));
    kiln_tensor *q32 = kiln_new_2d(ctx, KILN_F32, 2, 32);
    KT_OK(kiln_gguf_read_into(g, "q", q32)); /* dequantized on the way in */
    KT_OK(kiln_tensor_get_f32(q32, qf, 64));
    for (int i = 0; i < 64; i++) {
        const unsigned char *blk = (const unsigned char *)ti.data + (i / 32) * 34;
        double d = half_to_double((uint16_t)(blk[0] | blk[1] << 8)) * (int8_t)blk[2 + i % 32];
        KT_CHECK(qv[i] == (float)d && qf[i] == (float)d, "q[%d] = %g / %g, want %g", i, qv[i], qf[i], d);
    }
    kiln_gguf_close(g);
    unlink(p);
    kiln_ctx_free(ctx);
}

KT_TEST(gguf_writer_refuses_bad_input) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    KT_OK(kiln_gguf_set_int(w, "k", KILN_GGUF_INT32, 1));
    KT_CHECK(kiln_gguf_set_int(w, "k", KILN_GGUF_INT32, 2) == KILN_ERR_ARG, "key twice");
    KT_CHECK(kiln_gguf_set_int(w, "x", KILN_GGUF_UINT8, 256) == KILN_ERR_ARG, "does not fit");
    KT_CHECK(kiln_gguf_set_int(w, "y", KILN_GGUF_FLOAT32, 1) == KILN_ERR_ARG, "not an int type");
    KT_CHECK(kiln_gguf_add_raw(w, "q", KILN_GGML_Q4_0, 1, (int64_t[]){33}, "", 1) == KILN_ERR_ARG, "not whole blocks");
    kiln_tensor *i = kiln_new_1d(ctx, KILN_I32, 4);
    KT_CHECK(kiln_gguf_add_tensor(w, "i", i) == KILN_ERR_DTYPE, "i32");
    kiln_gguf_writer_free(w);
    /* a failed add keeps save from writing a file that lacks it */
    w = kiln_gguf_writer_new();
    KT_CHECK(kiln_gguf_add_raw(w, "q", KILN_GGML_Q8_0, 1, (int64_t[]){32}, "", 1) == KILN_ERR_ARG, "size");
    const char *p = tmp_path("never.gguf");
    unlink(p);
    KT_CHECK(kiln_gguf_writer_save(w, p) == KILN_ERR_ARG && access(p, F_OK) != 0, "sticky error");
    kiln_gguf_writer_free(w);
    kiln_ctx_free(ctx);
}

KT_TEST(gguf_truncated_at_every_length) {
    kiln_ctx *ctx = kiln_ctx_new();
    const char *p = tmp_path("full.gguf"), *q = tmp_path("cut.gguf");
    KT_OK(write_small(p, ctx, 0));
    size_t n;
    unsigned char *b = slurp(p, &n);
    KT_NOTNULL(b);
    kiln_gguf *g = kiln_gguf_open(p);
    KT_NOTNULL(g);
    /* the last tensor's bytes end here; past it is only padding */
    kiln_gguf_tensor_info last;
    kiln_gguf_tensor_info_at(g, kiln_gguf_tensor_count(g) - 1, &last);
    size_t data_start = n - (size_t)((last.offset + last.nbytes + 31) / 32 * 32);
    size_t need = data_start + (size_t)(last.offset + last.nbytes);
    kiln_gguf_close(g);
    for (size_t k = 0; k < n; k++) {
        write_bytes(q, b, k);
        kiln_clear_error();
        g = kiln_gguf_open(q);
        if (k < need) {
            KT_CHECK(!g && kiln_last_status() == KILN_ERR_FORMAT, "length %zu of %zu opened (%s)", k, n,
                     kiln_last_error());
        } else {
            KT_CHECK(g != NULL, "length %zu of %zu (only padding cut): %s", k, n, kiln_last_error());
        }
        kiln_gguf_close(g);
    }
    free(b);
    unlink(p);
    unlink(q);
    kiln_ctx_free(ctx);
}

/* Open bytes that must fail with FORMAT (or UNSUPPORTED) and a message holding text. */
static void expect_bad(const bb *b, kiln_status st, const char *text, int line) {
    const char *p = tmp_path("bad.gguf");
    write_bytes(p, b->b, b->n);
    kiln_clear_error();
    kiln_gguf *g = kiln_gguf_open(p);
    if (g || kiln_last_status() != st || !strstr(kiln_last_error(), text))
        kt_fail(__FILE__, line, "opened=%d status %s message '%s' (want '%s')", g != NULL,
                kiln_status_name(kiln_last_status()), kiln_last_error(), text);
    kiln_gguf_close(g);
    unlink(p);
}
#define BAD(st, text) expect_bad(&b, st, text, __LINE__)

/* One tensor info: name, dims, type, offset. */
static void b_tensor(bb *b, const char *name, int nd, const uint64_t *ne, uint32_t type, uint64_t off) {
    b_str(b, name);
    b_u(b, (uint64_t)nd, 4);
    for (int d = 0; d < nd; d++) b_u(b, ne[d], 8);
    b_u(b, type, 4);
    b_u(b, off, 8);
}

KT_TEST(gguf_corrupt_and_hostile_headers) {
    bb b;
    b.n = 0;
    b_raw(&b, "GGUX", 4);
    b_u(&b, 3, 4);
    b_u(&b, 0, 16);
    BAD(KILN_ERR_FORMAT, "magic");
    b_head(&b, 1, 0, 0);
    BAD(KILN_ERR_UNSUPPORTED, "version 1");
    b_head(&b, 4, 0, 0);
    BAD(KILN_ERR_FORMAT, "version 4");
    b_head(&b, 0x03000000, 0, 0);
    BAD(KILN_ERR_UNSUPPORTED, "big-endian");
    b_head(&b, 3, 0, 1ull << 62); /* billions of keys */
    BAD(KILN_ERR_FORMAT, "metadata entries cannot fit");
    b_head(&b, 3, 4000000000ull, 0); /* billions of tensors */
    BAD(KILN_ERR_FORMAT, "tensor infos cannot fit");
    b_head(&b, 3, 0, 1);
    b_u(&b, 1ull << 60, 8); /* a key of 2^60 bytes */
    b_u(&b, 0, 8);
    BAD(KILN_ERR_FORMAT, "runs past the end");
    b_head(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u(&b, 99, 4);
    b_u(&b, 0, 8);
    BAD(KILN_ERR_FORMAT, "unknown value type 99");
    b_head(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u(&b, KILN_GGUF_ARRAY, 4);
    b_u(&b, KILN_GGUF_STRING, 4);
    b_u(&b, 1ull << 61, 8); /* 2^61 strings */
    b_u(&b, 0, 16);
    BAD(KILN_ERR_FORMAT, "cannot fit");
    b_head(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u(&b, KILN_GGUF_ARRAY, 4);
    b_u(&b, KILN_GGUF_UINT64, 4);
    b_u(&b, (1ull << 61) + 1, 8); /* 8 * n wraps around */
    b_u(&b, 0, 16);
    BAD(KILN_ERR_FORMAT, "cannot fit");
    b_head(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u(&b, KILN_GGUF_BOOL, 4);
    b_u(&b, 2, 1);
    BAD(KILN_ERR_FORMAT, "bool");
    b_head(&b, 3, 0, 2);
    b_str(&b, "k");
    b_u(&b, KILN_GGUF_UINT8, 4);
    b_u(&b, 1, 1);
    b_str(&b, "k");
    b_u(&b, KILN_GGUF_UINT8, 4);
    b_u(&b, 2, 1);
    BAD(KILN_ERR_FORMAT, "key 'k' appears twice");
    b_head(&b, 3, 0, 1);
    b_str(&b, "general.alignment");
    b_u(&b, KILN_GGUF_UINT32, 4);
    b_u(&b, 24, 4);
    BAD(KILN_ERR_FORMAT, "power of two");
    b_head(&b, 3, 0, 1);
    b_str(&b, "general.alignment");
    b_u(&b, KILN_GGUF_UINT64, 4);
    b_u(&b, 32, 8);
    BAD(KILN_ERR_FORMAT, "not a u32");

    uint64_t ne[5] = {32, 2, 1, 1, 1};
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 5, ne, KILN_GGML_F32, 0);
    b_u(&b, 0, 32);
    BAD(KILN_ERR_FORMAT, "5 dims");
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 2, (uint64_t[]){1ull << 62, 1ull << 62}, KILN_GGML_F32, 0);
    b_u(&b, 0, 32);
    BAD(KILN_ERR_FORMAT, "overflows");
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 1, (uint64_t[]){~0ull}, KILN_GGML_F32, 0);
    b_u(&b, 0, 32);
    BAD(KILN_ERR_FORMAT, "ne[0]");
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 1, ne, 4, 0); /* a removed type id */
    b_u(&b, 0, 32);
    BAD(KILN_ERR_FORMAT, "unknown ggml type 4");
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 1, (uint64_t[]){33}, KILN_GGML_Q4_0, 0);
    b_u(&b, 0, 32);
    BAD(KILN_ERR_FORMAT, "block");
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 1, ne, KILN_GGML_F32, 16);
    b_pad(&b, 32);
    b_u(&b, 0, 8);
    BAD(KILN_ERR_FORMAT, "not a multiple of the alignment");
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 1, ne, KILN_GGML_F32, 1ull << 40);
    b_pad(&b, 32);
    b_u(&b, 0, 8);
    BAD(KILN_ERR_FORMAT, "runs past the data");
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 1, ne, KILN_GGML_F32, 0);
    b_pad(&b, 32);
    b_u(&b, 0, 64); /* 64 of the 128 bytes */
    BAD(KILN_ERR_FORMAT, "runs past the data");
    b_head(&b, 3, 2, 0);
    b_tensor(&b, "t", 1, ne, KILN_GGML_F32, 0);
    b_tensor(&b, "u", 1, ne, KILN_GGML_F32, 64);
    b_pad(&b, 32);
    for (int i = 0; i < 24; i++) b_u(&b, 0, 8);
    BAD(KILN_ERR_FORMAT, "overlap");
    b_head(&b, 3, 2, 0);
    b_tensor(&b, "t", 1, ne, KILN_GGML_F32, 0);
    b_tensor(&b, "t", 1, ne, KILN_GGML_F32, 128);
    b_pad(&b, 32);
    for (int i = 0; i < 32; i++) b_u(&b, 0, 8);
    BAD(KILN_ERR_FORMAT, "tensor 't' appears twice");
    /* an empty file and a file of only a header: errors vs a valid empty GGUF */
    b.n = 0;
    BAD(KILN_ERR_FORMAT, "magic");
    b_head(&b, 3, 0, 0);
    const char *p = tmp_path("empty.gguf");
    write_bytes(p, b.b, b.n);
    kiln_gguf *g = kiln_gguf_open(p);
    KT_CHECK(g && kiln_gguf_tensor_count(g) == 0 && kiln_gguf_kv_count(g) == 0, "an empty GGUF opens: %s",
             kiln_last_error());
    kiln_gguf_close(g);
    unlink(p);
}

/* The writer's bytes against the spec, built by hand: header, one u32
 * key, one F32 tensor info, padding to 32, the data, padding to 32. */
KT_TEST(gguf_writer_bytes_match_the_spec) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *t = kiln_new_2d(ctx, KILN_F32, 2, 3);
    const float v[6] = {1, 2, 3, 4, 5, 6};
    KT_OK(kiln_tensor_set_f32(t, v, 6));
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    KT_OK(kiln_gguf_set_int(w, "k", KILN_GGUF_UINT32, 7));
    KT_OK(kiln_gguf_add_tensor(w, "w", t));
    const char *p = tmp_path("spec.gguf");
    KT_OK(kiln_gguf_writer_save(w, p));
    kiln_gguf_writer_free(w);
    bb b;
    b_head(&b, 3, 1, 1);
    b_str(&b, "k");
    b_u(&b, KILN_GGUF_UINT32, 4);
    b_u(&b, 7, 4);
    b_tensor(&b, "w", 2, (uint64_t[]){3, 2}, KILN_GGML_F32, 0);
    b_pad(&b, 32);
    b_raw(&b, v, sizeof v);
    b_pad(&b, 32);
    size_t n;
    unsigned char *got = slurp(p, &n);
    KT_NOTNULL(got);
    KT_CHECK(n == b.n && !memcmp(got, b.b, n), "the writer's %zu bytes differ from the spec's %zu", n, b.n);
    free(got);
    unlink(p);
    kiln_ctx_free(ctx);
}

/* Random byte changes of a valid file: each opens or fails with a
 * message, and what opens reads back without crashing. */
KT_TEST(gguf_mutated_files_never_crash) {
    kiln_ctx *ctx = kiln_ctx_new();
    const char *p = tmp_path("m.gguf"), *q = tmp_path("mut.gguf");
    KT_OK(write_small(p, ctx, 0));
    size_t n;
    unsigned char *b = slurp(p, &n);
    KT_NOTNULL(b);
    unsigned char *m = malloc(n);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    int opened = 0;
    for (int trial = 0; trial < 1500; trial++) {
        memcpy(m, b, n);
        for (int k = 0; k < 1 + trial % 4; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t at = (size_t)(x % n);
            /* mostly the header (the data is opaque); small and huge values */
            if (trial % 3) at %= n / 2;
            m[at] = (unsigned char)(trial % 5 == 0 ? 0xff : trial % 5 == 1 ? 0 : (x >> 40));
        }
        write_bytes(q, m, n);
        kiln_clear_error();
        kiln_gguf *g = kiln_gguf_open(q);
        if (!g) {
            KT_CHECK(kiln_last_status() != KILN_OK && kiln_last_error()[0], "trial %d: failed without a message", trial);
            continue;
        }
        opened++;
        for (int i = 0; i < kiln_gguf_kv_count(g); i++) {
            const char *key = kiln_gguf_kv_key(g, i);
            int64_t iv;
            double fv;
            kiln_gguf_type et;
            uint64_t len;
            kiln_gguf_get_int(g, key, &iv);
            kiln_gguf_get_float(g, key, &fv);
            kiln_gguf_get_string(g, key, NULL);
            if (!kiln_gguf_get_array(g, key, &et, &len) && len) {
                kiln_gguf_array_int(g, key, len - 1, &iv);
                kiln_gguf_array_string(g, key, len - 1, NULL);
            }
        }
        for (int i = 0; i < kiln_gguf_tensor_count(g); i++) {
            kiln_gguf_tensor_info ti;
            kiln_gguf_tensor_info_at(g, i, &ti);
            if (ti.nbytes < (1u << 20)) {
                kiln_ctx *c2 = kiln_ctx_new();
                kiln_gguf_load(g, c2, ti.name);
                kiln_ctx_free(c2);
            }
        }
        kiln_gguf_close(g);
    }
    KT_CHECK(opened > 0, "no mutated file opened (the data part should)");
    free(m);
    free(b);
    unlink(p);
    unlink(q);
    kiln_ctx_free(ctx);
}
