#!/usr/bin/python3
"""One training step of mha beside torch 1.13's book code and llm.c's train_gpt2.c, measured in one run.

  book shape   batch 2 x 256 tokens, the book's chapter 5 GPTModel (GPT_CONFIG_124M, context_length 256, untied
               head, 163M parameters, dropout 0.1), AdamW lr 4e-4 wd 0.1:
               `mha bench GPTModel --train-step --context-length 256` against bench/torch_train_step.py
               (the book's GPTModel from ../shared/bench/llmc/gpt_book.py, cross_entropy, backward, AdamW step);
  llm.c shape  batch 4 x 64 tokens, GPT-2 124M with its head tied to wte, no dropout: llm.c's train_gpt2 (built
               and fed by ../shared/bench/llmc/setup.sh) against `mha bench GPTModel --train-step --weights
               DIR/model.safetensors` on the same weights (and torch on the same shape, tied, for scale).

Every program runs with --threads threads (default 2). torch runs under OMP_WAIT_POLICY=PASSIVE (the issue's
setting); mha too; llm.c is run under both PASSIVE and its default (spinning) policy and its faster run kept, so
the peer gets its best. Each figure is the minimum and the median over --rounds steps after a warm-up (llm.c:
its steps 2 onwards). mha's bound is its own report: the counted work at the best sgemm rate measured in the same
process (`mha bench GPTModel --help` says what is counted).

usage: bench/compare_train_step.py [--mha build/mha] [--rounds 5] [--threads 2] [--llmc DIR] [--llmc-src SRC]
                                   [--skip torch,llmc,book,llmc-shape] [--json]
  --llmc DIR      llm.c's folder made by setup.sh (default /tmp/llmc); with --llmc-src SRC (a checkout of
                  karpathy/llm.c) setup.sh builds it there first if DIR/train_gpt2 is missing.
The last line of stdout (with --json) is one JSON object with every figure and the ratios."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.path.join(ROOT, "..", "shared")


def env_with(**kv):
    e = dict(os.environ)
    for k, v in kv.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return e


def run_json(cmd, env):
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, universal_newlines=True, env=env)
    if p.returncode != 0:
        raise SystemExit("%s: exit %d" % (cmd[0], p.returncode))
    return json.loads(p.stdout.strip().splitlines()[-1])


def mha_step(a, args):
    return run_json([a.mha, "bench", "GPTModel", "--train-step", "--threads", str(a.threads), "--rounds",
                     str(a.rounds), "--json"] + args, env_with(OMP_WAIT_POLICY="PASSIVE"))


def torch_step(a, args):
    return run_json(["/usr/bin/python3", os.path.join(HERE, "torch_train_step.py"), "--threads", str(a.threads),
                     "--rounds", str(a.rounds), "--shared", a.shared] + args, env_with(OMP_WAIT_POLICY="PASSIVE"))


def llmc_step(a, policy):
    """llm.c's steps 2 onwards (the first ones include OpenMP's start-up)."""
    env = env_with(OMP_NUM_THREADS=str(a.threads), OMP_WAIT_POLICY=policy)
    print("$ cd %s && OMP_NUM_THREADS=%d OMP_WAIT_POLICY=%s ./train_gpt2" % (a.llmc, a.threads, policy or "(unset)"),
          file=sys.stderr, flush=True)
    p = subprocess.run(["./train_gpt2"], cwd=a.llmc, stdout=subprocess.PIPE, universal_newlines=True, env=env)
    if p.returncode != 0:
        raise SystemExit("train_gpt2: exit %d" % p.returncode)
    steps = [(int(s), float(loss), float(ms)) for s, loss, ms in
             re.findall(r"step (\d+): train loss ([-+0-9.naif]+) \(took ([0-9.]+) ms\)", p.stdout)]
    ms = [t for s, _, t in steps if s >= 2]
    if not ms:
        raise SystemExit("train_gpt2 printed fewer than 3 steps")
    return {"policy": policy or "default", "min_ms": min(ms), "median_ms": statistics.median(ms),
            "steps": len(ms), "loss0": steps[0][1]}


def fmt(name, j, extra=""):
    return "%-34s min %9.1f ms  median %9.1f ms%s" % (name, j["min_ms"], j["median_ms"], extra)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mha", default=os.path.join(ROOT, "build", "mha"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llmc", default="/tmp/llmc")
    ap.add_argument("--llmc-src")
    ap.add_argument("--shared", default=SHARED)
    ap.add_argument("--skip", default="", help="comma-separated: torch, llmc, book, llmc-shape")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    out = {"threads": a.threads, "rounds": a.rounds}
    lines = []

    if "book" not in skip:
        m = mha_step(a, ["--context-length", "256", "--batch", "2", "--tokens", "256"])
        out["book_mha"] = m
        lines.append("book shape: batch 2 x 256 tokens, 163M untied, dropout 0.1")
        lines.append(fmt("  mha", m, "  (bound %.1f ms at %.1f GFLOP/s: fraction %.3f min, %.3f median)" % (
            m["bound_ms"], m["sgemm_gflops"], m["fraction_of_bound"], m["bound_ms"] / m["median_ms"])))
        if "torch" not in skip:
            t = torch_step(a, ["--batch", "2", "--tokens", "256", "--context-length", "256", "--drop-rate", "0.1"])
            out["book_torch"] = t
            out["book_torch_over_mha_min"] = t["min_ms"] / m["min_ms"]
            out["book_torch_over_mha_median"] = t["median_ms"] / m["median_ms"]
            lines.append(fmt("  torch %s (book code)" % t["torch"], t, "  (mha %.2fx faster at the min, %.2fx at "
                             "the median)" % (out["book_torch_over_mha_min"], out["book_torch_over_mha_median"])))

    if "llmc-shape" not in skip:
        weights = os.path.join(a.llmc, "model.safetensors")
        if "llmc" not in skip and not os.access(os.path.join(a.llmc, "train_gpt2"), os.X_OK):
            if not a.llmc_src:
                raise SystemExit("%s/train_gpt2 is missing: give --llmc-src SRC (a checkout of karpathy/llm.c) "
                                 "or --skip llmc" % a.llmc)
            subprocess.run([os.path.join(a.shared, "bench", "llmc", "setup.sh"), a.llmc_src, a.llmc, "10"],
                           check=True)
        if not os.path.exists(weights):
            raise SystemExit("%s is missing (../shared/bench/llmc/setup.sh writes it)" % weights)
        m = mha_step(a, ["--weights", weights, "--batch", "4", "--tokens", "64"])
        out["llmc_mha"] = m
        lines.append("llm.c shape: batch 4 x 64 tokens, 124M tied, no dropout (the same weights)")
        lines.append(fmt("  mha", m, "  (bound %.1f ms at %.1f GFLOP/s: fraction %.3f min, %.3f median)" % (
            m["bound_ms"], m["sgemm_gflops"], m["fraction_of_bound"], m["bound_ms"] / m["median_ms"])))
        if "llmc" not in skip:
            runs = [llmc_step(a, "PASSIVE"), llmc_step(a, None)]
            best = min(runs, key=lambda r: r["min_ms"])
            out["llmc"] = best
            out["llmc_runs"] = runs
            out["llmc_over_mha_min"] = best["min_ms"] / m["min_ms"]
            out["llmc_over_mha_median"] = best["median_ms"] / m["median_ms"]
            for r in runs:
                lines.append(fmt("  llm.c train_gpt2 (%s policy)" % r["policy"], r))
            lines.append("  mha %.2fx faster than llm.c's best at the min, %.2fx at the median" % (
                out["llmc_over_mha_min"], out["llmc_over_mha_median"]))
        if "torch" not in skip:
            t = torch_step(a, ["--batch", "4", "--tokens", "64", "--context-length", "1024", "--drop-rate", "0",
                               "--qkv-bias", "--tie-head"])
            out["llmc_shape_torch"] = t
            lines.append(fmt("  torch %s (book code, tied)" % t["torch"], t))

    print("\n".join(lines))
    if a.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
