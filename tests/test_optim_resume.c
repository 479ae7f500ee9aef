/* test_optim_resume.c — a stopped run resumes bit for bit: for every
 * optimizer, train N steps, save a checkpoint (parameters and optimizer
 * state), train M more (run A); then a fresh context and optimizer load
 * the checkpoint and train the same M steps (run B). A's and B's
 * parameters must be equal byte for byte. The projector refresh of GaLore
 * and APOLLO (update_gap 3) falls inside the M steps; one optimizer runs
 * with a schedule, clipping and a parameter group. Also: separate
 * parameter and state files, load errors that change nothing, and Adam on
 * Vulkan. */
#include "kt.h"
#include "kt_device.h"
#include "../optim/optim_impl.h"

#include <unistd.h>

#define N_BEFORE 4
#define M_AFTER 5
#define IN 80
#define OUT 64 /* W [64, 80]: 5120 elements, enough for 8-bit state */
#define BATCH 8

typedef kiln_optim *(*make_fn)(kiln_ctx *ctx);

typedef struct model {
    kiln_ctx *ctx;
    kiln_tensor *w, *b, *x, *y, *loss;
    kiln_graph *g;
    kiln_optim *opt;
} model;

typedef kiln_status (*setup_fn)(kiln_optim *opt, model *m);

/* A linear layer fit by mse; params initialized from seeds unless zero. */
static bool model_new(model *m, kiln_backend *dev, make_fn make, setup_fn setup, bool init) {
    memset(m, 0, sizeof *m);
    kiln_ctx *ctx = m->ctx = kiln_ctx_new();
    if (dev && kiln_ctx_set_backend(ctx, dev)) return false;
    m->w = kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){OUT, IN});
    m->b = kiln_param(ctx, "b", KILN_F32, 1, (int64_t[]){OUT});
    m->x = kiln_new_2d(ctx, KILN_F32, BATCH, IN);
    m->y = kiln_new_2d(ctx, KILN_F32, BATCH, OUT);
    if (!m->w || !m->b || !m->x || !m->y) return false;
    if (init && (kiln_tensor_init_linear(m->w, 1, IN) || kiln_tensor_fill_uniform(m->b, 2, -0.1, 0.1))) return false;
    m->loss = kiln_mse(ctx, kiln_tanh(ctx, kiln_linear(ctx, m->x, m->w, m->b)), m->y);
    m->g = kiln_graph_new(ctx);
    if (!m->loss || kiln_graph_add(m->g, m->loss) || kiln_graph_backward(m->g, m->loss)) return false;
    if (!(m->opt = make(ctx))) return false;
    return !setup || !setup(m->opt, m);
}

/* Steps from..to-1, each on its own batch. */
static kiln_status train(model *m, int from, int to) {
    for (int k = from; k < to; k++) {
        kiln_status s;
        if ((s = kiln_tensor_fill_randn(m->x, 1000 + (uint64_t)k, 0, 1)) ||
            (s = kiln_tensor_fill_uniform(m->y, 2000 + (uint64_t)k, -0.5, 0.5)) || (s = kiln_graph_compute(m->g)) ||
            (s = kiln_optim_step(m->opt)))
            return s;
    }
    return KILN_OK;
}

static bool same_params(model *a, model *b) {
    return !memcmp(kiln_tensor_data(a->w), kiln_tensor_data(b->w), kiln_tensor_nbytes(a->w)) &&
           !memcmp(kiln_tensor_data(a->b), kiln_tensor_data(b->b), kiln_tensor_nbytes(a->b));
}

