"""`mha trace --svg` in a real browser: the picture of the book's example
(each head's attention weights after the causal mask and the softmax) is
well-formed, self-contained SVG naming the six tokens, both heads and its
colour scale, and headless Chromium renders it to a PNG that is not blank:
enough non-white pixels, the heat map's blue among them, on a canvas of the
SVG's size.

Without Chromium (scripts/deps.sh --test installs Debian's `chromium`) it
checks the SVG's content only and then skips (77), or fails under CI
(tests/oracle.py).
"""
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle  # noqa: E402
import st  # noqa: E402

TOKENS = ["Your", "journey", "starts", "with", "one", "step"]
SVG = "{http://www.w3.org/2000/svg}"


def png_pixels(path):
    """(width, height, channels, rows): rows is a list of bytes objects, one
    per row, from an 8-bit non-interlaced grey/RGB/RGBA PNG (what Chromium
    writes), with the filters undone. A minimal decoder: zlib only."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    w, h, depth, ctype, _, _, interlace = ihdr
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(ctype)
    if depth != 8 or channels is None or interlace:
        raise ValueError("unsupported PNG: depth %d, colour type %d, interlace %d" % (depth, ctype, interlace))
    raw = zlib.decompress(idat)
    stride, bpp, rows, prev = w * channels, channels, [], bytearray(w * channels)
    for y in range(h):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 255
            elif ftype == 2:
                line[i] = (line[i] + b) & 255
            elif ftype == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, channels, rows


CHROMIUMS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium():
    for name in CHROMIUMS:
        p = shutil.which(name)
        if p:
            return p
    return None


def main():
    fails = []

    def check(cond, msg):
        if not cond:
            fails.append(msg)
            print("FAIL " + msg)

    binary = st.find_bin(None)
    browser = find_chromium()
    with tempfile.TemporaryDirectory(prefix="mha_svg_") as tmp:
        svg = os.path.join(tmp, "attention.svg")
        p = subprocess.run([binary, "trace", "--svg", svg], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=120)
        check(p.returncode == 0, "mha trace --svg: exit %d: %s" % (p.returncode, p.stderr.decode()))
        check(("wrote %s" % svg) in p.stdout.decode(), "mha trace --svg does not say it wrote the file")
        root = ET.parse(svg).getroot()
        texts = [t.text or "" for t in root.iter(SVG + "text")]
        check(root.tag == SVG + "svg", "root element %s" % root.tag)
        for tok in TOKENS:
            check(texts.count(tok) == 3, "token %r labelled %d times, want 3 (queries once, keys under 2 heads)"
                  % (tok, texts.count(tok)))
        check("head 0" in texts and "head 1" in texts, "head names missing: %s" % texts[:4])
        check("0.00" in texts and "1.00" in texts and root.find(".//" + SVG + "linearGradient") is not None,
              "no colour scale")
        # the book's first query attends only to itself: weight 1.00 in each head
        check(texts.count("1.00") >= 3, "the first row's weight 1.00 is not written in the cells")
        text = open(svg, encoding="utf-8").read()
        check(not re.search(r"(href|src)\s*=\s*\"(?!#)", text), "the SVG refers to something outside itself")
        width, height = (int(v) for v in (root.get("width"), root.get("height")))

        if browser is None:
            print("the SVG's content checked; no browser to render it")
            status = oracle.missing("svg_browser", "no Chromium to render the SVG (none of %s on the PATH)"
                                    % ", ".join(CHROMIUMS))
            return 1 if fails else status
        png = os.path.join(tmp, "attention.png")
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--no-first-run", "--user-data-dir=" + os.path.join(tmp, "profile"),
               "--screenshot=" + png, "--window-size=%d,%d" % (width, height), "file://" + svg]
        env = dict(os.environ, HOME=tmp)
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=180, env=env)
        if not os.path.exists(png):
            check(False, "chromium wrote no screenshot (exit %d): %s" % (p.returncode, p.stderr.decode()[-2000:]))
        else:
            w, h, ch, rows = png_pixels(png)
            check((w, h) == (width, height), "screenshot %dx%d, SVG %dx%d" % (w, h, width, height))
            nonwhite = blue = 0
            for row in rows:
                for i in range(0, w * ch, ch):
                    r, g, b = (row[i], row[i + 1], row[i + 2]) if ch >= 3 else (row[i],) * 3
                    if r < 245 or g < 245 or b < 245:
                        nonwhite += 1
                    if b > r + 60 and b > 120:
                        blue += 1
            print("screenshot %dx%d: %.1f%% non-white pixels, %.1f%% blue"
                  % (w, h, 100.0 * nonwhite / (w * h), 100.0 * blue / (w * h)))
            check(nonwhite > 0.10 * w * h, "the screenshot is (nearly) blank")
            check(blue > 0.01 * w * h, "no heat map colours in the screenshot")
    print("%s" % ("FAILED" if fails else "ok"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
