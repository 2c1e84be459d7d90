/* svg.h — plain SVG pictures for the CLI (svg.c). Each returns 0, or -1
 * when the file cannot be written. */
#ifndef MHA_CLI_SVG_H
#define MHA_CLI_SVG_H

#include <stdint.h>

/* y[i] at x = x0 + i * dx; a dashed horizontal line at hline (NAN: none). */
int svg_line_chart(const char *path, const char *title, const char *xlabel, const char *ylabel,
                   const float *y, int64_t n, int64_t x0, int64_t dx, double hline,
                   const char *hline_label);

/* maps heat maps of (rows, cols) values in [0, 1], side by side; titles and
 * row labels may be NULL. */
int svg_heatmaps(const char *path, const char *title, const float *w, int64_t maps, int64_t rows,
                 int64_t cols, const char *const *map_titles, const char *const *row_labels);

#endif
