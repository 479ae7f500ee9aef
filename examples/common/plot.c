/* plot.c — see plot.h. The drawing is done here on an RGB canvas: text
 * from stb_easy_font's quads (scaled rectangles), lines as anti-aliased
 * capsules accumulated per series in a coverage buffer (so a polyline's
 * joints do not darken), and the PNG by stb_image_write, whose
 * implementation is compiled in this file and nowhere else. */
#include "plot.h"

#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#include <stb/stb_easy_font.h>
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

#define MAX_TICKS 40
#define FONT_CAP 7   /* stb_easy_font: capitals are 7 units tall */
#define FONT_DESC 2  /* descenders go 2 units lower */
#define TEXT_SCALE 2 /* tick labels, axis labels, legend */
#define LINE_HALF 1.15f
#define MARKER_R 5.5f

static const uint32_t palette[10] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                     0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};
#define INK 0x222222u
#define GRID 0xe4e4e4u
#define WHITE 0xffffffu

uint32_t plot_palette(int i) { return palette[((i % 10) + 10) % 10]; }

typedef struct series {
    char *name;
    double *x, *y;
    char **labels;
    int n, color;
    bool scatter, dashed;
} series;

struct plot {
    char *title, *xlabel, *ylabel;
    int w, h;
    bool log[2];
    plot_format fmt[2];
    double fix_lo[2], fix_hi[2];
    series *s;
    int ns, cap;
    char err[512];
};

static char *dup_str(const char *s) { return s ? strdup(s) : strdup(""); }

plot *plot_new(const char *title, const char *xlabel, const char *ylabel) {
    plot *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->title = dup_str(title);
    p->xlabel = dup_str(xlabel);
    p->ylabel = dup_str(ylabel);
    p->w = 960;
    p->h = 600;
    p->fix_lo[0] = p->fix_lo[1] = p->fix_hi[0] = p->fix_hi[1] = NAN;
    if (!p->title || !p->xlabel || !p->ylabel) {
        plot_free(p);
        return NULL;
    }
    return p;
}

void plot_free(plot *p) {
    if (!p) return;
    for (int i = 0; i < p->ns; i++) {
        series *s = &p->s[i];
        if (s->labels)
            for (int k = 0; k < s->n; k++) free(s->labels[k]);
        free(s->labels);
        free(s->name);
        free(s->x);
        free(s->y);
    }
    free(p->s);
    free(p->title);
    free(p->xlabel);
    free(p->ylabel);
    free(p);
}

void plot_set_size(plot *p, int width, int height) {
    if (width >= 200 && height >= 150 && width <= 8192 && height <= 8192) p->w = width, p->h = height;
}
void plot_set_log(plot *p, bool log_x, bool log_y) { p->log[0] = log_x, p->log[1] = log_y; }
void plot_set_format(plot *p, plot_format x, plot_format y) { p->fmt[0] = x, p->fmt[1] = y; }
void plot_set_range(plot *p, int axis, double lo, double hi) {
    if (axis < 0 || axis > 1 || (lo >= hi)) return;
    p->fix_lo[axis] = lo;
    p->fix_hi[axis] = hi;
}
const char *plot_error(const plot *p) { return p->err; }

static series *new_series(plot *p, const char *name, const double *x, const double *y, int n) {
    if (n < 0 || !y) return NULL;
    if (p->ns == p->cap) {
        int cap = p->cap ? 2 * p->cap : 8;
        series *ns = realloc(p->s, (size_t)cap * sizeof *ns);
        if (!ns) return NULL;
        p->s = ns;
        p->cap = cap;
    }
    series *s = &p->s[p->ns];
    memset(s, 0, sizeof *s);
    s->name = dup_str(name);
    s->x = malloc((size_t)(n ? n : 1) * sizeof *s->x);
    s->y = malloc((size_t)(n ? n : 1) * sizeof *s->y);
    if (!s->name || !s->x || !s->y) {
        free(s->name), free(s->x), free(s->y);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        s->x[i] = x ? x[i] : i;
        s->y[i] = y[i];
    }
    s->n = n;
    s->color = p->ns % 10;
    p->ns++;
    return s;
}

int plot_add_line(plot *p, const char *name, const double *x, const double *y, int n) {
    return new_series(p, name, x, y, n) ? p->ns - 1 : -1;
}

