/* test_svg.c — the CLI's pictures (cli/svg.c): axis ticks, view limits and
 * labels against values matplotlib 3.6.3 gives (tables below, printed by
 * tests/svg_ticks_expected.py; matplotlib is not needed here), then the
 * files: the book's Figure 5.12 and the line chart of `mha train`, with
 * NaN and infinite points, one point, no finite point, and failed writes
 * that leave the old picture whole.
 *
 * test_svg [--write DIR]: with DIR the pictures are left there for
 * tests/svg_charts.py, which parses them as XML. */
#include "svg.h"
#include "test_util.h"

#include <errno.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    double vmin, vmax;
    svg_locator l;
    int n;
    double t[16];
} tick_case;

typedef struct {
    double dmin, dmax;
    svg_locator l;
    double lo, hi;
    const char *offset;
    int n;
    const char *label[16];
} axis_case;

/* ---- from tests/svg_ticks_expected.py (matplotlib 3.6.3) ---- */
static const tick_case TICKS[] = {
    {0.0, 1.0, {9, 0, 0}, 6, {0, 0.20000000000000001, 0.40000000000000002, 0.60000000000000009, 0.80000000000000004, 1}},
    {-0.0861, 10.4101, {6, 0, 0}, 8, {-2, 0, 2, 4, 6, 8, 10, 12}},
    {-0.5, 10.5, {10, 1, 1}, 8, {-2, 0, 2, 4, 6, 8, 10, 12}},
    {-1664.0, 46208.0, {9, 0, 0}, 7, {-10000, 0, 10000, 20000, 30000, 40000, 50000}},
    {0.195, 3.705, {9, 0, 0}, 9, {0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4}},
    {-74.0, 1575.0, {9, 0, 0}, 10, {-200, 0, 200, 400, 600, 800, 1000, 1200, 1400, 1600}},
    {1000000.0, 1000010.0, {9, 0, 0}, 6, {1000000, 1000002, 1000004, 1000006, 1000008, 1000010}},
    {123456.0, 123999.0, {5, 0, 0}, 4, {123400, 123600, 123800, 124000}},
    {1e-07, 3e-07, {9, 0, 0}, 9, {9.9999999999999995e-08, 1.2499999999999999e-07, 1.4999999999999999e-07, 1.7499999999999999e-07, 1.9999999999999999e-07, 2.2499999999999999e-07, 2.4999999999999999e-07, 2.7500000000000001e-07, 2.9999999999999999e-07}},
    {-3.0, 7.0, {3, 0, 0}, 4, {-5, 0, 5, 10}},
    {0.0, 0.0, {9, 0, 0}, 9, {-1e-13, -7.5000000000000009e-14, -5.0000000000000002e-14, -2.4999999999999994e-14, 0, 2.4999999999999994e-14, 5.0000000000000014e-14, 7.5000000000000009e-14, 1e-13}},
    {5.0, 5.0, {9, 1, 1}, 8, {4.9999999999994511, 4.9999999999996003, 4.9999999999997513, 4.9999999999999005, 5.0000000000000506, 5.0000000000002007, 5.0000000000003508, 5.0000000000005009}},
    {-0.05, 0.05, {10, 1, 1}, 11, {-0.049999999999999996, -0.039999999999999994, -0.029999999999999999, -0.019999999999999997, -0.009999999999999995, 0, 0.010000000000000009, 0.020000000000000004, 0.029999999999999999, 0.040000000000000008, 0.050000000000000003}},
    {2500000.0, 7500000.0, {7, 0, 1}, 8, {2400000, 3200000, 4000000, 4800000, 5600000, 6400000, 7200000, 8000000}},
    {-10000000.0, 20000000.0, {1, 0, 0}, 3, {-20000000, 0, 20000000}},
    {0.3, 0.7, {10, 1, 1}, 12, {0.28000000000000003, 0.32000000000000001, 0.36000000000000004, 0.40000000000000002, 0.44000000000000006, 0.48000000000000004, 0.52000000000000002, 0.56000000000000005, 0.60000000000000009, 0.64000000000000001, 0.68000000000000005, 0.71999999999999997}},
    {99.5, 100.5, {9, 1, 0}, 7, {99.400000000000006, 99.599999999999994, 99.799999999999997, 100, 100.2, 100.40000000000001, 100.59999999999999}},
    {-5.0, -1.0, {9, 0, 1}, 9, {-5, -4.5, -4, -3.5, -3, -2.5, -2, -1.5, -1}},
    {1.0, 1.0000001, {9, 0, 0}, 6, {1, 1.0000000200000001, 1.00000004, 1.0000000600000001, 1.00000008, 1.0000001000000001}},
    {0.0, 1e-300, {9, 0, 0}, 9, {-1e-13, -7.5000000000000009e-14, -5.0000000000000002e-14, -2.4999999999999994e-14, 0, 2.4999999999999994e-14, 5.0000000000000014e-14, 7.5000000000000009e-14, 1e-13}},
};
static const axis_case AXES[] = {
    {0.391, 9.933, {6, 0, 0}, -0.08610000000000001, 10.4101, "", 6, {"0", "2", "4", "6", "8", "10"}},
    {0.0, 10.0, {10, 1, 1}, -0.5, 10.5, "", 6, {"0", "2", "4", "6", "8", "10"}},
    {512.0, 44032.0, {9, 0, 0}, -1664, 46208, "", 5, {"0", "10000", "20000", "30000", "40000"}},
    {0.47, 3.69, {9, 0, 0}, 0.30899999999999994, 3.851, "", 7, {"0.5", "1.0", "1.5", "2.0", "2.5", "3.0", "3.5"}},
    {1.0, 300.0, {9, 0, 0}, -13.950000000000001, 314.94999999999999, "", 7, {"0", "50", "100", "150", "200", "250", "300"}},
    {1.0, 1500.0, {9, 0, 0}, -73.950000000000003, 1574.95, "", 8, {"0", "200", "400", "600", "800", "1000", "1200", "1400"}},
    {0.0, 0.0, {10, 1, 1}, -0.055000000000000007, 0.055000000000000007, "", 7, {"\xe2\x88\x92" "0.045", "\xe2\x88\x92" "0.030", "\xe2\x88\x92" "0.015", "0.000", "0.015", "0.030", "0.045"}},
    {2.0, 2.0, {9, 0, 0}, 1.8899999999999999, 2.1100000000000003, "", 9, {"1.900", "1.925", "1.950", "1.975", "2.000", "2.025", "2.050", "2.075", "2.100"}},
    {-3.25, 7.5, {9, 0, 0}, -3.7875000000000001, 8.0374999999999996, "", 6, {"\xe2\x88\x92" "2", "0", "2", "4", "6", "8"}},
    {1000000.0, 1000010.0, {9, 0, 0}, 999999.5, 1000010.5, "+1e6", 6, {"0", "2", "4", "6", "8", "10"}},
    {123456.0, 123999.0, {9, 0, 0}, 123428.85000000001, 124026.14999999999, "", 6, {"123500", "123600", "123700", "123800", "123900", "124000"}},
    {1e-06, 4e-06, {9, 0, 0}, 8.4999999999999991e-07, 4.1500000000000001e-06, "1e\xe2\x88\x92" "6", 7, {"1.0", "1.5", "2.0", "2.5", "3.0", "3.5", "4.0"}},
    {3000000.0, 90000000.0, {9, 0, 0}, -1350000, 94350000, "1e7", 5, {"0", "2", "4", "6", "8"}},
    {-200000.0, -199000.0, {5, 0, 0}, -200050, -198950, "", 5, {"\xe2\x88\x92" "200000", "\xe2\x88\x92" "199750", "\xe2\x88\x92" "199500", "\xe2\x88\x92" "199250", "\xe2\x88\x92" "199000"}},
    {0.25, 0.2500004, {9, 0, 0}, 0.24999998000000001, 0.25000042, "1e\xe2\x88\x92" "7+2.5e\xe2\x88\x92" "1", 9, {"0.0", "0.5", "1.0", "1.5", "2.0", "2.5", "3.0", "3.5", "4.0"}},
    {1.0, 0.0, {9, 0, 0}, -0.055000000000000007, 0.055000000000000007, "", 5, {"\xe2\x88\x92" "0.04", "\xe2\x88\x92" "0.02", "0.00", "0.02", "0.04"}},
};

