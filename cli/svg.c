/* svg.c — the pictures the CLI draws (mha train, mha trace --svg), as
 * self-contained SVG files a browser opens: a line chart (a loss curve) and
 * a row of heat maps with a colour scale (attention weights, one per head).
 * No library, no external reference (fonts are the viewer's sans-serif). */
#include "svg.h"

#include <errno.h>
#include <float.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- files: written beside the target, then renamed -------------------- */

/* The open temporary file for path (path + ".tmp" into *tmp), or NULL.
 * A path that names something other than a regular file (/dev/stdout, a
 * pipe) is written in place, *tmp NULL: a rename would replace it. */
static FILE *open_tmp(const char *path, char **tmp) {
    struct stat sb;
    *tmp = NULL;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) return fopen(path, "w");
    const size_t k = strlen(path);
    *tmp = malloc(k + 5);
    if (!*tmp) {
        errno = ENOMEM;
        return NULL;
    }
    memcpy(*tmp, path, k);
    memcpy(*tmp + k, ".tmp", 5);
    FILE *f = fopen(*tmp, "w");
    if (!f) {
        free(*tmp);
        *tmp = NULL;
    }
    return f;
}

/* Closes f, synced, and renames it to path: the old picture stays whole
 * until the new one is; 0, or -1 (errno from the failing call, no .tmp
 * left behind). */
static int close_tmp(FILE *f, char *tmp, const char *path) {
    int ok = fflush(f) == 0 && !ferror(f) && (!tmp || fsync(fileno(f)) == 0);
    int e = errno;
    ok = fclose(f) == 0 && ok;
    if (ok && tmp && rename(tmp, path) != 0) ok = 0;
    if (!ok) {
        e = errno ? errno : e;
        if (tmp) unlink(tmp);
        errno = e;
    }
    free(tmp);
    return ok ? 0 : -1;
}

static void escaped(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

static void text(FILE *f, double x, double y, const char *anchor, double size, const char *s) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%.0f\">", x, y, anchor, size);
    escaped(f, s);
    fputs("</text>\n", f);
}

static void head(FILE *f, double w, double h) {
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
            "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            w, h, w, h);
}

/* ---- axes as matplotlib draws them ----------------------------------------
 * The default AutoLocator (a MaxNLocator) and ScalarFormatter of
 * matplotlib 3.6 (ticker.py), re-derived here step for step in the same
 * double arithmetic, Python's floor division included, so that the ticks
 * and labels are the ones matplotlib shows for the same limits. */

/* Python's float divmod(x, y) quotient (floor division, y > 0); *mod the
 * remainder. */
static double py_floordiv(double x, double y, double *mod) {
    double m = fmod(x, y), div = (x - m) / y, q;
    if (m != 0) {
        if ((y < 0) != (m < 0)) {
            m += y;
            div -= 1.0;
        }
    } else {
        m = copysign(0.0, y);
    }
    if (div != 0) {
        q = floor(div);
        if (div - q > 0.5) q += 1.0;
    } else {
        q = copysign(0.0, x / y);
    }
    if (mod) *mod = m;
    return q;
}

/* transforms.nonsingular: a range that is not a point, NaN or infinite. */
static void nonsingular(double *lo, double *hi, double expander, double tiny) {
    double a = *lo, b = *hi;
    if (!isfinite(a) || !isfinite(b)) {
        *lo = -expander, *hi = expander;
        return;
    }
    if (b < a) {
        const double t = a;
        a = b, b = t;
    }
    const double m = fmax(fabs(a), fabs(b));
    if (m < 1e6 / tiny * DBL_MIN) {
        a = -expander, b = expander;
    } else if (b - a <= m * tiny) {
        if (a == 0 && b == 0) {
            a = -expander, b = expander;
        } else {
            a -= expander * fabs(a);
            b += expander * fabs(b);
        }
    }
    *lo = a, *hi = b;
}

/* _Edge_integer's tolerance: more slop when the offset is large. */
static int close_to(double ms, double edge, double step, double offset) {
    double tol = 1e-10;
    if (offset > 0) {
        tol = fmax(1e-10, pow(10, log10(offset / step) - 12));
        tol = fmin(0.4999, tol);
    }
    return fabs(ms - edge) < tol;
}

