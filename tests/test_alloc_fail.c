/* test_alloc_fail.c — failure injection: each sweep runs one operation once
 * to count the heap allocations libkiln makes in it (kiln_debug.h), then
 * once per allocation with exactly that one failing. Every run must return
 * an error status (or succeed with the same result, where kiln has a
 * fallback), must not crash, and the model must work again afterwards. In
 * the sanitized build (make SANITIZE=address,undefined) the runner's
 * LeakSanitizer check after each test shows that no error path leaks.
 * Operations: graph build with backward (also with a checkpointed
 * segment), CPU compute, optimizer creation and step (AdamW, 8-bit AdamW,
 * GaLore, APOLLO, Lion), checkpoint save and load, safetensors and GGUF
 * save and load. One thread, so the order of
 * allocations is the same in every run. */
#include "kt.h"
#include "kiln_debug.h"

#include <unistd.h>

#define IN 24
#define HID 32
#define OUT 10
#define BATCH 6

typedef struct model {
    kiln_ctx *ctx;
    kiln_tensor *w1, *b1, *ln_w, *w2, *x, *labels, *loss;
    kiln_graph *g;
    kiln_optim *opt;
} model;

/* Parameters and inputs: the allocations of kiln_ctx_new and kiln_param. */
static kiln_status model_leaves(model *m) {
    memset(m, 0, sizeof *m);
    if (!(m->ctx = kiln_ctx_new())) return kiln_last_status();
    kiln_ctx *ctx = m->ctx;
    m->w1 = kiln_param(ctx, "w1", KILN_F32, 2, (int64_t[]){HID, IN});
    m->b1 = kiln_param(ctx, "b1", KILN_F32, 1, (int64_t[]){HID});
    m->ln_w = kiln_param(ctx, "ln_w", KILN_F32, 1, (int64_t[]){HID});
    m->w2 = kiln_param(ctx, "w2", KILN_F32, 2, (int64_t[]){OUT, HID});
    m->x = kiln_new_2d(ctx, KILN_F32, BATCH, IN);
    m->labels = kiln_new_1d(ctx, KILN_I32, BATCH);
    if (!m->w1 || !m->b1 || !m->ln_w || !m->w2 || !m->x || !m->labels) return kiln_last_status();
    kiln_status s;
    if ((s = kiln_tensor_fill_randn(m->w1, 1, 0, 0.2)) || (s = kiln_tensor_fill_randn(m->b1, 2, 0, 0.1)) ||
        (s = kiln_tensor_fill_randn(m->ln_w, 3, 1, 0.1)) || (s = kiln_tensor_fill_randn(m->w2, 4, 0, 0.2)) ||
        (s = kiln_tensor_fill_randn(m->x, 5, 0, 1)))
        return s;
    int32_t lab[BATCH];
    for (int i = 0; i < BATCH; i++) lab[i] = (i * 7) % OUT;
    return kiln_tensor_set_i32(m->labels, lab, BATCH);
}

/* linear -> layer norm -> gelu -> softmax attention over the batch -> linear -> cross entropy */
static bool checkpointed; /* the layers up to the attention as a kiln_checkpoint_begin/end segment */

static kiln_status model_graph(model *m) {
    kiln_ctx *ctx = m->ctx;
    kiln_status s;
    if (checkpointed && (s = kiln_checkpoint_begin(ctx))) return s;
    kiln_tensor *h = kiln_gelu(ctx, kiln_layer_norm(ctx, kiln_linear(ctx, m->x, m->w1, m->b1), m->ln_w, NULL, 1e-5));
    kiln_tensor *h4 = kiln_reshape(ctx, h, 4, (int64_t[]){1, 1, BATCH, HID});
    kiln_tensor *a = kiln_reshape(ctx, kiln_attention(ctx, h4, h4, h4, true, 0), 2, (int64_t[]){BATCH, HID});
    if (checkpointed && (s = kiln_checkpoint_end(ctx))) return s;
    m->loss = kiln_cross_entropy(ctx, kiln_linear(ctx, kiln_add(ctx, a, h), m->w2, NULL), m->labels, -100);
    if (!m->loss) return kiln_last_status();
    if (!(m->g = kiln_graph_new(ctx))) return kiln_last_status();
    if ((s = kiln_graph_add(m->g, m->loss)) || (s = kiln_graph_backward(m->g, m->loss))) return s;
    return KILN_OK;
}

static kiln_status model_new(model *m) {
    kiln_status s = model_leaves(m);
    return s ? s : model_graph(m);
}

static void model_free(model *m) {
    kiln_ctx_free(m->ctx);
    memset(m, 0, sizeof *m);
}

