"""Differential test of the `mha` CLI against the book's PyTorch classes.

For each random configuration (fixed base seed: reproducible), covering the
five classes and the edges (T = 1, d_in = 1, one head, head_dim = 1,
T = context_length and T < context_length, qkv_bias on/off, dropout 0 / 0.1 /
0.5 in training mode, b = 1..3, d_in = d_out = 64 with 4 heads and T = 50):

  (a) init   `mha init ... --seed s` vs torch.manual_seed(s) + constructor:
             the same tensor names as state_dict(), every tensor F32 with the
             same shape and BIT FOR BIT equal, and the metadata values;
  (b) eval   the torch module's state_dict saved here (with metadata, written
             the way a PyTorch user would) and `mha run` on random x, vs torch
             in eval mode (rtol 1e-4, atol 1e-5);
  (c) train  torch.manual_seed(S); m.train(); m(x) vs
             `mha run ... --train --seed S` (the dropout mask must match);
  (d) init-eval  `mha run` on the file `mha init` wrote, vs torch eval.

In scripts/test.sh's runs after the release one (MHA_TEST_SECONDARY=1: the
forced kernels, OpenBLAS, no OpenMP, the sanitizers) the default is the 32
edge cases alone, without the 28 random ones.

Usage: torch_modules_diff.py [--quick | --count N] [--base-seed N] [--bin PATH]
Run with Debian's /usr/bin/python3 (python3-torch 1.13.1). The binary is
$MHA_BIN (set by ctest), else --bin, else ../build*/mha.
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402
import book_modules as bm  # noqa: E402
import torch  # noqa: E402

RTOL = 1e-4
ATOL = 1e-5


# --------------------------------------------------------------------------
# configurations
# --------------------------------------------------------------------------

def _case(module, d_in, d_out, b=1, T=1, ctx=None, dropout=0.0, heads=1,
          bias=False, seed=123, train_seed=None, note=""):
    ctx = T if ctx is None else ctx
    return dict(module=module, d_in=d_in, d_out=d_out, context_length=ctx,
                dropout=dropout, num_heads=heads, qkv_bias=bias, b=b, T=T,
                seed=seed, train_seed=seed + 1 if train_seed is None else train_seed,
                note=note)


def edge_cases():
    V1, V2, CA = "SelfAttention_v1", "SelfAttention_v2", "CausalAttention"
    W, M = "MultiHeadAttentionWrapper", "MultiHeadAttention"
    return [
        _case(V1, 3, 2, T=6, seed=123, note="book v1"),
        _case(V1, 1, 1, T=1, seed=7, note="T=1 d_in=1 d_out=1"),
        _case(V1, 64, 64, T=50, seed=2024, note="large"),
        _case(V2, 3, 2, T=6, seed=789, note="book v2"),
        _case(V2, 1, 3, T=1, bias=True, seed=5, note="T=1 d_in=1 bias"),
        _case(V2, 64, 64, T=50, bias=True, seed=99, note="large bias"),
        _case(CA, 3, 2, b=2, T=6, dropout=0.0, seed=123, note="book causal"),
        _case(CA, 3, 2, b=2, T=6, dropout=0.5, seed=123, train_seed=123,
              note="book causal, dropout 0.5"),
        _case(CA, 2, 3, b=1, T=1, ctx=1, seed=11, note="T=ctx=1"),
        _case(CA, 1, 1, b=3, T=4, ctx=9, dropout=0.1, seed=12, note="d_in=d_out=1 T<ctx"),
        _case(CA, 5, 4, b=3, T=8, ctx=8, dropout=0.5, bias=True, seed=13,
              note="T=ctx dropout .5 bias"),
        _case(W, 3, 2, b=2, T=6, dropout=0.0, heads=2, seed=123, note="book wrapper"),
        _case(W, 4, 3, b=2, T=5, ctx=7, dropout=0.5, heads=1, seed=21, note="one head"),
        _case(W, 3, 1, b=1, T=3, ctx=6, dropout=0.1, heads=3, bias=True, seed=22,
              note="d_out=1 per head, bias"),
        _case(W, 64, 16, b=2, T=50, ctx=50, dropout=0.1, heads=4, seed=23,
              note="large wrapper T=ctx"),
        _case(M, 3, 2, b=2, T=6, dropout=0.0, heads=2, seed=123, note="book MHA"),
        _case(M, 3, 2, b=2, T=6, dropout=0.5, heads=2, seed=123, train_seed=123,
              note="book MHA dropout .5"),
        _case(M, 6, 4, b=2, T=7, ctx=7, dropout=0.5, heads=4, seed=31, note="head_dim=1"),
        _case(M, 4, 5, b=3, T=2, ctx=5, dropout=0.1, heads=1, seed=32, note="one head"),
        _case(M, 64, 64, b=3, T=50, ctx=64, dropout=0.1, heads=4, bias=True, seed=33,
              note="large MHA"),
        _case(M, 64, 64, b=1, T=50, ctx=50, dropout=0.5, heads=4, seed=34,
              note="large MHA T=ctx dropout .5"),
        _case(M, 1, 2, b=1, T=1, ctx=1, dropout=0.0, heads=2, seed=35, note="T=1 d_in=1"),
        _case(M, 5, 6, b=2, T=4, ctx=10, dropout=0.0, heads=3, bias=True, seed=36,
              train_seed=4, note="dropout 0 in train mode"),
        _case(M, 8, 8, b=2, T=9, ctx=12, dropout=0.25, heads=2, seed=2**40 + 7,
              train_seed=2**33 + 1, note="seeds > 2^32"),
        _case(CA, 4, 4, b=2, T=3, ctx=3, dropout=0.1, seed=0, train_seed=0, note="seed 0"),
        _case(M, 96, 96, b=2, T=100, ctx=128, dropout=0.1, heads=12, seed=124,
              note="12 heads"),
        _case(M, 8, 6, b=2, T=256, ctx=256, dropout=0.5, heads=2, seed=2**64 - 1,
              train_seed=2**64 - 1, note="T=ctx=256, seed 2^64-1"),
        _case(W, 5, 3, b=3, T=67, ctx=70, dropout=0.3, heads=2, bias=True, seed=-5,
              train_seed=-1, note="T=67, negative seeds"),
        _case(CA, 7, 5, b=2, T=33, ctx=40, dropout=0.1, seed=77, note="large x", ),
        _case(M, 16, 12, b=2, T=20, ctx=20, dropout=0.0, heads=3, seed=78, note="large x"),
        # more than one slice of the batch in the backward (slices of about
        # 1024 rows): the second slice's mask bits and statistics
        _case(M, 8, 6, b=3, T=600, ctx=600, dropout=0.5, heads=2, seed=79,
              note="3 x 600 rows, two backward slices"),
        _case(W, 4, 4, b=3, T=520, ctx=520, dropout=0.3, heads=2, seed=80,
              note="wrapper, two backward slices"),
    ]


def random_case(rng):
    module = rng.choice(list(bm.CLASSES))
    heads = rng.randint(1, 4)
    if module == "MultiHeadAttention":
        d_out = heads * rng.choice([1, 1, 2, 3, 4, 8])
    else:
        d_out = rng.choice([1, 2, 3, 4, 5, 8, 16])
    d_in = rng.choice([1, 2, 3, 4, 5, 7, 8, 16, 33])
    ctx = rng.choice([1, 2, 3, 5, 6, 8, 13, 20, 32])
    T = ctx if rng.random() < 0.3 else rng.randint(1, ctx)
    if module in ("SelfAttention_v1", "SelfAttention_v2"):
        T = rng.randint(1, 20)
    return _case(module, d_in, d_out, b=rng.randint(1, 3), T=T, ctx=ctx,
                 dropout=rng.choice([0.0, 0.1, 0.5, 0.1, 0.5, 0.3]), heads=heads,
                 bias=rng.random() < 0.5, seed=rng.randrange(2**31),
                 train_seed=rng.randrange(2**31), note="random")


def make_cases(count, base_seed):
    rng = random.Random(base_seed)
    edges = edge_cases()
    cases = edges[:count]
    while len(cases) < count:
        cases.append(random_case(rng))
    for i, c in enumerate(cases):
        c["id"] = i
        # how this case's torch-side file is written (PyTorch users' variants)
        c["bool_style"] = ("True", "False") if i % 2 == 0 else ("true", "false")
        c["with_mask"] = i % 3 != 1
        c["shuffle"] = i % 4 == 3
    return cases


def describe(c):
    keys = bm.ARGS[c["module"]]
    args = ", ".join("%s=%s" % (k, c[k]) for k in keys)
    return "%s(%s) b=%d T=%d seed=%d train_seed=%d [%s]" % (
        c["module"], args, c["b"], c["T"], c["seed"], c["train_seed"], c["note"])


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------



def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def fmt_cmd(cmd):
    return " ".join(str(a) for a in cmd)


def init_cmd(binary, c, out):
    m = c["module"]
    keys = bm.ARGS[m]
    cmd = [binary, "init", m, "--d-in", str(c["d_in"]), "--d-out", str(c["d_out"])]
    if "context_length" in keys:
        cmd += ["--context-length", str(c["context_length"])]
    if "dropout" in keys:
        cmd += ["--dropout", repr(c["dropout"])]
    if "num_heads" in keys:
        cmd += ["--num-heads", str(c["num_heads"])]
    if "qkv_bias" in keys and c["qkv_bias"]:
        cmd += ["--qkv-bias"]
    cmd += ["--seed", str(c["seed"]), "-o", out]
    return cmd


def torch_state(module):
    return {k: v.detach().contiguous().numpy() for k, v in module.state_dict().items()}


def save_torch_module(path, c, module):
    """The state_dict with its metadata, the way a PyTorch user would write it."""
    sd = torch_state(module)
    items = [(k, v) for k, v in sd.items() if c["with_mask"] or not k.endswith("mask")]
    if c["shuffle"]:
        random.Random(c["id"]).shuffle(items)
    meta = {"module": c["module"]}
    for k in bm.ARGS[c["module"]]:
        v = c[k]
        if k == "qkv_bias":
            meta[k] = c["bool_style"][0] if v else c["bool_style"][1]
        else:
            meta[k] = str(v)
    st.write(path, items, meta)


def compare(y, ref):
    """(ok, max_abs, max_rel, worst index)."""
    if y.shape != ref.shape:
        return False, float("inf"), float("inf"), None
    y64 = y.astype(np.float64)
    r64 = ref.astype(np.float64)
    err = np.abs(y64 - r64)
    if not np.all(np.isfinite(y64)):
        return False, float("inf"), float("inf"), None
    bad = err > ATOL + RTOL * np.abs(r64)
    rel = err / np.maximum(np.abs(r64), ATOL)
    worst = np.unravel_index(int(np.argmax(err)), err.shape) if err.size else None
    return (not bad.any(), float(err.max()) if err.size else 0.0,
            float(rel.max()) if rel.size else 0.0, worst)


class Stats:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.max_abs = {}
        self.max_rel = {}

    def note_err(self, kind, a, r):
        self.max_abs[kind] = max(self.max_abs.get(kind, 0.0), a)
        self.max_rel[kind] = max(self.max_rel.get(kind, 0.0), r)


# --------------------------------------------------------------------------
# the checks
# --------------------------------------------------------------------------

def check_init(binary, c, tmp, tmod):
    """(a): returns a list of problems (empty when ok) and the init file."""
    out = os.path.join(tmp, "init_%d.safetensors" % c["id"])
    cmd = init_cmd(binary, c, out)
    rc, so, se = run(cmd)
    if rc != 0:
        return ["exit %d: %s\n    cmd: %s" % (rc, se.strip(), fmt_cmd(cmd))], None
    try:
        with open(out, "rb") as f:
            tensors, meta, header = st.parse(f.read())
    except Exception as e:  # noqa: BLE001
        return ["cannot parse output file: %s\n    cmd: %s" % (e, fmt_cmd(cmd))], None
    probs = []
    want = torch_state(tmod)
    if set(tensors) != set(want):
        probs.append("tensor names differ: missing %s, unexpected %s" % (
            sorted(set(want) - set(tensors)), sorted(set(tensors) - set(want))))
    for name in want:
        if name not in tensors:
            continue
        got, ref = tensors[name], want[name]
        if header[name]["dtype"] != "F32":
            probs.append("%s: dtype %s, want F32" % (name, header[name]["dtype"]))
            continue
        if got.shape != ref.shape:
            probs.append("%s: shape %s, want %s" % (name, got.shape, ref.shape))
            continue
        diff = got.view(np.uint32) != ref.astype(np.float32).view(np.uint32)
        if diff.any():
            idx = np.argwhere(diff)
            i0 = tuple(idx[0])
            probs.append("%s: %d of %d elements differ in bits; first at %s: got %r want %r" % (
                name, len(idx), ref.size, i0, float(got[i0]), float(ref[i0])))
    # metadata
    want_meta = {"module": c["module"]}
    for k in bm.ARGS[c["module"]]:
        want_meta[k] = c[k]
    if meta is None:
        probs.append("no __metadata__")
    else:
        if set(meta) != set(want_meta):
            probs.append("metadata keys %s, want %s" % (sorted(meta), sorted(want_meta)))
        for k, v in want_meta.items():
            if k not in meta:
                continue
            s = meta[k]
            if k == "module":
                ok = s == v
            elif k == "qkv_bias":
                ok = s == ("true" if v else "false")
            elif k == "dropout":
                try:
                    ok = float(s) == float(v)
                except ValueError:
                    ok = False
            else:
                ok = s == str(v)
            if not ok:
                probs.append("metadata %s = %r, want %r" % (k, s, v))
    if probs:
        probs.append("cmd: %s" % fmt_cmd(cmd))
    return probs, out


def check_run(binary, kind, c, weights, xfile, ref, tmp, stats, train_seed=None):
    out = os.path.join(tmp, "y_%d_%s.safetensors" % (c["id"], kind))
    cmd = [binary, "run", weights, "-i", xfile, "-o", out]
    if train_seed is not None:
        cmd += ["--train", "--seed", str(train_seed)]
    rc, so, se = run(cmd)
    if rc != 0:
        return ["exit %d: %s\n    cmd: %s" % (rc, se.strip(), fmt_cmd(cmd))]
    try:
        with open(out, "rb") as f:
            tensors, _, header = st.parse(f.read())
    except Exception as e:  # noqa: BLE001
        return ["cannot parse output: %s\n    cmd: %s" % (e, fmt_cmd(cmd))]
    if "y" not in tensors:
        return ["no tensor y in output (has %s)\n    cmd: %s" % (sorted(tensors), fmt_cmd(cmd))]
    if header["y"]["dtype"] != "F32":
        return ["y has dtype %s, want F32\n    cmd: %s" % (header["y"]["dtype"], fmt_cmd(cmd))]
    y = tensors["y"]
    if y.shape != ref.shape:
        return ["y shape %s, want %s\n    cmd: %s" % (y.shape, ref.shape, fmt_cmd(cmd))]
    ok, mabs, mrel, worst = compare(y, ref)
    stats.note_err(kind, mabs, mrel)
    if not ok:
        nbad = int(np.sum(np.abs(y.astype(np.float64) - ref) > ATOL + RTOL * np.abs(ref)))
        detail = ""
        if worst is not None:
            detail = "; worst at %s: got %r want %r" % (
                tuple(int(i) for i in worst), float(y[worst]), float(ref[worst]))
        return ["%d of %d elements outside tolerance, max abs err %.3g, max rel err %.3g%s"
                "\n    cmd: %s" % (nbad, ref.size, mabs, mrel, detail, fmt_cmd(cmd))]
    return []


def run_case(binary, c, tmp, stats, verbose):
    m = c["module"]
    tmod = bm.construct(m, c, seed=c["seed"])
    xrng = np.random.default_rng(1000 + c["id"])
    shape = (c["b"], c["T"], c["d_in"]) if m in bm.BATCHED else (c["T"], c["d_in"])
    x = xrng.standard_normal(shape)
    if c["note"] == "large x":  # big scores: softmax must be computed stably
        x *= 40.0
    x = x.astype(np.float32)
    xfile = os.path.join(tmp, "x_%d.safetensors" % c["id"])
    st.write(xfile, {"x": x})
    xt = torch.from_numpy(x)

    with torch.no_grad():
        tmod.eval()
        ref_eval = tmod(xt).numpy().astype(np.float64)
        torch.manual_seed(c["train_seed"])
        tmod.train()
        ref_train = tmod(xt).numpy().astype(np.float64)
        tmod.eval()

    results = []
    probs, init_file = check_init(binary, c, tmp, tmod)
    results.append(("init", probs))

    wfile = os.path.join(tmp, "w_%d.safetensors" % c["id"])
    save_torch_module(wfile, c, tmod)
    results.append(("eval", check_run(binary, "eval", c, wfile, xfile, ref_eval, tmp, stats)))
    results.append(("train", check_run(binary, "train", c, wfile, xfile, ref_train, tmp, stats,
                                       train_seed=c["train_seed"])))
    if init_file is not None:
        results.append(("init-eval", check_run(binary, "init-eval", c, init_file, xfile,
                                               ref_eval, tmp, stats)))
    else:
        results.append(("init-eval", ["skipped: mha init failed"]))

    for kind, probs in results:
        if probs:
            stats.failed += 1
            print("FAIL case %d (%s) %s" % (c["id"], kind, describe(c)))
            for p in probs:
                print("    " + p)
        else:
            stats.passed += 1
            if verbose:
                print("ok   case %d (%s) %s" % (c["id"], kind, describe(c)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="20 cases instead of 60")
    ap.add_argument("--count", type=int, default=None, help="number of cases (default 60)")
    ap.add_argument("--base-seed", type=int, default=20240611)
    ap.add_argument("--bin", default=None, help="mha binary (when MHA_BIN is not set)")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    # scripts/test.sh's secondary runs (st.secondary()): the edge cases alone,
    # without the random ones, which draw more of the same paths
    count = a.count if a.count is not None else (
        20 if a.quick else len(edge_cases()) if st.secondary() else 60)
    binary = st.find_bin(a.bin)
    if not binary or not os.access(binary, os.X_OK):
        print("error: no mha binary (set MHA_BIN or --bin)")
        print("0 passed, 1 failed")
        return 1
    torch.set_num_threads(1)
    t0 = time.time()
    cases = make_cases(count, a.base_seed)
    stats = Stats()
    with tempfile.TemporaryDirectory(prefix="mha_diff_") as tmp:
        for c in cases:
            try:
                run_case(binary, c, tmp, stats, a.verbose)
            except Exception as e:  # noqa: BLE001
                stats.failed += 1
                print("FAIL case %d (exception) %s: %r" % (c["id"], describe(c), e))
    for kind in ("eval", "train", "init-eval"):
        if kind in stats.max_abs:
            print("%-9s max abs err %.3g, max rel err %.3g (rtol %g, atol %g)" % (
                kind, stats.max_abs[kind], stats.max_rel[kind], RTOL, ATOL))
    print("%d cases, %.1f s, binary %s" % (len(cases), time.time() - t0, binary))
    print("%d passed, %d failed" % (stats.passed, stats.failed))
    return 1 if stats.failed else 0


if __name__ == "__main__":
    sys.exit(main())
