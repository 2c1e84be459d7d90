"""Error behaviour of the `mha` CLI.

Every invalid invocation must exit with status 1, print exactly one
non-empty line on stderr that names the problem (a keyword is checked),
print nothing on stdout and create no output file. `--help` on every command
and `--version` must exit 0 and print to stdout.

Usage: cli_errors.py [--bin PATH] [-v]   (binary: $MHA_BIN, else --bin,
else ../build*/mha). Run with Debian's /usr/bin/python3.
"""
import argparse
import json
import os
import random
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402
import book_modules as bm  # noqa: E402

# Keyword patterns (regular expressions, case-insensitive).
CORRUPT = (r"corrupt|invalid|truncat|header|offset|json|format|utf|trailing|overlap|gap|"
           r"size|length|range|bytes|dtype|shape|safetensors|parse|short|end of file|eof")
MISSING_FILE = r"no such file|nonexistent|not found|cannot open|can't open|could not open|open"
SHAPE = r"shape|dim|rank|axes|axis|\d-?d\b"
NONFINITE = r"nan|finite|inf"




class Suite:
    def __init__(self, binary, tmp, verbose):
        self.bin = binary
        self.tmp = tmp
        self.verbose = verbose
        self.passed = 0
        self.failed = 0
        self.n = 0
        self.dups = []  # (case, message) whose message repeats a "path: " prefix

    def path(self, name):
        return os.path.join(self.tmp, name)

    def out(self):
        """A fresh output path that must not exist after an error."""
        self.n += 1
        return self.path("out_%03d.safetensors" % self.n)

    def _run(self, args):
        p = subprocess.run([self.bin] + args, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
        return (p.returncode, p.stdout.decode("utf-8", "replace"),
                p.stderr.decode("utf-8", "replace"))

    def _report(self, name, args, probs, rc, so, se):
        if probs:
            self.failed += 1
            print("FAIL %s\n    cmd: mha %s\n    %s\n    exit %d, stdout %r, stderr %r" % (
                name, " ".join(args), "; ".join(probs), rc, so[:300], se[:300]))
        else:
            self.passed += 1
            if self.verbose:
                print("ok   %-45s %s" % (name, se.strip() or so.strip()[:60]))

    def error(self, name, args, pattern, out=None):
        """args must fail: exit 1, one non-empty stderr line matching
        pattern, empty stdout, `out` (if given) not created."""
        rc, so, se = self._run(args)
        probs = []
        if rc != 1:
            probs.append("exit status %d, want 1" % rc)
        if so:
            probs.append("stdout not empty")
        text = se[:-1] if se.endswith("\n") else se
        lines = text.split("\n")
        if len(lines) != 1 or not lines[0].strip():
            probs.append("stderr has %d lines, want exactly one non-empty line" % (
                len(lines) if text else 0))
        else:
            if not re.search(pattern, lines[0], re.IGNORECASE):
                probs.append("stderr does not name the problem (want /%s/)" % pattern)
            dup = re.search(r"(\S+): \1: ", lines[0])
            if dup:  # counted once for the whole run, see main()
                self.dups.append((name, lines[0]))
        if out is not None and os.path.exists(out):
            probs.append("output file %s was created" % out)
            os.unlink(out)
        self._report(name, args, probs, rc, so, se)

    def ok(self, name, args, stdout_pattern=None, out=None):
        """args must succeed (controls, --help, --version)."""
        rc, so, se = self._run(args)
        probs = []
        if rc != 0:
            probs.append("exit status %d, want 0" % rc)
        if out is None and not so.strip():
            probs.append("nothing on stdout")
        if out is None and se:
            probs.append("stderr not empty")
        if stdout_pattern and not re.search(stdout_pattern, so, re.IGNORECASE):
            probs.append("stdout does not match /%s/" % stdout_pattern)
        if out is not None and not os.path.exists(out):
            probs.append("output file not created")
        self._report(name, args, probs, rc, so, se)

    # ---- file helpers -----------------------------------------------------

    def write(self, name, tensors, meta=None):
        p = self.path(name)
        st.write(p, tensors, meta)
        return p

    def write_bytes(self, name, data):
        p = self.path(name)
        with open(p, "wb") as f:
            f.write(data)
        return p


def module_file_parts(module, cfg, bool_style=("true", "false")):
    """(list of (name, array) incl. mask buffers, metadata) of a seeded module."""
    m = bm.construct(module, cfg, seed=123)
    items = [(k, v.detach().numpy().copy()) for k, v in m.state_dict().items()]
    meta = {"module": module}
    for k in bm.ARGS[module]:
        v = cfg[k]
        meta[k] = (bool_style[0] if v else bool_style[1]) if k == "qkv_bias" else str(v)
    return items, meta


def replace(items, name, arr):
    return [(k, arr if k == name else v) for k, v in items]


def drop(items, name):
    return [(k, v) for k, v in items if k != name]


def corrupt_variants(good):
    """(name, bytes) corruptions of a valid file's bytes `good`."""
    (hlen,) = struct.unpack("<Q", good[:8])
    header = json.loads(good[8:8 + hlen].decode("utf-8"))
    data = good[8 + hlen:]
    names = [k for k in header if k != "__metadata__"]
    names.sort(key=lambda k: header[k]["data_offsets"][0])
    first = names[0]

    def rebuild(h, d=data):
        return st.raw_file(json.dumps(h).encode("utf-8"), d)

    v = []
    v.append(("truncated data (last 4 bytes cut)", good[:-4]))
    v.append(("truncated inside the header", good[:20]))
    v.append(("empty file", b""))
    v.append(("5-byte file", good[:5]))
    v.append(("garbage bytes", bytes(random.Random(7).randrange(256) for _ in range(300))))
    v.append(("header length 2^40", struct.pack("<Q", 1 << 40) + good[8:]))
    v.append(("header length 2^64-1", struct.pack("<Q", 2**64 - 1) + good[8:]))
    v.append(("header length = file size", struct.pack("<Q", len(good)) + good[8:]))
    v.append(("header length one too large", struct.pack("<Q", hlen + 1) + good[8:]))
    v.append(("header length zero", struct.pack("<Q", 0) + good[8:]))
    h = json.loads(json.dumps(header))
    for k in names[1:]:
        b, e = h[k]["data_offsets"]
        h[k]["data_offsets"] = [b - 4, e - 4]
    v.append(("overlapping data_offsets", rebuild(h, data[:-4])))
    h = json.loads(json.dumps(header))
    for k in names[1:]:
        b, e = h[k]["data_offsets"]
        h[k]["data_offsets"] = [b + 4, e + 4]
    v.append(("gap between tensors", rebuild(h, data[:h[first]["data_offsets"][1]] + b"\0" * 4
                                              + data[h[first]["data_offsets"][1]:])))
    v.append(("trailing bytes after the data", good + b"\0\0\0\0"))
    hb = good[8:8 + hlen]
    bad_utf8 = hb.replace(first.encode(), first.encode()[:-1] + b"\xff", 1)
    v.append(("invalid UTF-8 in the header", st.raw_file(bad_utf8, data)))
    v.append(("invalid JSON header", st.raw_file(b"{\"W_query.weight\": {\"dtype\": ", data)))
    v.append(("invalid JSON header ending in }", st.raw_file(b"{\"a\": }", data)))
    v.append(("header is a JSON array", st.raw_file(b"[]", data)))
    v.append(("header is JSON null", st.raw_file(b"null", b"")))
    h = json.loads(json.dumps(header))
    h[first]["dtype"] = "F33"
    v.append(("unknown dtype", rebuild(h)))
    h = json.loads(json.dumps(header))
    h[first]["shape"] = [int(s) for s in h[first]["shape"]] + [2]
    v.append(("shape does not match the byte range", rebuild(h)))
    h = json.loads(json.dumps(header))
    b, e = h[first]["data_offsets"]
    h[first]["data_offsets"] = [e, b]
    v.append(("data_offsets end < begin", rebuild(h)))
    h = json.loads(json.dumps(header))
    h[names[-1]]["data_offsets"][1] += 1000
    v.append(("data_offsets beyond the end", rebuild(h)))
    h = json.loads(json.dumps(header))
    h[first]["shape"] = [2**62, 4]
    v.append(("shape whose size overflows", rebuild(h)))
    h = json.loads(json.dumps(header))
    h[first]["shape"] = [-1] + [int(s) for s in h[first]["shape"][1:]]
    v.append(("negative shape", rebuild(h)))
    h = json.loads(json.dumps(header))
    h[first]["data_offsets"] = [-4, h[first]["data_offsets"][1]]
    v.append(("negative offset", rebuild(h)))
    h = json.loads(json.dumps(header))
    del h[first]["data_offsets"]
    v.append(("tensor without data_offsets", rebuild(h)))
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=None)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    binary = st.find_bin(a.bin)
    if not binary or not os.access(binary, os.X_OK):
        print("error: no mha binary (set MHA_BIN or --bin)")
        print("0 passed, 1 failed")
        return 1
    with tempfile.TemporaryDirectory(prefix="mha_err_") as tmp:
        s = Suite(binary, tmp, a.verbose)
        run_all(s)
        if s.dups:
            s.failed += 1
            print("FAIL %d error messages repeat their 'FILE: ' prefix (say the file name once), "
                  "e.g. [%s] %r" % (len(s.dups), s.dups[0][0], s.dups[0][1]))
        else:
            s.passed += 1
        left = [f for f in os.listdir(tmp) if ".tmp" in f]
        if left:
            s.failed += 1
            print("FAIL temporary files left behind by failed writes: %s" % left)
        else:
            s.passed += 1
        print("%d passed, %d failed" % (s.passed, s.failed))
        return 1 if s.failed else 0