/* setup_b: the resumed run's own setup (NULL where the file restores it) */
static void check_resume2(const char *what, kiln_backend *dev, make_fn make, setup_fn setup, setup_fn setup_b) {
    char path[] = "/tmp/kiln_resume_XXXXXX";
    int fd = mkstemp(path);
    KT_REQUIRE(fd >= 0, "mkstemp");
    close(fd);
    model a, b, c;
    KT_REQUIRE(model_new(&a, dev, make, setup, true), "%s: model A: %s", what, kiln_last_error());
    KT_OK(train(&a, 0, N_BEFORE));
    KT_OK(kiln_checkpoint_save(a.opt, path));
    KT_OK(train(&a, N_BEFORE, N_BEFORE + M_AFTER));

    KT_REQUIRE(model_new(&b, dev, make, setup_b, false), "%s: model B: %s", what, kiln_last_error());
    KT_OK(kiln_checkpoint_load(b.opt, path));
    KT_CHECK(kiln_optim_steps(b.opt) == N_BEFORE, "%s: steps %lld", what, (long long)kiln_optim_steps(b.opt));
    KT_OK(train(&b, N_BEFORE, N_BEFORE + M_AFTER));
    KT_CHECK(same_params(&a, &b), "%s: the resumed run differs", what);
    KT_CHECK(kiln_optim_steps(a.opt) == kiln_optim_steps(b.opt) &&
                 kiln_optim_skipped_steps(a.opt) == kiln_optim_skipped_steps(b.opt) &&
                 memcmp(&(float){kiln_optim_last_grad_norm(a.opt)}, &(float){kiln_optim_last_grad_norm(b.opt)}, 4) == 0,
             "%s: counters differ", what);

    /* the state matters: parameters alone (state and counters fresh) give another run */
    KT_REQUIRE(model_new(&c, dev, make, setup, false), "%s: model C: %s", what, kiln_last_error());
    kiln_clear_error(); /* kiln_load_params wants a file of parameters only */
    KT_CHECK(kiln_load_params(c.ctx, path) == KILN_ERR_FORMAT && strstr(kiln_last_error(), "which is no parameter"),
             "%s: %s", what, kiln_last_error());
    kiln_safetensors *st = kiln_safetensors_open(path);
    KT_NOTNULL(st);
    KT_OK(kiln_safetensors_read_into(st, "w", c.w));
    KT_OK(kiln_safetensors_read_into(st, "b", c.b));
    kiln_safetensors_close(st);
    KT_OK(train(&c, N_BEFORE, N_BEFORE + M_AFTER));
    KT_CHECK(!same_params(&a, &c), "%s: a fresh optimizer gave the same parameters (state not exercised)", what);
    kiln_ctx_free(a.ctx);
    kiln_ctx_free(b.ctx);
    kiln_ctx_free(c.ctx);
    unlink(path);
}

static void check_resume(const char *what, kiln_backend *dev, make_fn make, setup_fn setup) {
    check_resume2(what, dev, make, setup, setup);
}

static kiln_optim *sgd(kiln_ctx *c) {
    return kiln_sgd_new(c, &(kiln_sgd_config){.lr = 0.05f, .momentum = 0.9f, .dampening = 0.1f, .weight_decay = 0.01f,
                                              .nesterov = false});
}
static kiln_optim *sgd_nesterov(kiln_ctx *c) {
    return kiln_sgd_new(c, &(kiln_sgd_config){.lr = 0.05f, .momentum = 0.9f, .nesterov = true});
}
static kiln_optim *adam(kiln_ctx *c) {
    kiln_adam_config a = kiln_adam_defaults();
    a.lr = 1e-2f;
    return kiln_adam_new(c, &a);
}
static kiln_optim *adamw_amsgrad(kiln_ctx *c) {
    kiln_adam_config a = kiln_adamw_defaults();
    a.lr = 1e-2f;
    a.amsgrad = true;
    return kiln_adamw_new(c, &a);
}
static kiln_optim *lion(kiln_ctx *c) {
    kiln_lion_config l = kiln_lion_defaults();
    l.lr = 1e-3f;
    l.weight_decay = 0.1f;
    return kiln_lion_new(c, &l);
}
static kiln_optim *adam8(kiln_ctx *c) {
    kiln_adam_config a = kiln_adam_defaults();
    a.lr = 1e-2f;
    return kiln_adam8bit_new(c, &a);
}
static kiln_optim *adamw8(kiln_ctx *c) {
    kiln_adam_config a = kiln_adamw_defaults();
    a.lr = 1e-2f;
    return kiln_adamw8bit_new(c, &a);
}
static kiln_optim *lion8(kiln_ctx *c) {
    kiln_lion_config l = kiln_lion_defaults();
    l.lr = 1e-3f;
    return kiln_lion8bit_new(c, &l);
}
static kiln_optim *sgd8(kiln_ctx *c) {
    return kiln_sgd8bit_new(c, &(kiln_sgd_config){.lr = 0.05f, .momentum = 0.9f});
}
#ifdef KILN_BLAS
static kiln_optim *galore(kiln_ctx *c) {
    kiln_galore_config g = kiln_galore_defaults();
    g.adamw.lr = 1e-2f;
    g.adamw.weight_decay = 0.01f;
    g.rank = 4;
    g.update_gap = 3;
    return kiln_galore_adamw_new(c, &g);
}
#endif
static kiln_optim *apollo(kiln_ctx *c) {
    kiln_apollo_config a = kiln_apollo_defaults();
    a.adamw.lr = 1e-2f;
    a.rank = 4;
    a.update_gap = 3;
    a.seed = 7;
    return kiln_apollo_new(c, &a);
}
static kiln_optim *apollo_mini(kiln_ctx *c) {
    kiln_apollo_config a = kiln_apollo_mini_defaults();
    a.adamw.lr = 1e-3f;
    a.update_gap = 3;
    return kiln_apollo_new(c, &a);
}

