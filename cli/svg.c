/* svg.c — the two pictures the CLI draws, as plain SVG files a browser
 * opens: a line chart (a loss curve) and a row of heat maps (attention
 * weights, one per head). No library; numbers written with %g. */
#include "svg.h"

#include <math.h>
#include <stdio.h>

static void text(FILE *f, double x, double y, const char *anchor, double size, const char *s) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%.0f\">", x, y, anchor, size);
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
    fputs("</text>\n", f);
}

static void head(FILE *f, double w, double h) {
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
            "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            w, h, w, h);
}

int svg_line_chart(const char *path, const char *title, const char *xlabel, const char *ylabel,
                   const float *y, int64_t n, int64_t x0, int64_t dx, double hline,
                   const char *hline_label) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    const double W = 720, H = 420, L = 70, R = 20, T = 40, B = 50;
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(y[i])) {
            lo = fmin(lo, (double)y[i]);
            hi = fmax(hi, (double)y[i]);
        }
    if (isfinite(hline)) {
        lo = fmin(lo, hline);
        hi = fmax(hi, hline);
    }
    if (!(lo <= hi)) lo = 0, hi = 1;
    if (lo > 0 && lo < 0.5 * hi) lo = 0;
    if (hi - lo < 1e-12) hi = lo + 1;
    const double x1 = (double)(x0 + (n > 1 ? n - 1 : 1) * dx);
    const double sx = (W - L - R) / (x1 - (double)x0), sy = (H - T - B) / (hi - lo);
    head(f, W, H);
    text(f, W / 2, 24, "middle", 16, title);
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#888\"/>\n", L, T,
            W - L - R, H - T - B);
    for (int k = 0; k <= 4; k++) { /* y ticks */
        const double v = lo + (hi - lo) * k / 4, py = H - B - (v - lo) * sy;
        char s[32];
        snprintf(s, sizeof s, "%.3g", v);
        fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", L, W - R, py, py);
        text(f, L - 6, py + 4, "end", 11, s);
    }
    for (int k = 0; k <= 4; k++) { /* x ticks */
        const double v = (double)x0 + (x1 - (double)x0) * k / 4, px = L + (v - (double)x0) * sx;
        char s[32];
        snprintf(s, sizeof s, "%.0f", v);
        text(f, px, H - B + 16, "middle", 11, s);
    }
    text(f, W / 2, H - 12, "middle", 12, xlabel);
    fprintf(f, "<text x=\"16\" y=\"%.0f\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 16 %.0f)\">%s</text>\n",
            H / 2, H / 2, ylabel);
    if (isfinite(hline)) {
        const double py = H - B - (hline - lo) * sy;
        fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#c33\" stroke-dasharray=\"6 4\"/>\n",
                L, W - R, py, py);
        if (hline_label) text(f, W - R - 4, py - 5, "end", 11, hline_label);
    }
    fputs("<polyline fill=\"none\" stroke=\"#1f5fbf\" stroke-width=\"1.5\" points=\"", f);
    for (int64_t i = 0; i < n; i++)
        if (isfinite(y[i]))
            fprintf(f, "%.1f,%.1f ", L + (double)(i * dx) * sx, H - B - ((double)y[i] - lo) * sy);
    fputs("\"/>\n</svg>\n", f);
    return fclose(f) == 0 ? 0 : -1;
}

int svg_heatmaps(const char *path, const char *title, const float *w, int64_t maps, int64_t rows,
                 int64_t cols, const char *const *map_titles, const char *const *row_labels) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    const double cell = rows <= 16 ? 18 : rows <= 32 ? 10 : 6, gap = 30, L = row_labels ? 56 : 20;
    const double mw = cell * (double)cols, mh = cell * (double)rows;
    const double W = L + (double)maps * (mw + gap), H = 70 + mh + 30;
    head(f, W, H);
    text(f, W / 2, 22, "middle", 15, title);
    for (int64_t m = 0; m < maps; m++) {
        const double ox = L + (double)m * (mw + gap), oy = 60;
        if (map_titles) text(f, ox + mw / 2, 48, "middle", 12, map_titles[m]);
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) {
                double v = (double)w[(m * rows + i) * cols + j];
                v = v < 0 ? 0 : v > 1 ? 1 : v;
                /* white (0) to dark blue (1) */
                const int r = (int)lround(255 - 225 * v), g = (int)lround(255 - 185 * v),
                          b = (int)lround(255 - 80 * v);
                fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#%02x%02x%02x\"/>\n",
                        ox + (double)j * cell, oy + (double)i * cell, cell, cell, r, g, b);
            }
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>\n", ox,
                oy, mw, mh);
        if (row_labels && m == 0)
            for (int64_t i = 0; i < rows; i++)
                text(f, ox - 4, oy + ((double)i + 0.75) * cell, "end", cell > 12 ? 10 : 7, row_labels[i]);
    }
    text(f, L, H - 10, "start", 11, "rows: queries (position), columns: keys; darker = more weight");
    fputs("</svg>\n", f);
    return fclose(f) == 0 ? 0 : -1;
}