int svg_tick_values(const svg_locator *l, double vmin, double vmax, double *t, int cap) {
    static const double auto_steps[] = {1, 2, 2.5, 5, 10}, fine_steps[] = {1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10};
    const double *st = l->fine ? fine_steps : auto_steps;
    const int ns = l->fine ? 10 : 5, nbins = l->nbins < 1 ? 1 : l->nbins, min_ticks = 2;
    nonsingular(&vmin, &vmax, 1e-13, 1e-14);
    /* scale_range: the step's power of ten and an offset for far ranges */
    const double dv = fabs(vmax - vmin), meanv = (vmax + vmin) / 2;
    double offset = 0;
    if (!(fabs(meanv) / dv < 100)) offset = copysign(pow(10, py_floordiv(log10(fabs(meanv)), 1, NULL)), meanv);
    const double scale = pow(10, py_floordiv(log10(dv / nbins), 1, NULL));
    const double v0 = vmin - offset, v1 = vmax - offset, raw_step = (v1 - v0) / nbins;
    /* the staircase: 0.1 x steps, steps, 10 x the second step; whole
     * numbers only (below 1 anything) for an integer locator */
    double steps[24];
    int k = 0;
    for (int i = 0; i < 2 * ns; i++) {
        const double s = (i < ns - 1 ? 0.1 * st[i] : i < 2 * ns - 1 ? st[i - (ns - 1)] : 10 * st[1]) * scale;
        if (l->integer && !(s < 1 || fabs(s - nearbyint(s)) < 0.001)) continue;
        steps[k++] = s;
    }
    int istep = 0;
    while (istep < k - 1 && !(steps[istep] >= raw_step)) istep++;
    const double aoff = fabs(offset);
    int n = 0;
    for (; istep >= 0; istep--) { /* the upper limit; smaller steps while too few ticks show */
        double step = steps[istep];
        if (l->integer && floor(v1) - ceil(v0) >= min_ticks - 1) step = fmax(1, step);
        const double best = py_floordiv(v0, step, NULL) * step;
        double m;
        double d = py_floordiv(v0 - best, step, &m);
        const double low = close_to(m / step, 1, step, aoff) ? d + 1 : d;
        d = py_floordiv(v1 - best, step, &m);
        const double high = close_to(m / step, 0, step, aoff) ? d : d + 1;
        n = 0;
        int shown = 0;
        for (double j = low; j < high + 1; j += 1) {
            const double tick = j * step + best;
            shown += tick <= v1 && tick >= v0;
            if (n >= cap) return -1;
            t[n++] = tick;
        }
        if (shown >= min_ticks) break;
    }
    for (int i = 0; i < n; i++) t[i] += offset;
    return n;
}

int svg_auto_nbins(double length_pt, double label_pt, int vertical) {
    const double size = label_pt * (vertical ? 2 : 3); /* labels no wider than 3:1; 2 between rows */
    const double space = size > 0 ? floor(length_pt / size) : 9;
    return space < 1 ? 1 : space > 9 ? 9 : (int)space;
}

void svg_data_range(const double *v, const double *w, int64_t n, double *lo, double *hi) {
    for (int64_t i = 0; i < n; i++)
        if (isfinite(v[i]) && (!w || isfinite(w[i]))) {
            *lo = fmin(*lo, v[i]);
            *hi = fmax(*hi, v[i]);
        }
}

/* snprintf that may cut (labels are short; a cut one is still text) */
__attribute__((format(printf, 3, 4))) static void put(char *s, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s, cap, fmt, ap);
    va_end(ap);
}

/* numpy's round(x, decimals) for decimals >= 0 */
static double np_round(double x, int decimals) {
    const double f = pow(10, decimals);
    return nearbyint(x * f) / f;
}

/* ScalarFormatter.format_data: "2e5", "1.5e5", "3" (the offset's text) */
static void format_data(char *s, size_t cap, double v) {
    const int e = (int)floor(log10(fabs(v)));
    const double sig = round(v / pow(10, e) * 1e10) / 1e10;
    char m[32];
    if (fmod(sig, 1) == 0) put(m, sizeof m, "%d", (int)sig);
    else put(m, sizeof m, "%1.10g", sig);
    if (e == 0) put(s, cap, "%s", m);
    else put(s, cap, "%se%d", m, e);
}