/* A cosine schedule with warmup, clipping that bites, and a group. */
static kiln_status schedule_clip_group(kiln_optim *opt, model *m) {
    kiln_schedule s = {.kind = KILN_SCHEDULE_COSINE, .warmup_steps = 2, .total_steps = 8, .min_lr_ratio = 0.1f};
    kiln_status st = kiln_optim_set_schedule(opt, &s);
    if (!st) st = kiln_optim_set_clip_grad_norm(opt, 0.05f);
    if (!st) st = kiln_optim_set_group(opt, &m->b, 1, 0.5f, 0.0f);
    return st;
}

static const struct {
    const char *name;
    make_fn make;
    setup_fn setup;
} optims[] = {
    {"sgd momentum + schedule/clip/group", sgd, schedule_clip_group},
    {"sgd nesterov", sgd_nesterov, NULL},
    {"adam", adam, NULL},
    {"adamw amsgrad + schedule/clip/group", adamw_amsgrad, schedule_clip_group},
    {"lion", lion, NULL},
    {"adam8bit", adam8, NULL},
    {"adamw8bit + schedule/clip/group", adamw8, schedule_clip_group},
    {"lion8bit", lion8, NULL},
    {"sgd8bit", sgd8, NULL},
#ifdef KILN_BLAS
    {"galore", galore, NULL},
    {"galore + schedule/clip/group", galore, schedule_clip_group},
#endif
    {"apollo", apollo, NULL},
    {"apollo-mini + schedule/clip/group", apollo_mini, schedule_clip_group},
};

/* Schedule and clipping without a group: the file alone restores them. */
static kiln_status schedule_clip(kiln_optim *opt, model *m) {
    (void)m;
    kiln_schedule s = {.kind = KILN_SCHEDULE_LINEAR, .warmup_steps = 3, .total_steps = 9, .min_lr_ratio = 0.2f};
    kiln_status st = kiln_optim_set_schedule(opt, &s);
    return st ? st : kiln_optim_set_clip_grad_norm(opt, 0.05f);
}

KT_TEST(optim_resume_bit_identical) {
    for (size_t i = 0; i < sizeof optims / sizeof optims[0]; i++)
        check_resume(optims[i].name, NULL, optims[i].make, optims[i].setup);
    check_resume2("adamw amsgrad, schedule and clipping from the file", NULL, adamw_amsgrad, schedule_clip, NULL);
}

