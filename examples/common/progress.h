/* progress.h — a progress line for long loops: done/total, percent, elapsed
 * time, ETA, the latest loss and the throughput in the caller's units.
 *
 * On a terminal the line is redrawn in place (\r) at most ten times a
 * second; into a file or a pipe it prints a plain line at every tenth of
 * the work (and at least every 30 s), so logs stay short and readable.
 *
 *     progress p;
 *     progress_start(&p, stdout, "epoch 1/3", steps, "img");
 *     for (int64_t s = 0; s < steps; s++) {
 *         ... one step of 'batch' images ...
 *         progress_update(&p, s + 1, loss, (double)batch);
 *     }
 *     progress_finish(&p);   // ends the line
 *
 * looks like
 *
 *     epoch 1/3 [#########...........]  412/937  44%  loss 0.5123  8.1k img/s  0:07 elapsed  ETA 0:09
 */
#ifndef PROGRESS_H
#define PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct progress {
    FILE *out;
    char label[64], unit[16];
    int64_t total, done;
    double units;        /* units processed so far */
    double loss;         /* latest loss; NaN: none */
    double t0, last_draw;
    int last_tenth;      /* non-terminal output: the last tenth printed */
    bool tty, drawn;
} progress;

/* unit: what throughput counts ("img", "tok", "step"); NULL: steps. */
void progress_start(progress *p, FILE *out, const char *label, int64_t total, const char *unit);
/* done: steps done so far; loss: NaN for none; units: processed in this
 * update (added to the running count). */
void progress_update(progress *p, int64_t done, double loss, double units);
/* Draw the final state and end the line. */
void progress_finish(progress *p);
/* The line as it would be drawn now (for logs and tests). */
void progress_format(const progress *p, char *buf, size_t n);

/* Seconds on a monotonic clock. */
double progress_now(void);

#endif
