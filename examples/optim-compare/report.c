/* report.c — the comparison's table, its checks of the targets, and
 * the CSV files and PNG charts it leaves in --out.
 */
#include "compare.h"

#include "csv.h"
#include "plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Colours: an 8-bit optimizer is drawn dashed in its twin's colour. */
static const int colour[OPT_COUNT] = {0, 1, 2, 2, 3, 3, 4, 4, 5, 6};

static void human_bytes(char *buf, size_t n, double b) {
    if (b >= 1e9) snprintf(buf, n, "%.2f GB", b / 1e9);
    else if (b >= 1e6) snprintf(buf, n, "%.2f MB", b / 1e6);
    else if (b >= 1e3) snprintf(buf, n, "%.1f kB", b / 1e3);
    else snprintf(buf, n, "%.0f B", b);
}

static const char *status_text(const run_result *r) {
    switch (r->status) {
    case RUN_OK: return "";
    case RUN_UNSUPPORTED: return "not in this build (needs LAPACK: BLAS=1)";
    default: return r->error;
    }
}

/* Mean of the training loss over the first steps: where a run starts. */
static double start_loss(const run_result *r) {
    int64_t n = r->steps / 50 < 1 ? 1 : r->steps / 50;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += r->curve[i];
    return s / (double)n;
}

void report_table(FILE *f, const task_report *rep) {
    const task *t = rep->t;
    bool cnn = t->kind == TASK_CNN;
    char data[32];
    human_bytes(data, sizeof data, rep->data_rss_kb * 1024.0);
    fprintf(f, "\n%s: %lld steps of batch %lld, learning rate picked from %d values by validation loss after %lld steps\n",
            t->title, (long long)t->steps, (long long)t->batch, rep->n_sweep, (long long)t->sweep_steps);
    fprintf(f, "%-13s %9s %8s %8s %9s %9s %8s %10s %10s\n", "optimizer", "lr", "train", "val", cnn ? "val acc" : "bits/byte",
            cnn ? "test acc" : "", "ms/step", "state", "peak RSS");
    for (int i = 0; i < OPT_COUNT; i++) {
        const run_result *r = &rep->full[i];
        if (r->status != RUN_OK && r->status != RUN_DIVERGED) {
            fprintf(f, "%-13s %9s  %s\n", optim_name(i), "-", status_text(r));
            continue;
        }
        char state[32], rss[32], metric[16], test[16];
        human_bytes(state, sizeof state, (double)r->state_bytes);
        human_bytes(rss, sizeof rss, (double)r->peak_rss_kb * 1024.0);
        if (cnn) snprintf(metric, sizeof metric, "%.2f%%", 100 * r->metric);
        else snprintf(metric, sizeof metric, "%.3f", r->metric);
        if (cnn && isfinite(r->test_acc)) snprintf(test, sizeof test, "%.2f%%", 100 * r->test_acc);
        else snprintf(test, sizeof test, "%s", cnn ? "-" : "");
        fprintf(f, "%-13s %9.3g %8.4f %8.4f %9s %9s %8.1f %10s %10s%s%s\n", optim_name(i), r->lr, r->train_loss,
                r->val_loss, metric, test, 1e3 * r->sec_per_step, state, rss, r->status ? "  " : "",
                r->status ? r->error : "");
    }
    fprintf(f, "GaLore rank %d (APOLLO the same, APOLLO-Mini 1), projections refreshed every %d steps (%d in the sweep);\n"
               "peak RSS is each run's own process (forked), including %s of data shared with the parent.\n",
            t->rank, optim_update_gap(t->steps), optim_update_gap(t->sweep_steps), data);
}

void report_targets(FILE *f, const task_report *rep) {
    const task *t = rep->t;
    fprintf(f, "\n%s: does every optimizer train? (training loss at the start -> at the end)\n", t->title);
    int trained = 0, ran = 0;
    for (int i = 0; i < OPT_COUNT; i++) {
        const run_result *r = &rep->full[i];
        if (r->status == RUN_UNSUPPORTED) continue;
        ran++;
        double a = r->status == RUN_FAILED ? NAN : start_loss(r), b = r->train_loss;
        bool ok = r->status == RUN_OK && b < 0.75 * a; /* "clearly": a quarter off at least */
        trained += ok;
        fprintf(f, "  %-13s %7.3f -> %7.3f  %s\n", optim_name(i), a, b, ok ? "trains" : "DOES NOT TRAIN");
    }
    fprintf(f, "  %d of %d trained\n", trained, ran);

    /* run-to-run noise: AdamW at its chosen lr with other seeds */
    double lo = rep->full[OPT_ADAMW].val_loss, hi = lo;
    fprintf(f, "%s: run-to-run noise, AdamW at lr %.3g: val loss %.4f (seed %llu)", t->title, rep->full[OPT_ADAMW].lr,
            lo, (unsigned long long)rep->noise_seed[0]);
    for (int k = 1; k < rep->n_noise; k++) {
        double v = rep->noise[k].val_loss;
        fprintf(f, ", %.4f (seed %llu)", v, (unsigned long long)rep->noise_seed[k]);
        if (v < lo) lo = v;
        if (v > hi) hi = v;
    }
    double spread = hi - lo;
    fprintf(f, ": spread %.4f\n", spread);
    for (int i = 0; i < OPT_COUNT; i++) {
        int twin = optim_twin(i);
        if (twin < 0) continue;
        const run_result *a = &rep->full[twin], *b = &rep->full[i];
        if (a->status != RUN_OK || b->status != RUN_OK) {
            fprintf(f, "  %-13s vs %-7s: not compared (%s)\n", optim_name(i), optim_name(twin),
                    b->status != RUN_OK ? status_text(b) : status_text(a));
            continue;
        }
        double d = b->val_loss - a->val_loss;
        fprintf(f, "  %-13s vs %-7s: val loss %+.4f (lr %.3g vs %.3g): %s\n", optim_name(i), optim_name(twin), d, b->lr,
                a->lr, fabs(d) <= spread ? "within the noise" : d < 0 ? "better than the noise" : "OUTSIDE the noise");
    }
}

