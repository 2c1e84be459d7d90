"""Prints the expected values of tests/test_svg.c from matplotlib (not run
by ctest: matplotlib is not needed to test). Run with a matplotlib at hand
(Debian's python3-matplotlib, 3.6.3 when the tables were made):

    /usr/bin/python3 tests/svg_ticks_expected.py > /tmp/tables.h

and paste the two tables into test_svg.c. TICKS: MaxNLocator(nbins, steps
= AutoLocator's or the default, integer).tick_values(vmin, vmax). AXES: a
line over x in [dmin, dmax] (none when dmin > dmax) with that locator on
the x axis: the view limits autoscaling gives, the drawn ticks' labels
and the offset text.
"""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

# (vmin, vmax, nbins, integer, fine)
TICKS = [
    (0.0, 1.0, 9, 0, 0), (-0.0861, 10.4101, 6, 0, 0), (-0.5, 10.5, 10, 1, 1), (-1664.0, 46208.0, 9, 0, 0),
    (0.195, 3.705, 9, 0, 0), (-74.0, 1575.0, 9, 0, 0), (1e6, 1e6 + 10, 9, 0, 0), (123456.0, 123999.0, 5, 0, 0),
    (1e-7, 3e-7, 9, 0, 0), (-3.0, 7.0, 3, 0, 0), (0.0, 0.0, 9, 0, 0), (5.0, 5.0, 9, 1, 1),
    (-0.05, 0.05, 10, 1, 1), (2.5e6, 7.5e6, 7, 0, 1), (-1e7, 2e7, 1, 0, 0), (0.3, 0.7, 10, 1, 1),
    (99.5, 100.5, 9, 1, 0), (-5.0, -1.0, 9, 0, 1), (1.0, 1.0000001, 9, 0, 0), (0.0, 1e-300, 9, 0, 0),
]
# (dmin, dmax, nbins, integer, fine)
AXES = [
    (0.391, 9.933, 6, 0, 0), (0.0, 10.0, 10, 1, 1), (512.0, 44032.0, 9, 0, 0), (0.47, 3.69, 9, 0, 0),
    (1.0, 300.0, 9, 0, 0), (1.0, 1500.0, 9, 0, 0), (0.0, 0.0, 10, 1, 1), (2.0, 2.0, 9, 0, 0),
    (-3.25, 7.5, 9, 0, 0), (1e6, 1e6 + 10, 9, 0, 0), (123456.0, 123999.0, 9, 0, 0), (1e-6, 4e-6, 9, 0, 0),
    (3e6, 9e7, 9, 0, 0), (-2e5, -1.99e5, 5, 0, 0), (0.25, 0.2500004, 9, 0, 0), (1.0, 0.0, 9, 0, 0),
]


def loc(nbins, integer, fine):
    return MaxNLocator(nbins=nbins, steps=None if fine else [1, 2, 2.5, 5, 10], integer=bool(integer))


def cstr(s):
    # U+2212 as UTF-8, the string broken after it: a C hex escape would
    # swallow the digit that follows
    return '"' + s.replace("\u2212", '\\xe2\\x88\\x92" "') + '"'


print("static const tick_case TICKS[] = {")
for vmin, vmax, nb, integer, fine in TICKS:
    t = loc(nb, integer, fine).tick_values(vmin, vmax)
    print("    {%r, %r, {%d, %d, %d}, %d, {%s}}," % (vmin, vmax, nb, integer, fine, len(t),
                                                 ", ".join("%.17g" % v for v in t)))
print("};")
print("static const axis_case AXES[] = {")
for dmin, dmax, nb, integer, fine in AXES:
    fig, ax = plt.subplots()
    ax.plot([dmin, dmax] if dmin <= dmax else [], [0, 1] if dmin <= dmax else [])
    ax.xaxis.set_major_locator(loc(nb, integer, fine))
    fig.canvas.draw()
    lo, hi = ax.get_xlim()
    labels = [t.label1.get_text() for t in ax.xaxis._update_ticks()]
    off = ax.xaxis.get_major_formatter().get_offset()
    print("    {%r, %r, {%d, %d, %d}, %.17g, %.17g, %s, %d, {%s}}," % (
        dmin, dmax, nb, integer, fine, lo, hi, cstr(off), len(labels), ", ".join(cstr(s) for s in labels)))
    plt.close(fig)
print("};")