/* '-' as U+2212, as matplotlib writes minus signs (axes.unicode_minus) */
static void fix_minus(char *s, size_t cap) {
    char out[64];
    size_t j = 0;
    for (const char *p = s; *p && j + 4 < sizeof out; p++) {
        if (*p == '-') {
            memcpy(out + j, "\xe2\x88\x92", 3);
            j += 3;
        } else {
            out[j++] = *p;
        }
    }
    out[j] = 0;
    put(s, cap, "%s", out);
}

/* ScalarFormatter's offset (_compute_offset) over the visible ticks: a
 * common leading part taken out when it saves at least 4 digits. */
static double compute_offset(const double *vis, int nv) {
    if (nv == 0) return 0;
    double lmin = vis[0], lmax = vis[0];
    for (int i = 1; i < nv; i++) lmin = fmin(lmin, vis[i]), lmax = fmax(lmax, vis[i]);
    if (lmin == lmax || (lmin <= 0 && 0 <= lmax)) return 0;
    double amin = fabs(lmin), amax = fabs(lmax);
    if (amin > amax) {
        const double t = amin;
        amin = amax, amax = t;
    }
    const double sign = copysign(1, lmin), oom_max = ceil(log10(amax));
    double oom = oom_max;
    for (int g = 0; g < 2000 && py_floordiv(amin, pow(10, oom), NULL) == py_floordiv(amax, pow(10, oom), NULL); g++)
        oom -= 1;
    oom += 1;
    if ((amax - amin) / pow(10, oom) <= 1e-2) { /* straddling a multiple of a large power of ten */
        oom = oom_max;
        for (int g = 0; g < 2000 && !(py_floordiv(amax, pow(10, oom), NULL) - py_floordiv(amin, pow(10, oom), NULL) > 1); g++)
            oom -= 1;
        oom += 1;
    }
    const double lead = py_floordiv(amax, pow(10, oom), NULL);
    return lead >= 1000 ? sign * lead * pow(10, oom) : 0; /* offset_threshold 4: 10 ** 3 */
}

/* ScalarFormatter.set_locs and __call__ on all the locator's ticks t (the
 * visible ones decide the offset and the order of magnitude, all of them
 * the number of decimals), labels for the visible ones into a. */
static void format_ticks(svg_axis *a, const double *t, int n) {
    double vis[SVG_MAX_TICKS * 2];
    int nv = 0;
    for (int i = 0; i < n && nv < (int)(sizeof vis / sizeof *vis); i++)
        if (a->lo <= t[i] && t[i] <= a->hi) vis[nv++] = t[i];
    const double offset = compute_offset(vis, nv);
    int oom = 0; /* scientific notation at 1e-5 and below, 1e6 and above */
    if (nv > 0) {
        double e;
        if (offset != 0) {
            e = floor(log10(a->hi - a->lo));
        } else {
            double m = 0;
            for (int i = 0; i < nv; i++) m = fmax(m, fabs(vis[i]));
            e = m == 0 ? 0 : floor(log10(m));
        }
        if (e <= -5 || e >= 6) oom = (int)e;
    }
    /* the decimals: the fewest that keep every tick within 1e-3 of the
     * ticks' range, counting from three below the range's order */
    double locs[SVG_MAX_TICKS + 2];
    int nl = 0;
    for (int i = 0; i < n && i < SVG_MAX_TICKS; i++) locs[nl++] = t[i];
    const int few = nl < 2;
    if (few) locs[nl++] = a->lo, locs[nl++] = a->hi;
    const double p = pow(10., oom);
    double lmin = INFINITY, lmax = -INFINITY, amax = 0;
    for (int i = 0; i < nl; i++) {
        locs[i] = (locs[i] - offset) / p;
        lmin = fmin(lmin, locs[i]), lmax = fmax(lmax, locs[i]), amax = fmax(amax, fabs(locs[i]));
    }
    double range = lmax - lmin;
    if (range == 0) range = amax;
    if (range == 0) range = 1;
    if (few) nl -= 2;
    const int range_oom = (int)floor(log10(range));
    const double thresh = 1e-3 * pow(10, range_oom);
    int sig = 3 - range_oom > 0 ? 3 - range_oom : 0;
    for (; sig >= 0; sig--) {
        double worst = 0;
        for (int i = 0; i < nl; i++) worst = fmax(worst, fabs(locs[i] - np_round(locs[i], sig)));
        if (!(worst < thresh)) break;
    }
    sig++;
    a->n = 0;
    const double rt = (a->hi - a->lo) * 1e-10; /* drawn: inside the view, give or take 1e-10 of it */
    for (int i = 0; i < n && a->n < SVG_MAX_TICKS; i++) {
        if (!(a->lo - rt <= t[i] && t[i] <= a->hi + rt)) continue;
        double xp = (t[i] - offset) / p;
        if (fabs(xp) < 1e-8) xp = 0;
        a->at[a->n] = t[i];
        put(a->label[a->n], sizeof a->label[0], "%1.*f", sig, xp);
        fix_minus(a->label[a->n], sizeof a->label[0]);
        a->n++;
    }
    a->offset[0] = 0;
    if (nv > 0 && (oom != 0 || offset != 0)) {
        char sci[16] = "", off[40] = "";
        if (offset != 0) {
            char d[32];
            format_data(d, sizeof d, offset);
            put(off, sizeof off, "%s%s", offset > 0 ? "+" : "", d);
        }
        if (oom != 0) put(sci, sizeof sci, "1e%d", oom);
        put(a->offset, sizeof a->offset, "%s%s", sci, off);
        fix_minus(a->offset, sizeof a->offset);
    }
}

