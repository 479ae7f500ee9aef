/* test_safetensors.c — the JSON reader (core/json.c), the safetensors
 * reader and writer and kiln_save/load_params: a hand-made fixture written
 * from the spec (tests/fixtures/tiny.safetensors) against kiln's writer
 * byte for byte, round trips of every dtype, a header laid out as other
 * writers do, every truncation of a small file, corrupt and hostile
 * headers, mismatches that must name both sides, and atomic writes that
 * leave the old file when they fail. */
#include "kt.h"
#include "json.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#define FIXTURE "tests/fixtures/tiny.safetensors"

/* ---- helpers ---- */

static char dir_[64];

static const char *tmpdir(void) {
    snprintf(dir_, sizeof dir_, "/tmp/kiln_st_XXXXXX");
    return mkdtemp(dir_) ? dir_ : NULL;
}

static char *path_in(const char *dir, const char *name) {
    static char buf[4][400];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 400, "%.64s/%.300s", dir, name);
    return p;
}

static unsigned char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return b;
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(p, 1, n, f);
    fclose(f);
}

/* A file of the 8-byte length of hdr, hdr itself and ndata zero bytes. */
static void write_st(const char *path, uint64_t hlen, const char *hdr, size_t ndata) {
    size_t h = strlen(hdr);
    unsigned char *b = calloc(1, 8 + h + ndata);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(b + 8, hdr, h);
    write_bytes(path, b, 8 + h + ndata);
    free(b);
}

/* Files in dir (to find leftover temp files). */
static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static void rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.') unlink(path_in(dir, e->d_name));
    if (d) closedir(d);
    rmdir(dir);
}

/* ---- JSON ---- */

KT_TEST(json_parses_values_and_escapes) {
    const char *s = " {\"a\": [1, -2.5e3, 9223372036854775807, -9223372036854775808, 9223372036854775808],"
                    " \"s\": \"q\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\u20ac\\ud83d\\ude00\", \"t\": true, \"f\": false,"
                    " \"n\": null, \"o\": {}, \"e\": [] } ";
    kiln__json_doc *d = kiln__json_parse(s, strlen(s), 0, "test");
    KT_NOTNULL(d);
    const kiln__json *r = kiln__json_root(d), *a = kiln__json_get(r, "a");
    KT_CHECK(r->type == KILN_JSON_OBJECT && r->len == 7, "root %d len %zu", r->type, r->len);
    KT_REQUIRE(a && a->type == KILN_JSON_ARRAY && a->len == 5, "a");
    const kiln__json *v = a->child;
    KT_CHECK(v->is_int && v->i64 == 1, "1");
    v = v->next;
    KT_CHECK(!v->is_int && v->num == -2500.0, "-2.5e3: %g", v->num);
    v = v->next;
    KT_CHECK(v->is_int && v->i64 == INT64_MAX, "int64 max");
    v = v->next;
    KT_CHECK(v->is_int && v->i64 == INT64_MIN, "int64 min");
    v = v->next;
    KT_CHECK(!v->is_int && v->num == 9223372036854775808.0, "2^63 is no int64");
    const kiln__json *str = kiln__json_get(r, "s");
    const char *want = "q\"\\/\b\f\n\r\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    KT_CHECK(str && str->len == strlen(want) && !strcmp(str->str, want), "escapes: '%s'", str ? str->str : "");
    KT_CHECK(kiln__json_get(r, "t")->type == KILN_JSON_TRUE && kiln__json_get(r, "f")->type == KILN_JSON_FALSE &&
                 kiln__json_get(r, "n")->type == KILN_JSON_NULL, "literals");
    KT_CHECK(kiln__json_get(r, "o")->len == 0 && kiln__json_get(r, "e")->len == 0, "empty containers");
    KT_CHECK(kiln__json_get(r, "zz") == NULL, "absent key");
    kiln__json_free(d);
}

