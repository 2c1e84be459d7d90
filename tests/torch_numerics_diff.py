"""The numerical edges of the `mha` CLI against the book's PyTorch classes
(docs/numerics.md describes them):

  overflow   inputs whose scores overflow float: x of magnitude 1e30 (every
             product q_d * k_d overflows), and normal x with one token scaled
             by 1e30 (only the scores of that token's own row overflow; the
             rows after it hold values near 1e30). y must have NaN exactly
             where torch's has, +-inf exactly where torch's has, and the
             finite values within rtol 1e-4 / atol 1e-5. Every class, eval
             and training mode (dropout 0.5, PyTorch's mask), head_dim 1 (a
             row's only score can be -inf: softmax gives NaN) and more;
  shapes     T = 1, head_dim 1, d_in 1 (also together);
  dropout    0 and 1 - 1e-7 in training mode: with 1 - 1e-7 almost every
             weight is dropped and a kept one is scaled by
             f32(1 / f32(1 - p)) ~ 1e7; seeds are searched (in torch) so
             that some cases keep a visible weight and one keeps none.

Each case is checked under the kernels this process gets (ctest runs the suite
with MHA_ISA=ref and with the best kernels: scripts/test.sh).

Usage: torch_numerics_diff.py [--bin PATH] [-v]
Run with Debian's /usr/bin/python3 (python3-torch 1.13.1). The binary is
$MHA_BIN (set by ctest), else --bin, else ../build*/mha.
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402
import book_modules as bm  # noqa: E402
import torch  # noqa: E402
from torch_modules_diff import _case, describe, fmt_cmd, run, save_torch_module  # noqa: E402

RTOL = 1e-4
ATOL = 1e-5
P_HIGH = 1.0 - 1e-7
V1, V2, CA = "SelfAttention_v1", "SelfAttention_v2", "CausalAttention"
W, M = "MultiHeadAttentionWrapper", "MultiHeadAttention"


def case(module, d_in, d_out, **kw):
    x = kw.pop("x", "normal")
    sign = kw.pop("sign", None)
    c = _case(module, d_in, d_out, **kw)
    c["x"] = x  # "normal", "huge" (all of x * 1e30) or ("token", t): token t * 1e30
    # "+" or "-": x >= 0, W_query >= 0 and W_key >= 0 or <= 0, so that every
    # score's products have one sign: an overflowed score is +inf or -inf
    # whatever the order of the additions (None: as drawn)
    c["sign"] = sign
    c["with_mask"], c["shuffle"], c["bool_style"] = True, False, ("true", "false")
    return c


def cases():
    out = []
    # overflow: every class, both modes; scores of one sign (any head_dim), or
    # of head_dim 1 (one product per score: its sign is the product's)
    for x in ("huge", ("token", 0), ("token", 3)):
        for sign in ("+", "-"):
            out += [
                case(V1, 4, 3, T=5, x=x, sign=sign, seed=1),
                case(V2, 3, 2, T=6, bias=True, x=x, sign=sign, seed=2),
                case(CA, 3, 4, b=2, T=6, dropout=0.5, x=x, sign=sign, seed=4),
                case(W, 3, 2, b=2, T=5, dropout=0.5, heads=3, bias=True, x=x, sign=sign, seed=5),
                case(M, 5, 8, b=3, T=6, dropout=0.1, heads=2, bias=True, x=x, sign=sign, seed=7),
            ]
        out += [
            case(V2, 3, 1, T=6, bias=True, x=x, seed=2, note="head_dim 1"),
            case(CA, 4, 1, b=2, T=5, dropout=0.5, x=x, seed=3, note="head_dim 1"),
            case(W, 3, 1, b=2, T=5, dropout=0.5, heads=3, bias=True, x=x, seed=5,
                 note="head_dim 1"),
            case(M, 4, 4, b=2, T=6, dropout=0.5, heads=4, x=x, seed=6, note="head_dim 1"),
            case(M, 1, 2, b=2, T=5, dropout=0.5, heads=2, x=x, seed=8, note="d_in 1, head_dim 1"),
        ]
    out += [case(M, 16, 32, b=2, T=40, dropout=0.5, heads=2, x="huge", sign="-", seed=9,
                 note="T 40"),
            case(M, 16, 32, b=2, T=40, dropout=0.5, heads=2, x=("token", 17), sign="+", seed=10,
                 note="T 40")]
    # T = 1, head_dim 1, d_in 1; dropout 0 in training mode
    for m in (V1, V2, CA, W, M):
        out += [case(m, 1, 1, b=2, T=1, heads=1, dropout=0.0, seed=11, note="T 1, d_in 1, d_out 1"),
                case(m, 1, 2, b=2, T=1, heads=2, dropout=0.5, seed=12, note="T 1, d_in 1"),
                case(m, 3, 2, b=2, T=7, ctx=9, heads=2, dropout=0.5, seed=13,
                     note="head_dim 1 (2 for SelfAttention_v1/v2, CausalAttention)")]
    out += [case(m, 4, 4, b=2, T=5, heads=2, dropout=0.0, seed=14, note="dropout 0")
            for m in (CA, W, M)]
    for i, c in enumerate(out):
        c["id"] = i
    return out


def high_dropout_cases():
    """dropout 1 - 1e-7 in training mode: a seed whose mask keeps some visible
    weight, and one whose mask keeps none (seeds found by seed_keeping(),
    the first that do in range(20000); checked again here in torch)."""
    out, probs = [], []
    for m, d_in, d_out, heads, b, T, kept in ((CA, 3, 2, 1, 2, 40, 4209), (W, 2, 3, 2, 2, 40, 839),
                                              (M, 4, 4, 2, 2, 40, 839), (M, 1, 2, 2, 1, 1, None)):
        base = case(m, d_in, d_out, b=b, T=T, heads=heads, dropout=P_HIGH, bias=True, seed=21)
        for s, want, note in ((kept, True, "a weight kept"), (0, False, "every weight dropped")):
            if s is None:
                continue
            if keeps(base, s) != want:
                probs.append("torch's mask for %s, seed %d: %s is no longer true (find another "
                             "seed with seed_keeping)" % (describe(base), s, note))
            out.append(dict(base, train_seed=s, note="dropout 1 - 1e-7, " + note))
    return out, probs


def keeps(c, seed):
    """Whether torch's dropout mask after torch.manual_seed(seed) keeps a
    visible weight of module c (on x = ones)."""
    tmod = bm.construct(c["module"], c, seed=c["seed"])
    tmod.train()
    seen = []

    def hook(_mod, inp, outp):  # inp[0]: the weights (masked ones are 0)
        seen.append(bool(((outp != 0) & (inp[0] != 0)).any()))
    for mod in tmod.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.register_forward_hook(hook)
    with torch.no_grad():
        torch.manual_seed(seed)
        tmod(torch.ones(c["b"], c["T"], c["d_in"]))
    return any(seen)


def seed_keeping(c, want_kept, tries=20000):
    """The first training seed whose mask keeps (or not) a visible weight."""
    return next((s for s in range(tries) if keeps(c, s) == want_kept), None)


def make_x(c):
    m = c["module"]
    shape = (c["b"], c["T"], c["d_in"]) if m in bm.BATCHED else (c["T"], c["d_in"])
    x = np.random.default_rng(500 + c["seed"]).standard_normal(shape)
    if c["sign"]:
        x = np.abs(x)
    if c["x"] == "huge":
        x *= 1e30
    elif c["x"] != "normal":
        t = min(c["x"][1], c["T"] - 1)
        x[..., t, :] *= 1e30
    return x.astype(np.float32)


def compare(y, ref):
    """Problems (empty when none): NaN and +-inf in the same places, finite
    values close."""
    probs = []
    if y.shape != ref.shape:
        return ["shape %s, want %s" % (y.shape, ref.shape)]
    for what, fn in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        a, b = fn(y), fn(ref)
        if (a != b).any():
            idx = tuple(int(i) for i in np.argwhere(a != b)[0])
            probs.append("%s at %d places, torch at %d; first difference at %s: %r vs torch %r" % (
                what, int(a.sum()), int(b.sum()), idx, float(y[idx]), float(ref[idx])))
    fin = np.isfinite(y) & np.isfinite(ref)
    # atol scaled by the row's largest value: rows of values near 1e30 are
    # sums of terms that large, cancelling
    r = np.where(np.isfinite(ref), np.abs(ref.astype(np.float64)), 0.0)
    scale = np.broadcast_to(np.maximum(1.0, r.max(axis=-1, keepdims=True)), ref.shape)[fin]
    y64, r64 = y[fin].astype(np.float64), ref[fin].astype(np.float64)
    bad = np.abs(y64 - r64) > ATOL * scale + RTOL * np.abs(r64)
    if bad.any():
        i = int(np.argmax(bad))
        probs.append("%d of %d finite values outside tolerance; e.g. %r vs torch %r" % (
            int(bad.sum()), bad.size, float(y64[i]), float(r64[i])))
    return probs


def run_case(binary, c, tmp, verbose):
    tmod = bm.construct(c["module"], c, seed=c["seed"])
    if c["sign"]:
        with torch.no_grad():
            for name, p in tmod.named_parameters():
                if name.endswith("W_query.weight") or name.endswith("W_key.weight"):
                    p.abs_()
                if name.endswith("W_key.weight") and c["sign"] == "-":
                    p.neg_()
    x = make_x(c)
    xfile = os.path.join(tmp, "x_%s.safetensors" % c["id"])
    wfile = os.path.join(tmp, "w_%s.safetensors" % c["id"])
    st.write(xfile, {"x": x})
    save_torch_module(wfile, c, tmod)
    xt = torch.from_numpy(x)
    with torch.no_grad():
        tmod.eval()
        ref = {"eval": tmod(xt).numpy()}
        torch.manual_seed(c["train_seed"])
        tmod.train()
        ref["train"] = tmod(xt).numpy()
    failed = 0
    for kind in ("eval", "train"):
        out = os.path.join(tmp, "y_%s_%s.safetensors" % (c["id"], kind))
        cmd = [binary, "run", wfile, "-i", xfile, "-o", out]
        if kind == "train":
            cmd += ["--train", "--seed", str(c["train_seed"])]
        rc, _, se = run(cmd)
        if rc != 0:
            probs = ["exit %d: %s" % (rc, se.strip())]
        else:
            with open(out, "rb") as f:
                probs = compare(st.parse(f.read())[0]["y"], ref[kind])
        nan = int(np.isnan(ref[kind]).sum())
        if probs:
            failed += 1
            print("FAIL case %s (%s) %s x=%s sign=%s" % (c["id"], kind, describe(c), c["x"],
                                                        c["sign"]))
            for p in probs + ["cmd: " + fmt_cmd(cmd)]:
                print("    " + p)
        elif verbose:
            print("ok   case %s (%s) %s x=%s sign=%s: %d of %d NaN" % (
                c["id"], kind, describe(c), c["x"], c["sign"], nan, ref[kind].size))
    return failed, 2 - failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=None, help="mha binary (when MHA_BIN is not set)")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    binary = st.find_bin(a.bin)
    if not binary or not os.access(binary, os.X_OK):
        print("error: no mha binary (set MHA_BIN or --bin)")
        print("0 passed, 1 failed")
        return 1
    torch.set_num_threads(1)
    t0 = time.time()
    all_cases = cases()
    high, probs = high_dropout_cases()
    for i, c in enumerate(high):
        c["id"] = "p%d" % i
        all_cases.append(c)
    passed, failed = 0, len(probs)
    for p in probs:
        print("FAIL " + p)
    with tempfile.TemporaryDirectory(prefix="mha_numerics_") as tmp:
        for c in all_cases:
            f, p = run_case(binary, c, tmp, a.verbose)
            failed += f
            passed += p
    print("%d cases, %.1f s, binary %s" % (len(all_cases), time.time() - t0, binary))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