int svg_axis_fit(svg_axis *a, double dmin, double dmax, const svg_locator *l) {
    double lo = dmin, hi = dmax;
    if (!(lo <= hi)) lo = -INFINITY, hi = INFINITY; /* no data */
    nonsingular(&lo, &hi, 0.05, 1e-15);             /* Locator.nonsingular */
    const double delta = (hi - lo) * 0.05;          /* axes.xmargin, axes.ymargin */
    if (isfinite(delta)) lo -= delta, hi += delta;
    nonsingular(&lo, &hi, 1e-12, 1e-13); /* MaxNLocator.view_limits */
    a->lo = lo, a->hi = hi, a->n = 0, a->offset[0] = 0;
    if (!isfinite(hi - lo)) return -1; /* data near DBL_MAX: no scale to draw it on */
    double t[SVG_MAX_TICKS];
    const int n = svg_tick_values(l, lo, hi, t, SVG_MAX_TICKS);
    if (n < 0) return -1;
    format_ticks(a, t, n);
    return 0;
}

/* ---- drawing an axes box ------------------------------------------------ */

typedef struct {
    double x, y, w, h; /* the axes' frame in the picture's units */
} frame;

/* A label's width, guessed from its characters (sans-serif digits are
 * about 0.6 em); UTF-8 continuation bytes do not count. */
static double text_width(const char *s, double fs) {
    double n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xc0) != 0x80;
    return 0.6 * fs * n;
}

static double widest(const svg_axis *a, double fs) {
    double w = 0;
    for (int i = 0; i < a->n; i++) w = fmax(w, text_width(a->label[i], fs));
    return w;
}

static double xpos(const svg_axis *a, const frame *b, double v) { return b->x + (v - a->lo) / (a->hi - a->lo) * b->w; }
static double ypos(const svg_axis *a, const frame *b, double v) { return b->y + b->h - (v - a->lo) / (a->hi - a->lo) * b->h; }

/* What the axes look like: tick length and the gaps to labels, in the
 * picture's units (matplotlib's 3.5 pt ticks, 3.5 pt pad, 4 pt labelpad). */
typedef struct {
    double fs, tick, pad, labelpad, grid; /* grid: 1 draws light grid lines at the ticks */
} axes_style;

/* An x axis's ticks and labels along the frame's bottom (top = 0) or top
 * (top = 1), its label beyond them, the offset text at the right end. */