KT_TEST(json_errors_name_the_byte) {
    static const struct { const char *s; const char *msg; } bad[] = {
        {"", "unexpected end of input at byte 0"},
        {"{\"a\":1,}", "expected a string key at byte 7"},
        {"[1 2]", "expected ',' or ']' at byte 3"},
        {"[01]", "expected ',' or ']' at byte 2"},
        {"[1.]", "bad number"},
        {"[-]", "bad number at byte 1"},
        {"\"abc", "unterminated string at byte 0"},
        {"\"a\tb\"", "control character in string at byte 2"},
        {"\"\\x\"", "bad escape in string at byte 1"},
        {"\"\\u12g4\"", "bad \\u escape at byte 1"},
        {"\"\\ud800\"", "lone high surrogate"},
        {"\"\\udc00\"", "lone low surrogate"},
        {"\"\xc3\x28\"", "invalid UTF-8 in string at byte 1"},
        {"\"\xc0\xaf\"", "invalid UTF-8"},
        {"\"\xed\xa0\x80\"", "invalid UTF-8"},
        {"tru", "unexpected character at byte 0"},
        {"{} x", "trailing characters after the value at byte 3"},
        {"{\"a\" 1}", "expected ':' at byte 5"},
        {"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]", "nesting too deep at byte 64"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kiln_clear_error();
        kiln__json_doc *d = kiln__json_parse(bad[i].s, strlen(bad[i].s), 0, "who");
        KT_CHECK(!d, "'%s' parsed", bad[i].s);
        KT_CHECK(kiln_last_status() == KILN_ERR_FORMAT && strstr(kiln_last_error(), bad[i].msg) &&
                     !strncmp(kiln_last_error(), "who: JSON: ", 11),
                 "'%s': %s", bad[i].s, kiln_last_error());
        kiln__json_free(d);
    }
    /* not NUL-terminated: a length stops the parser */
    kiln__json_doc *d = kiln__json_parse("[1]garbage", 3, 0, "who");
    KT_CHECK(d != NULL, "length-bounded parse: %s", kiln_last_error());
    kiln__json_free(d);
}

KT_TEST(json_writes_escaped_strings) {
    kiln__buf b = {0};
    kiln__json_put_string(&b, "a\"b\\c\n\x01\xc3\xa9");
    KT_CHECK(!b.oom && !strcmp(b.p, "\"a\\\"b\\\\c\\n\\u0001\xc3\xa9\""), "got %s", b.p);
    kiln__json_doc *d = kiln__json_parse(b.p, b.len, 0, "t");
    KT_CHECK(d && !strcmp(kiln__json_root(d)->str, "a\"b\\c\n\x01\xc3\xa9"), "round trip");
    kiln__json_free(d);
    kiln__buf_free(&b);
}

/* ---- the format ---- */

/* The fixture was written by hand from the spec (8-byte length 144, the
 * JSON header padded with 3 spaces, a = F32 [1, -2], b = I32 [[7]]);
 * kiln's writer must give the same bytes, and read them back. */
KT_TEST(safetensors_fixture_matches_writer) {
    const char *dir = tmpdir();
    KT_NOTNULL(dir);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_new_1d(ctx, KILN_F32, 2), *b = kiln_new_2d(ctx, KILN_I32, 1, 1);
    KT_OK(kiln_tensor_set_f32(a, (float[]){1.0f, -2.0f}, 2));
    KT_OK(kiln_tensor_set_i32(b, (int32_t[]){7}, 1));
    const char *out = path_in(dir, "w.safetensors");
    KT_OK(kiln_safetensors_save(out, (kiln_tensor *[]){a, b}, (const char *[]){"a", "b"}, 2,
                                (const char *[]){"format", "pt"}, 1));
    size_t nf, nw;
    unsigned char *fx = read_file(FIXTURE, &nf), *w = read_file(out, &nw);
    KT_REQUIRE(fx && w, "cannot read %s or %s", FIXTURE, out);
    KT_CHECK(nf == 164 && nw == nf && !memcmp(fx, w, nf), "kiln wrote %zu bytes unlike the fixture's %zu", nw, nf);
    free(fx);
    free(w);

    kiln_safetensors *st = kiln_safetensors_open(FIXTURE);
    KT_NOTNULL(st);
    KT_CHECK(kiln_safetensors_count(st) == 2, "count %d", kiln_safetensors_count(st));
    KT_CHECK(kiln_safetensors_metadata(st, "format") && !strcmp(kiln_safetensors_metadata(st, "format"), "pt"),
             "metadata");
    KT_CHECK(kiln_safetensors_metadata(st, "nope") == NULL, "absent metadata");
    kiln_safetensors_info in;
    KT_OK(kiln_safetensors_info_at(st, kiln_safetensors_find(st, "b"), &in));
    KT_CHECK(!strcmp(in.name, "b") && !strcmp(in.dtype, "I32") && in.kiln_dtype == KILN_I32 && in.ndim == 2 &&
                 in.shape[0] == 1 && in.shape[1] == 1 && in.nbytes == 4, "info of b");
    KT_CHECK(kiln_safetensors_find(st, "c") == -1, "find absent");
    kiln_tensor *la = kiln_safetensors_load(st, ctx, "a"), *lb = kiln_safetensors_load(st, ctx, "b");
    KT_NOTNULL(la);
    KT_NOTNULL(lb);
    float av[2];
    int32_t bv;
    KT_OK(kiln_tensor_get_f32(la, av, 2));
    KT_OK(kiln_tensor_get_i32(lb, &bv, 1));
    KT_CHECK(av[0] == 1.0f && av[1] == -2.0f && bv == 7 && !strcmp(kiln_tensor_name(la), "a"), "values");
    kiln_safetensors_close(st);
    kiln_ctx_free(ctx);
    rm_dir(dir);
}

KT_TEST(safetensors_roundtrip_every_dtype) {
    const char *dir = tmpdir();
    KT_NOTNULL(dir);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *t[(KILN_I32 + 1)];
    const char *names[(KILN_I32 + 1)] = {"f32", "f64", "f16 \"quoted\"", "bf16.weight", "i32/\xc3\xa9"};
    for (int d = 0; d < (KILN_I32 + 1); d++) {
        t[d] = kiln_tensor_new(ctx, (kiln_dtype)d, 3, (int64_t[]){2, 3, d + 1});
        KT_NOTNULL(t[d]);
        unsigned char *p = kiln_tensor_data(t[d]);
        for (size_t i = 0; i < kiln_tensor_nbytes(t[d]); i++) p[i] = (unsigned char)(i * 37 + d * 11 + 1);
    }
    const char *out = path_in(dir, "all.safetensors");
    KT_OK(kiln_safetensors_save(out, t, names, (KILN_I32 + 1), NULL, 0));
    kiln_safetensors *st = kiln_safetensors_open(out);
    KT_NOTNULL(st);
    for (int d = 0; d < (KILN_I32 + 1); d++) {
        kiln_tensor *l = kiln_safetensors_load(st, ctx, names[d]);
        KT_NOTNULL(l);
        KT_CHECK(kiln_tensor_dtype(l) == (kiln_dtype)d && kiln_tensor_ndim(l) == 3 && kiln_tensor_dim(l, 2) == d + 1 &&
                     !memcmp(kiln_tensor_data(l), kiln_tensor_data(t[d]), kiln_tensor_nbytes(t[d])),
                 "%s differs", names[d]);
        kiln_tensor *into = kiln_tensor_new(ctx, (kiln_dtype)d, 3, (int64_t[]){2, 3, d + 1});
        KT_OK(kiln_safetensors_read_into(st, names[d], into));
        KT_CHECK(!memcmp(kiln_tensor_data(into), kiln_tensor_data(t[d]), kiln_tensor_nbytes(t[d])), "%s into", names[d]);
        /* the data start 8-aligned: the header is padded */
        kiln_safetensors_info in;
        KT_OK(kiln_safetensors_info_at(st, d, &in));
    }
    size_t n;
    unsigned char *raw = read_file(out, &n);
    KT_CHECK(raw && raw[0] % 8 == 0, "header length %d not a multiple of 8", raw ? raw[0] : -1);
    free(raw);
    /* mismatches name both sides */
    kiln_tensor *wrong = kiln_tensor_set_name(kiln_new_2d(ctx, KILN_F32, 6, 1), "dst");
    kiln_clear_error();
    KT_CHECK(kiln_safetensors_read_into(st, "f32", wrong) == KILN_ERR_SHAPE &&
                 strstr(kiln_last_error(), "'f32' is [2, 3, 1] in the file, [6, 1] in the tensor given"), "%s",
             kiln_last_error());
    KT_CHECK(kiln_safetensors_read_into(st, "f64", wrong) == KILN_ERR_DTYPE &&
                 strstr(kiln_last_error(), "'f64' is F64 in the file, f32 in the tensor given"), "%s", kiln_last_error());
    KT_CHECK(kiln_safetensors_read_into(st, "nope", wrong) == KILN_ERR_FORMAT && strstr(kiln_last_error(), "'nope'"),
             "%s", kiln_last_error());
    kiln_safetensors_close(st);
    kiln_ctx_free(ctx);
    rm_dir(dir);
}

/* A header as another writer may lay it out: keys in any order, spaces,
 * escaped names, dtypes kiln lacks, a 0-d tensor, an empty tensor. */
KT_TEST(safetensors_reads_foreign_layouts) {
    const char *dir = tmpdir();
    KT_NOTNULL(dir);
    const char *h = "{ \"x\\u00e9\" : { \"data_offsets\" : [ 0 , 8 ] , \"shape\" : [ 2 ] , \"dtype\" : \"F32\" },"
                    " \"ids\": {\"shape\": [1], \"dtype\": \"I64\", \"data_offsets\": [8, 16], \"extra\": null},"
                    " \"s\": {\"dtype\": \"F64\", \"shape\": [], \"data_offsets\": [16, 24]},"
                    " \"empty\": {\"dtype\": \"U8\", \"shape\": [0, 5], \"data_offsets\": [24, 24]},"
                    " \"__metadata__\": {\"k\": \"v\\n\"}}   ";
    const char *p = path_in(dir, "f.safetensors");
    write_st(p, strlen(h), h, 24);
    kiln_safetensors *st = kiln_safetensors_open(p);
    KT_NOTNULL(st);
    KT_CHECK(kiln_safetensors_count(st) == 4, "count");
    KT_CHECK(!strcmp(kiln_safetensors_metadata(st, "k"), "v\n"), "metadata escape");
    kiln_ctx *ctx = kiln_ctx_new();
    KT_NOTNULL(kiln_safetensors_load(st, ctx, "x\xc3\xa9"));
    kiln_tensor *s = kiln_safetensors_load(st, ctx, "s");
    KT_CHECK(s && kiln_tensor_ndim(s) == 1 && kiln_tensor_dim(s, 0) == 1, "0-d loads as [1]");
    KT_EXPECT_ERR(kiln_safetensors_load(st, ctx, "ids"), KILN_ERR_DTYPE, "'ids' is I64, which kiln has no dtype for");
    kiln_safetensors_info in;
    KT_OK(kiln_safetensors_info_at(st, kiln_safetensors_find(st, "empty"), &in));
    KT_CHECK(in.kiln_dtype == -1 && in.nbytes == 0 && in.ndim == 2 && in.shape[0] == 0, "empty U8 listed");
    kiln_safetensors_close(st);
    kiln_ctx_free(ctx);
    rm_dir(dir);
}

/* Every length short of a valid file fails cleanly, as does one byte more. */
KT_TEST(safetensors_truncated_at_every_length) {
    size_t n;
    unsigned char *full = read_file(FIXTURE, &n);
    KT_NOTNULL(full);
    const char *dir = tmpdir();
    KT_NOTNULL(dir);
    const char *p = path_in(dir, "t.safetensors");
    for (size_t len = 0; len < n; len++) {
        write_bytes(p, full, len);
        kiln_clear_error();
        kiln_safetensors *st = kiln_safetensors_open(p);
        KT_CHECK(!st && kiln_last_status() == KILN_ERR_FORMAT, "length %zu: %s", len, kiln_last_error());
        kiln_safetensors_close(st);
    }
    unsigned char *more = malloc(n + 1);
    memcpy(more, full, n);
    more[n] = 0;
    write_bytes(p, more, n + 1);
    kiln_safetensors *st = kiln_safetensors_open(p);
    KT_CHECK(!st && strstr(kiln_last_error(), "cover 12 bytes of data but the file holds 13"), "%s", kiln_last_error());
    free(more);
    free(full);
    rm_dir(dir);
}

KT_TEST(safetensors_rejects_corrupt_headers) {
    static const struct { const char *h; size_t data; const char *msg; } bad[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, "unterminated object"},
        {"[1]     ", 0, "does not start with '{'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "past the data"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "(hole)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "is 12 bytes but data_offsets [0, 8] hold 8"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
         "element count overflows"},
        {"{\"a\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]}}", 8, "byte count overflows"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape[0] is not a non-negative integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "shape[0] is not"},
        {"{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype \"F33\""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "data_offsets must be"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "data_offsets must be"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "needs a string \"dtype\""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "'a' appears twice"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "value of 'k' is not a string"},
        {"{\"__metadata__\":[]}", 0, "__metadata__ is not an object"},
        {"{\"a\":7}", 0, "'a' is not an object"},
        {"{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, "holds a NUL"},
        {"{\"\xff\":{}}", 0, "invalid UTF-8"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]}}", 0, "nesting too deep"},
    };
    const char *dir = tmpdir();
    KT_NOTNULL(dir);
    const char *p = path_in(dir, "c.safetensors");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_st(p, strlen(bad[i].h), bad[i].h, bad[i].data);
        kiln_clear_error();
        kiln_safetensors *st = kiln_safetensors_open(p);
        KT_CHECK(!st && kiln_last_status() == KILN_ERR_FORMAT && strstr(kiln_last_error(), bad[i].msg),
                 "case %zu: %s (want '%s')", i, kiln_last_error(), bad[i].msg);
        kiln_safetensors_close(st);
    }
    /* hostile header lengths: beyond the file, huge, 2^64 - 1 */
    const uint64_t lens[] = {1000, 200000000ull, UINT64_MAX, (uint64_t)1 << 63};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        write_st(p, lens[i], "{}      ", 0);
        kiln_clear_error();
        kiln_safetensors *st = kiln_safetensors_open(p);
        KT_CHECK(!st && kiln_last_status() == KILN_ERR_FORMAT && strstr(kiln_last_error(), "header length"),
                 "length %llu: %s", (unsigned long long)lens[i], kiln_last_error());
    }
    /* a header of millions of tiny values stops at the value bound */
    size_t big = 6000000;
    char *h = malloc(big + 64);
    strcpy(h, "{\"a\":{\"dtype\":\"F32\",\"shape\":[");
    size_t at = strlen(h);
    while (at < big) h[at++] = '0', h[at++] = ',';
    strcpy(h + at, "0],\"data_offsets\":[0,0]}}");
    while (strlen(h) % 8) strcat(h, " ");
    write_st(p, strlen(h), h, 0);
    free(h);
    kiln_clear_error();
    KT_CHECK(!kiln_safetensors_open(p) && strstr(kiln_last_error(), "too many values"), "%s", kiln_last_error());
    /* the empty file, a missing one, a directory */
    write_bytes(p, "", 0);
    KT_EXPECT_ERR(kiln_safetensors_open(p), KILN_ERR_FORMAT, "too short");
    KT_EXPECT_ERR(kiln_safetensors_open(path_in(dir, "missing")), KILN_ERR_IO, "cannot open");
    KT_EXPECT_ERR(kiln_safetensors_open(dir), KILN_ERR_IO, "not a regular file");
    /* a valid empty file */
    write_st(p, 8, "{}      ", 0);
    kiln_safetensors *st = kiln_safetensors_open(p);
    KT_CHECK(st && kiln_safetensors_count(st) == 0, "empty file: %s", kiln_last_error());
    kiln_safetensors_close(st);
    rm_dir(dir);
}

