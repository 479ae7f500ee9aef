/* plot.h — PNG charts drawn by the project: line charts (loss curves) and
 * scatter charts (memory vs. quality), with axes, nice tick values and
 * labels, axis labels, a title and a legend.
 *
 * A chart collects series, then plot_write_png() lays it out and draws it:
 * the axis ranges cover every finite value (a log axis skips values <= 0;
 * NaN or Inf break a line), except that on a line chart a few values far
 * above the rest (a diverging run) leave through the top rather than
 * flatten every other curve; the legend sits to the right of the plotting
 * area so it never hides data, and the labels of scatter points are placed
 * where they overlap neither each other nor the markers. Text comes from
 * stb_easy_font (libstb-dev), lines and markers are anti-aliased, and the
 * file is written by stb_image_write through a temporary file and rename.
 * Colours are matplotlib's "tab10" palette in series order, unless set.
 *
 *     plot *p = plot_new("Fashion-MNIST CNN: training loss", "step", "loss");
 *     plot_set_log(p, false, true);
 *     int s = plot_add_line(p, "AdamW", steps, loss_adamw, n);
 *     int t = plot_add_line(p, "AdamW 8-bit", steps, loss_adamw8, n);
 *     plot_set_style(p, t, plot_series_color(p, s), true);   // same colour, dashed
 *     if (plot_write_png(p, "loss.png")) fprintf(stderr, "%s\n", plot_error(p));
 *     plot_free(p);
 */
#ifndef PLOT_H
#define PLOT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct plot plot;

/* How tick labels are written: plain numbers, or bytes with a decimal unit
 * (kB, MB, GB: 1000s, so that nice tick values stay round), one for a
 * linear axis, one a label on a log axis. */
typedef enum plot_format { PLOT_NUMBER = 0, PLOT_BYTES } plot_format;

/* NULL only when out of memory. The strings are copied. */
plot *plot_new(const char *title, const char *xlabel, const char *ylabel);
void plot_free(plot *p);

/* Image size in pixels (default 960 x 600). */
void plot_set_size(plot *p, int width, int height);
void plot_set_log(plot *p, bool log_x, bool log_y);
void plot_set_format(plot *p, plot_format x, plot_format y);
/* Fix an axis' range instead of fitting the data (lo < hi; a NaN end
 * keeps fitting that end). axis: 0 = x, 1 = y. */
void plot_set_range(plot *p, int axis, double lo, double hi);

/* A line through n points; x NULL means 0, 1, ..., n-1. The values are
 * copied. Returns the series' index, or -1 when out of memory. */
int plot_add_line(plot *p, const char *name, const double *x, const double *y, int n);
/* n markers; labels (NULL, or n strings, any NULL) are written beside the
 * points. */
int plot_add_scatter(plot *p, const char *name, const double *x, const double *y, const char *const *labels, int n);
/* Palette colour index (0..9) and dashing of a series. */
void plot_set_style(plot *p, int series, int color, bool dashed);
int plot_series_color(const plot *p, int series);
/* The palette's colour i (mod 10) as 0xRRGGBB. */
uint32_t plot_palette(int i);

/* Draw and write the PNG. Returns 0, or -1 with plot_error() saying why. */
int plot_write_png(plot *p, const char *path);
/* Draw into a new RGB buffer (width * height * 3 bytes; free() it). */
uint8_t *plot_render(plot *p, int *width, int *height);
const char *plot_error(const plot *p);

#endif