/* Parameters and state in two files; the state file's checks. */
KT_TEST(optim_state_file_and_errors) {
    char pp[] = "/tmp/kiln_params_XXXXXX", sp[] = "/tmp/kiln_state_XXXXXX";
    close(mkstemp(pp));
    close(mkstemp(sp));
    model a, b;
    KT_REQUIRE(model_new(&a, NULL, adamw_amsgrad, schedule_clip_group, true), "%s", kiln_last_error());
    KT_OK(train(&a, 0, N_BEFORE));
    KT_OK(kiln_save_params(a.ctx, pp));
    KT_OK(kiln_optim_save(a.opt, sp));
    KT_OK(train(&a, N_BEFORE, N_BEFORE + M_AFTER));
    KT_REQUIRE(model_new(&b, NULL, adamw_amsgrad, schedule_clip_group, false), "%s", kiln_last_error());
    KT_OK(kiln_load_params(b.ctx, pp));
    KT_OK(kiln_optim_load(b.opt, sp));
    KT_OK(train(&b, N_BEFORE, N_BEFORE + M_AFTER));
    KT_CHECK(same_params(&a, &b), "resumed from two files: differs");

    kiln_safetensors *st = kiln_safetensors_open(sp);
    KT_NOTNULL(st);
    KT_CHECK(kiln_safetensors_find(st, "state.0.exp_avg") >= 0 && kiln_safetensors_find(st, "state.1.max_exp_avg_sq") >= 0 &&
                 kiln_safetensors_count(st) == 6, "state names");
    KT_CHECK(!strcmp(kiln_safetensors_metadata(st, "kiln.optimizer"), "kiln_adamw") &&
                 !strcmp(kiln_safetensors_metadata(st, "kiln.param.1"), "b") &&
                 !strcmp(kiln_safetensors_metadata(st, "kiln.steps"), "4"), "metadata");
    kiln_safetensors_close(st);

    /* another kind, another config (no amsgrad), a parameter file: errors, nothing changed */
    model c;
    KT_REQUIRE(model_new(&c, NULL, adam, NULL, true), "%s", kiln_last_error());
    KT_OK(train(&c, 0, 2));
    unsigned char w0[OUT * IN * 4];
    memcpy(w0, kiln_tensor_data(c.w), sizeof w0);
    kiln_clear_error();
    KT_CHECK(kiln_optim_load(c.opt, sp) == KILN_ERR_ARG && strstr(kiln_last_error(), "kiln_adamw optimizer, not of this kiln_adam"),
             "kind: %s", kiln_last_error());
    KT_CHECK(kiln_checkpoint_load(c.opt, sp) != KILN_OK, "checkpoint from a state file");
    KT_CHECK(kiln_optim_load(c.opt, pp) == KILN_ERR_FORMAT && strstr(kiln_last_error(), "no metadata 'kiln.format'"),
             "params file: %s", kiln_last_error());
    KT_CHECK(kiln_optim_steps(c.opt) == 2 && !memcmp(w0, kiln_tensor_data(c.w), sizeof w0), "a failed load changed something");
    model e;
    KT_REQUIRE(model_new(&e, NULL, apollo, NULL, true), "%s", kiln_last_error());
    kiln_clear_error();
    KT_CHECK(kiln_optim_load(e.opt, sp) == KILN_ERR_ARG, "apollo from adamw: %s", kiln_last_error());
    kiln_ctx_free(e.ctx);
    kiln_ctx_free(a.ctx);
    kiln_ctx_free(b.ctx);
    kiln_ctx_free(c.ctx);
    unlink(pp);
    unlink(sp);
}

/* Same kind, state of another shape: adamw amsgrad's file into adamw
 * without amsgrad fails on the count, and into a model of other
 * parameter names on the names. */
static kiln_optim *adamw_plain(kiln_ctx *c) {
    kiln_adam_config a = kiln_adamw_defaults();
    a.lr = 1e-2f;
    return kiln_adamw_new(c, &a);
}