/* ---- atomic writes ---- */

KT_TEST(safetensors_failed_write_keeps_old_file) {
    const char *dir = tmpdir();
    KT_NOTNULL(dir);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_tensor_set_name(kiln_new_1d(ctx, KILN_F32, 4), "a");
    KT_OK(kiln_tensor_fill(a, 3.0));
    const char *p = path_in(dir, "m.safetensors");
    KT_OK(kiln_safetensors_save(p, &a, NULL, 1, NULL, 0));
    size_t n0, n1;
    unsigned char *before = read_file(p, &n0);
    KT_NOTNULL(before);

    /* a tensor with no data (a node never computed) fails mid-write */
    kiln_tensor *node = kiln_tensor_set_name(kiln_exp(ctx, a), "node");
    kiln_clear_error();
    KT_CHECK(kiln_safetensors_save(p, (kiln_tensor *[]){a, node}, NULL, 2, NULL, 0) == KILN_ERR_STATE, "%s",
             kiln_last_error());
    /* a directory that does not exist / is a file */
    KT_CHECK(kiln_safetensors_save(path_in(dir, "no/such/x"), &a, NULL, 1, NULL, 0) == KILN_ERR_IO, "missing dir");
    KT_CHECK(kiln_safetensors_save(path_in(dir, "m.safetensors/x"), &a, NULL, 1, NULL, 0) == KILN_ERR_IO,
             "file as dir");
    /* the disk fills up mid-write (a file-size limit) */
    kiln_tensor *big = kiln_tensor_set_name(kiln_new_1d(ctx, KILN_F32, 1 << 16), "big");
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 4096;
    setrlimit(RLIMIT_FSIZE, &lim);
    kiln_clear_error();
    KT_CHECK(kiln_safetensors_save(p, &big, NULL, 1, NULL, 0) == KILN_ERR_IO, "full disk: %s", kiln_last_error());
    setrlimit(RLIMIT_FSIZE, &old);
    /* bad arguments before any file is made */
    KT_CHECK(kiln_safetensors_save(p, (kiln_tensor *[]){a, a}, NULL, 2, NULL, 0) == KILN_ERR_ARG &&
                 strstr(kiln_last_error(), "'a' given twice"), "%s", kiln_last_error());
    KT_CHECK(kiln_safetensors_save(p, &a, (const char *[]){"__metadata__"}, 1, NULL, 0) == KILN_ERR_ARG, "reserved");
    KT_CHECK(kiln_safetensors_save(p, &a, NULL, 1, (const char *[]){"k", "1", "k", "2"}, 2) == KILN_ERR_ARG,
             "metadata key twice");

    unsigned char *after = read_file(p, &n1);
    KT_CHECK(after && n1 == n0 && !memcmp(before, after, n0), "the old file changed");
    KT_CHECK(count_files(dir) == 1, "%d files left in the directory (temp files?)", count_files(dir));
    free(before);
    free(after);
    kiln_ctx_free(ctx);
    rm_dir(dir);
}

