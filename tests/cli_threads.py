#!/usr/bin/python3
"""`mha run` at GPT-2 attention size gives the same bytes with 1, 2 and 3
threads: MultiHeadAttention(768, 768, 1024, 0.1, 12) from `mha init`, x of
(1, 1024, 768), in eval mode and with `--train --seed 5` (PyTorch's mask),
under every MHA_ISA the CPU supports (ref at T=64: its loops are slow), and
whatever OPENBLAS_CORETYPE the environment holds. Prints
"N passed, N failed"; exits 1 on any failure. Only OpenMP builds have
this test (tests/CMakeLists.txt).

--sanitized (the ASan+UBSan build): T=256, not 1024, for the fast ISAs:
the same kernels, GEMMs and splits of the 12 heads' rows among 1-3
threads, on a quarter of the rows (the other builds run T=1024).
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

MHA = st.find_bin()
tally = st.Tally()
check = tally.check


def run(args, env_extra):
    env = dict(os.environ, **env_extra)
    p = subprocess.run([MHA] + args, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("mha %s failed (%d): %s" % (" ".join(args), p.returncode, p.stderr))
    return p


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":")[1].split())
    except OSError:
        pass
    return set()


def main():
    if not MHA:
        raise SystemExit("mha binary not found (set MHA_BIN)")
    big_t = 256 if "--sanitized" in sys.argv else 1024
    flags = cpu_flags()
    isas = ["ref"]
    if {"avx2", "fma"} <= flags:
        isas.append("avx2")
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        isas.append("avx512")
    with tempfile.TemporaryDirectory() as d:
        w = os.path.join(d, "w.safetensors")
        run(["init", "MultiHeadAttention", "--d-in", "768", "--d-out", "768", "--context-length", "1024",
             "--num-heads", "12", "--dropout", "0.1", "--seed", "1", "-o", w], {})
        rng = np.random.default_rng(0)
        for isa in isas:
            T = 64 if isa == "ref" else big_t
            x = os.path.join(d, "x%d.safetensors" % T)
            if not os.path.exists(x):
                st.write(x, {"x": rng.standard_normal((1, T, 768), dtype=np.float32)})
            env = {"MHA_ISA": isa}
            for mode in ([], ["--train", "--seed", "5"]):
                outs = []
                for n in (1, 2, 3):
                    y = os.path.join(d, "y_%s_%d.safetensors" % (isa, n))
                    run(["run", w, "-i", x, "-o", y, "--threads", str(n)] + mode, env)
                    with open(y, "rb") as f:
                        outs.append(f.read())
                name = "%s %s T=%d" % (isa, " ".join(mode) or "eval", T)
                for n, o in zip((2, 3), outs[1:]):
                    check(o == outs[0], "%s: 1 vs %d threads differ" % (name, n))
                print("%s: 1/2/3 threads %s" % (name, "identical" if outs[0] == outs[1] == outs[2] else "DIFFER"))
    print("cli_threads: %d passed, %d failed" % (tally.passes, tally.fails))
    return tally.status()


if __name__ == "__main__":
    sys.exit(main())