/* the book's chapter 5 log (book-reference.md): 18 evaluations, every 5
 * steps of 2 x 256 tokens */
static const double BOOK_TRAIN[18] = {9.781, 8.111, 6.661, 5.961, 5.726, 5.201, 4.417, 4.069, 3.732,
                                      2.850, 2.427, 2.104, 1.882, 1.320, 0.985, 0.717, 0.541, 0.391};
static const double BOOK_VAL[18] = {9.933, 8.339, 7.048, 6.616, 6.600, 6.348, 6.278, 6.226, 6.160,
                                    6.179, 6.141, 6.134, 6.233, 6.238, 6.242, 6.293, 6.393, 6.452};

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = malloc(1 << 20);
    const size_t n = s ? fread(s, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (s) s[n] = 0;
    return s;
}

static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* s has ">label<" (a text element's whole content) */
static int has_text(const char *s, const char *label) {
    char k[96];
    snprintf(k, sizeof k, ">%s<", label);
    return strstr(s, k) != NULL;
}

/* no "nan" or "inf" anywhere: a non-finite coordinate would break the SVG */
static int finite_only(const char *s) {
    for (const char *p = s; *p; p++)
        if (!strncasecmp(p, "nan", 3) || !strncasecmp(p, "inf", 3)) return 0;
    return 1;
}

static void test_ticks(void) {
    for (size_t c = 0; c < sizeof TICKS / sizeof *TICKS; c++) {
        const tick_case *k = &TICKS[c];
        double t[32];
        const int n = svg_tick_values(&k->l, k->vmin, k->vmax, t, 32);
        int same = n == k->n;
        for (int i = 0; same && i < n; i++) same = t[i] == k->t[i];
        CHECK(same, "tick_values(%.17g, %.17g) nbins %d integer %d fine %d: %d ticks, first %.17g", k->vmin,
              k->vmax, k->l.nbins, k->l.integer, k->l.fine, n, n > 0 ? t[0] : (double)NAN);
    }
    double t[2];
    const svg_locator l = {9, 0, 0};
    CHECK(svg_tick_values(&l, 0, 1, t, 2) == -1, "six ticks into room for two");
}

static void test_axes(void) {
    for (size_t c = 0; c < sizeof AXES / sizeof *AXES; c++) {
        const axis_case *k = &AXES[c];
        svg_axis a;
        const int r = svg_axis_fit(&a, k->dmin, k->dmax, &k->l);
        int same = r == 0 && a.lo == k->lo && a.hi == k->hi && a.n == k->n && !strcmp(a.offset, k->offset);
        for (int i = 0; same && i < a.n; i++) same = !strcmp(a.label[i], k->label[i]);
        CHECK(same, "axis over [%.17g, %.17g]: view [%.17g, %.17g] want [%.17g, %.17g], %d labels (%s ... %s) want %d, "
              "offset '%s' want '%s'", k->dmin, k->dmax, a.lo, a.hi, k->lo, k->hi, a.n, a.n ? a.label[0] : "",
              a.n ? a.label[a.n - 1] : "", k->n, a.offset, k->offset);
    }
    svg_axis a;
    const svg_locator l9 = {9, 0, 0};
    CHECK(svg_axis_fit(&a, -1e308, 1e308, &l9) == -1 && a.n == 0, "a range beyond DBL_MAX was drawn");
    /* a line's data limits: points with both coordinates finite */
    const double x[] = {1, 2, NAN, 4, 5, INFINITY}, y[] = {0, NAN, 3, 3, -INFINITY, 1};
    double lo = INFINITY, hi = -INFINITY;
    svg_data_range(x, y, 6, &lo, &hi);
    CHECK(lo == 1 && hi == 4, "data range of (x, y) %g %g, want 1 4", lo, hi);
    lo = INFINITY, hi = -INFINITY;
    svg_data_range(x, NULL, 6, &lo, &hi);
    CHECK(lo == 1 && hi == 5, "data range of x %g %g, want 1 5", lo, hi);
}

/* Axis.get_tick_space: matplotlib's default 6.4 x 4.8 in figure (axes
 * 357.12 x 266.112 pt) has 11 and 13, clipped to 9; the book's 5 x 3 in
 * after tight_layout (axes about 304.6 x 134.2 pt) 10 (9) and 6 */
static void test_nbins(void) {
    CHECK(svg_auto_nbins(357.12, 10, 0) == 9, "default figure x");
    CHECK(svg_auto_nbins(266.112, 10, 1) == 9, "default figure y");
    CHECK(svg_auto_nbins(304.6, 10, 0) == 9, "book figure x");
    CHECK(svg_auto_nbins(134.2, 10, 1) == 6, "book figure y");
    CHECK(svg_auto_nbins(100, 10, 0) == 3 && svg_auto_nbins(100, 10, 1) == 5, "100 pt");
    CHECK(svg_auto_nbins(5, 10, 0) == 1 && svg_auto_nbins(10, 0, 1) == 9, "clipped to 1 ... 9");
}

static void test_files(const char *dir) {
    char p[4096], q[4200];
    double ep[18], tok[18];
    for (int i = 0; i < 18; i++) ep[i] = (double)i * 10 / 17, tok[i] = (5.0 * i + 1) * 512; /* linspace(0, 10, 18) */

    /* the book's figure: its ticks, legend, axis labels */
    snprintf(p, sizeof p, "%s/book.svg", dir);
    REQUIRE(svg_loss_epochs(p, NULL, ep, BOOK_TRAIN, BOOK_VAL, tok, 18) == 0, "%s: %s", p, strerror(errno));
    snprintf(q, sizeof q, "%s.tmp", p);
    CHECK(!exists(q), "%s left behind", q);
    char *s = slurp(p);
    REQUIRE(s, "cannot read %s", p);
    static const char *const want[] = {"Training loss", "Validation loss", "Epochs", "Tokens seen", "Loss", "0", "2",
                                       "4", "6", "8", "10", "10000", "20000", "30000", "40000"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) CHECK(has_text(s, want[i]), "book.svg: no label %s", want[i]);
    CHECK(!has_text(s, "12") && !has_text(s, "50000") && !has_text(s, "0.0"), "book.svg: a tick outside the view");
    CHECK(strstr(s, "stroke-dasharray") != NULL, "book.svg: no dash-dotted line");
    CHECK(finite_only(s) && strstr(s, "</svg>") != NULL, "book.svg: not finite or cut");
    free(s);

    /* with a title; a second write replaces the first */
    REQUIRE(svg_loss_epochs(p, "mha train GPTModel <the-verdict.txt> & co", ep, BOOK_TRAIN, BOOK_VAL, tok, 18) == 0,
            "%s", p);
    s = slurp(p);
    CHECK(s && strstr(s, ">mha train GPTModel &lt;the-verdict.txt&gt; &amp; co<"), "book.svg: the title, escaped");
    free(s);

    /* NaN and infinite points are skipped: gaps, no broken numbers */
    double tr[18], va[18], tk[18];
    memcpy(tr, BOOK_TRAIN, sizeof tr);
    memcpy(va, BOOK_VAL, sizeof va);
    memcpy(tk, tok, sizeof tk);
    tr[3] = NAN, tr[17] = INFINITY, va[0] = -INFINITY, va[9] = NAN, tk[5] = NAN, tk[17] = INFINITY;
    snprintf(p, sizeof p, "%s/nan.svg", dir);
    REQUIRE(svg_loss_epochs(p, "with gaps", ep, tr, va, tk, 18) == 0, "%s", p);
    s = slurp(p);
    CHECK(s && finite_only(s) && has_text(s, "Training loss") && has_text(s, "40000"), "nan.svg");
    free(s);

    /* one evaluation: points, not lines */
    snprintf(p, sizeof p, "%s/one.svg", dir);
    const double e0 = 0, t0 = 9.781, v0 = 9.933, k0 = 512;
    REQUIRE(svg_loss_epochs(p, NULL, &e0, &t0, &v0, &k0, 1) == 0, "%s", p);
    s = slurp(p);
    CHECK(s && strstr(s, "<circle") && finite_only(s), "one.svg: no points");
    free(s);

    /* nothing finite: matplotlib's empty axes, still a picture */
    const double nn[2] = {NAN, NAN};
    snprintf(p, sizeof p, "%s/empty.svg", dir);
    REQUIRE(svg_loss_epochs(p, NULL, ep, nn, nn, tok, 2) == 0, "%s", p);
    s = slurp(p);
    CHECK(s && finite_only(s) && has_text(s, "Epochs"), "empty.svg");
    free(s);

    /* mha train's chart: a loss from 3.69 to 0.47 over steps 1 ... 300, the
     * chance line at ln 16; round ticks (steps 50, loss 0.5) */
    float y[300];
    for (int i = 0; i < 300; i++) y[i] = (float)(0.47 + 3.22 * exp(-i / 60.0));
    y[100] = NAN;
    snprintf(p, sizeof p, "%s/line.svg", dir);
    REQUIRE(svg_line_chart(p, "loss", "step", "cross-entropy (nats)", y, 300, 1, 1, log(16.0), "ln 16") == 0, "%s", p);
    s = slurp(p);
    REQUIRE(s, "cannot read %s", p);
    static const char *const lw[] = {"0", "50", "100", "150", "200", "250", "300", "0.5", "1.0", "1.5",
                                     "2.0", "2.5", "3.0", "3.5", "step", "cross-entropy (nats)", "ln 16"};
    for (size_t i = 0; i < sizeof lw / sizeof *lw; i++) CHECK(has_text(s, lw[i]), "line.svg: no label %s", lw[i]);
    CHECK(!has_text(s, "4.0") && finite_only(s), "line.svg");
    free(s);

    /* failures: -1 with errno, the old picture whole, no .tmp */
    snprintf(p, sizeof p, "%s/missing/x.svg", dir);
    errno = 0;
    CHECK(svg_loss_epochs(p, NULL, ep, BOOK_TRAIN, BOOK_VAL, tok, 18) == -1 && errno == ENOENT,
          "a missing directory: errno %d", errno);
    CHECK(svg_line_chart(p, "t", "x", "y", y, 300, 1, 1, NAN, NULL) == -1, "line chart in a missing directory");
    snprintf(p, sizeof p, "%s/book.svg", dir);
    char *before = slurp(p);
    snprintf(q, sizeof q, "%s/book.svg.tmp", dir);
    REQUIRE(mkdir(q, 0755) == 0, "mkdir %s", q); /* the temporary file cannot be made */
    CHECK(svg_loss_epochs(p, NULL, ep, tr, va, tk, 18) == -1, "writing over a directory .tmp succeeded");
    CHECK(svg_line_chart(p, "t", "x", "y", y, 300, 1, 1, NAN, NULL) == -1, "line chart over a directory .tmp");
    const float w[4] = {1, 0, 0.5f, 0.5f};
    CHECK(svg_heatmaps(p, "t", w, 1, 2, 2, NULL) == -1, "heat maps over a directory .tmp");
    char *after = slurp(p);
    CHECK(before && after && !strcmp(before, after), "a failed write changed book.svg");
    free(before);
    free(after);
    rmdir(q);
}

int main(int argc, char **argv) {
    test_ticks();
    test_axes();
    test_nbins();
    char tmpl[] = "/tmp/mha_svg_XXXXXX";
    const char *dir = argc == 3 && !strcmp(argv[1], "--write") ? argv[2] : mkdtemp(tmpl);
    REQUIRE(dir, "no temporary directory");
    test_files(dir);
    if (dir == tmpl) { /* ours: cleared */
        static const char *const names[] = {"book.svg", "nan.svg", "one.svg", "empty.svg", "line.svg"};
        char p[64];
        for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
            snprintf(p, sizeof p, "%s/%s", tmpl, names[i]);
            unlink(p);
        }
        rmdir(tmpl);
    }
    return TEST_END("test_svg");
}