/* ---- parameters ---- */

KT_TEST(params_save_load_and_mismatches) {
    const char *dir = tmpdir();
    KT_NOTNULL(dir);
    kiln_ctx *a = kiln_ctx_new(), *b = kiln_ctx_new();
    kiln_tensor *w = kiln_param(a, "w", KILN_F32, 2, (int64_t[]){3, 4}), *v = kiln_param(a, "v", KILN_F64, 1, (int64_t[]){5});
    KT_OK(kiln_tensor_fill_randn(w, 1, 0, 1));
    KT_OK(kiln_tensor_fill_randn(v, 2, 0, 1));
    const char *p = path_in(dir, "p.safetensors");
    KT_OK(kiln_save_params(a, p));
    kiln_tensor *w2 = kiln_param(b, "w", KILN_F32, 2, (int64_t[]){3, 4}), *v2 = kiln_param(b, "v", KILN_F64, 1, (int64_t[]){5});
    KT_OK(kiln_load_params(b, p));
    KT_CHECK(!memcmp(kiln_tensor_data(w), kiln_tensor_data(w2), 48) && !memcmp(kiln_tensor_data(v), kiln_tensor_data(v2), 40),
             "loaded values differ");

    /* a context with another shape, a missing and an extra parameter: each fails and changes nothing */
    kiln_ctx *c = kiln_ctx_new();
    kiln_tensor *w3 = kiln_param(c, "w", KILN_F32, 2, (int64_t[]){3, 4});
    KT_OK(kiln_tensor_fill(w3, 9.0));
    kiln_clear_error();
    KT_CHECK(kiln_load_params(c, p) == KILN_ERR_FORMAT && strstr(kiln_last_error(), "'v', which is no parameter"),
             "extra: %s", kiln_last_error());
    kiln_tensor *u3 = kiln_param(c, "u", KILN_F32, 1, (int64_t[]){2});
    KT_CHECK(kiln_load_params(c, p) == KILN_ERR_FORMAT && strstr(kiln_last_error(), "no tensor 'u'"), "missing: %s",
             kiln_last_error());
    (void)u3;
    kiln_ctx *d = kiln_ctx_new();
    kiln_tensor *w4 = kiln_param(d, "w", KILN_F32, 2, (int64_t[]){4, 3});
    kiln_param(d, "v", KILN_F64, 1, (int64_t[]){5});
    KT_CHECK(kiln_load_params(d, p) == KILN_ERR_SHAPE && strstr(kiln_last_error(), "kiln_load_params: ") &&
                 strstr(kiln_last_error(), "p.safetensors: 'w' is [3, 4] in the file, [4, 3] in the model"),
             "shape: %s", kiln_last_error());
    float x[12];
    KT_OK(kiln_tensor_get_f32(w3, x, 12));
    KT_CHECK(x[0] == 9.0f && x[11] == 9.0f, "a failed load wrote");
    KT_OK(kiln_tensor_get_f32(w4, x, 12));
    KT_CHECK(x[0] == 0.0f, "a failed load wrote");
    kiln_ctx_free(a);
    kiln_ctx_free(b);
    kiln_ctx_free(c);
    kiln_ctx_free(d);
    rm_dir(dir);
}