/* The parameters' bytes, concatenated, to compare runs. */
static void params_get(model *m, float *out) {
    kiln_tensor *p[] = {m->w1, m->b1, m->ln_w, m->w2};
    for (int i = 0; i < 4; i++) {
        int64_t n = kiln_tensor_numel(p[i]);
        kiln_tensor_get_f32(p[i], out, n);
        out += n;
    }
}
#define N_PARAMS (HID * IN + HID + HID + OUT * HID)

/* One sweep. op runs on a fresh state made by setup (not failed); check
 * (may be NULL) says whether a run that returned KILN_OK gave the right
 * result and whether the state still works after a failure. Reports the
 * allocations and sites covered. */
typedef struct sweep {
    const char *name;
    kiln_status (*setup)(model *m);
    kiln_status (*op)(model *m);
    /* after op: ok is whether it returned KILN_OK; false when wrong */
    bool (*check)(model *m, bool ok);
    void (*teardown)(model *m);
} sweep;

static void run_sweep(const sweep *sw) {
    kiln_set_threads(1);
    model m;
    kiln_debug_fail_alloc_after(-1);
    if (sw->setup) KT_OK(sw->setup(&m));
    kiln_debug_fail_alloc_after(-1);
    kiln_status s = sw->op(&m);
    long n = kiln_debug_alloc_count(), sites = kiln_debug_alloc_sites();
    KT_CHECK(s == KILN_OK, "%s without failures: %s: %s", sw->name, kiln_status_name(s), kiln_last_error());
    KT_CHECK(!sw->check || sw->check(&m, true), "%s without failures: wrong result", sw->name);
    sw->teardown(&m);
    KT_CHECK(n > 0, "%s made no allocation", sw->name);
    int errors = 0, recovered = 0;
    for (long i = 0; i < n; i++) {
        kiln_debug_fail_alloc_after(-1);
        if (sw->setup && sw->setup(&m)) {
            kt_fail(__FILE__, __LINE__, "%s: setup failed: %s", sw->name, kiln_last_error());
            sw->teardown(&m);
            return;
        }
        kiln_clear_error();
        kiln_debug_fail_alloc_after(i);
        s = sw->op(&m);
        bool failed = kiln_debug_alloc_failed();
        kiln_debug_fail_alloc_after(-1);
        if (s != KILN_OK) {
            errors++;
            KT_CHECK(failed, "%s, allocation %ld: %s without an injected failure: %s", sw->name, i,
                     kiln_status_name(s), kiln_last_error());
            KT_CHECK(kiln_last_error()[0], "%s, allocation %ld: %s with no message", sw->name, i, kiln_status_name(s));
        } else if (failed) {
            recovered++;
        }
        KT_CHECK(!sw->check || sw->check(&m, s == KILN_OK), "%s, allocation %ld failed (status %s): wrong result after",
                 sw->name, i, kiln_status_name(s));
        sw->teardown(&m);
    }
    printf("    %-24s %4ld allocations at %3ld sites: %d errors, %d handled by a fallback\n", sw->name, n, sites, errors,
           recovered);
}

/* ---- graph build ---- */
static kiln_status op_build(model *m) { return model_new(m); }

KT_TEST(alloc_fail_graph_build) {
    run_sweep(&(sweep){"graph build", NULL, op_build, NULL, model_free});
}

KT_TEST(alloc_fail_graph_build_checkpointed) {
    checkpointed = true;
    run_sweep(&(sweep){"graph build with checkpointing", NULL, op_build, NULL, model_free});
}

/* ---- compute ---- */
static double ref_loss;
static float ref_grad[HID * IN];

static bool check_compute(model *m, bool ok) {
    float g[HID * IN];
    /* after a failure the graph computes again, and gives the same loss and gradient */
    if (!ok) {
        kiln_zero_grad(m->ctx);
        if (kiln_graph_compute(m->g)) return false;
    }
    if (kiln_tensor_get_f32(kiln_tensor_grad(m->w1), g, HID * IN)) return false;
    return kiln_tensor_item(m->loss) == ref_loss && !memcmp(g, ref_grad, sizeof g);
}

static kiln_status op_compute(model *m) { return kiln_graph_compute(m->g); }

KT_TEST(alloc_fail_compute) {
    kiln_set_threads(1);
    model m;
    KT_OK(model_new(&m));
    KT_OK(kiln_graph_compute(m.g));
    ref_loss = kiln_tensor_item(m.loss);
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(m.w1), ref_grad, HID * IN));
    model_free(&m);
    run_sweep(&(sweep){"compute (CPU)", model_new, op_compute, check_compute, model_free});
}

/* ---- optimizers: creation, then a step ---- */
static kiln_optim *(*make_opt)(kiln_ctx *ctx);
static float ref_params[N_PARAMS];

