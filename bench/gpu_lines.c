/* gpu_lines.c — the device lines the GPU issue's goals are read from, for
 * one device backend (bench_vulkan: vk_*, bench_cuda: cu_*):
 *
 *   <p>_gpt L4 d256 <mode>    models/gpt.h's GPT-2 training step (AdamW),
 *   <p>_gpt L12 d768 <mode>   4 layers, width 256, context 128, batch 16 and
 *                             12 layers, width 768, context 512, batch 8,
 *                             in tokens/s, in each matmul precision mode
 *                             (f32, tf32, bf16: kiln_set_matmul_precision),
 *                             against PyTorch on the same GPU in the
 *                             matching mode (bench/torch_ref.py --only gpu:
 *                             fp32, TF32, bf16 autocast) where torch has
 *                             CUDA, else against kiln's CPU in the same run
 *   <p>_generate <mix>        bench/generate.c's TinyLlama-shaped files read
 *   <p>_prompt 128 <mix>      into the device: batch-1 tok/s against kiln's
 *                             CPU on the same file (the goal: the GPU never
 *                             slower), and llama.cpp's GPU build (-ngl 99)
 *                             where $KILN_LLAMA_BENCH_GPU names its llama-bench
 *
 * On an emulated device (lavapipe, the fake CUDA toolkit: the host's CPU
 * runs the kernels) only the small GPT in f32 runs, to show the code runs:
 * a token of the 1.1B model there takes many seconds. */
#include "bench.h"
#include "gpt.h"
#include "llama_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool emulated(kiln_backend *b) {
    const char *d = kiln_backend_device(b);
    return d && (strstr(d, "llvmpipe") || strstr(d, "emulation"));
}

typedef struct gpt_job {
    kiln_ctx *ctx;
    gpt *m;
    model_graph g;
    kiln_optim *opt;
    kiln_matmul_precision prec;
    int nt;
} gpt_job;

static void gpt_run(void *p) {
    gpt_job *j = p;
    kiln_set_threads(j->nt);
    bench_check(kiln_set_matmul_precision(j->prec) == KILN_OK, "matmul precision");
    bench_check(kiln_graph_compute(j->g.graph) == KILN_OK && kiln_optim_step(j->opt) == KILN_OK, "GPT step");
    (void)kiln_tensor_item(j->g.loss); /* the device's queue drained */
}

/* The GPT of one size on backend b (NULL: the CPU), random tokens. */
static gpt_job gpt_job_new(kiln_backend *b, int64_t layers, int64_t width, int64_t t, int64_t batch, int nt) {
    gpt_job j = {.ctx = kiln_ctx_new(), .nt = nt};
    bench_check(j.ctx && kiln_ctx_set_backend(j.ctx, b) == KILN_OK, "context");
    gpt_config cfg = {.vocab = 256, .context = t, .layers = layers, .heads = width / 64, .width = width};
    j.m = gpt_new(j.ctx, &cfg, 1);
    bench_check(j.m && gpt_train_graph(j.m, batch, t, &j.g) == KILN_OK, "GPT training graph");
    const int64_t n = batch * t;
    int32_t *v = malloc((size_t)n * sizeof *v);
    bench_check(v != NULL, "out of memory");
    for (int k = 0; k < 2; k++) {
        for (int64_t i = 0; i < n; i++) v[i] = (int32_t)(((uint64_t)(i + k * n) * 2654435761u >> 7) % 256);
        bench_check(kiln_tensor_set_i32(k ? j.g.labels : j.g.input, v, n) == KILN_OK, "tokens");
    }
    free(v);
    kiln_adam_config c = kiln_adamw_defaults();
    c.lr = 3e-4f;
    j.opt = kiln_adamw_new(j.ctx, &c);
    bench_check(j.opt != NULL, "AdamW");
    return j;
}

static void gpt_job_free(gpt_job *j) {
    gpt_free(j->m);
    kiln_ctx_free(j->ctx);
}

