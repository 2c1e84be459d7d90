"""The CLI's charts as XML (plain Python, no matplotlib): the pictures
test_svg writes (its first argument; `test_svg --write DIR`) and the
loss.svg of a short `mha train` parse as SVG, every number in them is
finite, and their axes carry matplotlib's ticks where matplotlib puts
them:

  1. book.svg, the book's Figure 5.12 on its chapter 5 log: Epochs 0-10
     by 2 at the bottom, Tokens seen 0-40000 by 10000 on top, Loss 0-10 by
     2; each tick at its value's place in matplotlib's view limits
     (epochs [-0.5, 10.5], tokens [-1664, 46208], loss [-0.0861, 10.4101]),
     the two lines' first points at epoch 0, the legend's two entries;
  2. the other pictures (NaN points, one point, none, the line chart);
  3. `mha train --steps 60`'s loss.svg: round, evenly spaced tick values
     (a step of 1, 2, 2.5 or 5 times a power of ten), one number of
     decimals per axis.
"""
import math
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"
tally = st.Tally()
check = tally.check


def parse(path):
    """(root, texts, frame): texts as (x, y, anchor, string, rotated) with
    x, y in the picture's units; frame (x, y, w, h), the unfilled rect
    with the thinner stroke drawn last before the legend (the axes)."""
    root = ET.parse(path).getroot()
    check(root.tag == SVG + "svg", "%s: root %s" % (path, root.tag))
    texts = []
    for g in root.iter():
        for t in g.findall(SVG + "text"):
            texts.append((float(t.get("x")), float(t.get("y")), t.get("text-anchor"), t.text or "",
                          g.tag == SVG + "g"))
    frames = [r for r in root.iter(SVG + "rect") if r.get("fill") == "none"]
    fr = frames[-1] if frames else None
    frame = tuple(float(fr.get(k)) for k in ("x", "y", "width", "height")) if fr is not None else None
    return root, texts, frame


def numbers_finite(path):
    with open(path, encoding="utf-8") as f:
        s = f.read()
    check(not re.search(r"nan|inf", s, re.I), "%s: a non-finite number" % path)
    check(s.rstrip().endswith("</svg>"), "%s: cut short" % path)


def axis_labels(texts, frame):
    """The tick labels below, above and left of the frame, in drawing order."""
    x, y, w, h = frame
    bottom = [t for t in texts if t[2] == "middle" and not t[4] and y + h < t[1] < y + h + 20]
    top = [t for t in texts if t[2] == "middle" and not t[4] and y - 14 < t[1] < y]
    left = [t for t in texts if t[2] == "end" and not t[4] and x - 40 < t[0] < x]
    return bottom, top, left


def near(a, b, tol=0.06):  # labels are placed to 0.1
    return abs(a - b) <= tol


