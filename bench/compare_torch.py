#!/usr/bin/python3
"""Side-by-side: mha vs PyTorch at GPT-2 attention shapes, in one run.

For each (b, T) it times, on the same machine in the same process tree:
  - the book's MultiHeadAttention class in PyTorch (eval, no_grad),
  - nn.MultiheadAttention(768, 12, batch_first=True) with a causal mask,
    need_weights=False (PyTorch's fused/fast path where it applies),
  - `mha bench --json` (this project),
  - with --ort: ONNX Runtime's fused causal Attention (com.microsoft::Attention,
    unidirectional=1, + out_proj), from onnxruntime-node installed with
      npm install --prefix bench/.ort --ignore-scripts onnxruntime-node@1.30.0
    (--ignore-scripts: its install script fetches GPU binaries; the CPU ones
    ship in the package),
and prints milliseconds (min and median of --repeat runs), the ratios, and
the physical bound: useful FLOPs (4 projections + the causal half of QK^T
and PV) divided by the best sgemm throughput measured in the same run, at
8192x2304x768 (x @ W^T, the fused Q/K/V projection), the best of:
  - torch's a @ w.t() in this process (its OpenBLAS, configured only by the
    user's environment: this script never sets OPENBLAS_CORETYPE for torch;
    the core type it runs is printed, via threadpoolctl or the loaded
    libopenblas's openblas_get_corename(), else "unknown"),
  - build/bench/bench_sgemm in its own process: the library's projection
    GEMM (mha__sgemm, the backend mha_runtime_blas() names),
  - bench_sgemm --openblas in its own process: OpenBLAS's threaded
    cblas_sgemm with OPENBLAS_CORETYPE set, in that child only, to the best
    core type for this CPU (/proc/cpuinfo: AVX-512 F/BW/DQ/VL -> SkylakeX,
    AVX2+FMA -> Zen on AMD, Haswell otherwise). The choice lives here, not
    in the library.
All are printed (bench_sgemm also at 8192x768x768 and 2048^3).

With --train the forward is also timed in training mode (dropout 0.1 on
the attention weights): the book's class in train mode (no_grad) against
`mha bench --train` (PyTorch's mask) and `--train --philox`, in a second
table with the same bound (dropout adds no FLOP to the bound). ORT's
Attention op has no dropout, so it has no training row.

With --backward it compares a training step instead: the book's
MultiHeadAttention(768, 768, 1024, 0.1, 12) forward + autograd backward
(y.backward(dy): dx and every parameter's gradient), in eval and in training
mode, against `mha bench --backward` (eval; --train with PyTorch's mask;
--train --philox), and prints the ms, the torch/mha ratios and the bound:
the step's FLOPs (the forward's, plus dX and dW of the 4 projections, plus
the attention core's backward counted as 2.5x its forward: five products of
the forward's size, the recomputed S included; 161 GFLOP at (8, 1024)) at
the best sgemm throughput measured in the same run, as above.

Run with Debian's torch: /usr/bin/python3 bench/compare_torch.py [--mha build/mha] [--ort]
(build first: cmake -S . -B build && cmake --build build; bench_sgemm is
looked up as bench/bench_sgemm beside --mha, or given with --bench-sgemm)
The machine is shared and noisy: compare ratios within one run, prefer the
minimum, and rerun a few times.
"""
import argparse, ctypes, json, os, statistics, subprocess, sys, time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from book_modules import MultiHeadAttention  # noqa: E402


