/* test_file_limits.c — hostile sizes in file headers, built by hand, are
 * refused with a message before anything of the claimed size is
 * allocated: counts of billions of entries, string lengths past the end,
 * dims whose product overflows, offsets past the data, absurd ndims, IDX
 * headers claiming gigabytes (plain and gzipped), tokenizer ids far past
 * the vocabulary, llama configs whose sizes the weights do not have.
 *
 * Each test first caps the process's address space at what it uses plus
 * 1 GiB (not under AddressSanitizer, whose shadow memory needs more): a
 * loader that allocated the claimed size would then fail with
 * KILN_ERR_OOM instead of the expected format error, so each check below
 * fails if the limit it tests is removed. */
#include "kt.h"
#include "fuzz/fuzz_util.h"
#include "llama_files.h"

#include <sys/resource.h>
#include <unistd.h>
#ifdef KILN_ZLIB
#include <zlib.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define KT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KT_ASAN 1
#endif
#endif

/* Address space: what the process has mapped now plus 1 GiB. */
static void cap_memory(void) {
#ifndef KT_ASAN
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (!f) return;
    if (fscanf(f, "%lu", &pages) != 1) pages = 0;
    fclose(f);
    if (!pages) return;
    rlim_t cap = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)1 << 30);
    struct rlimit r = {cap, cap};
    setrlimit(RLIMIT_AS, &r);
#endif
}

/* ---- a byte builder for headers ---- */

typedef struct bytes {
    unsigned char b[8192];
    size_t n;
} bytes;

static void put(bytes *o, const void *p, size_t k) {
    memcpy(o->b + o->n, p, k);
    o->n += k;
}
static void u32(bytes *o, uint32_t v) {
    for (int i = 0; i < 4; i++) o->b[o->n++] = (unsigned char)(v >> (8 * i));
}
static void u64(bytes *o, uint64_t v) {
    for (int i = 0; i < 8; i++) o->b[o->n++] = (unsigned char)(v >> (8 * i));
}
static void str(bytes *o, const char *s) {
    u64(o, strlen(s));
    put(o, s, strlen(s));
}

static const char *tmp_file(const char *tag, const void *p, size_t n) {
    static char path[128];
    snprintf(path, sizeof path, "/tmp/kiln_limits_%d_%s", (int)getpid(), tag);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(p, 1, n, f);
        fclose(f);
    }
    return path;
}

/* ---- GGUF ---- */

static void gguf_head(bytes *o, uint64_t n_tensors, uint64_t n_kv) {
    o->n = 0;
    put(o, "GGUF", 4);
    u32(o, 3);
    u64(o, n_tensors);
    u64(o, n_kv);
}

/* One tensor info: name, ndim, dims, type, offset. */
static void gguf_tensor(bytes *o, const char *name, uint32_t nd, const uint64_t *ne, uint32_t type, uint64_t off) {
    str(o, name);
    u32(o, nd);
    for (uint32_t d = 0; d < nd; d++) u64(o, ne[d]);
    u32(o, type);
    u64(o, off);
}

static void pad(bytes *o, size_t to) {
    while (o->n % to) o->b[o->n++] = 0;
}

static void gguf_expect(const bytes *o, const char *text, int line) {
    const char *p = tmp_file("g.gguf", o->b, o->n);
    kiln_clear_error();
    kiln_gguf *g = kiln_gguf_open(p);
    unlink(p);
    KT_CHECK(!g, "line %d: opened", line);
    KT_CHECK(kiln_last_status() == KILN_ERR_FORMAT, "line %d: %s: %s", line, kiln_status_name(kiln_last_status()),
             kiln_last_error());
    KT_CHECK(strstr(kiln_last_error(), text), "line %d: '%s' lacks '%s'", line, kiln_last_error(), text);
    kiln_gguf_close(g);
}

