/* main.c — `make bench`: kiln's CPU figures beside their references.
 *
 *     kiln_bench [--torch FILE] [--only gemm|memory|train|sizes|vulkan|cuda|optim|quant|generate|slots|dfp|load|qlora] [--model mlp|cnn|gpt] [--threads 1,2]
 *                [--quick] [--stream-mib N] [--qlora-layers N] [--qlora-gguf FILE]
 *
 * One line per figure: name, kiln's value and unit, and the ratio to a
 * reference measured in the same run (OpenBLAS sgemm, a plain triad, or
 * PyTorch's figures read from FILE, written by bench/torch_ref.py; bench/run.sh
 * runs both; sizes: ResNet-18 and GPT training steps and peak RSS,
 * bench/train_sizes.c; optim: optimizer steps against the triad, bench/optim.c; slots: batched
 * decoding against batch-1 generation, bench/slots.c; quant: the quantized
 * dtypes' error and dequantize rate, bench/quant.c; load: 2 threads against 1
 * with a busy process on every core, bench/load.c; qlora: a QLoRA step, bench/qlora.c).
 * Timings on a shared machine drift: read the ratios. */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *usage =
    "usage: kiln_bench [--torch FILE] [--only gemm|memory|train|sizes|vulkan|cuda|optim|quant|generate|slots|dfp|load|qlora] [--model mlp|cnn|gpt] [--threads 1,2] [--quick] [--stream-mib N] [--qlora-layers N] [--qlora-gguf FILE]\n";

int main(int argc, char **argv) {
    bench_opts o = {.threads = {1, 2}, .n_threads = 2, .scale = 1.0, .stream_mib = 320, .qlora_layers = 2};
    const char *only = NULL, *torch = NULL;
    if (argc == 4 && strcmp(argv[1], "--size-line") == 0) return bench_size_line(argv[2], argv[3]);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--torch") == 0 && v) {
            torch = v;
            i++;
        } else if (strcmp(a, "--only") == 0 && v) {
            only = v;
            i++;
        } else if (strcmp(a, "--model") == 0 && v) {
            o.model = v;
            i++;
        } else if (strcmp(a, "--threads") == 0 && v) {
            o.n_threads = sscanf(v, "%d,%d", &o.threads[0], &o.threads[1]);
            if (o.n_threads < 1 || o.threads[0] < 1 || (o.n_threads == 2 && o.threads[1] < 1)) {
                fputs(usage, stderr);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--quick") == 0) {
            o.scale = 0.25;
            o.stream_mib = 64;
        } else if (strcmp(a, "--qlora-layers") == 0 && v && atoi(v) > 0) {
            o.qlora_layers = atoi(v);
            i++;
        } else if (strcmp(a, "--qlora-gguf") == 0 && v) {
            o.qlora_gguf = v;
            i++;
        } else if (strcmp(a, "--stream-mib") == 0 && v) {
            o.stream_mib = atoll(v);
            i++;
        } else {
            fputs(usage, stderr);
            return strcmp(a, "--help") == 0 ? 0 : 2;
        }
    }
    if (torch) bench_torch_load(torch);
    printf("# kiln bench: %s; %s\n", kiln_cpu_describe(), bench_torch_note());
    printf("# %-32s %-4s %9s %-9s %7s %s\n", "figure", "", "value", "unit", "ratio", "reference");
    if (!only || strcmp(only, "gemm") == 0) bench_gemm(&o);
    if (!only || strcmp(only, "memory") == 0) bench_memory(&o);
    if (!only || strcmp(only, "train") == 0) bench_train(&o);
    if (!only || strcmp(only, "sizes") == 0) bench_train_sizes(&o);
    if (!only || strcmp(only, "vulkan") == 0) bench_vulkan(&o);
    if (!only || strcmp(only, "cuda") == 0) bench_cuda(&o); /* bench/gpu_gemv.c */
    if (!only || strcmp(only, "optim") == 0) bench_optim(&o);
    if (!only || strcmp(only, "quant") == 0) bench_quant(&o);
    if (!only || strcmp(only, "generate") == 0) bench_generate(&o); /* bench/generate.c */
    if (!only || strcmp(only, "slots") == 0) bench_slots(&o); /* bench/slots.c */
    if (!only || strcmp(only, "dfp") == 0) bench_dfp(&o);
    if (!only || strcmp(only, "load") == 0) bench_load(&o); /* bench/load.c */
    if (!only || strcmp(only, "qlora") == 0) bench_qlora(&o); /* bench/qlora.c */
    return 0;
}