int plot_add_scatter(plot *p, const char *name, const double *x, const double *y, const char *const *labels, int n) {
    series *s = new_series(p, name, x, y, n);
    if (!s) return -1;
    s->scatter = true;
    if (labels) {
        s->labels = calloc((size_t)(n ? n : 1), sizeof *s->labels);
        if (!s->labels) return -1;
        for (int i = 0; i < n; i++) s->labels[i] = labels[i] ? strdup(labels[i]) : NULL;
    }
    return p->ns - 1;
}

void plot_set_style(plot *p, int i, int color, bool dashed) {
    if (i < 0 || i >= p->ns) return;
    p->s[i].color = ((color % 10) + 10) % 10;
    p->s[i].dashed = dashed;
}

int plot_series_color(const plot *p, int i) { return i >= 0 && i < p->ns ? p->s[i].color : 0; }

/* ---- the canvas ------------------------------------------------------- */

typedef struct canvas {
    uint8_t *px; /* RGB */
    float *cov;  /* coverage of the series being drawn */
    int w, h;
} canvas;

static void blend(canvas *c, int x, int y, uint32_t rgb, float a) {
    if (x < 0 || y < 0 || x >= c->w || y >= c->h || !(a > 0)) return;
    if (a > 1) a = 1;
    uint8_t *d = c->px + 3 * ((size_t)y * (size_t)c->w + (size_t)x);
    for (int k = 0; k < 3; k++) {
        float src = (float)((rgb >> (16 - 8 * k)) & 0xff);
        d[k] = (uint8_t)(d[k] + (src - d[k]) * a + 0.5f);
    }
}

static float overlap(float a0, float a1, float b0, float b1) {
    float lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? hi - lo : 0;
}

/* A rectangle with exact fractional coverage at its edges. */
static void fill_rect(canvas *c, float x0, float y0, float x1, float y1, uint32_t rgb) {
    for (int y = (int)floorf(y0); y < (int)ceilf(y1); y++) {
        float cy = overlap((float)y, (float)y + 1, y0, y1);
        for (int x = (int)floorf(x0); x < (int)ceilf(x1); x++) blend(c, x, y, rgb, cy * overlap((float)x, (float)x + 1, x0, x1));
    }
}

/* ---- text ------------------------------------------------------------- */

/* The quads of s at scale 1, origin at the top-left of the capitals;
 * returns their count, *buf to free(). */
static int text_quads(const char *s, float **buf) {
    size_t len = strlen(s);
    size_t size = 64 * 16 * (len + 1); /* 16-byte vertices, 4 per quad, <= 16 quads a glyph */
    char *copy = malloc(len + 1), *vb = malloc(size);
    if (!copy || !vb) {
        free(copy), free(vb);
        *buf = NULL;
        return 0;
    }
    memcpy(copy, s, len + 1);
    unsigned char col[4] = {0, 0, 0, 255};
    int q = stb_easy_font_print(0, 0, copy, col, vb, (int)size);
    free(copy);
    *buf = (float *)vb;
    return q;
}

static float text_width(const char *s, float scale) {
    float *v;
    int q = text_quads(s, &v), maxx = 0;
    for (int i = 0; i < q * 4; i++)
        if (v[4 * i] > maxx) maxx = (int)v[4 * i];
    free(v);
    return (float)maxx * scale;
}

/* Draw s with the top-left of its capitals at (x, y); rotated, the text
 * reads upwards and (x, y) is where its top-left corner went (the text
 * spans y - width .. y). */
static void draw_text(canvas *c, const char *s, float x, float y, float scale, uint32_t rgb, bool rotated) {
    float *v;
    int q = text_quads(s, &v);
    x = roundf(x), y = roundf(y);
    for (int i = 0; i < q; i++) {
        /* stb_easy_font's vertex: x, y, z as floats, then 4 colour bytes */
        float u0 = v[(4 * i) * 4 + 0], v0 = v[(4 * i) * 4 + 1];     /* top-left corner */
        float u1 = v[(4 * i + 2) * 4 + 0], v1 = v[(4 * i + 2) * 4 + 1]; /* bottom-right */
        if (!rotated) fill_rect(c, x + u0 * scale, y + v0 * scale, x + u1 * scale, y + v1 * scale, rgb);
        else fill_rect(c, x + v0 * scale, y - u1 * scale, x + v1 * scale, y - u0 * scale, rgb);
    }
    free(v);
}

/* halign/valign: 0 left/top, 1 centre, 2 right/bottom; vertical extent
 * is the capitals' height. */
