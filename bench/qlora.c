/* qlora.c — `kiln_bench --only qlora`: a QLoRA fine-tuning step
 * (models/llama_qlora.h) of a llama in TinyLlama-1.1B's shape (dim 2048,
 * 32 heads, 4 kv heads, MLP 5632, vocab 32000) with random weights: layers
 * in NF4_DQ, embedding and head in bf16, matmuls in bf16
 * (KILN_MATMUL_BF16), gradient checkpointing, LoRA r 8 (alpha 16) on q, k,
 * v and o, 8-bit AdamW on the adapters; batch 1, sequence 512. Against the
 * same step in PyTorch on the CPU over the dequantized (f32, frozen)
 * weights with f32 adapters and AdamW (bench/torch_ref.py, "qlora_<L>l").
 *
 * make bench runs 2 of the 22 layers (--qlora-layers N to change it);
 * --qlora-gguf FILE loads a GGUF instead (llama_qlora_from_gguf: its shape,
 * its weights), and prints the peak RSS after the load and after the
 * steps, beside the file's size: the goal's figure for the whole model
 * (kiln_bench --only qlora --qlora-gguf tinyllama-f16.gguf). */
#include "bench.h"

#include "llama_qlora.h"
#include "lora.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

enum { SEQ = 512 };

/* Peak resident set of this process so far, MiB (Linux's VmHWM; 0 elsewhere). */
static double peak_rss_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kib = atof(line + 6);
    if (f) fclose(f);
    return kib / 1024;
}

typedef struct qstep {
    model_graph g;
    kiln_optim *opt;
} qstep;

static void step(void *arg) {
    qstep *q = arg;
    bench_check(kiln_graph_compute(q->g.graph) == KILN_OK && kiln_optim_step(q->opt) == KILN_OK, "qlora step");
}

void bench_qlora(const bench_opts *o) {
    const int threads = o->threads[o->n_threads - 1];
    kiln_set_threads(threads);
    kiln_matmul_precision was = kiln_get_matmul_precision();
    kiln_set_matmul_precision(KILN_MATMUL_BF16);
    kiln_ctx *ctx = kiln_ctx_new();
    bench_check(ctx != NULL, "context");
    llama *m;
    if (o->qlora_gguf) {
        double t0 = bench_now();
        m = llama_qlora_from_gguf(ctx, o->qlora_gguf, KILN_NF4_DQ, KILN_BF16);
        bench_check(m != NULL, kiln_last_error());
        struct stat st;
        double file = stat(o->qlora_gguf, &st) ? 0 : (double)st.st_size / (1 << 20);
        printf("# qlora: %s (%.0f MiB) loaded as NF4_DQ in %.1f s: %.0f MiB of weights, peak RSS %.0f MiB\n",
               o->qlora_gguf, file, bench_now() - t0, (double)llama_weight_bytes(m) / (1 << 20), peak_rss_mib());
    } else {
        llama_config c = llama_defaults();
        c.vocab = 32000, c.context = SEQ, c.layers = o->qlora_layers, c.heads = 32, c.kv_heads = 4, c.dim = 2048;
        c.hidden = 5632;
        m = llama_qlora_new(ctx, &c, KILN_NF4_DQ, KILN_BF16);
        bench_check(m && llama_init_random(m, 1) == KILN_OK, "qlora model");
    }
    lora_config lc = lora_defaults();
    lc.targets = (const char *[]){"q_proj", "k_proj", "v_proj", "o_proj"}, lc.n_targets = 4;
    lora *l = lora_attach_llama(m, &lc, 1);
    bench_check(l != NULL, "lora");
    for (int i = 1; i < l->n_params; i += 2) kiln_tensor_fill_randn(l->params[i], (uint64_t)i, 0, 0.01); /* B != 0 */
    qstep q;
    bench_check(llama_train_graph(m, 1, SEQ, &q.g) == KILN_OK, kiln_last_error());
    int32_t *tok = malloc(2 * SEQ * sizeof *tok);
    for (int i = 0; i < 2 * SEQ; i++) tok[i] = (int32_t)(((uint32_t)i * 2654435761u) % (uint32_t)m->cfg.vocab);
    bench_check(kiln_tensor_set_i32(q.g.input, tok, SEQ) == KILN_OK &&
                    kiln_tensor_set_i32(q.g.labels, tok + SEQ, SEQ) == KILN_OK, "tokens");
    free(tok);
    q.opt = kiln_adamw8bit_new_for(ctx, l->params, l->n_params, NULL);
    bench_check(q.opt != NULL, "8-bit AdamW");
    bench_job job = {step, &q};
    double med;
    bench_measure(&job, 1, 2, 10, 20.0 * o->scale, &med);
    /* one step more in CPU seconds: the figure a loaded machine moves least */
    const clock_t c0 = clock();
    step(&q);
    const double cpu = (double)(clock() - c0) / CLOCKS_PER_SEC;
    char name[48], key[48];
    snprintf(name, sizeof name, "qlora_%lldl_seq%d_%dt", (long long)m->cfg.layers, SEQ, threads);
    snprintf(key, sizeof key, "qlora_%lldl_%dt", (long long)m->cfg.layers, threads);
    bench_report(name, SEQ / med, "tok/s", bench_torch(key), "PyTorch f32 over dequantized weights");
    printf("# qlora: %lld layers, a step %.2f s (%.2f CPU s), peak RSS %.0f MiB, trainable %lld adapter values\n",
           (long long)m->cfg.layers, med, cpu, peak_rss_mib(), (long long)model_count(l->params, l->n_params));
    lora_free(l);
    llama_free(m);
    kiln_ctx_free(ctx);
    kiln_set_matmul_precision(was);
}
