#!/usr/bin/python3
"""`mha bench GPTModel --train-step` on tiny GPTs (about 2 s):

  1. a seeded model: exit 0, the last line of stdout one JSON object with
     min_ms <= median_ms, gflop = 6 x parameters x tokens + the attention's
     12 x B x L x T(T+1)/2 x E (what the help says is counted), gflops =
     gflop / min, bound_ms = gflop / sgemm_gflops, fraction_of_bound =
     bound / min, peak_rss_mib at least the weights, gradients and AdamW's
     two states;
  2. --tie-head: one V x E matrix fewer parameters, the same gflop (the
     head's GEMMs counted as the head's);
  3. --weights on `mha init GPTModel`'s file of the same configuration and
     seed: the same first loss as the seeded model (the same draws);
  4. bad options: exit 1, one line on stderr, nothing on stdout.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

CFG = ["--vocab-size", "300", "--context-length", "32", "--emb-dim", "48", "--n-heads", "4", "--n-layers", "2"]
V, E, L = 300, 48, 2


def run(binary, args):
    return subprocess.run([binary] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)


def main():
    binary = st.find_bin(None)
    if not binary:
        raise SystemExit("mha binary not found (set MHA_BIN)")
    fails = []

    def check(cond, msg):
        print(("ok   " if cond else "FAIL ") + msg)
        if not cond:
            fails.append(msg)

    def bench(args):
        p = run(binary, ["bench", "GPTModel", "--train-step", "--rounds", "2", "--json"] + args)
        if p.returncode != 0:
            raise SystemExit("mha bench %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr))
        return json.loads(p.stdout.splitlines()[-1])

    B, T = 2, 16
    j = bench(CFG + ["--batch", str(B), "--tokens", str(T)])
    for k in ("min_ms", "median_ms", "gflop", "gflops", "peak_rss_mib", "sgemm_gflops", "bound_ms",
              "fraction_of_bound"):
        check(isinstance(j.get(k), (int, float)) and j[k] > 0, "%s is a positive number (%s)" % (k, j.get(k)))
    check(j["min_ms"] <= j["median_ms"], "min_ms <= median_ms")
    P = V * E + 32 * E + L * (12 * E * E + 10 * E) + 2 * E + V * E  # the book's GPTModel, qkv_bias False
    check(j["params"] == P, "parameters %d (want %d)" % (j["params"], P))
    gflop = (6.0 * P * B * T + 12.0 * B * L * T * (T + 1) / 2 * E) * 1e-9
    check(abs(j["gflop"] - gflop) <= 1e-4 * gflop, "gflop %.4f = 6 x P x tokens + attention %.4f"
          % (j["gflop"], gflop))
    check(abs(j["gflops"] - j["gflop"] / j["min_ms"] * 1e3) <= 1e-2 * j["gflops"], "gflops = gflop / min")
    check(abs(j["bound_ms"] - j["gflop"] / j["sgemm_gflops"] * 1e3) <= 1e-2 * j["bound_ms"],
          "bound_ms = gflop / sgemm_gflops")
    check(abs(j["fraction_of_bound"] - j["bound_ms"] / j["min_ms"]) <= 1e-2 * j["fraction_of_bound"],
          "fraction_of_bound = bound / min")
    check(j["peak_rss_mib"] >= 16.0 * P / 1048576, "peak_rss_mib %.1f >= weights, gradients, AdamW state"
          % j["peak_rss_mib"])

    t = bench(CFG + ["--batch", str(B), "--tokens", str(T), "--tie-head"])
    check(t["tied"] is True and t["params"] == P - V * E, "--tie-head: %d parameters (want %d)"
          % (t["params"], P - V * E))
    check(abs(t["gflop"] - j["gflop"]) <= 1e-6, "--tie-head: the head's GEMMs still counted (gflop %.4f)"
          % t["gflop"])

    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "m.safetensors")
        p = run(binary, ["init", "GPTModel"] + CFG + ["--seed", "7", "-o", f])
        check(p.returncode == 0, "mha init GPTModel")
        w = bench(["--weights", f, "--batch", str(B), "--tokens", str(T), "--seed", "7"])
        s = bench(CFG + ["--batch", str(B), "--tokens", str(T), "--seed", "7"])
        check(w["loss"] == s["loss"], "--weights FILE: the seeded model's first loss (%r, %r)" % (w["loss"], s["loss"]))

        bad = [
            ["--batch", "0"],
            ["--tokens", "33"],
            ["--rounds", "0"],
            ["--drop-rate", "1.5"],
            ["--n-layers", "x"],
            ["--frobnicate"],
            ["--weights"],
            ["--weights", os.path.join(d, "missing.safetensors")],
            ["--weights", f, "--n-layers", "3"],
            ["--weights", f, "--tie-head"],
        ]
        for args in bad:
            p = run(binary, ["bench", "GPTModel", "--train-step"] + ([] if "--weights" in args else CFG[:4]) + args)
            lines = p.stderr.strip().splitlines()
            check(p.returncode == 1 and len(lines) == 1 and lines[0].startswith("mha: error:") and not p.stdout,
                  "%s: exit 1 (%d), one line on stderr: %s" % (" ".join(args), p.returncode, p.stderr.strip()))
    if fails:
        raise SystemExit("%d check(s) failed" % len(fails))
    print("all checks passed")


if __name__ == "__main__":
    main()