static void draw_label(canvas *c, const char *s, float x, float y, float scale, int halign, int valign, uint32_t rgb) {
    float w = text_width(s, scale), h = FONT_CAP * scale;
    draw_text(c, s, x - w * 0.5f * (float)halign, y - h * 0.5f * (float)valign, scale, rgb, false);
}

/* ---- lines and markers ------------------------------------------------- */

typedef struct rect { float x0, y0, x1, y1; } rect;

/* Liang-Barsky: clip the segment to r; false when nothing is left. */
static bool clip_segment(double *ax, double *ay, double *bx, double *by, rect r) {
    double t0 = 0, t1 = 1, dx = *bx - *ax, dy = *by - *ay;
    double pk[4] = {-dx, dx, -dy, dy}, qk[4] = {*ax - r.x0, r.x1 - *ax, *ay - r.y0, r.y1 - *ay};
    for (int k = 0; k < 4; k++) {
        if (pk[k] == 0) {
            if (qk[k] < 0) return false;
            continue;
        }
        double t = qk[k] / pk[k];
        if (pk[k] < 0) {
            if (t > t1) return false;
            if (t > t0) t0 = t;
        } else {
            if (t < t0) return false;
            if (t < t1) t1 = t;
        }
    }
    double x0 = *ax + t0 * dx, y0 = *ay + t0 * dy;
    *bx = *ax + t1 * dx, *by = *ay + t1 * dy;
    *ax = x0, *ay = y0;
    return true;
}

/* Coverage of a capsule of half-width hw around a-b, within clip. */
static void cov_segment(canvas *c, rect clip, float ax, float ay, float bx, float by, float hw) {
    int x0 = (int)floorf(fminf(ax, bx) - hw - 1), x1 = (int)ceilf(fmaxf(ax, bx) + hw + 1);
    int y0 = (int)floorf(fminf(ay, by) - hw - 1), y1 = (int)ceilf(fmaxf(ay, by) + hw + 1);
    if (x0 < (int)clip.x0) x0 = (int)clip.x0;
    if (y0 < (int)clip.y0) y0 = (int)clip.y0;
    if (x1 > (int)clip.x1) x1 = (int)clip.x1;
    if (y1 > (int)clip.y1) y1 = (int)clip.y1;
    float dx = bx - ax, dy = by - ay, len2 = dx * dx + dy * dy;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            float px = (float)x + 0.5f - ax, py = (float)y + 0.5f - ay;
            float t = len2 > 0 ? (px * dx + py * dy) / len2 : 0;
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            float ex = px - t * dx, ey = py - t * dy, d = sqrtf(ex * ex + ey * ey);
            float a = hw + 0.5f - d;
            if (a <= 0) continue;
            float *cv = &c->cov[(size_t)y * (size_t)c->w + (size_t)x];
            if (a > *cv) *cv = a > 1 ? 1 : a;
        }
}

/* Paint the accumulated coverage within r in rgb and clear it. */
static void flush_cov(canvas *c, rect r, uint32_t rgb) {
    for (int y = (int)r.y0; y < (int)r.y1; y++)
        for (int x = (int)r.x0; x < (int)r.x1; x++) {
            float *cv = &c->cov[(size_t)y * (size_t)c->w + (size_t)x];
            if (*cv > 0) blend(c, x, y, rgb, *cv), *cv = 0;
        }
}

/* A polyline segment, dashed or not; *phase carries the dash pattern. */
static void draw_segment(canvas *c, rect clip, double ax, double ay, double bx, double by, bool dashed, double *phase) {
    rect big = {clip.x0 - 4, clip.y0 - 4, clip.x1 + 4, clip.y1 + 4};
    double ox = ax, oy = ay, full = hypot(bx - ax, by - ay);
    if (!clip_segment(&ax, &ay, &bx, &by, big)) return;
    if (!dashed) {
        (void)full;
        cov_segment(c, clip, (float)ax, (float)ay, (float)bx, (float)by, LINE_HALF);
        return;
    }
    const double on = 9, period = 15;
    /* the phase runs along the unclipped segment so dashes stay aligned */
    double start = hypot(ax - ox, ay - oy), len = hypot(bx - ax, by - ay);
    double ux = len > 0 ? (bx - ax) / len : 0, uy = len > 0 ? (by - ay) / len : 0;
    double base = *phase + start;
    for (double d = 0; d < len;) {
        double pos = fmod(base + d, period), seg_end;
        if (pos < on) {
            seg_end = fmin(len, d + on - pos);
            cov_segment(c, clip, (float)(ax + ux * d), (float)(ay + uy * d), (float)(ax + ux * seg_end),
                        (float)(ay + uy * seg_end), LINE_HALF);
        } else {
            seg_end = fmin(len, d + period - pos);
        }
        d = seg_end + 1e-9;
    }
    *phase = fmod(*phase + full, period);
}