static void draw_xaxis(FILE *f, const svg_axis *a, const frame *b, int top, const axes_style *st, const char *label) {
    const double edge = top ? b->y : b->y + b->h, dir = top ? -1 : 1;
    const double ty = edge + dir * (st->tick + st->pad) + (top ? 0 : 0.8 * st->fs); /* baseline */
    for (int i = 0; i < a->n; i++) {
        const double x = xpos(a, b, a->at[i]);
        if (st->grid)
            fprintf(f, "<line x1=\"%.2f\" x2=\"%.2f\" y1=\"%.2f\" y2=\"%.2f\" stroke=\"#eee\"/>\n", x, x, b->y,
                    b->y + b->h);
        fprintf(f, "<line x1=\"%.2f\" x2=\"%.2f\" y1=\"%.2f\" y2=\"%.2f\" stroke=\"black\" stroke-width=\"0.8\"/>\n", x,
                x, edge, edge + dir * st->tick);
        text(f, x, ty, "middle", st->fs, a->label[i]);
    }
    const double ly = ty + dir * (st->labelpad + st->fs * 1.1) + (top ? 0.1 * st->fs : 0);
    if (a->offset[0]) text(f, b->x + b->w, ly, "end", st->fs, a->offset);
    if (label) text(f, b->x + b->w / 2, ly, "middle", st->fs, label);
}

/* The y axis on the frame's left: ticks, labels, the label turned upwards,
 * the offset text above the frame's top left corner. */
static void draw_yaxis(FILE *f, const svg_axis *a, const frame *b, const axes_style *st, const char *label) {
    for (int i = 0; i < a->n; i++) {
        const double y = ypos(a, b, a->at[i]);
        if (st->grid)
            fprintf(f, "<line x1=\"%.2f\" x2=\"%.2f\" y1=\"%.2f\" y2=\"%.2f\" stroke=\"#eee\"/>\n", b->x, b->x + b->w,
                    y, y);
        fprintf(f, "<line x1=\"%.2f\" x2=\"%.2f\" y1=\"%.2f\" y2=\"%.2f\" stroke=\"black\" stroke-width=\"0.8\"/>\n",
                b->x - st->tick, b->x, y, y);
        text(f, b->x - st->tick - st->pad, y + 0.35 * st->fs, "end", st->fs, a->label[i]);
    }
    if (a->offset[0]) text(f, b->x, b->y - 0.4 * st->fs, "start", st->fs, a->offset);
    if (label) {
        const double x = b->x - st->tick - st->pad - widest(a, st->fs) - st->labelpad - 0.25 * st->fs,
                     y = b->y + b->h / 2;
        fprintf(f, "<g transform=\"rotate(-90 %.2f %.2f)\">", x, y);
        text(f, x, y, "middle", st->fs, label);
        fputs("</g>\n", f);
    }
}

static void draw_frame(FILE *f, const frame *b, const char *stroke) {
    fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" stroke=\"%s\" stroke-width=\"0.8\"/>\n",
            b->x, b->y, b->w, b->h, stroke);
}

/* The line through (x[i], y[i]): broken where a point is not finite (as
 * matplotlib leaves a gap), a lone point drawn as a dot. style: the
 * stroke's attributes. */
static void draw_line(FILE *f, const svg_axis *ax, const svg_axis *ay, const frame *b, const double *x,
                      const double *y, int64_t n, const char *colour, const char *style) {
    int64_t i = 0;
    fprintf(f, "<path fill=\"none\" stroke=\"%s\" %s d=\"", colour, style);
    while (i < n) {
        if (!isfinite(x[i]) || !isfinite(y[i])) {
            i++;
            continue;
        }
        int64_t j = i;
        while (j < n && isfinite(x[j]) && isfinite(y[j])) j++;
        if (j - i > 1)
            for (int64_t k = i; k < j; k++)
                fprintf(f, "%s%.2f,%.2f ", k == i ? "M" : "L", xpos(ax, b, x[k]), ypos(ay, b, y[k]));
        i = j;
    }
    fputs("\"/>\n", f);
    for (i = 0; i < n; i++) { /* the lone points */
        const int here = isfinite(x[i]) && isfinite(y[i]);
        const int prev = i > 0 && isfinite(x[i - 1]) && isfinite(y[i - 1]);
        const int next = i + 1 < n && isfinite(x[i + 1]) && isfinite(y[i + 1]);
        if (here && !prev && !next)
            fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"2\" fill=\"%s\"/>\n", xpos(ax, b, x[i]), ypos(ay, b, y[i]),
                    colour);
    }
}

/* ---- the charts ------------------------------------------------------------ */

