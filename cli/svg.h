/* svg.h — plain SVG pictures for the CLI (svg.c). Each returns 0, or -1
 * when the file cannot be written (errno says why); a file is written to
 * path + ".tmp" and renamed, so a crash never leaves half a picture. */
#ifndef MHA_CLI_SVG_H
#define MHA_CLI_SVG_H

#include <stdint.h>

/* y[i] at x = x0 + i * dx; a dashed horizontal line at hline (NAN: none). */
int svg_line_chart(const char *path, const char *title, const char *xlabel, const char *ylabel,
                   const float *y, int64_t n, int64_t x0, int64_t dx, double hline,
                   const char *hline_label);

/* The book's Figure 5.12: train[i] and val[i] at epochs[i] (bottom axis,
 * "Epochs"), tokens[i] the tokens seen at that point (top axis, "Tokens
 * seen"); n >= 1 (n == 1 draws points). 0, or -1 when the file cannot be written. */
int svg_loss_epochs(const char *path, const char *title, const double *epochs, const double *train,
                    const double *val, const double *tokens, int64_t n);

/* ---- axes as matplotlib draws them (for the charts above and their test) */

/* matplotlib's MaxNLocator: at most nbins intervals, ticks at k x step with
 * step one of the steps times a power of ten. */
typedef struct {
    int nbins;   /* >= 1 */
    int integer; /* 1: whole-number steps when two whole numbers fit (integer=True) */
    int fine;    /* 1: MaxNLocator's default steps 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10;
                  * 0: AutoLocator's 1, 2, 2.5, 5, 10 */
} svg_locator;

/* The locator's tick_values(vmin, vmax): up to cap ticks into t, the ones
 * just beyond the limits included, as matplotlib returns them; their
 * number, or -1 when more than cap. */
int svg_tick_values(const svg_locator *l, double vmin, double vmax, double *t, int cap);

/* AutoLocator's nbins on an axis of length pt points with labels of
 * label_pt points (Axis.get_tick_space, clipped to 1 ... 9). */
int svg_auto_nbins(double length_pt, double label_pt, int vertical);

#define SVG_MAX_TICKS 24
/* An axis as autoscaling leaves it: view limits lo, hi (the data's range,
 * made non-singular, plus margins of 0.05 of it), the n ticks inside them
 * and their labels as ScalarFormatter writes them (one number of decimals,
 * U+2212 for minus), offset: its "1e6" / "+1e5" text at the axis end, or "". */
typedef struct {
    double lo, hi;
    int n;
    double at[SVG_MAX_TICKS];
    char label[SVG_MAX_TICKS][40];
    char offset[40];
} svg_axis;

/* Widens [*lo, *hi] to the points (v[i], w[i]), i < n, of a line whose
 * two coordinates are finite, as a line's data limits (w NULL: v alone);
 * start from lo = INFINITY, hi = -INFINITY (no data). */
void svg_data_range(const double *v, const double *w, int64_t n, double *lo, double *hi);

/* The axis over the data range [dmin, dmax] (dmin > dmax: none, which
 * gives matplotlib's default). 0, or -1 when the ticks do not fit. */
int svg_axis_fit(svg_axis *a, double dmin, double dmax, const svg_locator *l);

/* What a row of heat maps shows besides the values; every field may be
 * NULL / 0. */
typedef struct {
    const char *const *map_titles; /* (maps) above each map: "head 0", ... */
    const char *const *row_labels; /* (rows) left of the first map: the queries */
    const char *const *col_labels; /* (cols) below each map, upwards: the keys */
    int causal;                    /* 1: cells above the diagonal drawn as masked */
    const char *scale_label;       /* above the colour scale; "weight" when NULL */
    const char *note;              /* the line at the bottom; a default when NULL */
} svg_heatmap_opts;

/* maps heat maps of (rows, cols) values in [0, 1] (w: (maps, rows, cols)),
 * side by side, white (0) to dark blue (1), with a colour scale; cells
 * show their value when there is room (up to 8 rows and columns). */
int svg_heatmaps(const char *path, const char *title, const float *w, int64_t maps, int64_t rows,
                 int64_t cols, const svg_heatmap_opts *o);

#endif