/* Random byte changes anywhere in the fixture: every open either fails
 * with a message or gives a file whose tensors all load (a fuzzing smoke
 * test; the sanitizer builds make it a memory-safety check). */
KT_TEST(safetensors_mutations_never_crash) {
    size_t n;
    unsigned char *full = read_file(FIXTURE, &n);
    KT_NOTNULL(full);
    const char *dir = tmpdir();
    KT_NOTNULL(dir);
    const char *p = path_in(dir, "m.safetensors");
    uint64_t r = 12345;
    int opened = 0;
    for (int it = 0; it < 500; it++) {
        unsigned char *b = malloc(n);
        memcpy(b, full, n);
        for (int k = 0; k < 1 + it % 3; k++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(r >> 33) % n;
            static const char pool[] = "{}[]\",:0123456789-eE.\\u \x00\xff";
            b[at] = (r >> 20) & 1 ? (unsigned char)pool[(r >> 24) % (sizeof pool - 1)] : (unsigned char)(r >> 40);
        }
        write_bytes(p, b, n);
        free(b);
        kiln_clear_error();
        kiln_safetensors *st = kiln_safetensors_open(p);
        if (!st) {
            KT_CHECK(kiln_last_status() != KILN_OK && *kiln_last_error(), "iteration %d: failed without a message", it);
            continue;
        }
        opened++;
        kiln_ctx *ctx = kiln_ctx_new();
        for (int i = 0; i < kiln_safetensors_count(st); i++) {
            kiln_safetensors_info in;
            KT_OK(kiln_safetensors_info_at(st, i, &in));
            kiln_tensor *t = kiln_safetensors_load(st, ctx, in.name);
            KT_CHECK(t || kiln_last_status() == KILN_ERR_DTYPE || kiln_last_status() == KILN_ERR_SHAPE,
                     "iteration %d: '%s' listed but not loaded: %s", it, in.name, kiln_last_error());
        }
        kiln_ctx_free(ctx);
        kiln_safetensors_close(st);
    }
    KT_CHECK(opened > 0, "no mutation kept the file valid (the data bytes at least should)");
    free(full);
    rm_dir(dir);
}