def best_coretype():
    """The OpenBLAS core type for this CPU's features (None: let OpenBLAS choose).

    OpenBLAS 0.3.21 (Debian 12) picks its kernels from the CPU model and falls
    back to SSE3 ones on models it does not know (e.g. virtualised Xeons).
    Zen vs Haswell on this project's Zen 3 VM (2 threads, 8192x2304x768): no
    difference beyond the VM's noise (118-148 vs 127-155 GFLOP/s alternating);
    Debian's 0.3.21 builds the same sgemm kernel source for both (equal-sized
    sgemm_kernel_ZEN / _HASWELL). Zen is what OpenBLAS itself detects on
    AMD, so it is used there. This choice is made only
    here, for the benchmark's OpenBLAS child, never in the library.
    """
    try:
        info = open("/proc/cpuinfo").read()
    except OSError:
        return None
    flags, vendor = set(), ""
    for line in info.splitlines():
        key, _, val = line.partition(":")
        if key.strip() == "flags" and not flags:
            flags = set(val.split())
        elif key.strip() == "vendor_id" and not vendor:
            vendor = val.strip()
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Zen" if vendor == "AuthenticAMD" else "Haswell"
    return None


def torch_openblas_core():
    """The kernels torch's OpenBLAS runs in this process ("unknown" if not found)."""
    try:
        import threadpoolctl
        for lib in threadpoolctl.threadpool_info():
            if lib.get("internal_api") == "openblas":
                return f"{lib.get('architecture')} (threadpoolctl)"
    except Exception:
        pass
    # Without threadpoolctl: ask the OpenBLAS this process has loaded.
    try:
        paths = {l.split()[-1] for l in open("/proc/self/maps") if "libopenblas" in l.split()[-1]}
        for path in sorted(paths):
            fn = ctypes.CDLL(path).openblas_get_corename
            fn.restype = ctypes.c_char_p
            return f"{fn().decode()} ({os.path.basename(path)})"
    except Exception:
        pass
    return "unknown"


SGEMM_SHAPE = (8192, 2304, 768)  # the fused Q/K/V projection at b*T = 8192, x @ W^T


def bench_sgemm(args, openblas):
    """bench_sgemm in its own process: {(m, n, k): min_ms} and its JSON, or None."""
    cmd = [args.bench_sgemm, "--json", "--threads", str(args.threads), "--repeat", str(args.repeat)]
    env = dict(os.environ)
    if openblas:
        cmd.append("--openblas")
        if best_coretype():
            env["OPENBLAS_CORETYPE"] = best_coretype()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"bench_sgemm{' --openblas' if openblas else ''} failed: {e}", file=sys.stderr)
        return None
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return {(x["m"], x["n"], x["k"]): x["min_ms"] for x in r["results"]}, r


def timeit(fn, repeat, warmup=2):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return min(ts), statistics.median(ts)


class _AttentionOp(torch.autograd.Function):
    """Stands for ONNX Runtime's fused Attention op in the exported graph."""

    @staticmethod
    def forward(ctx, x, w, b):
        return x.clone()  # only the exported graph is run

    @staticmethod
    def symbolic(g, x, w, b):
        return g.op("com.microsoft::Attention", x, w, b, num_heads_i=12, unidirectional_i=1)


class _FusedForOrt(nn.Module):
    """The book's MultiHeadAttention as ORT's fused Attention + out_proj."""

    def __init__(self, m):
        super().__init__()
        w = torch.cat([m.W_query.weight, m.W_key.weight, m.W_value.weight], 0).t().contiguous()
        self.w = nn.Parameter(w)                      # (768, 2304)
        self.b = nn.Parameter(torch.zeros(w.shape[1]))  # qkv_bias=False
        self.out_proj = m.out_proj

    def forward(self, x):
        return self.out_proj(_AttentionOp.apply(x, self.w, self.b))


def ort_times(args, book_m, tmpdir, shapes):
    """{(b, t): (min, median)} from ONNX Runtime, or None when not installed."""
    here = os.path.dirname(os.path.abspath(__file__))
    mods = os.path.join(args.ort_dir, "node_modules")
    if not os.path.isdir(os.path.join(mods, "onnxruntime-node")):
        return None
    model = os.path.join(tmpdir, "fused.onnx")
    if not os.path.exists(model):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(_FusedForOrt(book_m).eval(), (torch.rand(1, 8, 768),), model, input_names=["x"],
                              output_names=["y"], dynamic_axes={"x": {0: "b", 1: "t"}, "y": {0: "b", 1: "t"}},
                              opset_version=14, custom_opsets={"com.microsoft": 1})
    out = subprocess.run(["node", os.path.join(here, "ort_bench.js"), model, str(args.threads), str(args.repeat),
                          ",".join(f"{b}x{t}" for b, t in shapes)],
                         capture_output=True, text=True, check=True, env=dict(os.environ, NODE_PATH=mods))
    res = {}
    for line in out.stdout.splitlines():
        r = json.loads(line)
        res[(r["b"], r["t"])] = (r["min_ms"], r["median_ms"])
    return res