KT_TEST(limits_gguf_counts_and_lengths) {
    cap_memory();
    bytes o;
    gguf_head(&o, 0, (uint64_t)1 << 40); /* a trillion keys in 24 bytes */
    gguf_expect(&o, "metadata entries cannot fit", __LINE__);
    gguf_head(&o, (uint64_t)1 << 40, 0);
    gguf_expect(&o, "tensor infos cannot fit", __LINE__);
    gguf_head(&o, 0, 1);
    u64(&o, (uint64_t)1 << 62); /* a key of 4 EiB */
    put(&o, "abcdefgh", 8);
    gguf_expect(&o, "runs past the end", __LINE__);
    gguf_head(&o, 0, 1);
    str(&o, "k");
    u32(&o, KILN_GGUF_ARRAY);
    u32(&o, KILN_GGUF_STRING);
    u64(&o, (uint64_t)1 << 40); /* a trillion strings */
    u64(&o, 1);
    gguf_expect(&o, "cannot fit in the", __LINE__);
    gguf_head(&o, 0, 1);
    str(&o, "k");
    u32(&o, KILN_GGUF_ARRAY);
    u32(&o, KILN_GGUF_UINT64);
    u64(&o, UINT64_MAX / 4); /* its bytes overflow size_t */
    u64(&o, 1);
    gguf_expect(&o, "cannot fit in the", __LINE__);
    gguf_head(&o, 0, 1);
    str(&o, "k");
    u32(&o, KILN_GGUF_ARRAY); /* an array of one array of one array ... */
    for (int d = 0; d < 6; d++) u32(&o, KILN_GGUF_ARRAY), u64(&o, 1);
    for (int k = 0; k < 64; k++) u32(&o, 0);
    gguf_expect(&o, "nested deeper than 4", __LINE__);
}

KT_TEST(limits_gguf_tensor_sizes) {
    cap_memory();
    bytes o;
    const uint64_t big[4] = {(uint64_t)1 << 32, (uint64_t)1 << 32, (uint64_t)1 << 32, 1};
    gguf_head(&o, 1, 0);
    gguf_tensor(&o, "t", 3, big, 0, 0); /* 2^96 f32 elements */
    gguf_expect(&o, "its size overflows", __LINE__);
    const uint64_t neg[1] = {UINT64_MAX};
    gguf_head(&o, 1, 0);
    gguf_tensor(&o, "t", 1, neg, 0, 0); /* a dim past int64 */
    gguf_expect(&o, "ne[0]", __LINE__);
    const uint64_t four[1] = {4};
    for (uint32_t nd = 0; nd < 3; nd++) {
        static const uint32_t nds[3] = {0, 5, 0xffffffffu};
        gguf_head(&o, 1, 0);
        str(&o, "t");
        u32(&o, nds[nd]);
        for (int k = 0; k < 8; k++) u64(&o, 4);
        gguf_expect(&o, "dims (1 to 4)", __LINE__);
    }
    gguf_head(&o, 1, 0);
    gguf_tensor(&o, "t", 1, four, 0, (uint64_t)1 << 40); /* data far past the end */
    pad(&o, 32);
    u64(&o, 0), u64(&o, 0);
    gguf_expect(&o, "runs past the data", __LINE__);
    const uint64_t huge[2] = {(uint64_t)1 << 30, (uint64_t)1 << 30};
    gguf_head(&o, 1, 0);
    gguf_tensor(&o, "t", 2, huge, 0, 0); /* 4 EiB that fit int64 but not the file */
    pad(&o, 32);
    gguf_expect(&o, "runs past the data", __LINE__);
}

/* ---- safetensors ---- */

static void st_expect(const char *header, uint64_t claimed_len, size_t data, const char *text, int line) {
    static unsigned char buf[1 << 16];
    size_t h = strlen(header);
    uint64_t len = claimed_len ? claimed_len : h;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(len >> (8 * i));
    memcpy(buf + 8, header, h);
    memset(buf + 8 + h, 0, data);
    const char *p = tmp_file("s.safetensors", buf, 8 + h + data);
    kiln_clear_error();
    kiln_safetensors *st = kiln_safetensors_open(p);
    unlink(p);
    KT_CHECK(!st, "line %d: opened", line);
    KT_CHECK(kiln_last_status() == KILN_ERR_FORMAT, "line %d: %s: %s", line, kiln_status_name(kiln_last_status()),
             kiln_last_error());
    KT_CHECK(strstr(kiln_last_error(), text), "line %d: '%s' lacks '%s'", line, kiln_last_error(), text);
    kiln_safetensors_close(st);
}

