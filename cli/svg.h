/* svg.h — plain SVG pictures for the CLI (svg.c). Each returns 0, or -1
 * when the file cannot be written. */
#ifndef MHA_CLI_SVG_H
#define MHA_CLI_SVG_H

#include <stdint.h>

/* y[i] at x = x0 + i * dx; a dashed horizontal line at hline (NAN: none). */
int svg_line_chart(const char *path, const char *title, const char *xlabel, const char *ylabel,
                   const float *y, int64_t n, int64_t x0, int64_t dx, double hline,
                   const char *hline_label);

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
