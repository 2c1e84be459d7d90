/* svg.c — the pictures the CLI draws (mha train, mha trace --svg), as
 * self-contained SVG files a browser opens: a line chart (a loss curve) and
 * a row of heat maps with a colour scale (attention weights, one per head).
 * No library, no external reference (fonts are the viewer's sans-serif). */
#include "svg.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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

/* The colour of weight v in [0, 1]: white (0) to dark blue (1), linear in
 * each channel, so the scale's two-stop gradient is the same map. */
static void colour(double v, int rgb[3]) {
    v = v < 0 ? 0 : v > 1 ? 1 : v;
    rgb[0] = (int)lround(255 - 225 * v);
    rgb[1] = (int)lround(255 - 185 * v);
    rgb[2] = (int)lround(255 - 80 * v);
}

static size_t longest(const char *const *labels, int64_t n) {
    size_t m = 0;
    for (int64_t i = 0; labels && i < n; i++) {
        size_t k = strlen(labels[i]);
        m = k > m ? k : m;
    }
    return m;
}

int svg_heatmaps(const char *path, const char *title, const float *w, int64_t maps, int64_t rows,
                 int64_t cols, const svg_heatmap_opts *o) {
    static const svg_heatmap_opts none = {0};
    if (!o) o = &none;
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    const int64_t n = rows > cols ? rows : cols;
    const double cell = n <= 8 ? 44 : n <= 16 ? 18 : n <= 32 ? 10 : n <= 64 ? 6 : 3;
    const double fs = cell >= 18 ? 12 : cell >= 10 ? 9 : 7, cw = 0.62 * fs; /* label font, char width */
    const double gap = 30, L = 12 + cw * (double)longest(o->row_labels, rows);
    const double mw = cell * (double)cols, mh = cell * (double)rows;
    const double oy = 64, colh = o->col_labels ? 8 + cw * (double)longest(o->col_labels, cols) : 0;
    const double legend_x = L + (double)maps * (mw + gap), legend_h = mh > 120 ? mh : 120;
    const double W = legend_x + 110, H = oy + (mh > legend_h ? mh : legend_h) + colh + 40;
    head(f, W, H);
    text(f, W / 2, 24, "middle", 15, title);
    for (int64_t m = 0; m < maps; m++) {
        const double ox = L + (double)m * (mw + gap);
        if (o->map_titles) text(f, ox + mw / 2, oy - 10, "middle", 13, o->map_titles[m]);
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) {
                const double v = (double)w[(m * rows + i) * cols + j], x = ox + (double)j * cell,
                             y = oy + (double)i * cell;
                if (o->causal && j > i) { /* masked: -inf before the softmax */
                    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#e4e4e4\"/>\n", x,
                            y, cell, cell);
                    continue;
                }
                int c[3];
                colour(v, c);
                fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#%02x%02x%02x\"/>\n", x,
                        y, cell, cell, c[0], c[1], c[2]);
                if (cell >= 40) { /* the weight itself, as the book's figures show it */
                    char s[16];
                    snprintf(s, sizeof s, "%.2f", v);
                    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\" fill=\"%s\">%s</text>\n",
                            x + cell / 2, y + cell / 2 + 4, v > 0.5 ? "white" : "#222", s);
                }
            }
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>\n", ox,
                oy, mw, mh);
        if (o->row_labels && m == 0)
            for (int64_t i = 0; i < rows; i++)
                text(f, ox - 5, oy + ((double)i + 0.5) * cell + fs / 3, "end", fs, o->row_labels[i]);
        for (int64_t j = 0; o->col_labels && j < cols; j++) { /* read upwards, below the map */
            const double x = ox + ((double)j + 0.5) * cell + fs / 3, y = oy + mh + 5;
            fprintf(f, "<g transform=\"rotate(-90 %.1f %.1f)\">", x, y);
            text(f, x, y, "end", fs, o->col_labels[j]);
            fputs("</g>\n", f);
        }
    }
    /* the colour scale: 1 at the top, 0 at the bottom */
    const double bx = legend_x, by = oy, bh = legend_h * 0.8;
    fprintf(f,
            "<defs><linearGradient id=\"scale\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">"
            "<stop offset=\"0\" stop-color=\"#ffffff\"/><stop offset=\"1\" stop-color=\"#1e46af\"/>"
            "</linearGradient></defs>\n"
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"16\" height=\"%.1f\" fill=\"url(#scale)\" stroke=\"#888\"/>\n",
            bx, by, bh);
    for (int k = 0; k <= 4; k++) {
        char s[16];
        const double y = by + bh - bh * k / 4;
        snprintf(s, sizeof s, "%.2f", k / 4.0);
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", bx + 16, bx + 20, y, y);
        text(f, bx + 23, y + 4, "start", 10, s);
    }
    text(f, bx, by - 10, "start", 11, o->scale_label ? o->scale_label : "weight");
    if (o->causal) {
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"16\" height=\"12\" fill=\"#e4e4e4\" stroke=\"#888\"/>\n", bx,
                by + bh + 10);
        text(f, bx + 22, by + bh + 20, "start", 10, "masked");
    }
    text(f, L, H - 12, "start", 11,
         o->note ? o->note : "rows: queries, columns: keys; darker = more weight");
    fputs("</svg>\n", f);
    return fclose(f) == 0 ? 0 : -1;
}