static kiln_optim *make_adamw(kiln_ctx *ctx) { return kiln_adamw_new(ctx, &(kiln_adam_config){.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f}); }
static kiln_optim *make_adamw8bit(kiln_ctx *ctx) { return kiln_adamw8bit_new(ctx, NULL); }
static kiln_optim *make_lion(kiln_ctx *ctx) { return kiln_lion_new(ctx, NULL); }
#ifdef KILN_BLAS
static kiln_optim *make_galore(kiln_ctx *ctx) {
    kiln_galore_config c = kiln_galore_defaults();
    c.rank = 4;
    return kiln_galore_adamw_new(ctx, &c);
}
#endif
static kiln_optim *make_apollo(kiln_ctx *ctx) { return kiln_apollo_new(ctx, NULL); }

static kiln_status op_opt_new(model *m) { return (m->opt = make_opt(m->ctx)) ? KILN_OK : kiln_last_status(); }

static kiln_status setup_step(model *m) {
    kiln_status s = model_new(m);
    if (!s) s = op_opt_new(m);
    if (!s) s = kiln_graph_compute(m->g);
    return s;
}

static kiln_status op_step(model *m) { return kiln_optim_step(m->opt); }

/* A step that worked (perhaps through a fallback) gives the reference
 * parameters; after a failed one the next step works. (A failure part way
 * may have stepped some parameters already: no rollback is promised.) */
static bool check_step(model *m, bool ok) {
    static float p[N_PARAMS];
    if (!ok) return !kiln_graph_compute(m->g) && !kiln_optim_step(m->opt);
    params_get(m, p);
    return !memcmp(p, ref_params, sizeof p);
}

static void opt_sweeps(const char *name, kiln_optim *(*make)(kiln_ctx *)) {
    make_opt = make;
    model m;
    kiln_set_threads(1);
    KT_OK(setup_step(&m));
    KT_OK(kiln_optim_step(m.opt));
    params_get(&m, ref_params);
    model_free(&m);
    char a[64], b[64];
    snprintf(a, sizeof a, "%s new", name);
    snprintf(b, sizeof b, "%s step", name);
    run_sweep(&(sweep){a, model_new, op_opt_new, NULL, model_free});
    run_sweep(&(sweep){b, setup_step, op_step, check_step, model_free});
}

KT_TEST(alloc_fail_optim_adamw) { opt_sweeps("adamw", make_adamw); }
KT_TEST(alloc_fail_optim_adamw8bit) { opt_sweeps("adamw8bit", make_adamw8bit); }
KT_TEST(alloc_fail_optim_lion) { opt_sweeps("lion", make_lion); }
#ifdef KILN_BLAS /* GaLore needs LAPACK's SVD: a BLAS=0 build has no GaLore to sweep */
KT_TEST(alloc_fail_optim_galore) { opt_sweeps("galore", make_galore); }
#endif
KT_TEST(alloc_fail_optim_apollo) { opt_sweeps("apollo", make_apollo); }

/* ---- checkpoint save and load ---- */
static char ckpt_path[64], ckpt_tmp[64];

static kiln_status setup_trained(model *m) {
    kiln_status s = setup_step(m);
    if (!s) s = kiln_optim_step(m->opt);
    return s;
}
static kiln_status op_ckpt_save(model *m) { return kiln_checkpoint_save(m->opt, ckpt_tmp); }
/* a saved file loads and gives the trained parameters */
static bool check_ckpt_save(model *m, bool ok) {
    (void)m;
    if (!ok) return true;
    model fresh;
    bool good = !setup_step(&fresh) && !kiln_checkpoint_load(fresh.opt, ckpt_tmp);
    static float p[N_PARAMS];
    if (good) params_get(&fresh, p);
    model_free(&fresh);
    return good && !memcmp(p, ref_params, sizeof p);
}
static kiln_status op_ckpt_load(model *m) { return kiln_checkpoint_load(m->opt, ckpt_path); }
/* a failed load changes nothing; a load that worked gives the trained parameters */
static bool check_ckpt_load(model *m, bool ok) {
    static float p[N_PARAMS], untrained[N_PARAMS];
    params_get(m, p);
    if (ok) return !memcmp(p, ref_params, sizeof p);
    model fresh;
    bool good = !setup_step(&fresh);
    if (good) params_get(&fresh, untrained);
    model_free(&fresh);
    return good && !memcmp(p, untrained, sizeof p) && !kiln_checkpoint_load(m->opt, ckpt_path);
}

KT_TEST(alloc_fail_checkpoint) {
    make_opt = make_adamw;
    snprintf(ckpt_path, sizeof ckpt_path, "/tmp/kiln_allocfail_%d.ckpt", (int)getpid());
    snprintf(ckpt_tmp, sizeof ckpt_tmp, "/tmp/kiln_allocfail_%d.save", (int)getpid());
    kiln_set_threads(1);
    model m;
    KT_OK(setup_trained(&m));
    params_get(&m, ref_params);
    KT_OK(kiln_checkpoint_save(m.opt, ckpt_path));
    model_free(&m);
    run_sweep(&(sweep){"checkpoint save", setup_trained, op_ckpt_save, check_ckpt_save, model_free});
    run_sweep(&(sweep){"checkpoint load", setup_step, op_ckpt_load, check_ckpt_load, model_free});
    unlink(ckpt_path);
    unlink(ckpt_tmp);
}