static void disk(canvas *c, float cx, float cy, float r, uint32_t rgb) {
    for (int y = (int)floorf(cy - r - 1); y <= (int)ceilf(cy + r + 1); y++)
        for (int x = (int)floorf(cx - r - 1); x <= (int)ceilf(cx + r + 1); x++) {
            float d = hypotf((float)x + 0.5f - cx, (float)y + 0.5f - cy);
            blend(c, x, y, rgb, r + 0.5f - d);
        }
}

static void marker(canvas *c, float x, float y, uint32_t rgb) {
    disk(c, x, y, MARKER_R + 1.5f, WHITE);
    disk(c, x, y, MARKER_R, rgb);
}

/* ---- axes -------------------------------------------------------------- */

typedef struct axis {
    bool log;
    bool bytes;         /* PLOT_BYTES */
    double unit;        /* PLOT_BYTES on a linear axis: 1, 1e3, 1e6, ... */
    const char *suffix; /* " kB", ... */
    double lo, hi;      /* in transformed units: log10(v / unit) or v / unit */
    double ticks[MAX_TICKS];
    int nt, decimals;
    float p0, p1;       /* pixels of lo and hi */
} axis;

static bool usable(const axis *a, double v) { return isfinite(v) && (!a->log || v > 0); }
static double transform(const axis *a, double v) { return a->log ? log10(v / a->unit) : v / a->unit; }
static float to_px(const axis *a, double v) {
    return (float)(a->p0 + (transform(a, v) - a->lo) / (a->hi - a->lo) * (a->p1 - a->p0));
}