int svg_line_chart(const char *path, const char *title, const char *xlabel, const char *ylabel,
                   const float *y, int64_t n, int64_t x0, int64_t dx, double hline,
                   const char *hline_label) {
    if (n < 0) n = 0;
    double *xs = malloc((size_t)(n ? n : 1) * sizeof(double)), *ys = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!xs || !ys) {
        free(xs);
        free(ys);
        errno = ENOMEM;
        return -1;
    }
    for (int64_t i = 0; i < n; i++) xs[i] = (double)(x0 + i * dx), ys[i] = (double)y[i];
    const double W = 720, H = 420, R = 20, T = 40, B = 54;
    const axes_style st = {.fs = 11, .tick = 4, .pad = 3, .labelpad = 4, .grid = 1};
    frame b = {.y = T, .h = H - T - B};
    /* the y axis first: the frame's height is fixed, its labels' width
     * sets the left margin and so the x axis's length */
    double lo = INFINITY, hi = -INFINITY;
    svg_data_range(ys, xs, n, &lo, &hi);
    if (isfinite(hline)) lo = fmin(lo, hline), hi = fmax(hi, hline); /* axhline widens the view, as in matplotlib */
    svg_axis ay, ax;
    const svg_locator ly = {svg_auto_nbins(b.h, st.fs, 1), 0, 0};
    int ok = svg_axis_fit(&ay, lo, hi, &ly) == 0;
    b.x = 14 + 1.2 * st.fs + st.labelpad + widest(&ay, st.fs) + st.pad + st.tick;
    b.w = W - b.x - R;
    lo = INFINITY, hi = -INFINITY;
    svg_data_range(xs, ys, n, &lo, &hi);
    const svg_locator lx = {svg_auto_nbins(b.w, st.fs, 0), 0, 0};
    ok = ok && svg_axis_fit(&ax, lo, hi, &lx) == 0;
    char *tmp = NULL;
    FILE *f = ok ? open_tmp(path, &tmp) : NULL;
    if (!f) {
        free(xs);
        free(ys);
        if (!ok) errno = EDOM;
        return -1;
    }
    head(f, W, H);
    text(f, W / 2, 24, "middle", 16, title);
    draw_xaxis(f, &ax, &b, 0, &st, xlabel);
    draw_yaxis(f, &ay, &b, &st, ylabel);
    draw_frame(f, &b, "#888");
    if (isfinite(hline)) {
        const double py = ypos(&ay, &b, hline);
        fprintf(f, "<line x1=\"%.2f\" x2=\"%.2f\" y1=\"%.2f\" y2=\"%.2f\" stroke=\"#c33\" stroke-dasharray=\"6 4\"/>\n",
                b.x, b.x + b.w, py, py);
        if (hline_label) text(f, b.x + b.w - 4, py - 5, "end", 11, hline_label);
    }
    draw_line(f, &ax, &ay, &b, xs, ys, n, "#1f5fbf", "stroke-width=\"1.5\"");
    fputs("</svg>\n", f);
    free(xs);
    free(ys);
    return close_tmp(f, tmp, path);
}

/* The book's plot_losses (chapter 5): figsize=(5, 3) inches, laid out in
 * points (the viewBox) and shown at 2 px a point; matplotlib's default
 * 10 pt text, colours C0 and C1, 1.5 pt lines, "-." dashes. The bottom
 * axis has the book's MaxNLocator(integer=True), the top one (twiny) and
 * the y axis the default AutoLocator; each axis is fitted to its own data
 * with matplotlib's 5 % margins, so the first and last points line up on
 * both x axes, as in the book. */