def check_book(path):
    root, texts, frame = parse(path)
    numbers_finite(path)
    if frame is None:
        check(False, "%s: no axes frame" % path)
        return
    x, y, w, h = frame
    bottom, top, left = axis_labels(texts, frame)
    want = [("bottom", bottom, ["0", "2", "4", "6", "8", "10"], (-0.5, 10.5)),
            ("top", top, ["0", "10000", "20000", "30000", "40000"], (-1664.0, 46208.0))]
    for name, got, labels, (lo, hi) in want:
        check([t[3] for t in got] == labels, "book.svg %s labels %s, want %s" % (name, [t[3] for t in got], labels))
        for t in got:
            if t[3] in labels:
                px = x + (float(t[3]) - lo) / (hi - lo) * w
                check(near(t[0], px), "book.svg %s tick %s at x %.2f, matplotlib's place %.2f" % (name, t[3], t[0], px))
    ylabels = [t[3] for t in sorted(left, key=lambda t: -t[1])]
    check(ylabels == ["0", "2", "4", "6", "8", "10"], "book.svg y labels %s" % ylabels)
    lo, hi = -0.0861, 10.4101
    for t in left:
        py = y + h - (float(t[3]) - lo) / (hi - lo) * h
        check(abs(t[1] - 3.5 - py) < 0.06, "book.svg y tick %s at %.2f, want %.2f" % (t[3], t[1] - 3.5, py))
    strings = [t[3] for t in texts]
    for s in ("Epochs", "Tokens seen", "Loss", "Training loss", "Validation loss"):
        check(s in strings, "book.svg: no %r" % s)
    check(any(t[3] == "Loss" and t[4] for t in texts), "book.svg: Loss not turned upwards")
    paths = [p for p in root.iter(SVG + "path") if p.get("d")]
    check(len(paths) == 2, "book.svg: %d lines, want 2" % len(paths))
    x0 = x + (0 - (-0.5)) / 11.0 * w  # epoch 0
    for p in paths:
        first = re.match(r"M([-0-9.]+),", p.get("d"))
        check(first and near(float(first.group(1)), x0), "book.svg: a line starts at %s, epoch 0 is at %.2f"
              % (first.group(1) if first else "?", x0))
    dashed = [p for p in paths if p.get("stroke-dasharray")]
    check(len(dashed) == 1, "book.svg: %d dash-dotted lines, want 1 (validation)" % len(dashed))


def round_step(vals):
    """True when vals are evenly spaced by 1, 2, 2.5 or 5 x 10^k."""
    if len(vals) < 2:
        return False
    d = [b - a for a, b in zip(vals, vals[1:])]
    step = d[0]
    if step <= 0 or any(abs(e - step) > 1e-9 * max(1.0, abs(step)) for e in d):
        return False
    m = step / 10 ** math.floor(math.log10(step))
    return any(abs(m - s) < 1e-9 for s in (1, 2, 2.5, 5))


def check_train(binary, tmp):
    out = os.path.join(tmp, "train")
    p = subprocess.run([binary, "train", "--steps", "60", "--out", out, "--threads", "1"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    check(p.returncode == 0, "mha train: %s" % p.stderr.decode())
    path = os.path.join(out, "loss.svg")
    if not os.path.exists(path):
        check(False, "no %s" % path)
        return
    check(not os.path.exists(path + ".tmp"), "loss.svg.tmp left behind")
    _, texts, frame = parse(path)
    numbers_finite(path)
    bottom, _, left = axis_labels(texts, frame)
    xs, ys = [t[3] for t in bottom], [t[3] for t in sorted(left, key=lambda t: -t[1])]
    print("mha train loss.svg: x %s, y %s" % (" ".join(xs), " ".join(ys)))
    check(xs and round_step([float(v) for v in xs]) and all(re.fullmatch(r"\d+", v) for v in xs),
          "loss.svg x labels not round: %s" % xs)
    decimals = {len(v.split(".")[1]) if "." in v else 0 for v in ys}
    check(ys and round_step([float(v.replace("\u2212", "-")) for v in ys]) and len(decimals) == 1,
          "loss.svg y labels not round or mixed decimals: %s" % ys)


def main():
    if len(sys.argv) != 2:
        print("usage: svg_charts.py TEST_SVG")
        return 2
    binary = st.find_bin(None)
    with tempfile.TemporaryDirectory(prefix="mha_svg_charts_") as tmp:
        p = subprocess.run([sys.argv[1], "--write", tmp], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=120)
        check(p.returncode == 0, "test_svg --write: %s" % p.stdout.decode())
        check_book(os.path.join(tmp, "book.svg"))
        for f in ("nan.svg", "one.svg", "empty.svg", "line.svg"):
            parse(os.path.join(tmp, f))
            numbers_finite(os.path.join(tmp, f))
        check(binary is not None, "no mha binary (MHA_BIN)")
        if binary:
            check_train(binary, tmp)
    print("svg_charts: %s" % ("ok" if not tally.fails else "%d failed" % tally.fails))
    return tally.status()


if __name__ == "__main__":
    sys.exit(main())