KT_TEST(limits_safetensors_headers) {
    cap_memory();
    st_expect("{}", (uint64_t)1 << 63, 0, "past the end of the file", __LINE__);
    st_expect("{}", UINT64_MAX, 0, "past the end of the file", __LINE__);
    st_expect("{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", 0, 4,
              "element count overflows", __LINE__);
    st_expect("{\"t\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]}}", 0, 8,
              "byte count overflows", __LINE__);
    st_expect("{\"t\":{\"dtype\":\"U8\",\"shape\":[1099511627776],\"data_offsets\":[0,1099511627776]}}", 0, 8,
              "past the data", __LINE__);
    st_expect("{\"t\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", 0, 16, "non-negative integer",
              __LINE__);
    st_expect("{\"t\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[-8,0]}}", 0, 8, "data_offsets must be",
              __LINE__);
    /* 2000 dims of 1: refused by count, before a shape array is made */
    static char many[8192];
    char *w = many + sprintf(many, "{\"t\":{\"dtype\":\"U8\",\"shape\":[");
    for (int i = 0; i < 2000; i++) w += sprintf(w, i ? ",1" : "1");
    sprintf(w, "],\"data_offsets\":[0,1]}}");
    st_expect(many, 0, 1, "has 2000 dimensions", __LINE__);
}

/* ---- IDX ---- */

static void idx_expect(const unsigned char *h, size_t n, bool gz, kiln_status want, const char *text, int line) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/kiln_limits_%d.idx", (int)getpid());
    if (gz) {
#ifdef KILN_ZLIB
        gzFile f = gzopen(path, "wb");
        gzwrite(f, h, (unsigned)n);
        gzclose(f);
#else
        return;
#endif
    } else {
        tmp_file("x.idx", h, n);
        snprintf(path, sizeof path, "/tmp/kiln_limits_%d_x.idx", (int)getpid());
    }
    kiln_ctx *ctx = kiln_ctx_new();
    for (int labels = 0; labels < 2; labels++) {
        kiln_clear_error();
        KT_CHECK(!kiln_idx_load(ctx, path, labels, 1.0f), "line %d: loaded", line);
        KT_CHECK(kiln_last_status() == want, "line %d: %s: %s", line, kiln_status_name(kiln_last_status()),
                 kiln_last_error());
        KT_CHECK(strstr(kiln_last_error(), text), "line %d: '%s' lacks '%s'", line, kiln_last_error(), text);
    }
    kiln_ctx_free(ctx);
    unlink(path);
}

KT_TEST(limits_idx_headers) {
    cap_memory();
    /* 65535 x 65535 x 3 bytes (12 GiB, under the 16 Gi element cap) in a 20-byte file */
    const unsigned char claims[] = {0, 0, 8, 3, 0, 0, 0xff, 0xff, 0, 0, 0xff, 0xff, 0, 0, 0, 3, 1, 2, 3, 4};
    idx_expect(claims, sizeof claims, false, KILN_ERR_FORMAT, "is truncated", __LINE__);
    idx_expect(claims, sizeof claims, true, KILN_ERR_FORMAT, "more than 64 times", __LINE__); /* before inflating */
    /* 2^32-1 squared: over the element cap, refused by the header alone */
    const unsigned char over[] = {0, 0, 8, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    idx_expect(over, sizeof over, false, KILN_ERR_FORMAT, "elements", __LINE__);
    const unsigned char nd0[] = {0, 0, 8, 0, 1, 2, 3, 4}, nd200[] = {0, 0, 8, 200, 0, 0, 0, 1};
    idx_expect(nd0, sizeof nd0, false, KILN_ERR_FORMAT, "dims (expected", __LINE__);
    idx_expect(nd200, sizeof nd200, false, KILN_ERR_FORMAT, "dims (expected", __LINE__);
}

/* ---- tokenizer.json ---- */

KT_TEST(limits_tokenizer_json_ids) {
    cap_memory();
    static const char *bad[] = {
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1000000000000000}, \"merges\": []}}",
        ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"id\": "
         "4000000000, \"content\": \"x\"}]}"),
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *p = tmp_file("t.json", bad[i], strlen(bad[i]));
        KT_EXPECT_ERR(kiln_tokenizer_from_json(p), KILN_ERR_FORMAT, "is not an integer in [0,");
        unlink(p);
    }
}

/* ---- llama: config sizes against the weights ---- */

/* Overwrite the u32 value of GGUF key in buf[0..n); false if absent. */
static bool patch_u32(unsigned char *buf, size_t n, const char *key, uint32_t v) {
    size_t k = strlen(key);
    for (size_t i = 8; i + k + 8 <= n; i++)
        if (!memcmp(buf + i, key, k) && buf[i - 8] == k && buf[i + k] == KILN_GGUF_UINT32) {
            for (int b = 0; b < 4; b++) buf[i + k + 4 + b] = (unsigned char)(v >> (8 * b));
            return true;
        }
    return false;
}