/* ---- files ---------------------------------------------------------------- */

static int write_results(const task_report *rep, const char *path) {
    csv *c = csv_open(path);
    if (!c) return -1;
    const char *head[] = {"task", "optimizer", "status", "lr", "train_loss", "val_loss", "val_accuracy",
                          "bits_per_byte", "test_accuracy", "sec_per_step", "state_bytes", "peak_rss_bytes", "steps"};
    for (size_t i = 0; i < sizeof head / sizeof *head; i++) csv_str(c, head[i]);
    csv_row(c);
    bool cnn = rep->t->kind == TASK_CNN;
    for (int i = 0; i < OPT_COUNT; i++) {
        const run_result *r = &rep->full[i];
        bool ok = r->status == RUN_OK;
        csv_str(c, rep->t->name);
        csv_str(c, optim_name(i));
        csv_str(c, ok ? "ok" : r->status == RUN_UNSUPPORTED ? "not in this build" : r->error);
        csv_num(c, r->lr);
        csv_num(c, ok ? r->train_loss : NAN);
        csv_num(c, ok ? r->val_loss : NAN);
        csv_num(c, ok && cnn ? r->metric : NAN);
        csv_num(c, ok && !cnn ? r->metric : NAN);
        csv_num(c, ok ? r->test_acc : NAN);
        csv_num(c, ok ? r->sec_per_step : NAN);
        csv_int(c, (int64_t)r->state_bytes);
        csv_int(c, (int64_t)r->peak_rss_kb * 1024);
        csv_int(c, r->steps);
        csv_row(c);
    }
    return csv_close(c);
}

static int write_sweep(const task_report *rep, const char *path) {
    csv *c = csv_open(path);
    if (!c) return -1;
    csv_str(c, "task"), csv_str(c, "optimizer"), csv_str(c, "lr"), csv_str(c, "val_loss"), csv_str(c, "chosen");
    csv_row(c);
    for (int i = 0; i < OPT_COUNT; i++)
        for (int k = 0; k < rep->n_sweep; k++) {
            if (rep->full[i].status == RUN_UNSUPPORTED) continue;
            csv_str(c, rep->t->name), csv_str(c, optim_name(i));
            csv_num(c, rep->sweep_lr[i][k]), csv_num(c, rep->sweep_val[i][k]);
            csv_int(c, rep->sweep_lr[i][k] == rep->full[i].lr);
            csv_row(c);
        }
    return csv_close(c);
}

static int write_noise(const task_report *rep, const char *path) {
    csv *c = csv_open(path);
    if (!c) return -1;
    csv_str(c, "task"), csv_str(c, "optimizer"), csv_str(c, "seed"), csv_str(c, "lr"), csv_str(c, "val_loss");
    csv_row(c);
    for (int k = 0; k < rep->n_noise; k++) {
        const run_result *r = k == 0 ? &rep->full[OPT_ADAMW] : &rep->noise[k];
        csv_str(c, rep->t->name), csv_str(c, "AdamW"), csv_int(c, (int64_t)rep->noise_seed[k]);
        csv_num(c, r->lr), csv_num(c, r->status == RUN_OK ? r->val_loss : NAN);
        csv_row(c);
    }
    return csv_close(c);
}

static int write_curves(const task_report *rep, const char *path) {
    csv *c = csv_open(path);
    if (!c) return -1;
    csv_str(c, "step");
    for (int i = 0; i < OPT_COUNT; i++)
        if (rep->full[i].status != RUN_UNSUPPORTED && rep->full[i].curve) csv_str(c, optim_name(i));
    csv_row(c);
    for (int64_t s = 0; s < rep->t->steps; s++) {
        csv_int(c, s + 1);
        for (int i = 0; i < OPT_COUNT; i++)
            if (rep->full[i].status != RUN_UNSUPPORTED && rep->full[i].curve) csv_num(c, rep->full[i].curve[s]);
        csv_row(c);
    }
    return csv_close(c);
}

