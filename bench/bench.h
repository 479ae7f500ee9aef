/* bench.h — what the parts of `make bench` share: timing, alternating
 * measurement, the report line and the PyTorch reference figures.
 *
 * Every figure is a median over several timed repetitions after a warm-up,
 * and is printed next to a reference measured in the same process (OpenBLAS,
 * a plain triad, PyTorch), in alternating blocks where both run here: this
 * machine's timings drift by tens of percent, ratios much less. */
#ifndef KILN_BENCH_H
#define KILN_BENCH_H

#include "kiln.h"

#include <stdbool.h>
#include <stdint.h>

/* Seconds on a monotonic clock. */
double bench_now(void);

/* A timed piece of work: fn(arg) once. */
typedef struct bench_job {
    void (*fn)(void *arg);
    void *arg;
} bench_job;

/* Run each job once to warm up, then three rounds in which each job in
 * turn runs a block of timed calls (after a 0.15 s pause and 0.02 s of
 * untimed calls, at least one, when there are several jobs, so a thread
 * pool another job left spinning has gone idle and the job's own threads
 * are awake again), up to max_reps calls per job or, after min_reps,
 * budget_s seconds in all; a warm-up longer than 2 * budget_s leaves one
 * timed call each. Writes each job's median seconds per call to med[]. */
void bench_measure(const bench_job *jobs, int n_jobs, int min_reps, int max_reps, double budget_s, double *med);

/* One report line: name, kiln's value and unit, and value / ref_value
 * against ref_name (no ratio when ref_value <= 0). */
void bench_report(const char *name, double value, const char *unit, double ref_value, const char *ref_name);

/* The PyTorch figures from bench/torch_ref.py's output ("ref <key> <value>"
 * lines); 0 when absent. bench_torch_note says why there are none. */
bool bench_torch_load(const char *path);
double bench_torch(const char *key);
const char *bench_torch_note(void);

/* Options from the command line. */
typedef struct bench_opts {
    int threads[2]; /* thread counts to measure, e.g. {1, 2} */
    int n_threads;
    double scale;   /* time budget multiplier (--quick: smaller) */
    int64_t stream_mib; /* bytes per array of the bandwidth figures */
    const char *model;  /* --model: only this training model (mlp, cnn, gpt) */
    int qlora_layers;      /* --qlora-layers: the QLoRA step's layers (2) */
    const char *qlora_gguf; /* --qlora-gguf: a GGUF to load for it instead */
} bench_opts;

/* The parts, each printing its lines. */
void bench_gemm(const bench_opts *o);
void bench_memory(const bench_opts *o);
void bench_train(const bench_opts *o);
void bench_train_sizes(const bench_opts *o); /* bench/train_sizes.c */
/* One line of bench_train_sizes, run in its own process (kiln_bench
 * --size-line NAME THREADS): prints its median seconds a step; the exit status. */
int bench_size_line(const char *name, const char *threads);
void bench_vulkan(const bench_opts *o);
void bench_cuda(const bench_opts *o); /* bench/gpu_gemv.c */
/* The GEMV lines of device backend b, named prefix_gemv_<dtype> (gpu_gemv.c). */
void bench_gpu_gemv(kiln_backend *b, const char *prefix, const bench_opts *o);
void bench_optim(const bench_opts *o);
void bench_quant(const bench_opts *o);
void bench_generate(const bench_opts *o);
void bench_dfp(const bench_opts *o); /* bench/int16.c: DFP GEMM vs f32 GEMM */
void bench_qlora(const bench_opts *o); /* bench/qlora.c: a QLoRA step of TinyLlama's shape */

/* Training steps/s (or tokens/s: *unit says) of model "mlp", "cnn" or "gpt"
 * on backend b (NULL: CPU), measured for about budget_s times the model's
 * usual budget. */
double bench_train_rate(const char *name, kiln_backend *b, int threads, double budget_s, const char **unit);

/* A step of model "mlp", "cnn" or "gpt" on the CPU with `threads`
 * threads as a job (free it with bench_train_job_free); *per_step: 1 or
 * tokens a step; *budget_s: the model's usual measuring time. */
bench_job bench_train_job(const char *name, int threads, double *per_step, double *budget_s);
void bench_train_job_free(bench_job *j);

/* Batch-1 generation steps of a Q4_0 llama in TinyLlama-1.1B's shape, the
 * same model and cache for jobs[i] on threads[i] (i < n); each step is one
 * token. bench_generate_jobs_free frees them. */
void bench_generate_jobs(const int *threads, int n, bench_job *jobs);
void bench_generate_jobs_free(bench_job *jobs, int n);

/* One step of batch-1 generation with a KV cache as a bench_job's arg
 * (bench_gen_run): n tokens from tok on, 1 (generation; the cache wraps at
 * its end) or a prompt from position 0; nt threads. */
typedef struct bench_gen {
    struct llama *m;
    struct llama_cache *c;
    float *logits;
    int32_t tok;
    int nt;
    int64_t n;
} bench_gen;
void bench_gen_run(void *bench_gen);

/* bench/generate.c's llama in TinyLlama-1.1B's shape with its 2-d weights
 * in `weights`, random (a chunk drawn per tensor, then tiled). */
struct llama *bench_tinyllama(kiln_ctx *ctx, kiln_dtype weights);

/* build/bench/models/tinyllama-<mix>.gguf beside the bench binary (mix:
 * "Q4_K_M", "Q8_0", ...): the random model in llama-quantize's mix, written
 * once (a chunk drawn per tensor, then tiled: seconds, not the minutes of
 * quantizing every block), then read mapped as generate reads it. Delete
 * the folder to make them again. */
void bench_model_file(const char *mix, char *path, size_t size);

/* llama.cpp's tok/s on a file where $env names its llama-bench: prompt 128
 * (*pp) and generation of 32 tokens (*tg) at nt threads, 3 runs each (its
 * averages), with extra options (e.g. "-ngl 99"); 0 where unset or it fails. */
void bench_llama_cpp(const char *env, const char *file, int nt, const char *extra, double *pp, double *tg);

/* bench/gpu_lines.c: device backend b's GPT-2 training steps (two sizes,
 * each matmul precision mode) against PyTorch on the same GPU or kiln's
 * CPU, and its generation against kiln's CPU and llama.cpp's GPU build;
 * lines named prefix_*. */
void bench_gpu_lines(kiln_backend *b, const char *prefix, const bench_opts *o);

/* bench/slots.c: batched decoding of 1, 4 and 16 sequences (llama_slots)
 * against batch-1 generation. */
void bench_slots(const bench_opts *o);

/* bench/load.c: training and generation at two thread counts while a busy
 * process runs on every core. */
void bench_load(const bench_opts *o);

/* Abort the bench with kiln's message (bench code, not library code). */
void bench_check(bool ok, const char *what);

/* The memory-bandwidth reference: a plain threaded triad a[i] = b[i] +
 * 0.5 c[i] over three arrays of n floats (run it as a bench_job beside
 * what it is compared with). bench_triad_gbs: its GB/s when one run took
 * s seconds (3 arrays moved once, as the benches count their own bytes). */
typedef struct bench_triad {
    float *a, *b, *c;
    int64_t n;
    int nt; /* threads */
} bench_triad;
bench_triad bench_triad_new(int64_t n);
void bench_triad_run(void *triad);
double bench_triad_gbs(const bench_triad *t, double s);
void bench_triad_free(bench_triad *t);

#endif
