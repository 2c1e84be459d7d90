#!/usr/bin/python3
"""Side-by-side: mha vs PyTorch at GPT-2 attention shapes, in one run.

For each (b, T) it times, on the same machine in the same process tree:
  - the book's MultiHeadAttention class in PyTorch (eval, no_grad),
  - nn.MultiheadAttention(768, 12, batch_first=True) with a causal mask,
    need_weights=False (PyTorch's fused/fast path where it applies),
  - `mha bench --json` (this project),
and prints milliseconds (min and median of --repeat runs), the ratios, and
the physical bound: useful FLOPs (4 projections + the causal half of QK^T
and PV) divided by the sgemm throughput measured here in the same run.

Run with Debian's torch: /usr/bin/python3 bench/compare_torch.py [--mha build/mha]
The machine is shared and noisy: compare ratios within one run, prefer the
minimum, and rerun a few times.
"""
import argparse, json, os, statistics, subprocess, sys, time

# OpenBLAS 0.3.21 misdetects some CPUs and runs SSE3 kernels; give torch
# the same kernels mha chooses (mha sets this itself when loading OpenBLAS).
def _coretype():
    flags = open("/proc/cpuinfo").read().split("flags")[1].split("\n")[0].split()
    if all(f in flags for f in ("avx512f", "avx512bw", "avx512dq", "avx512vl")):
        return "SKYLAKEX"
    if "avx2" in flags and "fma" in flags:
        return "HASWELL"
    return None

if "OPENBLAS_CORETYPE" not in os.environ and _coretype() and not os.environ.get("MHA_COMPARE_CHILD"):
    env = dict(os.environ, OPENBLAS_CORETYPE=_coretype(), MHA_COMPARE_CHILD="1")
    os.execve(sys.executable, [sys.executable] + sys.argv, env)

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from book_modules import MultiHeadAttention  # noqa: E402


def timeit(fn, repeat, warmup=2):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return min(ts), statistics.median(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--mha", default=os.path.join(here, "..", "build", "mha"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--shapes", default="8x1024,1x1024,8x256")
    ap.add_argument("--skip-torch", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    E, H = 768, 12

    # sgemm throughput of this machine, in this run (torch -> OpenBLAS).
    a = torch.randn(8192, E)
    w = torch.randn(3 * E, E)
    gmin, _ = timeit(lambda: a @ w.t(), args.repeat)
    sgemm_gflops = 2 * 8192 * E * 3 * E / (gmin * 1e6)
    print(f"torch {torch.__version__}, {args.threads} threads, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(auto)')}")
    print(f"sgemm throughput here: {sgemm_gflops:.1f} GFLOP/s (8192x768 @ 768x2304, best of {args.repeat})")
    print()
    hdr = f"{'(b, T)':>10} | {'torch book':>16} | {'nn.MHA':>16} | {'mha':>16} | {'book/mha':>8} | {'nn/mha':>6} | {'bound':>8} | {'bound/mha':>9}"
    print(hdr)
    print("-" * len(hdr))
    results = []
    for shape in args.shapes.split(","):
        b, t = (int(v) for v in shape.split("x"))
        flops = 4 * 2 * b * t * E * E + 4 * b * H * (t * (t + 1) / 2) * (E // H)
        bound = flops / (sgemm_gflops * 1e6)
        x = torch.rand(b, t, E)
        book = nn_ = (float("nan"), float("nan"))
        if not args.skip_torch:
            torch.manual_seed(123)
            m = MultiHeadAttention(E, E, 1024, 0.0, H).eval()
            ref = nn.MultiheadAttention(E, H, bias=True, batch_first=True).eval()
            causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
            with torch.no_grad():
                book = timeit(lambda: m(x), args.repeat)
                nn_ = timeit(lambda: ref(x, x, x, attn_mask=causal, need_weights=False), args.repeat)
        out = subprocess.run([args.mha, "bench", "--batch", str(b), "--tokens", str(t), "--threads", str(args.threads),
                              "--repeat", str(args.repeat), "--json", "--no-check"],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        ours = (r["min_ms"], r["median_ms"])
        results.append(dict(b=b, t=t, torch_book_min_ms=book[0], nn_mha_min_ms=nn_[0], mha_min_ms=ours[0],
                            mha_median_ms=ours[1], bound_ms=bound))
        fmt = lambda p: f"{p[0]:7.1f} ({p[1]:6.1f})"
        print(f"{f'({b}, {t})':>10} | {fmt(book)} | {fmt(nn_)} | {fmt(ours)} | {book[0] / ours[0]:7.2f}x | {nn_[0] / ours[0]:5.2f}x"
              f" | {bound:6.1f}ms | {bound / ours[0]:9.2f}")
    print("\nms as min (median); ratios and bound/mha from the minima; bound = useful FLOPs / sgemm throughput above.")
    print(json.dumps({"sgemm_gflops": sgemm_gflops, "results": results}))


if __name__ == "__main__":
    main()