KT_TEST(limits_llama_gguf_sizes_against_tensors) {
    llama_config c = llama_defaults();
    c.vocab = 8, c.context = 8, c.layers = 1, c.heads = 2, c.kv_heads = 1, c.dim = 8, c.hidden = 12;
    kiln_ctx *ctx = kiln_ctx_new();
    llama *m = llama_new(ctx, &c, 1);
    KT_NOTNULL(m);
    char path[128];
    snprintf(path, sizeof path, "/tmp/kiln_limits_%d_l.gguf", (int)getpid());
    KT_OK(llama_save_gguf(m, path, KILN_F32));
    llama_free(m);
    kiln_ctx_free(ctx);
    static unsigned char buf[1 << 16];
    FILE *f = fopen(path, "rb");
    KT_REQUIRE(f, "reopen");
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    cap_memory();
    static const struct { const char *key; uint32_t v; const char *key2; uint32_t v2; const char *msg; } cases[] = {
        /* 3 x 64 GB of ffn weights */
        {"llama.feed_forward_length", 2000000000u, NULL, 0, "as llama.block_count / llama.feed_forward_length"},
        /* a 2^30 width (with the rope dims to match), against token_embd's 8 */
        {"llama.embedding_length", 1u << 30, "llama.rope.dimension_count", 1u << 29, "as llama.embedding_length"},
        {"llama.block_count", 100000000u, NULL, 0, "no tensor 'blk.99999999.ffn_gate.weight'"},
        {"llama.attention.head_count_kv", 3u, NULL, 0,
         "llama.attention.head_count_kv = 3 does not divide llama.attention.head_count = 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        static unsigned char mod[1 << 16];
        memcpy(mod, buf, n);
        KT_REQUIRE(patch_u32(mod, n, cases[i].key, cases[i].v), "no u32 key %s", cases[i].key);
        KT_REQUIRE(!cases[i].key2 || patch_u32(mod, n, cases[i].key2, cases[i].v2), "no u32 key %s", cases[i].key2);
        const char *p = tmp_file("m.gguf", mod, n);
        kiln_ctx *x = kiln_ctx_new();
        KT_EXPECT_ERR(llama_from_gguf(x, p), KILN_ERR_FORMAT, cases[i].msg);
        KT_EXPECT_ERR(llama_infer_from_gguf(x, p, LLAMA_AS_STORED), KILN_ERR_FORMAT, cases[i].msg);
        kiln_ctx_free(x);
        unlink(p);
    }
    unlink(path);
}

KT_TEST(limits_llama_hf_config_against_weights) {
    const char *dir = kiln_fuzz_llama_dir(); /* the tiny weights of fuzz_llama_config.c */
    KT_REQUIRE(dir, "weights dir: %s", kiln_last_error());
    cap_memory();
    const char *good = kiln_fuzz_llama_config_json();
    static const struct { const char *from, *to, *msg; } cases[] = {
        {"\"intermediate_size\": 12", "\"intermediate_size\": 100000000000", "num_hidden_layers and intermediate_size"},
        {"\"hidden_size\": 8", "\"hidden_size\": 1000000000000", "hidden_size"},
        {"\"vocab_size\": 8", "\"vocab_size\": 1000000000000", "vocab_size and hidden_size"},
        {"\"num_hidden_layers\": 1", "\"num_hidden_layers\": 100000000", "has no tensor 'model.layers.99999999"},
    };
    char p[300];
    snprintf(p, sizeof p, "%s/config.json", dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *at = strstr(good, cases[i].from);
        KT_REQUIRE(at, "seed config lacks %s", cases[i].from);
        FILE *f = fopen(p, "w");
        KT_REQUIRE(f, "config.json");
        fprintf(f, "%.*s%s%s", (int)(at - good), good, cases[i].to, at + strlen(cases[i].from));
        fclose(f);
        kiln_ctx *x = kiln_ctx_new();
        kiln_clear_error();
        KT_CHECK(!llama_from_hf(x, dir), "case %zu loaded", i);
        kiln_status s = kiln_last_status();
        KT_CHECK(s == KILN_ERR_SHAPE || s == KILN_ERR_FORMAT, "case %zu: %s: %s", i, kiln_status_name(s),
                 kiln_last_error());
        KT_CHECK(strstr(kiln_last_error(), cases[i].msg), "case %zu: '%s' lacks '%s'", i, kiln_last_error(),
                 cases[i].msg);
        kiln_ctx_free(x);
    }
    /* the seed config itself loads */
    FILE *f = fopen(p, "w");
    KT_REQUIRE(f, "config.json");
    fputs(good, f);
    fclose(f);
    kiln_ctx *x = kiln_ctx_new();
    llama *m = llama_from_hf(x, dir);
    KT_CHECK(m, "seed config: %s", kiln_last_error());
    llama_free(m);
    kiln_ctx_free(x);
    kiln_fuzz_llama_dir_remove();
}

/* A safetensors header of two million and one JSON values (4 MB of
 * "0,"): the parser's value bound refuses it before building more nodes. */
KT_TEST(limits_safetensors_value_count) {
    cap_memory();
    const size_t zeros = 2000001, h = 8 + 2 * zeros + 8;
    unsigned char *buf = malloc(8 + h);
    KT_REQUIRE(buf, "malloc");
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)h >> (8 * i));
    char *w = (char *)buf + 8;
    w += sprintf(w, "{\"a\":[0");
    for (size_t i = 1; i < zeros; i++) *w++ = ',', *w++ = '0';
    memcpy(w, "]}", 2), w += 2;
    while ((size_t)(w - (char *)buf) < 8 + h) *w++ = ' ';
    const char *p = tmp_file("v.safetensors", buf, 8 + h);
    free(buf);
    KT_EXPECT_ERR(kiln_safetensors_open(p), KILN_ERR_FORMAT, "too many values");
    unlink(p);
}

