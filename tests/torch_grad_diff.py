"""Differential test of `mha grad` against PyTorch's autograd on the book's
classes.

For each configuration (the edge cases and random ones of
torch_modules_diff.py: the five classes, T = 1, head_dim 1, d_in != d_out,
qkv_bias, v1's (d_in, d_out) weights, dropout 0 / 0.1 / 0.5, b = 1..3, big
scores), with random x and dy:

  eval   y = m.eval()(x); y.backward(dy)  vs  `mha grad W -i IN -o OUT`
  train  torch.manual_seed(S); m.train(); y = m(x); y.backward(dy)
         vs  `mha grad ... --train --seed S` (the same dropout mask)

y, dx = x.grad and grad.<name> for every parameter of state_dict() must
agree within rtol 1e-4 and atol 1e-5 * max|grad| (per tensor). The output
file must hold exactly those tensors, all F32.

In scripts/test.sh's runs after the release one (MHA_TEST_SECONDARY=1) the
default is the 32 edge cases alone, without the 18 random ones. torch's
side of the cases (x, dy, the weights file, autograd's tensors), which no
build changes, is computed by the first run that needs it and read back by
the later ones (tests/torch_cache.py).

Usage: torch_grad_diff.py [--quick | --count N] [--base-seed N] [--bin PATH]
Run with Debian's /usr/bin/python3 (python3-torch 1.13.1).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402
import book_modules as bm  # noqa: E402
import torch_cache  # noqa: E402
import torch_modules_diff as tmd  # noqa: E402
import torch  # noqa: E402

RTOL = 1e-4
ATOL = 1e-5  # times max|reference| (see compare)


def torch_grads(tmod, x, dy, train_seed, dtype=torch.float32):
    """y, dx and {grad.<name>: grad} from autograd (train_seed None: eval),
    computed in dtype (the module is converted to it and back)."""
    tmod.to(dtype)
    xt = torch.from_numpy(x).to(dtype).requires_grad_(True)
    tmod.zero_grad(set_to_none=True)
    if train_seed is None:
        tmod.eval()
    else:
        torch.manual_seed(train_seed)
        tmod.train()
    y = tmod(xt)
    y.backward(torch.from_numpy(dy).to(dtype))
    tmod.eval()
    tmod.to(torch.float32)
    out = {"y": y.detach().numpy(), "dx": xt.grad.numpy()}
    for name, p in tmod.named_parameters():
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        out["grad." + name] = g.numpy()
    return out


def compare(name, got, ref, grad_max, ref64=None):
    if got.shape != ref.shape:
        return "%s: shape %s, want %s" % (name, got.shape, ref.shape), 0.0
    g, r = got.astype(np.float64), ref.astype(np.float64)
    if not np.all(np.isfinite(g)):
        return "%s: non-finite values" % name, float("inf")
    scale = float(np.abs(r).max()) if r.size else 0.0
    # atol is relative to the largest gradient of the module (the largest
    # of dx for dx): a parameter whose gradient is zero in exact arithmetic
    # (W_key.bias: softmax does not see a shift of a row's scores; Q and K
    # at T = 1) is rounding noise on both sides.
    scale = max(scale, grad_max)
    err = np.abs(g - r)
    tol = ATOL * scale + RTOL * np.abs(r)
    rel = float(err.max()) / scale if r.size and scale > 0 else float(err.max()) if r.size else 0.0
    bad = err > tol
    if bad.any() and ref64 is not None:
        # Ill-conditioned cases (scores in the hundreds or thousands, a
        # saturated softmax: one rounding of a score or of the attention's
        # output moves a gradient by 1e-5 of its largest element; PyTorch's
        # own float32 result is then 1e-6 or more away from float64's):
        # compared with the float64 result, within 1e-4 of max|grad| or twice
        # PyTorch's own distance. mha's backward takes delta = rowsum(dO * O)
        # (as FlashAttention does) where autograd takes rowsum(P * dP); the
        # two round differently when P is nearly one-hot.
        r64 = ref64.astype(np.float64)
        own = float(np.abs(r - r64).max())
        if own > 1e-6 * scale and np.abs(g - r64).max() <= max(2.0 * own, 1e-4 * scale):
            return None, rel
    if bad.any():
        w = np.unravel_index(int(np.argmax(err - tol)), err.shape)
        return ("%s: %d of %d outside tolerance; worst at %s: got %r want %r (max|ref| %.3g)" % (
            name, int(bad.sum()), r.size, tuple(int(i) for i in w), float(g[w]), float(r[w]),
            scale)), rel
    return None, rel


def check(binary, c, kind, wfile, infile, ref, ref64, tmp, worst):
    out = os.path.join(tmp, "g_%d_%s.safetensors" % (c["id"], kind))
    cmd = [binary, "grad", wfile, "-i", infile, "-o", out]
    if kind == "train":
        cmd += ["--train", "--seed", str(c["train_seed"])]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if p.returncode != 0:
        return ["exit %d: %s\n    cmd: %s" % (p.returncode, p.stderr.decode().strip(),
                                              tmd.fmt_cmd(cmd))]
    with open(out, "rb") as f:
        tensors, _, header = st.parse(f.read())
    probs = []
    grad_max = max(float(np.abs(v).max()) for k, v in ref.items() if k.startswith("grad.") and v.size)
    if set(tensors) != set(ref):
        probs.append("tensors %s, want %s" % (sorted(tensors), sorted(ref)))
    for name, r in ref.items():
        if name not in tensors:
            continue
        if header[name]["dtype"] != "F32":
            probs.append("%s: dtype %s" % (name, header[name]["dtype"]))
            continue
        msg, rel = compare(name, tensors[name], r, grad_max if name.startswith("grad.") else 0.0,
                           ref64[name])
        key = kind + (" y" if name == "y" else " dx" if name == "dx" else " params")
        worst[key] = max(worst.get(key, 0.0), rel)
        if msg:
            probs.append(msg)
    if probs:
        probs.append("cmd: %s" % tmd.fmt_cmd(cmd))
    return probs


def torch_side(c, tmp):
    """What the case's check needs from torch: the input file's tensors, the
    weights file's bytes, autograd's tensors in F32 and F64 per mode."""
    m = c["module"]
    tmod = bm.construct(m, c, seed=c["seed"])
    rng = np.random.default_rng(5000 + c["id"])
    shape = (c["b"], c["T"], c["d_in"]) if m in bm.BATCHED else (c["T"], c["d_in"])
    x = rng.standard_normal(shape).astype(np.float32)
    if c["note"] == "large x":
        x *= 40.0
    W = bm.output_width(m, c)
    dy = rng.standard_normal(shape[:-1] + (W,)).astype(np.float32)
    wfile = os.path.join(tmp, "w_%d.safetensors" % c["id"])
    tmd.save_torch_module(wfile, c, tmod)
    with open(wfile, "rb") as f:
        side = {"x": x, "dy": dy, "weights": f.read()}
    for kind in ("eval", "train"):
        seed = c["train_seed"] if kind == "train" else None
        side[kind] = (torch_grads(tmod, x, dy, seed), torch_grads(tmod, x, dy, seed, torch.float64))
    return side


def torch_sides(cases, key):
    """torch_side() of every case ({"error": ...} where it raised), through
    torch_cache under the key of this set of cases."""
    def compute():
        out = []
        with tempfile.TemporaryDirectory(prefix="mha_grad_torch_") as tmp:
            for c in cases:
                try:
                    out.append(torch_side(c, tmp))
                except Exception as e:  # noqa: BLE001
                    out.append({"error": repr(e)})
        return out
    with open(os.path.abspath(__file__), encoding="utf-8") as f, \
            open(os.path.join(HERE, "torch_modules_diff.py"), encoding="utf-8") as g:
        src = f.read() + g.read()  # the cases and torch's side are these files'
    return torch_cache.cached("torch_grad_diff", (key, src), compute)


def run_case(binary, c, side, tmp, worst, verbose):
    if "error" in side:
        raise RuntimeError(side["error"])
    infile = os.path.join(tmp, "in_%d.safetensors" % c["id"])
    st.write(infile, {"x": side["x"], "dy": side["dy"]})
    wfile = os.path.join(tmp, "w_%d.safetensors" % c["id"])
    with open(wfile, "wb") as f:
        f.write(side["weights"])
    failed = 0
    for kind in ("eval", "train"):
        ref, ref64 = side[kind]
        probs = check(binary, c, kind, wfile, infile, ref, ref64, tmp, worst)
        if probs:
            failed += 1
            print("FAIL case %d (%s) %s" % (c["id"], kind, tmd.describe(c)))
            for p in probs:
                print("    " + p)
        elif verbose:
            print("ok   case %d (%s) %s" % (c["id"], kind, tmd.describe(c)))
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="20 cases instead of 50")
    ap.add_argument("--count", type=int, default=None)
    ap.add_argument("--base-seed", type=int, default=20261130)
    ap.add_argument("--bin", default=None)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    # scripts/test.sh's secondary runs: the edge cases alone (as above)
    count = a.count if a.count is not None else (
        20 if a.quick else len(tmd.edge_cases()) if st.secondary() else 50)
    binary = st.find_bin(a.bin)
    if not binary or not os.access(binary, os.X_OK):
        print("error: no mha binary (set MHA_BIN or --bin)")
        return 1
    torch.set_num_threads(1)
    t0 = time.time()
    cases = tmd.make_cases(count, a.base_seed)
    sides = torch_sides(cases, (count, a.base_seed))
    worst, failed = {}, 0
    with tempfile.TemporaryDirectory(prefix="mha_grad_") as tmp:
        for c, side in zip(cases, sides):
            try:
                failed += run_case(binary, c, side, tmp, worst, a.verbose)
            except Exception as e:  # noqa: BLE001
                failed += 1
                print("FAIL case %d (exception) %s: %r" % (c["id"], tmd.describe(c), e))
    for k in sorted(worst):
        print("%-13s max |err| / max|ref| = %.3g" % (k, worst[k]))
    print("%d cases, %.1f s, binary %s" % (len(cases), time.time() - t0, binary))
    print("%d checks passed, %d failed" % (2 * len(cases) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