int svg_loss_epochs(const char *path, const char *title, const double *epochs, const double *train,
                    const double *val, const double *tokens, int64_t n) {
    if (n < 0) n = 0;
    const axes_style st = {.fs = 10, .tick = 3.5, .pad = 3.5, .labelpad = 4, .grid = 0};
    const double pad = 1.08 * st.fs, lh = st.fs; /* tight_layout's pad, a line of text */
    const int titled = title && *title;
    const double th = titled ? 1.2 * 12 + 6 : 0, W = 360, H = 216 + th;
    const double edge = st.tick + st.pad + lh + st.labelpad + lh; /* ticks, their labels, the axis label */
    frame b = {.y = pad + th + edge};
    b.h = H - b.y - pad - edge;
    double lo = INFINITY, hi = -INFINITY;
    svg_data_range(train, epochs, n, &lo, &hi);
    svg_data_range(val, epochs, n, &lo, &hi);
    svg_data_range(train, tokens, n, &lo, &hi); /* the twin's invisible line shares y */
    svg_axis ay, ax, at;
    const svg_locator ly = {svg_auto_nbins(b.h, st.fs, 1), 0, 0};
    int ok = svg_axis_fit(&ay, lo, hi, &ly) == 0;
    b.x = pad + lh + st.labelpad + widest(&ay, st.fs) + st.pad + st.tick;
    double ex0 = INFINITY, ex1 = -INFINITY, tk0 = INFINITY, tk1 = -INFINITY;
    svg_data_range(epochs, train, n, &ex0, &ex1);
    svg_data_range(epochs, val, n, &ex0, &ex1);
    svg_data_range(tokens, train, n, &tk0, &tk1);
    const svg_locator lx = {10, 1, 1}; /* the book's MaxNLocator(integer=True) */
    ok = ok && svg_axis_fit(&ax, ex0, ex1, &lx) == 0;
    /* the frame to the right pad, less what the last labels would stick out */
    double right = pad;
    for (int pass = 0; ok && pass < 2; pass++) {
        b.w = W - b.x - right;
        const svg_locator lt = {svg_auto_nbins(b.w, st.fs, 0), 0, 0};
        ok = svg_axis_fit(&at, tk0, tk1, &lt) == 0;
        double out = 0;
        for (int k = 0; ok && k < 2; k++) {
            const svg_axis *a = k ? &at : &ax;
            if (a->n) out = fmax(out, xpos(a, &b, a->at[a->n - 1]) + text_width(a->label[a->n - 1], st.fs) / 2 - (b.x + b.w));
        }
        if (out <= right - pad) break;
        right = pad + out;
    }
    char *tmp = NULL;
    FILE *f = ok ? open_tmp(path, &tmp) : NULL;
    if (!f) {
        if (!ok) errno = EDOM;
        return -1;
    }
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
            "font-family=\"DejaVu Sans, sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            2 * W, 2 * H, W, H);
    if (titled) text(f, W / 2, pad + 12, "middle", 12, title);
    draw_xaxis(f, &ax, &b, 0, &st, "Epochs");
    draw_xaxis(f, &at, &b, 1, &st, "Tokens seen");
    draw_yaxis(f, &ay, &b, &st, "Loss");
    draw_line(f, &ax, &ay, &b, epochs, train, n, "#1f77b4", "stroke-width=\"1.5\" stroke-linejoin=\"round\"");
    draw_line(f, &ax, &ay, &b, epochs, val, n, "#ff7f0e",
              "stroke-width=\"1.5\" stroke-linejoin=\"round\" stroke-dasharray=\"9.6 2.4 1.5 2.4\"");
    draw_frame(f, &b, "black");
    /* the legend, upper right: matplotlib's paddings in font sizes */
    static const char *const names[2] = {"Training loss", "Validation loss"};
    const double bp = 0.4 * st.fs, hl = 2 * st.fs, hp = 0.8 * st.fs, rs = 0.5 * st.fs;
    const double lw = 2 * bp + hl + hp + fmax(text_width(names[0], st.fs), text_width(names[1], st.fs));
    const double lhh = 2 * bp + 2 * st.fs + rs, lx0 = b.x + b.w - 0.5 * st.fs - lw, ly0 = b.y + 0.5 * st.fs;
    fprintf(f,
            "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" rx=\"2\" fill=\"white\" fill-opacity=\"0.8\" "
            "stroke=\"#ccc\" stroke-width=\"0.8\"/>\n",
            lx0, ly0, lw, lhh);
    for (int k = 0; k < 2; k++) {
        const double yy = ly0 + bp + st.fs * (k + 0.5) + rs * k;
        fprintf(f, "<line x1=\"%.2f\" x2=\"%.2f\" y1=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" stroke-width=\"1.5\"%s/>\n",
                lx0 + bp, lx0 + bp + hl, yy, yy, k ? "#ff7f0e" : "#1f77b4",
                k ? " stroke-dasharray=\"9.6 2.4 1.5 2.4\"" : "");
        text(f, lx0 + bp + hl + hp, yy + 0.35 * st.fs, "start", st.fs, names[k]);
    }
    fputs("</svg>\n", f);
    return close_tmp(f, tmp, path);
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
    char *tmp = NULL;
    FILE *f = open_tmp(path, &tmp);
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
    return close_tmp(f, tmp, path);
}