/* Optimizer-state metadata with absurd counts: refused by comparison,
 * nothing sized by them. */
KT_TEST(limits_checkpoint_metadata_counts) {
    kiln_ctx *ctx;
    kiln_optim *opt = kiln_fuzz_checkpoint_model(&ctx);
    KT_REQUIRE(opt, "model: %s", kiln_last_error());
    char path[128];
    snprintf(path, sizeof path, "/tmp/kiln_limits_%d.ckpt", (int)getpid());
    KT_OK(kiln_optim_save(opt, path));
    kiln_safetensors *st = kiln_safetensors_open(path);
    KT_NOTNULL(st);
    /* the same tensors and metadata, one value replaced */
    static const struct { const char *key, *value, *msg; } cases[] = {
        {"kiln.n_params", "4611686018427387904", "parameters, this optimizer has"},
        {"kiln.n_params", "-1", "is not a count"},
        {"kiln.steps", "99999999999999999999999", "is not a count"},
        {"kiln.schedule", "0 -1 5 0x0p+0", "'kiln.schedule': warmup_steps -1 < 0"},
    };
    const char *keys[] = {"kiln.format", "kiln.optimizer", "kiln.n_params", "kiln.param.0", "kiln.param.1",
                          "kiln.steps", "kiln.skipped_steps", "kiln.lr", "kiln.last_grad_norm",
                          "kiln.clip_max_norm", "kiln.schedule"};
    enum { NK = sizeof keys / sizeof keys[0] };
    kiln_ctx *tmp = kiln_ctx_new();
    kiln_tensor *ts[8];
    const char *names[8];
    int n = kiln_safetensors_count(st);
    KT_REQUIRE(n <= 8, "%d tensors", n);
    for (int i = 0; i < n; i++) {
        kiln_safetensors_info in;
        KT_OK(kiln_safetensors_info_at(st, i, &in));
        names[i] = in.name;
        ts[i] = kiln_safetensors_load(st, tmp, in.name);
        KT_NOTNULL(ts[i]);
    }
    cap_memory();
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *meta[2 * NK];
        for (int k = 0; k < NK; k++) {
            const char *v = kiln_safetensors_metadata(st, keys[k]);
            KT_REQUIRE(v, "no metadata %s", keys[k]);
            meta[2 * k] = keys[k];
            meta[2 * k + 1] = strcmp(keys[k], cases[c].key) ? v : cases[c].value;
        }
        char bad[160];
        snprintf(bad, sizeof bad, "%s.bad", path);
        KT_OK(kiln_safetensors_save(bad, ts, names, n, meta, NK));
        kiln_clear_error();
        kiln_status s = kiln_optim_load(opt, bad);
        KT_CHECK(s == KILN_ERR_FORMAT || s == KILN_ERR_ARG, "case %zu: %s", c, kiln_status_name(s));
        KT_CHECK(strstr(kiln_last_error(), cases[c].msg), "case %zu: '%s' lacks '%s'", c, kiln_last_error(),
                 cases[c].msg);
        unlink(bad);
    }
    kiln_ctx_free(tmp);
    kiln_safetensors_close(st);
    unlink(path);
}