GEMM_NAMES = ("mha", "openblas")


def measure_sgemm(args, a, w, keep, sgemm_json):
    """One round of the sgemm probes (torch in this process, bench_sgemm twice)."""
    keep(("sgemm", "torch"), timeit(lambda: a @ w.t(), args.repeat))
    for what, openblas in zip(GEMM_NAMES, (False, True)):
        time.sleep(1.0)  # torch's worker threads go idle
        r = bench_sgemm(args, openblas)
        if r is not None:
            sgemm_json[what] = r[1]
            for shape, mn in r[0].items():
                keep(("sgemm", what, shape), (mn, mn))


def report_sgemm(args, best, sgemm_json):
    """Prints the probes; returns the bound's rate (GFLOP/s), its source and every rate."""
    gf = lambda ms, m, n, k: 2 * m * n * k / (ms * 1e6)
    sgemm = {"torch": gf(best[("sgemm", "torch")][0], *SGEMM_SHAPE)}
    for what in GEMM_NAMES:
        if ("sgemm", what, SGEMM_SHAPE) in best:
            sgemm[what] = gf(best[("sgemm", what, SGEMM_SHAPE)][0], *SGEMM_SHAPE)
    best_what = max(sgemm, key=sgemm.get)
    print(f"sgemm, {args.threads} threads, min over {args.rounds} rounds x {args.repeat} calls, GFLOP/s at "
          "8192x2304x768 (x @ W^T) / 8192x768x768 (x @ W^T) / 2048^3:")
    names = {"torch": f"torch a @ w.t() (its OpenBLAS, core {torch_openblas_core()}, "
                      f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')})",
             "mha": f"mha__sgemm ({sgemm_json.get('mha', {}).get('mha_blas', '?')})",
             "openblas": f"OpenBLAS cblas_sgemm, own threads (core {sgemm_json.get('openblas', {}).get('corename', '?')}, "
                         f"OPENBLAS_CORETYPE={best_coretype() or '(unset)'})"}
    for what in ("torch",) + GEMM_NAMES:
        if what not in sgemm:
            print(f"  {what:>8}: not measured ({args.bench_sgemm} missing or failed)")
            continue
        figs = [f"{sgemm[what]:6.1f}"]
        if what != "torch":
            for sh in ((8192, 768, 768), (2048, 2048, 2048)):
                figs.append(f"{gf(best[('sgemm', what, sh)][0], *sh):6.1f}")
        print(f"  {what:>8}: {' / '.join(figs)}   {names[what]}")
    print(f"best sgemm: {sgemm[best_what]:.1f} GFLOP/s ({best_what}, 8192x2304x768): the bound below")
    return sgemm[best_what], best_what, sgemm