/* ---- safetensors and GGUF: save, open and load every tensor ---- */
static char file_path[64];

static kiln_status op_st_save(model *m) {
    kiln_tensor *t[] = {m->w1, m->b1, m->ln_w, m->w2};
    const char *names[] = {"w1", "b1", "ln_w", "w2"}, *meta[] = {"k", "v"};
    return kiln_safetensors_save(file_path, t, names, 4, meta, 1);
}
static kiln_status op_gguf_save(model *m) {
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    if (!w) return kiln_last_status();
    kiln_status s;
    const char *strs[] = {"a", "bc"};
    if (!(s = kiln_gguf_set_string(w, "general.architecture", "test")) &&
        !(s = kiln_gguf_set_int(w, "test.n", KILN_GGUF_UINT32, 7)) &&
        !(s = kiln_gguf_set_array(w, "test.strs", KILN_GGUF_STRING, strs, 2)) &&
        !(s = kiln_gguf_add_tensor(w, "w1", m->w1)) && !(s = kiln_gguf_add_tensor(w, "w2", m->w2)))
        s = kiln_gguf_writer_save(w, file_path);
    kiln_gguf_writer_free(w);
    return s;
}
static const char *const file_names[] = {"w1", "w2"};

/* every tensor loaded matches its parameter */
static bool same_as(kiln_tensor *t, kiln_tensor *p) {
    int64_t n = kiln_tensor_numel(p);
    float *a = malloc((size_t)n * 2 * sizeof(float));
    bool ok = a && t && kiln_tensor_numel(t) == n && !kiln_tensor_get_f32(t, a, n) && !kiln_tensor_get_f32(p, a + n, n) &&
              !memcmp(a, a + n, (size_t)n * sizeof(float));
    free(a);
    return ok;
}

static kiln_tensor *loaded[2];
static kiln_status op_st_load(model *m) {
    kiln_safetensors *st = kiln_safetensors_open(file_path);
    if (!st) return kiln_last_status();
    kiln_status s = KILN_OK;
    for (int i = 0; i < 2 && !s; i++)
        if (!(loaded[i] = kiln_safetensors_load(st, m->ctx, file_names[i]))) s = kiln_last_status();
    if (!s && (!kiln_safetensors_metadata(st, "k") || strcmp(kiln_safetensors_metadata(st, "k"), "v")))
        s = KILN_ERR_FORMAT;
    kiln_safetensors_close(st);
    return s;
}
static kiln_status op_gguf_load(model *m) {
    kiln_gguf *g = kiln_gguf_open(file_path);
    if (!g) return kiln_last_status();
    kiln_status s = KILN_OK;
    int64_t n = 0;
    for (int i = 0; i < 2 && !s; i++)
        if (!(loaded[i] = kiln_gguf_load(g, m->ctx, file_names[i]))) s = kiln_last_status();
    if (!s) s = kiln_gguf_get_int(g, "test.n", &n);
    if (!s && n != 7) s = KILN_ERR_FORMAT;
    kiln_gguf_close(g);
    return s;
}
static bool check_loaded(model *m, bool ok) {
    if (!ok) return true;
    bool good = same_as(loaded[0], m->w1) && same_as(loaded[1], m->w2);
    loaded[0] = loaded[1] = NULL;
    return good;
}
static bool check_saved(model *m, bool ok) {
    if (!ok) return true;
    return !op_st_load(m) && check_loaded(m, true);
}
static bool check_gguf_saved(model *m, bool ok) {
    if (!ok) return true;
    return !op_gguf_load(m) && check_loaded(m, true);
}

KT_TEST(alloc_fail_safetensors) {
    snprintf(file_path, sizeof file_path, "/tmp/kiln_allocfail_%d.safetensors", (int)getpid());
    run_sweep(&(sweep){"safetensors save", model_leaves, op_st_save, check_saved, model_free});
    run_sweep(&(sweep){"safetensors load", model_leaves, op_st_load, check_loaded, model_free});
    unlink(file_path);
}

KT_TEST(alloc_fail_gguf) {
    snprintf(file_path, sizeof file_path, "/tmp/kiln_allocfail_%d.gguf", (int)getpid());
    run_sweep(&(sweep){"gguf save", model_leaves, op_gguf_save, check_gguf_saved, model_free});
    run_sweep(&(sweep){"gguf load", model_leaves, op_gguf_load, check_loaded, model_free});
    unlink(file_path);
}
