"""16-bit weights against F32 on a model with decisive logits (the chapter 5
model `mha train GPTModel` writes, or any GPTModel file):

  greedy   for 10 prompts (windows of The Verdict), 64 greedy tokens with
           `mha generate --dtype f32` and with `--dtype bf16` / `f16`: how many
           of the first tokens agree before the first difference;
  logits   max|logits_D - logits_F32| / max|logits_F32| over every position of
           8 random windows of the text (`mha run --dtype D`), for these trained
           weights, and for random weights of the same shape (mha init, seed 123).

  /usr/bin/python3 bench/compare_dtype.py [--weights mha-train-gpt/model.safetensors] [--bin build/mha]
Prints a table and ends with one JSON line.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import st  # noqa: E402


def run(cmd):
    p = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode:
        sys.exit("%s: %s" % (" ".join(str(c) for c in cmd[:3]), p.stderr.strip()))
    return p.stdout


def tokens(binary, path):
    p = subprocess.run([binary, "tokenize", "-"], stdin=open(path, "rb"), stdout=subprocess.PIPE, check=True)
    return [int(t) for t in p.stdout.decode().replace(",", " ").split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", default="mha-train-gpt/model.safetensors")
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "mha"))
    ap.add_argument("--text", default=os.path.join(HERE, "..", "data", "the-verdict.txt"))
    ap.add_argument("--new", type=int, default=64)
    args = ap.parse_args()
    b = args.bin
    ids = tokens(b, args.text)
    hdr = st.header(args.weights)
    meta = hdr.get("__metadata__", {})
    ctx = int(meta.get("context_length", 1024))
    rng = np.random.default_rng(0)
    starts = rng.integers(0, len(ids) - 16, size=10)
    result = {"weights": args.weights, "greedy": {}, "logits_err": {}, "logits_err_random": {}}
    gens = {}
    for d in ("f32", "bf16", "f16"):
        gens[d] = []
        for s in starts:
            prompt = ids[s:s + 8]
            out = run([b, "generate", args.weights, "--ids", ",".join(map(str, prompt)), "--max-new-tokens",
                       args.new, "--dtype", d, "--json"])
            gens[d].append(json.loads(out.strip().splitlines()[-1])["ids"][len(prompt):])
    print("greedy tokens equal to F32's before the first difference (%d prompts, %d tokens):" % (len(starts), args.new))
    for d in ("bf16", "f16"):
        agree = []
        for a, g in zip(gens["f32"], gens[d]):
            k = 0
            while k < min(len(a), len(g)) and a[k] == g[k]:
                k += 1
            agree.append(k)
        result["greedy"][d] = agree
        print("  %-5s %s  (min %d, all %d equal: %d of %d)" % (d, agree, min(agree), args.new,
                                                               sum(k == args.new for k in agree), len(agree)))
    with tempfile.TemporaryDirectory() as tmp:
        T = min(ctx, 256)
        wins = np.stack([ids[s:s + T] for s in rng.integers(0, len(ids) - T, size=8)]).astype(np.int64)
        inp = os.path.join(tmp, "in.safetensors")
        st.write(inp, {"idx": wins})
        rand = os.path.join(tmp, "random.safetensors")
        cfg = ["--vocab-size", meta.get("vocab_size", 50257), "--context-length", ctx, "--emb-dim",
               meta.get("emb_dim", 768), "--n-heads", meta.get("n_heads", 12), "--n-layers", meta.get("n_layers", 12),
               "--qkv-bias", meta.get("qkv_bias", "false")]
        run([b, "init", "GPTModel"] + cfg + ["--seed", 123, "-o", rand])
        for key, w in (("logits_err", args.weights), ("logits_err_random", rand)):
            out = {}
            for d in ("f32", "bf16", "f16"):
                o = os.path.join(tmp, "o_%s.safetensors" % d)
                run([b, "run", w, "-i", inp, "-o", o, "--dtype", d])
                out[d] = st.read(o)[0]["logits"].astype(np.float64)
            scale = np.abs(out["f32"]).max()
            for d in ("bf16", "f16"):
                result[key][d] = float(np.abs(out[d] - out["f32"]).max() / scale)
                # also the top-1 agreement at every position
                result[key][d + "_top1"] = float((out[d].argmax(-1) == out["f32"].argmax(-1)).mean())
    print("max|logits_D - logits_F32| / max|logits_F32| over 8 x %d positions:" % T)
    for key, what in (("logits_err", "trained"), ("logits_err_random", "random (seed 123)")):
        print("  %-18s bf16 %.2e (top-1 equal at %.4f of positions), f16 %.2e (%.4f)" % (
            what, result[key]["bf16"], result[key]["bf16_top1"], result[key]["f16"], result[key]["f16_top1"]))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