static void gpt_lines(kiln_backend *b, const char *prefix, const bench_opts *o) {
    static const struct {
        int64_t layers, width, t, batch;
        const char *key; /* torch_ref.py's gpu_gpt_<key>_<mode> */
    } sizes[] = {{4, 256, 128, 16, "small"}, {12, 768, 512, 8, "large"}};
    static const struct {
        kiln_matmul_precision prec;
        const char *name, *torch;
    } modes[] = {{KILN_MATMUL_F32, "f32", "fp32"}, {KILN_MATMUL_TF32, "tf32", "tf32"}, {KILN_MATMUL_BF16, "bf16", "bf16"}};
    const int nt = o->threads[o->n_threads - 1];
    const bool emu = emulated(b);
    for (int s = 0; s < (emu ? 1 : 2); s++) {
        for (int k = 0; k < (emu ? 1 : 3); k++) {
            gpt_job dev = gpt_job_new(b, sizes[s].layers, sizes[s].width, sizes[s].t, sizes[s].batch, nt);
            dev.prec = modes[k].prec;
            char key[48], name[64], ref[48];
            snprintf(key, sizeof key, "gpu_gpt_%s_%s", sizes[s].key, modes[k].torch);
            const double torch = bench_torch(key), tokens = (double)(sizes[s].batch * sizes[s].t);
            double med[2];
            if (torch > 0) {
                bench_measure(&(bench_job){gpt_run, &dev}, 1, 3, 50, 2.0 * o->scale, med);
                snprintf(ref, sizeof ref, "pytorch %s", modes[k].torch);
            } else { /* kiln's CPU, alternating with the device */
                gpt_job cpu = gpt_job_new(NULL, sizes[s].layers, sizes[s].width, sizes[s].t, sizes[s].batch, nt);
                cpu.prec = modes[k].prec;
                bench_measure((bench_job[]){{gpt_run, &dev}, {gpt_run, &cpu}}, 2, 1, 50, 2.0 * o->scale, med);
                gpt_job_free(&cpu);
                snprintf(ref, sizeof ref, "kiln-cpu %dt (no PyTorch GPU figure)", nt);
            }
            snprintf(name, sizeof name, "%s_gpt L%lld d%lld %s", prefix, (long long)sizes[s].layers,
                     (long long)sizes[s].width, modes[k].name);
            bench_report(name, tokens / med[0], "tokens/s", torch > 0 ? torch : tokens / med[1], ref);
            bench_check(kiln_graph_get_stats(dev.g.graph).nodes_fallback == 0, "a GPT node ran on the CPU, not the device");
            gpt_job_free(&dev);
        }
    }
    kiln_set_matmul_precision(KILN_MATMUL_F32);
}

static void generate_lines(kiln_backend *b, const char *prefix, const bench_opts *o) {
    static const char *const mixes[] = {"Q4_0", "Q8_0", "Q4_K_M"};
    static float logits[2][32000];
    const int nt = o->threads[o->n_threads - 1];
    const char *lb = getenv("KILN_LLAMA_BENCH_GPU");
    for (size_t i = 0; i < sizeof mixes / sizeof *mixes; i++) {
        char path[4200];
        bench_model_file(mixes[i], path, sizeof path);
        kiln_ctx *ctx[2] = {kiln_ctx_new(), kiln_ctx_new()};
        bench_check(ctx[0] && ctx[1] && kiln_ctx_set_backend(ctx[0], b) == KILN_OK, "context");
        bench_gen g[2], p[2];
        for (int d = 0; d < 2; d++) { /* 0: the device, 1: the CPU */
            llama *m = llama_infer_from_gguf(ctx[d], path, LLAMA_AS_STORED);
            llama_cache *c = m ? llama_cache_new(m, 1, 256) : NULL;
            bench_check(c != NULL, path);
            g[d] = (bench_gen){m, c, logits[d], 1, nt, 1};
            p[d] = (bench_gen){m, c, logits[d], 1, nt, 128};
        }
        double tg[2], pp[2], lpp, ltg;
        bench_measure((bench_job[]){{bench_gen_run, &g[0]}, {bench_gen_run, &g[1]}}, 2, 3, 64, 1.5 * o->scale, tg);
        bench_measure((bench_job[]){{bench_gen_run, &p[0]}, {bench_gen_run, &p[1]}}, 2, 1, 8, 1.5 * o->scale, pp);
        bench_llama_cpp("KILN_LLAMA_BENCH_GPU", path, nt, "-ngl 99", &lpp, &ltg);
        char name[64], ref[48];
        snprintf(ref, sizeof ref, "kiln-cpu %dt", nt);
        snprintf(name, sizeof name, "%s_generate %s", prefix, mixes[i]);
        bench_report(name, 1 / tg[0], "tok/s", 1 / tg[1], ref);
        if (ltg > 0) bench_report(name, 1 / tg[0], "tok/s", ltg, "llama.cpp -ngl 99");
        snprintf(name, sizeof name, "%s_prompt 128 %s", prefix, mixes[i]);
        bench_report(name, 128 / pp[0], "tok/s", 128 / pp[1], ref);
        if (lpp > 0) bench_report(name, 128 / pp[0], "tok/s", lpp, "llama.cpp -ngl 99");
        for (int d = 0; d < 2; d++) {
            llama_cache_free(g[d].c);
            llama_free(g[d].m);
            kiln_ctx_free(ctx[d]);
        }
    }
    if (!lb || !*lb) printf("# %s_generate: no llama.cpp GPU figures: KILN_LLAMA_BENCH_GPU unset\n", prefix);
}

void bench_gpu_lines(kiln_backend *b, const char *prefix, const bench_opts *o) {
    gpt_lines(b, prefix, o);
    if (emulated(b))
        printf("# %s: %s is an emulated device (the host's CPU runs its kernels): the large GPT, the tf32 and bf16 "
               "modes and the generation lines skipped\n",
               prefix, kiln_backend_device(b));
    else
        generate_lines(b, prefix, o);
}