/* Training loss per step, averaged over a trailing window (a twentieth of
 * the run) so that the curves are readable; one series per optimizer. */
static int plot_curves(const task_report *rep, const char *path) {
    char title[160];
    snprintf(title, sizeof title, "%s: training loss (mean of the last %d steps)", rep->t->title,
             (int)(rep->t->steps / 20 < 1 ? 1 : rep->t->steps / 20));
    plot *p = plot_new(title, "step", "training loss");
    if (!p) return -1;
    plot_set_log(p, false, true);
    int64_t n = rep->t->steps, w = n / 20 < 1 ? 1 : n / 20;
    double *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    int rc = x && y ? 0 : -1;
    for (int i = 0; !rc && i < OPT_COUNT; i++) {
        const run_result *r = &rep->full[i];
        if (r->status == RUN_UNSUPPORTED || r->status == RUN_FAILED) continue;
        double sum = 0;
        for (int64_t s = 0; s < n; s++) {
            sum += r->curve[s];
            if (s >= w) sum -= r->curve[s - w];
            x[s] = (double)(s + 1);
            y[s] = sum / (double)(s + 1 < w ? s + 1 : w);
        }
        int k = plot_add_line(p, optim_name(i), x, y, (int)n);
        if (k < 0) rc = -1;
        else plot_set_style(p, k, colour[i], optim_twin(i) >= 0);
    }
    if (!rc && plot_write_png(p, path)) {
        fprintf(stderr, "optim-compare: %s: %s\n", path, plot_error(p));
        rc = -1;
    }
    free(x);
    free(y);
    plot_free(p);
    return rc;
}

/* Optimizer state against the final validation loss: one labelled point per
 * optimizer. */
static int plot_memory(const task_report *rep, const char *path) {
    char title[160];
    snprintf(title, sizeof title, "%s: optimizer memory vs. quality", rep->t->title);
    plot *p = plot_new(title, "optimizer state (bytes)", "validation loss");
    if (!p) return -1;
    plot_set_log(p, true, false);
    plot_set_format(p, PLOT_BYTES, PLOT_NUMBER);
    plot_set_size(p, 1000, 640);
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < OPT_COUNT; i++)
        if (rep->full[i].status == RUN_OK && rep->full[i].state_bytes) {
            lo = fmin(lo, (double)rep->full[i].state_bytes);
            hi = fmax(hi, (double)rep->full[i].state_bytes);
        }
    if (hi > 0) plot_set_range(p, 0, lo / 2, hi * 2); /* room for the labels */
    for (int i = 0; i < OPT_COUNT; i++) {
        const run_result *r = &rep->full[i];
        if (r->status != RUN_OK || r->state_bytes == 0) continue;
        double x = (double)r->state_bytes, y = r->val_loss;
        const char *label = optim_name(i);
        int k = plot_add_scatter(p, optim_name(i), &x, &y, &label, 1);
        if (k >= 0) plot_set_style(p, k, colour[i], false);
    }
    /* AdamW's other seeds, in grey: how far apart two runs of one
     * optimizer land, to read the differences above by */
    double nx[4], ny[4];
    char text[4][32];
    const char *labels[4];
    int nn = 0;
    for (int k = 1; k < rep->n_noise; k++) {
        const run_result *r = &rep->noise[k];
        if (r->status != RUN_OK) continue;
        nx[nn] = (double)r->state_bytes;
        ny[nn] = r->val_loss;
        snprintf(text[nn], sizeof text[nn], "seed %llu", (unsigned long long)rep->noise_seed[k]);
        labels[nn] = text[nn];
        nn++;
    }
    if (nn) {
        int k = plot_add_scatter(p, "AdamW seeds", nx, ny, labels, nn);
        if (k >= 0) plot_set_style(p, k, 7, false);
    }
    int rc = plot_write_png(p, path);
    if (rc) fprintf(stderr, "optim-compare: %s: %s\n", path, plot_error(p));
    plot_free(p);
    return rc;
}

int report_write(const task_report *rep, const char *dir) {
    char path[4096];
    const char *name = rep->t->name;
    int rc = 0;
#define FILE_OF(fmt) (snprintf(path, sizeof path, "%s/" fmt, dir, name), path)
    if (write_results(rep, FILE_OF("results-%s.csv"))) rc = -1, perror(path);
    if (write_sweep(rep, FILE_OF("sweep-%s.csv"))) rc = -1, perror(path);
    if (write_noise(rep, FILE_OF("noise-%s.csv"))) rc = -1, perror(path);
    if (write_curves(rep, FILE_OF("curves-%s.csv"))) rc = -1, perror(path);
    if (plot_curves(rep, FILE_OF("loss-%s.png"))) rc = -1;
    if (plot_memory(rep, FILE_OF("memory-%s.png"))) rc = -1;
#undef FILE_OF
    return rc;
}
