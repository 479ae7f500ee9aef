/* test_plot.c — examples/common/plot: charts rendered to PNG files and
 * read back (stb_image): size, the axes, every series' colour, the legend.
 * KILN_PLOT_KEEP=DIR keeps the PNGs there to look at. */
#include "kt.h"
#include "plot.h"

#include <unistd.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

static void out_path(char *buf, size_t n, const char *name) {
    const char *keep = getenv("KILN_PLOT_KEEP");
    if (keep) snprintf(buf, n, "%s/%s", keep, name);
    else snprintf(buf, n, "/tmp/kiln-plot-%d-%s", (int)getpid(), name);
}

static int64_t count_rgb(const uint8_t *px, int w, int h, uint32_t rgb) {
    int64_t n = 0;
    for (int64_t i = 0; i < (int64_t)w * h; i++)
        n += px[3 * i] == (rgb >> 16 & 0xff) && px[3 * i + 1] == (rgb >> 8 & 0xff) && px[3 * i + 2] == (rgb & 0xff);
    return n;
}

static bool dark(const uint8_t *p) { return p[0] < 80 && p[1] < 80 && p[2] < 80; }

/* The longest run of dark pixels in a column / a row. */
static int longest_run(const uint8_t *px, int w, int h, bool column, int *where) {
    int best = 0;
    for (int a = 0; a < (column ? w : h); a++) {
        int run = 0;
        for (int b = 0; b < (column ? h : w); b++) {
            const uint8_t *p = px + 3 * (column ? (int64_t)b * w + a : (int64_t)a * w + b);
            run = dark(p) ? run + 1 : 0;
            /* ties: the leftmost column, the lowest row (the axes) */
            if (run > best || (!column && run == best)) best = run, *where = a;
        }
    }
    return best;
}

static uint8_t *write_and_read(plot *p, const char *name, int *w, int *h) {
    char path[512];
    out_path(path, sizeof path, name);
    if (plot_write_png(p, path)) {
        kt_fail(__FILE__, __LINE__, "%s", plot_error(p));
        return NULL;
    }
    int ch;
    uint8_t *px = stbi_load(path, w, h, &ch, 3);
    if (!getenv("KILN_PLOT_KEEP")) unlink(path);
    if (!px) kt_fail(__FILE__, __LINE__, "cannot read back %s", path);
    return px;
}

KT_TEST(plot_line_chart_png) {
    enum { N = 300 };
    double x[N], y[3][N];
    for (int i = 0; i < N; i++) {
        x[i] = 10.0 * i;
        for (int s = 0; s < 3; s++) y[s][i] = 2.3 * exp(-i / (40.0 + 30 * s)) + 0.25 + 0.05 * s + 0.02 * sin(i * 0.7 + s);
    }
    y[1][N / 2] = NAN; /* a gap */
    plot *p = plot_new("Fashion-MNIST CNN: training loss", "step", "cross-entropy loss");
    KT_NOTNULL(p);
    plot_set_log(p, false, true);
    int a = plot_add_line(p, "AdamW", x, y[0], N);
    int b = plot_add_line(p, "AdamW 8-bit", x, y[1], N);
    plot_add_line(p, "Lion", x, y[2], N);
    plot_set_style(p, b, plot_series_color(p, a), true);
    int w, h;
    uint8_t *px = write_and_read(p, "lines.png", &w, &h);
    KT_REQUIRE(px, "no image");
    KT_CHECK(w == 960 && h == 600, "size %dx%d", w, h);
    int col = 0, row = 0;
    int vrun = longest_run(px, w, h, true, &col), hrun = longest_run(px, w, h, false, &row);
    KT_CHECK(vrun > h / 2 && col < w / 4, "no y axis: longest dark column run %d at x=%d", vrun, col);
    KT_CHECK(hrun > w / 2 && row > h / 2, "no x axis: longest dark row run %d at y=%d", hrun, row);
    KT_CHECK(count_rgb(px, w, h, plot_palette(0)) > 300, "AdamW's colour: %lld px", (long long)count_rgb(px, w, h, plot_palette(0)));
    KT_CHECK(count_rgb(px, w, h, plot_palette(2)) > 300, "Lion's colour: %lld px", (long long)count_rgb(px, w, h, plot_palette(2)));
    KT_CHECK(count_rgb(px, w, h, plot_palette(1)) == 0, "palette colour 1 used by a restyled series");
    /* the legend: its box right of the plotting area, text inside it */
    int64_t box = 0, ink = 0;
    for (int yy = 0; yy < h / 2; yy++)
        for (int xx = 3 * w / 4; xx < w; xx++) {
            const uint8_t *q = px + 3 * ((int64_t)yy * w + xx);
            box += q[0] == 0xf7 && q[1] == 0xf7 && q[2] == 0xf7;
            ink += dark(q);
        }
    KT_CHECK(box > 2000 && ink > 200, "legend: %lld box pixels, %lld dark", (long long)box, (long long)ink);
    free(px);
    plot_free(p);
}

KT_TEST(plot_scatter_chart_png) {
    static const char *const names[] = {"SGD", "Adam", "AdamW", "AdamW-8bit", "Lion", "Lion-8bit", "GaLore", "APOLLO-Mini"};
    double mem[8] = {0.4e6, 1.6e6, 1.6e6, 0.41e6, 0.8e6, 0.21e6, 0.5e6, 0.01e6};
    double loss[8] = {0.42, 0.31, 0.30, 0.305, 0.33, 0.335, 0.36, 0.37};
    plot *p = plot_new("Memory vs. quality", "optimizer state", "validation loss");
    plot_set_format(p, PLOT_BYTES, PLOT_NUMBER);
    plot_set_size(p, 800, 500);
    for (int i = 0; i < 8; i++) plot_add_scatter(p, names[i], &mem[i], &loss[i], &names[i], 1);
    int w, h;
    uint8_t *px = write_and_read(p, "scatter.png", &w, &h);
    KT_REQUIRE(px, "no image");
    KT_CHECK(w == 800 && h == 500, "size %dx%d", w, h);
    for (int i = 0; i < 8; i++)
        KT_CHECK(count_rgb(px, w, h, plot_palette(i)) > 40, "marker %d: %lld px", i, (long long)count_rgb(px, w, h, plot_palette(i)));
    free(px);
    /* bad paths are errors, not crashes */
    KT_CHECK(plot_write_png(p, "/nonexistent/dir/x.png") == -1 && strstr(plot_error(p), "cannot write"), "%s",
             plot_error(p));
    plot_free(p);
}

KT_TEST(plot_degenerate_data_still_draws) {
    /* no series, a single point, only NaN, values <= 0 on a log axis */
    double one = 3, nan = NAN, neg[3] = {-1, 0, -5};
    for (int k = 0; k < 4; k++) {
        plot *p = plot_new(k ? "t" : "", "", "");
        if (k == 1) plot_add_line(p, "one", NULL, &one, 1);
        if (k == 2) plot_add_scatter(p, "nan", &nan, &nan, NULL, 1);
        if (k == 3) plot_set_log(p, true, true), plot_add_line(p, "neg", neg, neg, 3);
        int w, h;
        uint8_t *px = plot_render(p, &w, &h);
        KT_CHECK(px && w == 960 && h == 600, "case %d: %s", k, plot_error(p));
        free(px);
        plot_free(p);
    }
}
