#!/usr/bin/python3
"""`mha bench` and `mha bench GPTModel` report mha's own peak resident
memory (peak_rss_mib), not the parent's: started from this process, which
first makes 512 MiB of its pages resident, then

  1. `mha bench` on a tiny module must report under a quarter of this
     process's size (getrusage's ru_maxrss, which survives exec, gave the
     parent's size and more: 2079.8 MiB from a 2 GiB parent);
  2. `mha bench` on 8 x 1024 tokens of width 1024 must report at least the
     memory it cannot do without (baseline_mib: weights, x, y, Q/K/V, about
     33 MiB) and not much more;
  3. `mha bench GPTModel` on a 1-layer GPT of about 50 MiB of weights
     (`mha init GPTModel`) at least its weights, and not much more.

About 2 s of wall time and 0.7 GiB at the most. --sanitized (the ASan
build) allows the sanitizer's own memory on top in 2 and 3.
"""
import json
import mmap
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

PARENT_MIB = 512


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise SystemExit("no %s in /proc/self/status" % field)


def bench(binary, args):
    p = subprocess.run([binary] + args + ["--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=120)
    if p.returncode != 0:
        raise SystemExit("mha %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr))
    return json.loads(p.stdout.splitlines()[-1])


def main():
    sanitized = "--sanitized" in sys.argv[1:]
    binary = st.find_bin(None)
    if not binary:
        raise SystemExit("mha binary not found (set MHA_BIN)")
    fails = []

    def check(cond, msg):
        print(("ok   " if cond else "FAIL ") + msg)
        if not cond:
            fails.append(msg)

    # Resident, not just reserved: a byte written in every page, in 2 MiB
    # pages where the kernel gives them (4 KiB ones cost a fault each; on
    # this shared VM touching 512 MiB takes 0.2 s to 2 s either way).
    hold = mmap.mmap(-1, PARENT_MIB << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        hold.madvise(mmap.MADV_HUGEPAGE)
    hold[::4096] = b"\x01" * (len(hold) // 4096)
    parent_mib = status_kib("VmRSS") / 1024.0
    if parent_mib < PARENT_MIB:
        raise SystemExit("this process holds %.0f MiB resident, not the %d MiB the test needs"
                         % (parent_mib, PARENT_MIB))
    # Fixed costs beside what mha allocates: the libraries' pages (oneDNN,
    # libgomp), the threads' stacks; under ASan its shadow and quarantine.
    slack, factor = (96.0, 2.0) if sanitized else (48.0, 1.5)

    small = bench(binary, ["bench", "--batch", "1", "--tokens", "8", "--d-in", "8", "--d-out", "8",
                           "--num-heads", "2", "--repeat", "1", "--warmup", "0"])
    check(small["peak_rss_mib"] < parent_mib / 4,
          "tiny mha bench from a %.0f MiB parent: peak_rss_mib %.1f (under a quarter of the parent's)"
          % (parent_mib, small["peak_rss_mib"]))

    # x of 32 MiB is most of it; d_out 8 keeps the work small (0.5 GFLOP:
    # 0.6 s with MHA_ISA=ref)
    big = bench(binary, ["bench", "--batch", "8", "--tokens", "1024", "--d-in", "1024", "--d-out", "8",
                         "--num-heads", "2", "--repeat", "1", "--warmup", "0", "--no-check"])
    lo, hi = big["baseline_mib"], big["baseline_mib"] * factor + slack
    check(lo <= big["peak_rss_mib"] <= hi, "mha bench, 8 x 1024 x 1024: peak_rss_mib %.1f in [%.1f, %.1f]"
          % (big["peak_rss_mib"], lo, hi))

    with tempfile.TemporaryDirectory(prefix="mha_rss_") as tmp:
        w = os.path.join(tmp, "gpt.safetensors")
        p = subprocess.run([binary, "init", "GPTModel", "--emb-dim", "128", "--n-heads", "2", "--n-layers", "1",
                            "--context-length", "64", "--seed", "1", "-o", w],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
        if p.returncode != 0:
            raise SystemExit("mha init GPTModel: exit %d: %s" % (p.returncode, p.stderr))
        gpt = bench(binary, ["bench", "GPTModel", "--weights", w, "--prompt-tokens", "16", "--decode", "1",
                             "--rounds", "1"])
    lo = gpt["weights_mib"]
    hi = (gpt["weights_mib"] + gpt["kv_cache_mib"]) * factor + slack
    check(lo <= gpt["peak_rss_mib"] <= hi, "mha bench GPTModel, %.1f MiB of weights: peak_rss_mib %.1f in "
          "[%.1f, %.1f]" % (gpt["weights_mib"], gpt["peak_rss_mib"], lo, hi))
    hold.close()
    print("cli_peak_rss: %s" % ("FAILED" if fails else "ok"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