static double nice_step(double raw) {
    double e = pow(10, floor(log10(raw))), f = raw / e;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * e;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Line charts only: when the top 2% of the y values reach far above the
 * rest, lower *th to just above the 98th percentile. */
static bool margin_robust(const plot *p, const axis *a, double *th, double tl) {
    int64_t n = 0;
    for (int i = 0; i < p->ns; i++) {
        if (p->s[i].scatter) return false;
        n += p->s[i].n;
    }
    if (n < 50 || isfinite(p->fix_hi[1])) return false;
    double *v = malloc((size_t)n * sizeof *v);
    if (!v) return false;
    int64_t m = 0;
    for (int i = 0; i < p->ns; i++)
        for (int j = 0; j < p->s[i].n; j++)
            if (usable(a, p->s[i].y[j])) v[m++] = transform(a, p->s[i].y[j]);
    bool cut = false;
    if (m >= 50) {
        qsort(v, (size_t)m, sizeof *v, cmp_double);
        double q = v[(m - 1) * 98 / 100];
        if (*th > q + 1.0 * (q - tl) && q > tl) *th = q + 0.25 * (q - tl), cut = true;
    }
    free(v);
    return cut;
}

/* Fit the range to the data (plus margin, as a fraction of the range) and
 * choose about 'want' ticks. */
static void fit_axis(const plot *p, int k, axis *a, double margin, int want) {
    a->log = p->log[k];
    a->unit = 1;
    a->suffix = "";
    a->bytes = p->fmt[k] == PLOT_BYTES;
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < p->ns; i++)
        for (int j = 0; j < p->s[i].n; j++) {
            double v = k ? p->s[i].y[j] : p->s[i].x[j];
            if (!usable(a, v)) continue;
            lo = fmin(lo, v), hi = fmax(hi, v);
        }
    if (isfinite(p->fix_lo[k]) && usable(a, p->fix_lo[k])) lo = p->fix_lo[k];
    if (isfinite(p->fix_hi[k]) && usable(a, p->fix_hi[k])) hi = p->fix_hi[k];
    if (!(lo <= hi)) lo = a->log ? 1 : 0, hi = a->log ? 10 : 1;
    if (a->bytes && !a->log) {
        /* one unit for the whole linear axis; a log axis picks one a label */
        static const char *const units[] = {" B", " kB", " MB", " GB", " TB"};
        double m = fmax(fabs(lo), fabs(hi));
        int u = 0;
        while (u < 4 && m >= 1000 * a->unit) a->unit *= 1000, u++;
        a->suffix = units[u];
    }
    double tl = transform(a, lo), th = transform(a, hi);
    if (th - tl < 1e-12 * fmax(1, fabs(tl))) {
        double d = a->log ? 0.5 : fmax(fabs(tl) * 0.1, 0.5);
        tl -= d, th += d;
    }
    /* a line that shoots up (a diverging run) would flatten every other
     * curve: the top follows the bulk of the values, the spike leaves the
     * chart at the top */
    if (k == 1) margin_robust(p, a, &th, tl);
    double m = (th - tl) * margin;
    a->lo = tl - (isfinite(p->fix_lo[k]) ? 0 : m);
    a->hi = th + (isfinite(p->fix_hi[k]) ? 0 : m);
    a->nt = 0;
    if (a->log) {
        /* decades; when that gives too few ticks, 1-2-5 or 1-2-3-5 or all */
        static const int sets[4][10] = {{1}, {1, 2, 5}, {1, 2, 3, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
        static const int sizes[4] = {1, 3, 4, 9};
        for (int s = 0; s < 4; s++) {
            a->nt = 0;
            for (int e = (int)floor(a->lo); e <= (int)ceil(a->hi) && a->nt < MAX_TICKS; e++)
                for (int j = 0; j < sizes[s] && a->nt < MAX_TICKS; j++) {
                    double t = e + log10(sets[s][j]);
                    if (t >= a->lo - 1e-9 && t <= a->hi + 1e-9) a->ticks[a->nt++] = t;
                }
            if (a->nt >= 4) break;
        }
        a->decimals = -1; /* %g */
    } else {
        double step = nice_step((a->hi - a->lo) / (want > 1 ? want : 2));
        for (double t = ceil(a->lo / step - 1e-9) * step; t <= a->hi + step * 1e-9 && a->nt < MAX_TICKS; t += step)
            a->ticks[a->nt++] = fabs(t) < step * 1e-9 ? 0 : t;
        int d = (int)-floor(log10(step) + 1e-9);
        a->decimals = d < 0 ? 0 : d > 6 ? 6 : d;
    }
}

static void tick_label(const axis *a, double t, char *buf, size_t n) {
    if (a->log && a->bytes) {
        static const char *const units[] = {" B", " kB", " MB", " GB", " TB"};
        double v = pow(10, t);
        int u = 0;
        while (u < 4 && v >= 1000 * (1 - 1e-9)) v /= 1000, u++;
        snprintf(buf, n, "%.3g%s", v, units[u]);
    } else if (a->log) {
        double v = pow(10, t);
        snprintf(buf, n, "%.6g%s", v, a->suffix);
    } else if (fabs(t) >= 1e7) {
        snprintf(buf, n, "%.3g%s", t, a->suffix);
    } else {
        snprintf(buf, n, "%.*f%s", a->decimals, t, a->suffix);
    }
}

/* ---- layout and drawing ---------------------------------------------- */

static bool rect_hit(rect a, rect b) { return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1; }
static float rect_overlap(rect a, rect b) { return overlap(a.x0, a.x1, b.x0, b.x1) * overlap(a.y0, a.y1, b.y0, b.y1); }

/* Labels of scatter points: the first of a few spots beside the point that
 * overlaps no marker, no placed label and stays inside the plot area;
 * failing that, the spot that overlaps least. */
static void place_labels(const plot *p, canvas *c, const axis *ax, const axis *ay, rect area) {
    int nmark = 0;
    for (int i = 0; i < p->ns; i++) nmark += p->s[i].scatter ? p->s[i].n : 0;
    rect *used = malloc(sizeof(rect) * (size_t)(2 * nmark + 1));
    if (!used) return;
    int nu = 0;
    const float r = MARKER_R + 2;
    for (int i = 0; i < p->ns; i++)
        for (int j = 0; p->s[i].scatter && j < p->s[i].n; j++) {
            if (!usable(ax, p->s[i].x[j]) || !usable(ay, p->s[i].y[j])) continue;
            float x = to_px(ax, p->s[i].x[j]), y = to_px(ay, p->s[i].y[j]);
            used[nu++] = (rect){x - r, y - r, x + r, y + r};
        }
    const float th = FONT_CAP * TEXT_SCALE, gap = MARKER_R + 5;
    for (int i = 0; i < p->ns; i++)
        for (int j = 0; p->s[i].scatter && p->s[i].labels && j < p->s[i].n; j++) {
            const char *s = p->s[i].labels[j];
            if (!s || !*s || !usable(ax, p->s[i].x[j]) || !usable(ay, p->s[i].y[j])) continue;
            float x = to_px(ax, p->s[i].x[j]), y = to_px(ay, p->s[i].y[j]), tw = text_width(s, TEXT_SCALE);
            const float dx[8] = {gap, -gap - tw, -tw / 2, -tw / 2, gap - 2, gap - 2, -gap - tw + 2, -gap - tw + 2};
            const float dy[8] = {-th / 2, -th / 2, -gap - th, gap, -gap - th + 2, gap - 2, -gap - th + 2, gap - 2};
            int best = 0;
            float best_cost = INFINITY;
            for (int k = 0; k < 8; k++) {
                rect t = {x + dx[k] - 2, y + dy[k] - 2, x + dx[k] + tw + 2, y + dy[k] + th + 2};
                float cost = 0;
                for (int u = 0; u < nu; u++)
                    if (rect_hit(t, used[u])) cost += rect_overlap(t, used[u]) + 1;
                if (t.x0 < area.x0 || t.x1 > area.x1 || t.y0 < area.y0 || t.y1 > area.y1) cost += 1e6f;
                if (cost < best_cost) best_cost = cost, best = k;
                if (cost == 0) break;
            }
            rect t = {x + dx[best] - 2, y + dy[best] - 2, x + dx[best] + tw + 2, y + dy[best] + th + 2};
            used[nu++] = t;
            draw_text(c, s, x + dx[best], y + dy[best], TEXT_SCALE, INK, false);
        }
    free(used);
}

static bool is_major(const axis *a, double t) { return !a->log || fabs(t - round(t)) < 1e-9; }

static bool fits(rect r, const rect *drawn, int n) {
    for (int i = 0; i < n; i++)
        if (rect_hit(r, drawn[i])) return false;
    return true;
}

uint8_t *plot_render(plot *p, int *width, int *height) {
    canvas c = {.w = p->w, .h = p->h};
    c.px = malloc((size_t)c.w * (size_t)c.h * 3);
    c.cov = calloc((size_t)c.w * (size_t)c.h, sizeof *c.cov);
    if (!c.px || !c.cov) {
        free(c.px), free(c.cov);
        snprintf(p->err, sizeof p->err, "plot: out of memory for a %dx%d image", c.w, c.h);
        return NULL;
    }
    memset(c.px, 0xff, (size_t)c.w * (size_t)c.h * 3);

    const float ts = TEXT_SCALE, cap = FONT_CAP * ts, pad = 16, tick = 6;
    /* the title: big when it fits */
    float title_s = text_width(p->title, 3) <= (float)c.w - 2 * pad ? 3 : 2;
    float top = *p->title ? pad + FONT_CAP * title_s + 18 : pad + cap / 2;
    float bottom = tick + 8 + cap + (*p->xlabel ? 14 + cap : 0) + pad;
    bool only_lines = true;
    for (int i = 0; i < p->ns; i++) only_lines &= !p->s[i].scatter;

    axis ay, ax;
    float plot_h = (float)c.h - top - bottom;
    fit_axis(p, 1, &ay, 0.05, (int)(plot_h / 64));
    float ytw = 0;
    char buf[64];
    for (int i = 0; i < ay.nt; i++) {
        tick_label(&ay, ay.ticks[i], buf, sizeof buf);
        ytw = fmaxf(ytw, text_width(buf, ts));
    }
    float left = pad + (*p->ylabel ? cap + 14 : 0) + ytw + tick + 8;
    /* the legend: outside the plotting area, to the right */
    int nleg = 0;
    float legw = 0;
    for (int i = 0; i < p->ns; i++)
        if (*p->s[i].name) nleg++, legw = fmaxf(legw, text_width(p->s[i].name, ts));
    const float sw = 30, row = cap + 12;
    float right = nleg ? pad + 12 + sw + 10 + legw + 12 + pad : pad + 24;
    rect area = {roundf(left), roundf(top), roundf((float)c.w - right), roundf((float)c.h - bottom)};
    if (area.x1 - area.x0 < 60 || area.y1 - area.y0 < 60) {
        snprintf(p->err, sizeof p->err, "plot: %dx%d is too small for these labels", c.w, c.h);
        free(c.px), free(c.cov);
        return NULL;
    }
    fit_axis(p, 0, &ax, only_lines ? 0 : 0.05, (int)((area.x1 - area.x0) / 110));
    ax.p0 = area.x0, ax.p1 = area.x1;
    ay.p0 = area.y1, ay.p1 = area.y0;

    /* grid */
    for (int i = 0; i < ax.nt; i++) {
        float x = roundf(ax.p0 + (float)((ax.ticks[i] - ax.lo) / (ax.hi - ax.lo)) * (ax.p1 - ax.p0));
        fill_rect(&c, x, area.y0, x + 1, area.y1, GRID);
    }
    for (int i = 0; i < ay.nt; i++) {
        float y = roundf(ay.p0 + (float)((ay.ticks[i] - ay.lo) / (ay.hi - ay.lo)) * (ay.p1 - ay.p0));
        fill_rect(&c, area.x0, y, area.x1, y + 1, GRID);
    }

    /* series: lines first, markers over them */
    rect inner = {area.x0 + 1, area.y0, area.x1, area.y1 - 1};
    for (int i = 0; i < p->ns; i++) {
        const series *s = &p->s[i];
        if (s->scatter) continue;
        double phase = 0;
        for (int j = 0; j + 1 < s->n; j++) {
            if (!usable(&ax, s->x[j]) || !usable(&ay, s->y[j]) || !usable(&ax, s->x[j + 1]) ||
                !usable(&ay, s->y[j + 1]))
                continue;
            draw_segment(&c, inner, to_px(&ax, s->x[j]), to_px(&ay, s->y[j]), to_px(&ax, s->x[j + 1]),
                         to_px(&ay, s->y[j + 1]), s->dashed, &phase);
        }
        if (s->n == 1 && usable(&ax, s->x[0]) && usable(&ay, s->y[0]))
            cov_segment(&c, inner, to_px(&ax, s->x[0]), to_px(&ay, s->y[0]), to_px(&ax, s->x[0]), to_px(&ay, s->y[0]),
                        2 * LINE_HALF);
        flush_cov(&c, inner, plot_palette(s->color));
    }
    for (int i = 0; i < p->ns; i++)
        for (int j = 0; p->s[i].scatter && j < p->s[i].n; j++)
            if (usable(&ax, p->s[i].x[j]) && usable(&ay, p->s[i].y[j]))
                marker(&c, to_px(&ax, p->s[i].x[j]), to_px(&ay, p->s[i].y[j]), plot_palette(p->s[i].color));
    place_labels(p, &c, &ax, &ay, area);
    /* markers near the edge may spill: clear the margins again */
    fill_rect(&c, 0, 0, (float)c.w, area.y0, WHITE);
    fill_rect(&c, 0, area.y1, (float)c.w, (float)c.h, WHITE);
    fill_rect(&c, 0, 0, area.x0, (float)c.h, WHITE);
    fill_rect(&c, area.x1, 0, (float)c.w, (float)c.h, WHITE);

    /* frame, ticks and their labels; a label that would touch the one
     * before is left out */
    fill_rect(&c, area.x0, area.y0, area.x1 + 1, area.y0 + 1, INK);
    fill_rect(&c, area.x0, area.y1, area.x1 + 1, area.y1 + 1, INK);
    fill_rect(&c, area.x0, area.y0, area.x0 + 1, area.y1 + 1, INK);
    fill_rect(&c, area.x1, area.y0, area.x1 + 1, area.y1 + 1, INK);
    /* tick labels: decades of a log axis first, then the others where
     * they touch no label already drawn */
    rect drawn[2 * MAX_TICKS];
    int nd = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < ax.nt; i++) {
            if (is_major(&ax, ax.ticks[i]) != (pass == 0)) continue;
            float x = roundf(ax.p0 + (float)((ax.ticks[i] - ax.lo) / (ax.hi - ax.lo)) * (ax.p1 - ax.p0));
            fill_rect(&c, x, area.y1, x + 1, area.y1 + tick, INK);
            tick_label(&ax, ax.ticks[i], buf, sizeof buf);
            float w = text_width(buf, ts);
            rect r = {x - w / 2 - 6, 0, x + w / 2 + 6, 1};
            if (!fits(r, drawn, nd) || x + w / 2 > (float)c.w - 2) continue;
            drawn[nd++] = r;
            draw_label(&c, buf, x + 0.5f, area.y1 + tick + 6, ts, 1, 0, INK);
        }
    nd = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < ay.nt; i++) {
            if (is_major(&ay, ay.ticks[i]) != (pass == 0)) continue;
            float y = roundf(ay.p0 + (float)((ay.ticks[i] - ay.lo) / (ay.hi - ay.lo)) * (ay.p1 - ay.p0));
            fill_rect(&c, area.x0 - tick, y, area.x0, y + 1, INK);
            rect r = {0, y - cap / 2 - 3, 1, y + cap / 2 + 3};
            if (!fits(r, drawn, nd)) continue;
            drawn[nd++] = r;
            tick_label(&ay, ay.ticks[i], buf, sizeof buf);
            draw_label(&c, buf, area.x0 - tick - 6, y + 0.5f, ts, 2, 1, INK);
        }
    /* axis labels and title */
    if (*p->xlabel) draw_label(&c, p->xlabel, (area.x0 + area.x1) / 2, area.y1 + tick + 8 + cap + 14, ts, 1, 0, INK);
    if (*p->ylabel) {
        float w = text_width(p->ylabel, ts);
        draw_text(&c, p->ylabel, pad, (area.y0 + area.y1) / 2 + w / 2, ts, INK, true);
    }
    if (*p->title) {
        float tw = text_width(p->title, title_s);
        float tx = fmaxf(pad, fminf((area.x0 + area.x1) / 2 - tw / 2, (float)c.w - pad - tw));
        draw_text(&c, p->title, tx, pad, title_s, INK, false);
    }

    /* the legend: a swatch (line, dashes or marker) and the name */
    if (nleg) {
        float lx = area.x1 + pad, ly = area.y0;
        rect box = {lx, ly, lx + 12 + sw + 10 + legw + 12, ly + 8 + (float)nleg * row + 4};
        fill_rect(&c, box.x0, box.y0, box.x1, box.y1, 0xf7f7f7u);
        fill_rect(&c, box.x0, box.y0, box.x1, box.y0 + 1, 0xb0b0b0u);
        fill_rect(&c, box.x0, box.y1 - 1, box.x1, box.y1, 0xb0b0b0u);
        fill_rect(&c, box.x0, box.y0, box.x0 + 1, box.y1, 0xb0b0b0u);
        fill_rect(&c, box.x1 - 1, box.y0, box.x1, box.y1, 0xb0b0b0u);
        int k = 0;
        for (int i = 0; i < p->ns; i++) {
            const series *s = &p->s[i];
            if (!*s->name) continue;
            float cy = ly + 8 + (float)k * row + cap / 2, x0 = lx + 12;
            rect cl = {box.x0 + 1, box.y0 + 1, box.x1 - 1, box.y1 - 1};
            if (s->scatter) {
                marker(&c, x0 + sw / 2, cy, plot_palette(s->color));
            } else {
                double phase = 0;
                draw_segment(&c, cl, x0, cy, x0 + sw, cy, s->dashed, &phase);
                flush_cov(&c, cl, plot_palette(s->color));
            }
            draw_label(&c, s->name, x0 + sw + 10, cy, ts, 0, 1, INK);
            k++;
        }
    }
    free(c.cov);
    *width = c.w;
    *height = c.h;
    return c.px;
}