KT_TEST(optim_state_config_mismatch) {
    char sp[] = "/tmp/kiln_state_XXXXXX";
    close(mkstemp(sp));
    model a, b;
    KT_REQUIRE(model_new(&a, NULL, adamw_amsgrad, NULL, true), "%s", kiln_last_error());
    KT_OK(train(&a, 0, 2));
    KT_OK(kiln_optim_save(a.opt, sp));
    KT_REQUIRE(model_new(&b, NULL, adamw_plain, NULL, true), "%s", kiln_last_error());
    kiln_clear_error();
    KT_CHECK(kiln_optim_load(b.opt, sp) == KILN_ERR_FORMAT && strstr(kiln_last_error(), "holds 6 tensors where 4 were expected"),
             "%s", kiln_last_error());
    KT_CHECK(kiln_optim_steps(b.opt) == 0, "steps changed");
    kiln_ctx_free(a.ctx);
    kiln_ctx_free(b.ctx);
    unlink(sp);
}

/* A load accepts exactly what the setters (and kiln_optim_step, for the
 * step count) accept: files saved from settings that no call would make
 * are refused with the setter's words, naming the key, and change nothing. */
KT_TEST(optim_load_accepts_what_the_setters_accept) {
    char sp[] = "/tmp/kiln_state_XXXXXX";
    close(mkstemp(sp));
    model a, b;
    KT_REQUIRE(model_new(&a, NULL, adam, NULL, true) && model_new(&b, NULL, adam, NULL, true), "%s", kiln_last_error());
    KT_OK(train(&b, 0, 1));
    const kiln_schedule warmup_past_total = {KILN_SCHEDULE_COSINE, 10, 5, 0.0f};
    KT_CHECK(kiln_optim_set_schedule(a.opt, &warmup_past_total) == KILN_ERR_ARG, "the setter took the schedule");
    const struct {
        const char *what, *text;
        int64_t steps, skipped;
        float lr;
        kiln_schedule sched;
    } bad[] = {
        {"steps INT64_MAX", "'kiln.steps': step count 9223372036854775807 is outside 0..4294967294", INT64_MAX, 0,
         1e-3f, {0}},
        {"skipped INT64_MAX", "'kiln.skipped_steps': step count", 3, INT64_MAX, 1e-3f, {0}},
        {"lr -1", "'kiln.lr': invalid learning rate -1", 3, 0, -1.0f, {0}},
        {"warmup past total", "'kiln.schedule': total_steps 5 < warmup_steps 10", 3, 0, 1e-3f, warmup_past_total},
    };
    const float lr_b = kiln_optim_lr(b.opt);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        a.opt->steps = bad[i].steps, a.opt->skipped_steps = bad[i].skipped;
        a.opt->lr = bad[i].lr, a.opt->sched = bad[i].sched; /* as a hand-made file would hold */
        KT_OK(kiln_optim_save(a.opt, sp));
        kiln_clear_error();
        KT_CHECK(kiln_optim_load(b.opt, sp) == KILN_ERR_FORMAT && strstr(kiln_last_error(), bad[i].text) &&
                     strstr(kiln_last_error(), sp),
                 "%s: %s", bad[i].what, kiln_last_error());
        KT_CHECK(kiln_optim_steps(b.opt) == 1 && kiln_optim_lr(b.opt) == lr_b, "%s: a failed load changed b",
                 bad[i].what);
    }
    /* the last step count that can still step loads; stepping past it is refused */
    a.opt->steps = KILN__MAX_STEPS - 1, a.opt->skipped_steps = 0, a.opt->lr = 1e-3f, a.opt->sched = (kiln_schedule){0};
    KT_OK(kiln_optim_save(a.opt, sp));
    KT_OK(kiln_optim_load(b.opt, sp));
    KT_OK(train(&b, 0, 1));
    KT_CHECK(train(&b, 1, 2) == KILN_ERR_STATE && strstr(kiln_last_error(), "kiln_optim_step: step count 4294967295"),
             "a step past the last: %s", kiln_last_error());
    kiln_ctx_free(a.ctx);
    kiln_ctx_free(b.ctx);
    unlink(sp);
}

#ifdef KILN_VULKAN
KT_TEST(optim_resume_vulkan_adam) {
    kiln_backend *vk = kt_device("vulkan");
    if (!vk) return;
    check_resume("adam on vulkan", vk, adam, NULL);
    check_resume("adamw amsgrad on vulkan + schedule/clip/group", vk, adamw_amsgrad, schedule_clip_group);
}
#endif