def run_all(s):
    MHA, CA, W = "MultiHeadAttention", "CausalAttention", "MultiHeadAttentionWrapper"
    V1, V2 = "SelfAttention_v1", "SelfAttention_v2"

    # ---- help and version ------------------------------------------------
    s.ok("--version", ["--version"], r"0\.2\.0")
    s.ok("--help", ["--help"], r"init|run|usage")
    rc, so, _ = s._run(["--help"])
    commands = ["init", "run"]
    for m in re.finditer(r"^  ([a-z][a-z0-9_-]*)\s{2,}\S", so, re.MULTILINE):
        if m.group(1) not in commands:
            commands.append(m.group(1))
    for cmd in commands:
        s.ok("%s --help" % cmd, [cmd, "--help"], r"%s|usage" % re.escape(cmd))
    s.ok("help", ["help"], r"trace")
    s.ok("help trace", ["help", "trace"], r"--svg")
    s.error("help unknown", ["help", "nosuch"], r"unknown command 'nosuch'")
    s.error("help two", ["help", "run", "init"], r"one command")
    s.error("version extra", ["version", "x"], r"unexpected argument 'x'")

    # ---- trace --svg ------------------------------------------------------
    svg = s.path("trace.svg")
    s.error("trace --labels without --svg", ["trace", "--labels", "a b"], r"--labels only applies with --svg")
    s.error("trace --svg no file", ["trace", "--svg"], r"--svg needs a file")
    s.error("trace --labels count", ["trace", "--svg", svg, "--labels", "Your journey"], r"2 words for 6 tokens",
            out=svg)
    s.error("trace --labels too many", ["trace", "--svg", svg, "--tokens", "2", "--labels", "a b c"],
            r"more words than the 2 tokens", out=svg)
    s.error("trace --svg too long", ["trace", "--svg", svg, "--tokens", "300"], r"up to 256 tokens", out=svg)
    s.error("trace --svg unwritable", ["trace", "--svg", s.path("no/such/dir/a.svg")], r"no/such/dir/a.svg")
    s.ok("trace --svg", ["trace", "--svg", svg, "--max-values", "0"], r"wrote .*trace.svg")

    # ---- base files -------------------------------------------------------
    mcfg = dict(d_in=3, d_out=4, context_length=6, dropout=0.1, num_heads=2, qkv_bias=True)
    m_items, m_meta = module_file_parts(MHA, mcfg, ("True", "False"))
    w_mha = s.write("mha.safetensors", m_items, m_meta)
    ccfg = dict(d_in=3, d_out=2, context_length=6, dropout=0.0, qkv_bias=False)
    c_items, c_meta = module_file_parts(CA, ccfg)
    w_ca = s.write("ca.safetensors", c_items, c_meta)
    wcfg = dict(d_in=3, d_out=2, context_length=6, dropout=0.0, num_heads=2, qkv_bias=False)
    wr_items, wr_meta = module_file_parts(W, wcfg)
    w_wr = s.write("wrapper.safetensors", wr_items, wr_meta)
    v1_items, v1_meta = module_file_parts(V1, dict(d_in=3, d_out=2))
    w_v1 = s.write("v1.safetensors", v1_items, v1_meta)
    v2_items, v2_meta = module_file_parts(V2, dict(d_in=3, d_out=2, qkv_bias=False))
    w_v2 = s.write("v2.safetensors", v2_items, v2_meta)
    inputs = np.array(bm.INPUTS, dtype=np.float32)
    batch = np.stack([inputs, inputs])
    x_b = s.write("x_batch.safetensors", {"x": batch})
    x_1 = s.write("x_single.safetensors", {"x": inputs})

    # controls: the base files work (otherwise the error cases prove nothing)
    for name, w, x in (("MHA", w_mha, x_b), ("CA", w_ca, x_b), ("wrapper", w_wr, x_b),
                       ("v1", w_v1, x_1), ("v2", w_v2, x_1)):
        o = s.out()
        s.ok("control: run %s" % name, ["run", w, "-i", x, "-o", o], out=o)
    o = s.out()
    s.ok("control: run MHA --train --seed 1", ["run", w_mha, "-i", x_b, "-o", o,
                                                "--train", "--seed", "1"], out=o)
    o = s.out()
    s.ok("control: init MHA", ["init", MHA, "--d-in", "3", "--d-out", "4", "--context-length",
                               "6", "--dropout", "0.1", "--num-heads", "2", "--qkv-bias",
                               "--seed", "123", "-o", o], out=o)

    # ---- command line: init ----------------------------------------------
    s.error("unknown command", ["frobnicate"], r"frobnicate|command")

    def init(module, over=None, omit=(), extra=()):
        opts = {"--d-in": "3", "--d-out": "4", "--context-length": "6", "--dropout": "0.1",
                "--num-heads": "2", "--seed": "123"}
        if module in (V1, V2):
            for k in ("--context-length", "--dropout", "--num-heads"):
                del opts[k]
        elif module == CA:
            del opts["--num-heads"]
        opts.update(over or {})
        o = s.out()
        args = ["init", module] if module else ["init"]
        for k, v in opts.items():
            if k not in omit:
                args += [k, v]
        args += list(extra)
        if "-o" not in omit:
            args += ["-o", o]
        return args, o

    args, o = init("Transformer")
    s.error("init: unknown module", args, r"Transformer|module", o)
    args, o = init("multiheadattention")
    s.error("init: module name in the wrong case", args, r"multiheadattention|module", o)
    args, o = init(None)
    s.error("init: no module", args, r"module", o)
    for opt, pat in (("--d-in", r"d[-_]in"), ("--d-out", r"d[-_]out"), ("--seed", r"seed")):
        args, o = init(MHA, omit=(opt,))
        s.error("init: missing %s" % opt, args, pat, o)
    args, o = init(MHA, omit=("-o",))
    s.error("init: missing -o", args, r"-o\b|output")
    for mod in (MHA, W):
        args, o = init(mod, omit=("--num-heads",))
        s.error("init %s: missing --num-heads" % mod, args, r"num[-_ ]heads", o)
    args, o = init(CA, omit=("--context-length",))
    s.error("init CausalAttention: missing --context-length", args, r"context[-_ ]length", o)
    args, o = init(MHA, omit=("--context-length",))
    s.error("init MultiHeadAttention: missing --context-length", args,
            r"context[-_ ]length", o)

    bad_sizes = [("abc", "non-numeric"), ("3x", "trailing garbage"), ("", "empty"),
                 ("0", "zero"), ("-3", "negative"), ("99999999999999999999", "overflowing"),
                 ("1.5", "fractional"), (" ", "blank")]
    for opt, pat, mod in (("--d-in", r"d[-_]in", MHA), ("--d-out", r"d[-_]out", MHA),
                          ("--context-length", r"context[-_ ]length", CA),
                          ("--num-heads", r"num[-_ ]heads", MHA),
                          ("--d-in", r"d[-_]in", V1), ("--d-out", r"d[-_]out", V2)):
        for val, what in bad_sizes:
            args, o = init(mod, over={opt: val})
            s.error("init %s: %s %s %r" % (mod, what, opt, val), args, pat, o)
    args, o = init(MHA, over={"--num-heads": "-2"})
    s.error("init: negative --num-heads", args, r"num[-_ ]heads", o)
    args, o = init(W, over={"--num-heads": "0"})
    s.error("init wrapper: zero --num-heads", args, r"num[-_ ]heads", o)
    for val in ("abc", "99999999999999999999999", "", "1x"):
        args, o = init(MHA, over={"--seed": val})
        s.error("init: bad --seed %r" % val, args, r"seed", o)

    args, o = init(MHA, over={"--d-out": "5", "--num-heads": "2"})
    s.error("init: d_out % num_heads != 0", args, r"num[-_ ]heads", o)
    args, o = init(MHA, over={"--d-out": "2", "--num-heads": "4"})
    s.error("init: num_heads > d_out", args, r"num[-_ ]heads", o)
    for val in ("1.0", "1", "-0.1", "nan", "NaN", "inf", "1.5", "abc", ""):
        for mod in (MHA, CA, W):
            args, o = init(mod, over={"--dropout": val})
            s.error("init %s: --dropout %r" % (mod, val), args, r"dropout", o)
    # sizes that are valid numbers but whose products overflow or cannot be allocated
    args, o = init(V1, over={"--d-in": "4611686018427387904", "--d-out": "4611686018427387904"})
    s.error("init: d_in, d_out 2^62", args,
            r"overflow|too large|large|memory|alloc|d[-_]in|d[-_]out|size", o)
    args, o = init(V1, over={"--d-in": "1099511627776", "--d-out": "1099511627776"})
    s.error("init: d_in*d_out overflows (2^40 each)", args,
            r"overflow|too large|large|memory|alloc|d[-_]in|d[-_]out|size", o)
    args, o = init(MHA, over={"--d-in": "3037000500", "--d-out": "3037000500",
                              "--num-heads": "1"})
    s.error("init: d_out*d_out overflows", args,
            r"overflow|too large|large|memory|alloc|d[-_]in|d[-_]out|size", o)
    args, o = init(MHA, over={"--context-length": "100000000"})
    s.error("init: mask of context_length 1e8 cannot be allocated", args,
            r"overflow|too large|large|memory|alloc|context|size", o)
    args, o = init(MHA, extra=("--frobnicate", "3"))
    s.error("init: unknown option", args, r"frobnicate|option", o)
    args, o = init(MHA, extra=("stray",))
    s.error("init: stray positional argument", args, r"stray|argument|unexpected|extra", o)
    args, _ = init(MHA, omit=("-o",))
    s.error("init: -o without a value", args + ["-o"], r"-o\b|output|value|argument")
    args, o = init(MHA, omit=("--seed",))
    s.error("init: --seed without a value", args + ["-o", o, "--seed"],
            r"seed|value|argument", o)
    args, _ = init(MHA, omit=("-o",))
    s.error("init: unwritable output", args + ["-o", "/nonexistent/dir/w.safetensors"],
            r"nonexistent|no such|write|open|create")

    # ---- command line: run -----------------------------------------------
    o = s.out()
    s.error("run: no weights file", ["run", "-i", x_b, "-o", o], r"weights|argument|file|missing", o)
    o = s.out()
    s.error("run: missing -i", ["run", w_mha, "-o", o], r"-i\b|input", o)
    s.error("run: missing -o", ["run", w_mha, "-i", x_b], r"-o\b|output")
    o = s.out()
    s.error("run: --train without --seed", ["run", w_mha, "-i", x_b, "-o", o, "--train"],
            r"seed", o)
    o = s.out()
    s.error("run: --train --seed abc", ["run", w_mha, "-i", x_b, "-o", o, "--train", "--seed",
                                        "abc"], r"seed", o)
    o = s.out()
    s.error("run: unknown option", ["run", w_mha, "-i", x_b, "-o", o, "--frobnicate"],
            r"frobnicate|option", o)
    o = s.out()
    s.error("run: two weights files", ["run", w_mha, w_ca, "-i", x_b, "-o", o],
            r"argument|unexpected|extra|ca\.safetensors|weights", o)
    o = s.out()
    s.error("run: non-existent weights file", ["run", "/nonexistent/w.safetensors", "-i", x_b,
                                                "-o", o], MISSING_FILE, o)
    o = s.out()
    s.error("run: non-existent input file", ["run", w_mha, "-i", "/nonexistent/x.safetensors",
                                             "-o", o], MISSING_FILE, o)
    o = s.out()
    s.error("run: input is a directory", ["run", w_mha, "-i", s.tmp, "-o", o],
            r"director|read|open|" + re.escape(s.tmp), o)
    s.error("run: unwritable output", ["run", w_mha, "-i", x_b, "-o",
                                       "/nonexistent/dir/y.safetensors"],
            r"nonexistent|no such|write|open|create")
    outdir = s.path("outdir")
    os.mkdir(outdir)
    s.error("run: output is a directory", ["run", w_mha, "-i", x_b, "-o", outdir],
            r"director|write|create|rename|open|exists")
    args, _ = init(MHA, omit=("-o",))
    s.error("init: output is a directory", args + ["-o", outdir],
            r"director|write|create|rename|open|exists")

    # ---- inputs ------------------------------------------------------------
    def run_x(name, w, x, pat, xname="x.safetensors"):
        xf = s.write(xname, x) if isinstance(x, (dict, list)) else x
        o = s.out()
        s.error(name, ["run", w, "-i", xf, "-o", o], pat, o)

    rng = np.random.default_rng(5)
    for mod, w in ((MHA, w_mha), (CA, w_ca), (W, w_wr)):
        run_x("run %s: T > context_length" % mod, w,
              {"x": rng.standard_normal((2, 7, 3)).astype(np.float32)},
              r"context[-_ ]length|context|\bT\b|tokens")
        run_x("run %s: input width 4 != d_in 3" % mod, w,
              {"x": rng.standard_normal((2, 6, 4)).astype(np.float32)},
              r"d[-_]in|width|shape|dim")
        run_x("run %s: b == 0" % mod, w, {"x": np.zeros((0, 6, 3), np.float32)},
              r"batch|empty|zero|shape|\bb\b|size|at least|B")
        run_x("run %s: T == 0" % mod, w, {"x": np.zeros((2, 0, 3), np.float32)},
              r"token|empty|zero|shape|\bT\b|size|at least")
        run_x("run %s: 1-D x" % mod, w, {"x": inputs[0].copy()}, SHAPE)
        run_x("run %s: 2-D x" % mod, w, {"x": inputs}, SHAPE)
        run_x("run %s: 4-D x" % mod, w, {"x": batch[None]}, SHAPE)
    for mod, w in ((V1, w_v1), (V2, w_v2)):
        run_x("run %s: 3-D x" % mod, w, {"x": batch}, SHAPE)
        run_x("run %s: 1-D x" % mod, w, {"x": inputs[0].copy()}, SHAPE)
        run_x("run %s: T == 0" % mod, w, {"x": np.zeros((0, 3), np.float32)},
              r"token|empty|zero|shape|\bT\b|size|at least")
        run_x("run %s: input width 2 != d_in 3" % mod, w, {"x": inputs[:, :2].copy()},
              r"d[-_]in|width|shape|dim")
    run_x("run: missing x tensor", w_mha, {"inputs": batch}, r"\bx\b")
    run_x("run: empty input file (no tensors)", w_mha, {}, r"\bx\b")
    xn = batch.copy()
    xn[1, 3, 2] = np.nan
    run_x("run: x with NaN", w_mha, {"x": xn}, NONFINITE)
    xi = batch.copy()
    xi[0, 0, 0] = np.inf
    run_x("run: x with inf", w_mha, {"x": xi}, NONFINITE)
    run_x("run: x of dtype I32", w_mha, {"x": batch.astype(np.int32)},
          r"dtype|F32|I32|type|float")
    good_x = st.serialize({"x": batch})
    for what, data in (("truncated", good_x[:-4]), ("garbage", b"\x07" * 64),
                       ("trailing bytes", good_x + b"\0" * 4),
                       ("header length too large", struct.pack("<Q", 1 << 40) + good_x[8:])):
        xf = s.write_bytes("x_bad.safetensors", data)
        o = s.out()
        s.error("run: corrupt input (%s)" % what, ["run", w_mha, "-i", xf, "-o", o], CORRUPT, o)

    # ---- weights -----------------------------------------------------------
    def run_w(name, items_or_bytes, meta, pat, x=x_b):
        if isinstance(items_or_bytes, bytes):
            wf = s.write_bytes("w.safetensors", items_or_bytes)
        else:
            wf = s.write("w.safetensors", items_or_bytes, meta)
        o = s.out()
        s.error(name, ["run", wf, "-i", x, "-o", o], pat, o)

    run_w("weights: missing W_key.weight", drop(m_items, "W_key.weight"), m_meta,
          r"W_key\.weight")
    run_w("weights: missing out_proj.bias", drop(m_items, "out_proj.bias"), m_meta,
          r"out_proj\.bias")
    run_w("weights: missing W_query.bias (qkv_bias True)", drop(m_items, "W_query.bias"),
          m_meta, r"W_query\.bias")
    run_w("wrapper weights: missing heads.1.W_value.weight",
          drop(wr_items, "heads.1.W_value.weight"), wr_meta, r"heads\.1\.W_value\.weight")
    run_w("v1 weights: missing W_value", drop(v1_items, "W_value"), v1_meta, r"W_value",
          x=x_1)
    run_w("weights: W_query.weight transposed (3,4)",
          replace(m_items, "W_query.weight", np.zeros((3, 4), np.float32)), m_meta,
          r"W_query\.weight")
    run_w("weights: out_proj.bias of shape (5,)",
          replace(m_items, "out_proj.bias", np.zeros(5, np.float32)), m_meta, r"out_proj\.bias")
    run_w("weights: W_key.bias of shape (1, 4)",
          replace(m_items, "W_key.bias", np.zeros((1, 4), np.float32)), m_meta, r"W_key\.bias")
    run_w("v1 weights: W_query transposed (2,3)",
          replace(v1_items, "W_query", np.zeros((2, 3), np.float32)), v1_meta, r"W_query",
          x=x_1)
    run_w("weights: mask of shape (5, 5) for context_length 6",
          replace(m_items, "mask", np.triu(np.ones((5, 5), np.float32), 1)), m_meta, r"mask")
    run_w("wrapper weights: heads.0.mask of shape (6,)",
          replace(wr_items, "heads.0.mask", np.zeros(6, np.float32)), wr_meta, r"mask")
    run_w("weights: extra tensor foo.bar", m_items + [("foo.bar", np.zeros(3, np.float32))],
          m_meta, r"foo\.bar")
    run_w("weights: W_query.bias although qkv_bias false",
          c_items + [("W_query.bias", np.zeros(2, np.float32))], c_meta, r"W_query\.bias")
    run_w("wrapper weights: heads.2.W_query.weight (only 2 heads)",
          wr_items + [("heads.2.W_query.weight", np.zeros((2, 3), np.float32))], wr_meta,
          r"heads\.2\.W_query\.weight")
    run_w("weights: W_query.weight of dtype I32",
          replace(m_items, "W_query.weight", np.zeros((4, 3), np.int32)), m_meta,
          r"dtype|F32|I32|type|float|W_query\.weight")
    wn = [(k, v.copy()) for k, v in m_items]
    dict(wn)["W_value.weight"][1, 2] = np.nan
    run_w("weights: NaN in W_value.weight", wn, m_meta, NONFINITE)
    wn = [(k, v.copy()) for k, v in m_items]
    dict(wn)["out_proj.bias"][0] = -np.inf
    run_w("weights: -inf in out_proj.bias", wn, m_meta, NONFINITE)
    wn = [(k, v.copy()) for k, v in v1_items]
    dict(wn)["W_key"][0, 0] = np.nan
    run_w("v1 weights: NaN in W_key", wn, v1_meta, NONFINITE, x=x_1)

    # ---- metadata ----------------------------------------------------------
    def meta_with(meta, **kw):
        m = dict(meta)
        for k, v in kw.items():
            if v is None:
                m.pop(k, None)
            else:
                m[k] = v
        return m

    run_w("metadata: unknown module", m_items, meta_with(m_meta, module="Transformer"),
          r"Transformer|module")
    run_w("metadata: missing", m_items, None, r"metadata|module")
    run_w("metadata: no module key", m_items, meta_with(m_meta, module=None), r"module")
    run_w("metadata: missing d_in", m_items, meta_with(m_meta, d_in=None), r"d_in")
    run_w("metadata: missing context_length", m_items, meta_with(m_meta, context_length=None),
          r"context_length")
    run_w("metadata: missing num_heads", m_items, meta_with(m_meta, num_heads=None),
          r"num_heads")
    run_w("metadata: d_in 'abc'", m_items, meta_with(m_meta, d_in="abc"), r"d_in")
    run_w("metadata: d_in '0'", m_items, meta_with(m_meta, d_in="0"), r"d_in")
    run_w("metadata: d_in '-3'", m_items, meta_with(m_meta, d_in="-3"), r"d_in")
    run_w("metadata: d_out overflowing", m_items,
          meta_with(m_meta, d_out="99999999999999999999"), r"d_out")
    run_w("metadata: context_length '0'", m_items, meta_with(m_meta, context_length="0"),
          r"context_length")
    run_w("metadata: num_heads '0'", m_items, meta_with(m_meta, num_heads="0"), r"num_heads")
    for val in ("1.0", "-0.1", "nan", "abc"):
        run_w("metadata: dropout %r" % val, m_items, meta_with(m_meta, dropout=val), r"dropout")
    run_w("metadata: qkv_bias 'maybe'", m_items, meta_with(m_meta, qkv_bias="maybe"),
          r"qkv_bias")
    # d_out 6 with 4 heads, tensors shaped consistently for d_out 6
    i6, meta6 = module_file_parts(MHA, dict(d_in=3, d_out=6, context_length=6, dropout=0.0,
                                            num_heads=2, qkv_bias=False))
    run_w("metadata: d_out 6 % num_heads 4 != 0", i6, meta_with(meta6, num_heads="4"),
          r"num_heads")
    # a metadata value that is a JSON number, not a string
    good = st.serialize(m_items, m_meta)
    (hlen,) = struct.unpack("<Q", good[:8])
    hdr = json.loads(good[8:8 + hlen].decode("utf-8"))
    hdr["__metadata__"]["d_in"] = 3
    run_w("metadata: d_in as a JSON number", st.raw_file(json.dumps(hdr).encode(),
                                                          good[8 + hlen:]), None,
          r"metadata|d_in|string")

    # ---- corrupt weights files ---------------------------------------------
    for what, data in corrupt_variants(good):
        run_w("corrupt weights: %s" % what, data, None, CORRUPT)


if __name__ == "__main__":
    sys.exit(main())