/* The written file on disk before the rename (a crash leaves the old
 * chart or the new one, never an empty file under the name). */
static bool sync_file(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    bool ok = fd >= 0 && fsync(fd) == 0;
    if (fd >= 0) close(fd);
    return ok;
}

int plot_write_png(plot *p, const char *path) {
    int w, h;
    uint8_t *px = plot_render(p, &w, &h);
    if (!px) return -1;
    /* through a temporary file and rename: never a half-written chart */
    size_t n = strlen(path) + 8;
    char *tmp = malloc(n);
    int rc = -1;
    if (!tmp) {
        snprintf(p->err, sizeof p->err, "plot: out of memory");
    } else {
        snprintf(tmp, n, "%s.tmp", path);
        if (!stbi_write_png(tmp, w, h, 3, px, w * 3)) {
            snprintf(p->err, sizeof p->err, "plot: cannot write %s", tmp);
            remove(tmp);
        } else if (!sync_file(tmp)) {
            snprintf(p->err, sizeof p->err, "plot: cannot sync %s", tmp);
            remove(tmp);
        } else if (rename(tmp, path)) {
            snprintf(p->err, sizeof p->err, "plot: cannot rename %s to %s", tmp, path);
            remove(tmp);
        } else {
            rc = 0;
        }
    }
    free(tmp);
    free(px);
    return rc;
}
