"""Out of memory is an error, never a hang (or a crash).

`mha run`, `mha grad` and `mha generate` at GPT-2 sizes run under a sweep of
address-space limits (RLIMIT_AS, set in the child before exec), from limits
where the program cannot even load its input to limits where it succeeds.
At every limit the command must either succeed (exit 0) or exit 1 with one
line on stderr saying "out of memory"; never a signal, another status, or
more than 5 seconds to fail (or, in a build without BLAS, longer than a
success takes) (OpenBLAS, which retries a failed buffer allocation
forever, and oneDNN, which crashes when its first-call set-up cannot map
its code, are guarded by probes: src/kernels/gemm_openblas.c and
gemm_onednn.c). At least one limit of
each command must fail with "out of memory" and the largest must succeed.
The sweep of a command stops at its first success (then only the largest
limit, run first to time a success, is left): a run that succeeded under a
limit allocated nothing a larger limit refuses, so larger limits reach no
new failure point. `run` also runs under 200000 KiB, the `ulimit -v 200000`
of issue 10.

Skipped (77) in a sanitizer build: ASan reserves terabytes of address space
at start, so an address-space limit cannot work there (--sanitized, which
ctest passes in such a build, or a binary linked to libasan).

Usage: cli_oom.py [--bin PATH] [--sanitized] [-v]   (binary: $MHA_BIN, else
--bin, else ../build*/mha). Plain python3 with numpy.
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402

MIB = 1 << 20
LIMIT_S = 5.0


def sanitized(binary):
    try:
        out = subprocess.run(["ldd", binary], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=30).stdout.decode()
    except (OSError, subprocess.SubprocessError):
        return False
    return "libasan" in out or "libtsan" in out


def run_limited(args, limit_bytes):
    def preexec():
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    t0 = time.monotonic()
    try:
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           preexec_fn=preexec, timeout=60)
    except subprocess.TimeoutExpired:
        return None, "", time.monotonic() - t0
    return p.returncode, p.stderr.decode("utf-8", "replace"), time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin")
    ap.add_argument("--sanitized", action="store_true")
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args()
    binary = st.find_bin(a.bin)
    if not binary:
        print("error: no mha binary (set MHA_BIN or --bin)")
        return 1
    if a.sanitized or sanitized(binary):
        print("cli_oom: skipped: a sanitizer build cannot run under an address-space limit")
        return 77

    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        def path(n):
            return os.path.join(tmp, n)

        def must(args):
            p = subprocess.run([binary] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            if p.returncode != 0:
                sys.exit("setup failed: %s: %s" % (" ".join(args), p.stderr.decode()))

        # the case: MultiHeadAttention(768, 768, 1024, 0, 12), x (8,
        # 1024, 768); a build without BLAS takes a minute for that where it
        # succeeds: a quarter of the width and a quarter of the tokens there
        version = subprocess.run([binary, "--version"], stdout=subprocess.PIPE).stdout.decode()
        # (and with the reference kernels forced, MHA_ISA=ref: plain loops)
        small = "builtin" in version or "kernels ref" in version
        E, T, H = (256, 256, 4) if small else (768, 1024, 12)
        must(["init", "MultiHeadAttention", "--d-in", str(E), "--d-out", str(E),
              "--context-length", str(T), "--num-heads", str(H), "--seed", "1", "-o", path("m.st")])
        rng = np.random.default_rng(0)
        x = rng.standard_normal((8, T, E)).astype(np.float32)
        st.write(path("x.st"), {"x": x})
        xg = x[:4]  # half the batch: the backward's time counts
        st.write(path("g.st"), {"x": xg, "dy": rng.standard_normal(xg.shape).astype(np.float32)})
        # a GPT with GPT-2's attention and context but 2 layers and a small
        # vocabulary (token ids, no tokenizer): 60 MB of weights
        must(["init", "GPTModel", "--vocab-size", "2000", "--context-length", str(T),
              "--emb-dim", str(E), "--n-heads", str(H), "--n-layers", "2", "--seed", "1",
              "-o", path("gpt.st")])

        cases = [
            ("run", ["run", path("m.st"), "-i", path("x.st"), "-o", path("y.st"),
                     "--threads", "2"]),
            ("run --train", ["run", path("m.st"), "-i", path("x.st"), "-o", path("y.st"),
                             "--train", "--seed", "3", "--threads", "2"]),
            ("grad", ["grad", path("m.st"), "-i", path("g.st"), "-o", path("gr.st"),
                      "--threads", "2"]),
            ("generate", ["generate", path("gpt.st"), "--ids", ",".join(["7"] * (T - 124)),
                          "--max-new-tokens", "3", "--threads", "2"]),
            ("generate --no-kv-cache", ["generate", path("gpt.st"), "--ids", "1,2,3",
                                        "--max-new-tokens", "3", "--no-kv-cache",
                                        "--threads", "2"]),
        ]
        limits_mib = [12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 400, 2048]
        for name, args in cases:
            nomem = 0
            rows = []
            limits = list(limits_mib)
            always = {limits[-1]}
            if name == "run":  # issue 10's ulimit -v 200000 (KiB)
                limits.insert(limits.index(256), 200000 / 1024)
                always.add(200000 / 1024)
            succeeded = False
            # the time a success takes (the largest limit, whose row this
            # is): a build without BLAS and OpenMP can take longer than 5 s
            # to reach the failing allocation; a failure must never take
            # longer than a success
            largest = run_limited([binary] + args, limits[-1] * MIB)
            limit_s = max(LIMIT_S, 1.5 * largest[2]) if largest[0] == 0 else LIMIT_S
            for lim in limits:
                if succeeded and lim not in always:
                    continue  # no new failure point above a success
                if lim == limits[-1]:
                    rc, err, secs = largest
                else:
                    rc, err, secs = run_limited([binary] + args, int(lim * MIB))
                succeeded = succeeded or rc == 0
                lines = [ln for ln in err.splitlines() if ln.strip()]
                # the time limit is for failing (a success takes what it takes)
                ok = rc == 0 or (rc == 1 and len(lines) == 1 and "out of memory" in lines[0]
                                 and secs < limit_s)
                if rc == 127 and "loading shared libraries" in err:
                    ok = True  # below what the program's libraries take: it never started
                    rows.append((lim, rc, 0.0, ""))
                    continue
                if rc == 1 and ok:
                    nomem += 1
                rows.append((lim, rc, secs, lines[-1] if lines else ""))
                if not ok:
                    failed += 1
                    print("FAIL %s under %g MiB: status %s after %.2f s: %s"
                          % (name, lim, rc, secs, err.strip()[:400]))
                elif a.v:
                    print("  %s under %6.1f MiB: status %s, %.2f s %s"
                          % (name, lim, rc, secs, lines[-1][:150] if lines else ""))
            if nomem == 0:
                failed += 1
                print("FAIL %s: no limit gave 'out of memory'" % name)
            if rows[-1][1] != 0:
                failed += 1
                print("FAIL %s: fails under %g MiB too: %s" % (name, rows[-1][0], rows[-1][3]))
            worst = max([r[2] for r in rows if r[1] != 0] or [0.0])
            print("%-24s %d limits, %d out of memory, the slowest exit 1 after %.2f s"
                  % (name, len(rows), nomem, worst))
    print("cli_oom: %s" % ("ok" if failed == 0 else "%d failures" % failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
