/* progress.c — see progress.h. */
#include "progress.h"

#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BAR 20

double progress_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void progress_start(progress *p, FILE *out, const char *label, int64_t total, const char *unit) {
    memset(p, 0, sizeof *p);
    p->out = out ? out : stdout;
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    snprintf(p->unit, sizeof p->unit, "%s", unit ? unit : "step");
    p->total = total > 0 ? total : 1;
    p->loss = NAN;
    p->t0 = progress_now();
    p->last_draw = -1;
    p->tty = isatty(fileno(p->out));
}

/* h:mm:ss or m:ss */
static void fmt_time(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 1e7) {
        snprintf(buf, n, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

/* 812, 8.1k, 12.3M */
static void fmt_rate(char *buf, size_t n, double r) {
    if (r >= 1e9) snprintf(buf, n, "%.1fG", r / 1e9);
    else if (r >= 1e6) snprintf(buf, n, "%.1fM", r / 1e6);
    else if (r >= 1e4) snprintf(buf, n, "%.1fk", r / 1e3);
    else if (r >= 10) snprintf(buf, n, "%.0f", r);
    else snprintf(buf, n, "%.2f", r);
}

void progress_format(const progress *p, char *buf, size_t n) {
    double el = progress_now() - p->t0;
    double frac = (double)p->done / (double)p->total;
    if (frac > 1) frac = 1;
    char bar[BAR + 1], elapsed[32], eta[32], rate[32], loss[32] = "";
    int fill = (int)(frac * BAR + 0.5);
    for (int i = 0; i < BAR; i++) bar[i] = i < fill ? '#' : '.';
    bar[BAR] = '\0';
    fmt_time(elapsed, sizeof elapsed, el);
    fmt_time(eta, sizeof eta, p->done > 0 ? el / (double)p->done * (double)(p->total - p->done) : -1);
    fmt_rate(rate, sizeof rate, el > 0 ? p->units / el : 0);
    if (!isnan(p->loss)) snprintf(loss, sizeof loss, "  loss %.4f", p->loss);
    int digits = snprintf(NULL, 0, "%lld", (long long)p->total);
    snprintf(buf, n, "%s%s[%s] %*lld/%lld %3.0f%%%s  %s %s/s  %s elapsed  ETA %s", p->label, *p->label ? " " : "", bar,
             digits, (long long)p->done, (long long)p->total, 100 * frac, loss, rate, p->unit, elapsed, eta);
}

static void draw(progress *p, bool final) {
    char line[512];
    progress_format(p, line, sizeof line);
    if (p->tty) fprintf(p->out, "\r%s\033[K%s", line, final ? "\n" : "");
    else fprintf(p->out, "%s\n", line);
    fflush(p->out);
    p->drawn = true;
    p->last_draw = progress_now();
}

void progress_update(progress *p, int64_t done, double loss, double units) {
    p->done = done;
    p->loss = loss;
    p->units += units;
    double t = progress_now();
    if (p->tty) {
        if (p->last_draw < 0 || t - p->last_draw >= 0.1) draw(p, false);
        return;
    }
    int tenth = (int)(10 * done / p->total);
    if (done < p->total && (tenth > p->last_tenth || t - p->last_draw >= 30)) {
        p->last_tenth = tenth;
        draw(p, false);
    }
}

void progress_finish(progress *p) { draw(p, true); }
