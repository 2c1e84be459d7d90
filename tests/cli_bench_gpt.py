#!/usr/bin/python3
"""`mha bench GPTModel` (prefill and decode) on tiny GPTs, and --size (about 2 s):

  1. a seeded model: exit 0, the last line of stdout one JSON object whose
     read_mib is the weights one decode step reads (all but tok_emb and
     pos_emb, which it looks up a row of), stream_read_gbps the best read
     and stream_read_gbps_worst <= it, weights_read_ms = read_mib at the
     best rate, decode_over_read = decode_ms_per_token / weights_read_ms;
  2. --tie-head: the head is tok_emb, read once per step (read_mib grows
     back by nothing: the head's V x E is counted either way);
  3. --dtype bf16: read_mib the 16-bit matrices' and the F32 vectors' bytes;
     --against f32: the F32 model's decode and the speedups beside it;
  4. --size medium (emb 1024, 16 heads) with options after it changing
     vocab, context and layers; `mha init GPTModel --size` writes that cfg;
  5. bad options: exit 1, one line on stderr, nothing on stdout.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

CFG = ["--vocab-size", "300", "--context-length", "32", "--emb-dim", "48", "--n-heads", "4", "--n-layers", "2"]
V, C, E, L = 300, 32, 48, 2
MIB = 1048576.0


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
        p = run(binary, ["bench", "GPTModel", "--prompt-tokens", "8", "--decode", "4", "--rounds", "2", "--json"] + args)
        if p.returncode != 0:
            raise SystemExit("mha bench %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr))
        return json.loads(p.stdout.splitlines()[-1])

    j = bench(CFG)
    for k in ("prefill_tokens_per_s", "decode_tokens_per_s", "decode_ms_per_token", "stream_read_gbps",
              "stream_read_gbps_worst", "weights_read_ms", "decode_over_read", "read_mib", "peak_rss_mib"):
        check(isinstance(j.get(k), (int, float)) and j[k] > 0, "%s is a positive number (%s)" % (k, j.get(k)))
    P = V * E + C * E + L * (12 * E * E + 10 * E) + 2 * E + V * E  # the book's GPTModel, qkv_bias False
    check(j["params"] == P and j["tied"] is False, "parameters %d (want %d), untied" % (j["params"], P))
    want = (P - V * E - C * E) * 4 / MIB
    check(abs(j["read_mib"] - want) <= 1e-3 + 1e-4 * want, "read_mib %.2f: all but the embeddings (%.2f)"
          % (j["read_mib"], want))
    check(j["stream_read_gbps_worst"] <= j["stream_read_gbps"], "the worst read <= the best")
    ms = j["read_mib"] * MIB / (j["stream_read_gbps"] * 1e9) * 1e3
    check(abs(j["weights_read_ms"] - ms) <= 0.02 * ms + 1e-3, "weights_read_ms = read_mib at the best read")
    r = j["decode_ms_per_token"] / j["weights_read_ms"]
    check(abs(j["decode_over_read"] - r) <= 0.02 * r, "decode_over_read = decode / weights_read_ms")

    t = bench(CFG + ["--tie-head"])
    check(t["tied"] is True and t["params"] == P - V * E, "--tie-head: %d parameters" % t["params"])
    check(abs(t["read_mib"] - j["read_mib"]) <= 1e-3, "--tie-head: the head still read once (read_mib %.2f)"
          % t["read_mib"])

    h = bench(CFG + ["--dtype", "bf16"])
    want16 = (2 * (L * 12 * E * E + V * E) + 4 * (L * 10 * E + 2 * E)) / MIB  # matrices in 16 bits, vectors F32
    check(h["dtype"] == "bf16" and abs(h["read_mib"] - want16) <= 1e-3 + 1e-4 * want16,
          "--dtype bf16: read_mib %.4f, the 16-bit bytes (%.4f)" % (h["read_mib"], want16))
    check(h["params"] == P, "--dtype bf16: %d parameters" % h["params"])
    check("against_dtype" not in h, "no --against: no against keys")
    a = bench(CFG + ["--dtype", "bf16", "--against", "f32"])
    check(a["dtype"] == "bf16" and a.get("against_dtype") == "f32", "--against f32: against_dtype %s"
          % a.get("against_dtype"))
    for k in ("against_decode_ms_per_token", "speedup_over_against", "speedup_over_against_best"):
        check(isinstance(a.get(k), (int, float)) and a[k] > 0, "--against: %s is a positive number (%s)" % (k, a.get(k)))
    best = a["against_decode_ms_per_token"] / a["decode_ms_per_token"]
    check(abs(a["speedup_over_against_best"] - best) <= 0.01 * best,
          "--against: speedup_over_against_best = the best rounds' ratio (%.4f, %.4f)"
          % (a["speedup_over_against_best"], best))

    small = ["--vocab-size", "300", "--context-length", "32", "--n-layers", "1"]
    s = bench(["--size", "medium"] + small)
    check(s["emb_dim"] == 1024 and s["n_layers"] == 1, "--size medium then --n-layers 1: emb %d, layers %d"
          % (s["emb_dim"], s["n_layers"]))
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "m.safetensors")
        p = run(binary, ["init", "GPTModel", "--size", "xl"] + small + ["--seed", "1", "-o", f])
        check(p.returncode == 0, "mha init GPTModel --size xl")
        h = st.header(f) if p.returncode == 0 else {}
        meta = h.get("__metadata__", {})
        check(meta.get("emb_dim") == "1600" and meta.get("n_heads") == "25" and meta.get("n_layers") == "1",
              "--size xl: emb_dim 1600, n_heads 25 in the file (%s)" % meta)
        bad = [
            ["--size"],
            ["--size", "huge"],
            ["--prompt-tokens", "8", "--decode", "29"],
            ["--prompt-tokens", "33"],
            ["--frobnicate"],
            ["--weights", f, "--size", "medium"],
            ["--weights", f, "--tie-head"],
            ["--dtype", "f8"],
            ["--against", "f8"],
            ["--against"],
            ["--weights", os.path.join(d, "missing.safetensors")],
        ]
        for args in bad:
            p = run(binary, ["bench", "GPTModel"] + ([] if "--weights" in args else CFG[:4]) + args)
            lines = p.stderr.strip().splitlines()
            check(p.returncode == 1 and len(lines) == 1 and lines[0].startswith("mha: error:") and not p.stdout,
                  "%s: exit 1 (%d), one line on stderr: %s" % (" ".join(args), p.returncode, p.stderr.strip()))
    if fails:
        raise SystemExit("%d check(s) failed" % len(fails))
    print("all checks passed")


if __name__ == "__main__":
    main()