def module_flops(b, t, E=768, H=12):
    """The forward's useful FLOPs (4 projections, the causal half of QK^T and PV) and the core's share."""
    core = 4 * b * H * (t * (t + 1) / 2) * (E // H)
    return 4 * 2 * b * t * E * E + core, core


def compare_backward(args, shapes):
    """torch autograd on the book's class vs mha bench --backward."""
    E, H = 768, 12
    torch.manual_seed(123)
    book_m = MultiHeadAttention(E, E, 1024, 0.1, H)
    best = {}
    sgemm_json = {}
    a, w = torch.randn(8192, E), torch.randn(3 * E, E)

    def keep(key, mn):
        if isinstance(mn, tuple):  # the sgemm probes' (min, median)
            cur = best.setdefault(key, [float("inf"), []])
            cur[0] = min(cur[0], mn[0])
            cur[1].append(mn[1])
        else:
            best[key] = min(best.get(key, float("inf")), mn)

    for rnd in range(args.rounds):
        measure_sgemm(args, a, w, keep, sgemm_json)
        for b, t in shapes:
            x = torch.rand(b, t, E, requires_grad=True)
            dy = torch.rand(b, t, E)
            rep = args.repeat * max(1, 8192 // (b * t) // 2)
            for mode in ("eval", "train"):
                if args.skip_torch:
                    break
                book_m.train(mode == "train")

                def step():
                    book_m.zero_grad(set_to_none=False)
                    x.grad = None
                    book_m(x).backward(dy)
                keep(("torch", mode, (b, t)), timeit(step, rep)[0])
            time.sleep(1.0)
            for mode, flags in (("eval", []), ("train", ["--train"]), ("philox", ["--train", "--philox"])):
                out = subprocess.run([args.mha, "bench", "--backward", "--batch", str(b), "--tokens", str(t),
                                      "--threads", str(args.threads), "--repeat", str(rep), "--json",
                                      "--no-check"] + flags, capture_output=True, text=True, check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                keep(("mha", mode, (b, t)), r["min_ms"])
                keep(("mha bwd", mode, (b, t)), r["backward_min_ms"])
        print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr)
    print(f"torch {torch.__version__}, {args.threads} threads, "
          f"mha: {subprocess.run([args.mha, '--version'], capture_output=True, text=True).stdout.strip()}")
    rate, rate_what, rates = report_sgemm(args, best, sgemm_json)
    print("\nMultiHeadAttention(768, 768, 1024, 0.1, 12): forward + backward (dx and every parameter's gradient),")
    print(f"min ms over {args.rounds} rounds; mha's backward alone in brackets\n")
    hdr = (f"{'(b, T)':>10} | {'torch eval':>10} | {'torch train':>11} | {'mha eval':>17} | {'mha train':>17} |"
           f" {'mha philox':>17} | {'eval x':>6} | {'train x':>7} | {'philox x':>8} | {'bound':>8} |"
           f" bound/mha eval / train / philox")
    print(hdr)
    print("-" * len(hdr))
    nan = float("nan")
    results = []
    for b, t in shapes:
        g = lambda *k: best.get(k, nan)
        te, tt = g("torch", "eval", (b, t)), g("torch", "train", (b, t))
        me, mt, mp = g("mha", "eval", (b, t)), g("mha", "train", (b, t)), g("mha", "philox", (b, t))
        be, bt, bp = g("mha bwd", "eval", (b, t)), g("mha bwd", "train", (b, t)), g("mha bwd", "philox", (b, t))
        fwd, core = module_flops(b, t, E, H)
        flops = fwd + 2 * (fwd - core) + 2.5 * core
        bound = flops / (rate * 1e6)
        print(f"{f'({b}, {t})':>10} | {te:10.1f} | {tt:11.1f} | {me:7.1f} ({be:7.1f}) | {mt:7.1f} ({bt:7.1f}) |"
              f" {mp:7.1f} ({bp:7.1f}) | {te / me:5.2f}x | {tt / mt:6.2f}x | {tt / mp:7.2f}x | {bound:6.1f}ms |"
              f" {bound / me:14.2f} / {bound / mt:5.2f} / {bound / mp:6.2f}")
        results.append(dict(b=b, t=t, torch_eval_ms=te, torch_train_ms=tt, mha_eval_ms=me, mha_train_ms=mt,
                            mha_philox_ms=mp, mha_backward_eval_ms=be, mha_backward_train_ms=bt,
                            mha_backward_philox_ms=bp, gflop=flops / 1e9, bound_ms=bound))
    print("\nratios: torch's step / mha's (philox: against torch's training step); bound = the step's FLOPs")
    print("(the forward's, dX and dW of the projections, 2.5x the core's forward) at the best sgemm rate above")
    print(json.dumps({"sgemm_gflops": rate, "sgemm_best": rate_what, "sgemm_gflops_by": rates, "backward": results}))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--mha", default=os.path.join(here, "..", "build", "mha"))
    ap.add_argument("--bench-sgemm", help="bench_sgemm program (default: bench/bench_sgemm in --mha's build dir)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5, help="timed calls per measurement")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the minimum over all is kept")
    ap.add_argument("--shapes", default="8x1024,1x1024,8x256")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--ort", action="store_true", help="also time ONNX Runtime's fused Attention (see above)")
    ap.add_argument("--train", action="store_true",
                    help="also time the forward in training mode (dropout 0.1; see above)")
    ap.add_argument("--backward", action="store_true",
                    help="compare a training step (forward + backward) with torch autograd")
    ap.add_argument("--ort-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".ort"))
    args = ap.parse_args()
    if not args.bench_sgemm:
        args.bench_sgemm = os.path.join(os.path.dirname(os.path.abspath(args.mha)), "bench", "bench_sgemm")
    torch.set_num_threads(args.threads)
    E, H = 768, 12
    shapes = [tuple(int(v) for v in sh.split("x")) for sh in args.shapes.split(",")]

    if args.backward:
        return compare_backward(args, shapes)
    a = torch.randn(8192, E)
    w = torch.randn(3 * E, E)
    torch.manual_seed(123)
    book_m = MultiHeadAttention(E, E, 1024, 0.0, H).eval()
    nn_m = nn.MultiheadAttention(E, H, bias=True, batch_first=True).eval()
    best = {}  # (what, shape) -> [min, list of medians]
    import tempfile
    tmpdir = tempfile.mkdtemp(prefix="mha_compare_")
    have_ort = False
    sgemm_json = {}  # what -> bench_sgemm's last JSON

    def keep(key, res):
        mn, med = res
        cur = best.setdefault(key, [float("inf"), []])
        cur[0] = min(cur[0], mn)
        cur[1].append(med)

    for rnd in range(args.rounds):
        # sgemm throughput of this machine, in this run: torch (its OpenBLAS,
        # as the user's environment configures it) in this process, then
        # bench_sgemm in its own processes: the library's backend, and
        # OpenBLAS with the best core type for this CPU.
        measure_sgemm(args, a, w, keep, sgemm_json)
        for b, t in shapes:
            x = torch.rand(b, t, E)
            # more calls for the short shapes, so each measurement spans ~1 s
            rep = args.repeat * max(1, 8192 // (b * t) // 2)
            if not args.skip_torch:
                causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
                with torch.no_grad():
                    keep(("book", (b, t)), timeit(lambda: book_m(x), rep))
                    keep(("nn", (b, t)), timeit(lambda: nn_m(x, x, x, attn_mask=causal, need_weights=False), rep))
                if args.train:  # the same weights, dropout 0.1 (mha bench --train's default)
                    book_m.dropout.p = 0.1
                    book_m.train()
                    with torch.no_grad():
                        keep(("book train", (b, t)), timeit(lambda: book_m(x), rep))
                    book_m.eval()
                    book_m.dropout.p = 0.0
            # Let torch's worker threads go idle (OpenMP and OpenBLAS spin for
            # a while after work) so they do not steal cycles from mha.
            time.sleep(1.0)
            modes = (("mha", []),)
            if args.train:
                modes += (("mha train", ["--train"]), ("mha philox", ["--train", "--philox"]))
            for what, flags in modes:
                out = subprocess.run([args.mha, "bench", "--batch", str(b), "--tokens", str(t), "--threads",
                                      str(args.threads), "--repeat", str(rep), "--json", "--no-check"] + flags,
                                     capture_output=True, text=True, check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                keep((what, (b, t)), (r["min_ms"], r["median_ms"]))
        if args.ort:
            time.sleep(1.0)
            ort = ort_times(args, book_m, tmpdir, shapes)
            if ort is None:
                print(f"--ort: onnxruntime-node not found under {args.ort_dir} (see --help)", file=sys.stderr)
                args.ort = False
            else:
                have_ort = True
                for shape, r in ort.items():
                    keep(("ort", shape), r)
        print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr)

    print(f"torch {torch.__version__}, {args.threads} threads, "
          f"mha: {subprocess.run([args.mha, '--version'], capture_output=True, text=True).stdout.strip()}")
    sgemm_gflops, best_what, sgemm = report_sgemm(args, best, sgemm_json)
    print()
    hdr = (f"{'(b, T)':>10} | {'torch book':>16} | {'nn.MHA':>16} | {'ORT fused':>16} | {'mha':>16} | {'book/mha':>8} |"
           f" {'nn/mha':>6} | {'ORT/mha':>7} | {'bound':>8} | {'bound/mha':>9}")
    print(hdr)
    print("-" * len(hdr))
    results = []
    nan = (float("nan"), [float("nan")])
    for b, t in shapes:
        bound = module_flops(b, t, E, H)[0] / (sgemm_gflops * 1e6)
        book, nn_, ours = best.get(("book", (b, t)), nan), best.get(("nn", (b, t)), nan), best[("mha", (b, t))]
        ort = best.get(("ort", (b, t)), nan)
        fmt = lambda p: f"{p[0]:7.1f} ({statistics.median(p[1]):6.1f})"
        print(f"{f'({b}, {t})':>10} | {fmt(book)} | {fmt(nn_)} | {fmt(ort)} | {fmt(ours)} | {book[0] / ours[0]:7.2f}x |"
              f" {nn_[0] / ours[0]:5.2f}x | {ort[0] / ours[0]:6.2f}x | {bound:6.1f}ms | {bound / ours[0]:9.2f}")
        results.append(dict(b=b, t=t, torch_book_min_ms=book[0], nn_mha_min_ms=nn_[0], ort_fused_min_ms=ort[0],
                            mha_min_ms=ours[0], bound_ms=bound))
    print("\nms as min over all rounds (median of the rounds' medians); ratios and bound/mha from the minima;")
    print("bound = useful FLOPs (4 projections + causal half of QK^T and PV) / the best sgemm throughput above.")
    if not have_ort:
        print("ORT: not measured (run with --ort after installing onnxruntime-node, see --help).")
    train = []
    if args.train:
        print("\ntraining mode (dropout 0.1 on the attention weights), min (median) ms, the same bound:\n")
        hdr = (f"{'(b, T)':>10} | {'torch book':>16} | {'mha torch mask':>16} | {'mha philox':>16} | {'book/mha':>8} |"
               f" {'book/philox':>11} | {'bound':>8} | {'bound/mha':>9} | {'bound/philox':>12}")
        print(hdr)
        print("-" * len(hdr))
        for b, t in shapes:
            bound = module_flops(b, t, E, H)[0] / (sgemm_gflops * 1e6)
            book, mt, mp = (best.get((k, (b, t)), nan) for k in ("book train", "mha train", "mha philox"))
            fmt = lambda p: f"{p[0]:7.1f} ({statistics.median(p[1]):6.1f})"
            print(f"{f'({b}, {t})':>10} | {fmt(book)} | {fmt(mt)} | {fmt(mp)} | {book[0] / mt[0]:7.2f}x |"
                  f" {book[0] / mp[0]:10.2f}x | {bound:6.1f}ms | {bound / mt[0]:9.2f} | {bound / mp[0]:12.2f}")
            train.append(dict(b=b, t=t, torch_book_train_min_ms=book[0], mha_train_min_ms=mt[0],
                              mha_philox_min_ms=mp[0], bound_ms=bound))
    print(json.dumps({"sgemm_gflops": sgemm_gflops, "sgemm_best": best_what, "sgemm_gflops_by": sgemm,
                      "results": results, "train": train}))


if __name__ == "__main__":
    main()
