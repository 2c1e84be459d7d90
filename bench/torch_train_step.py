#!/usr/bin/python3
"""torch 1.13 timing one training step of the book's chapter 4 GPTModel (../shared/bench/llmc/gpt_book.py) as
chapter 5's train_model_simple runs it: optimizer.zero_grad(), logits = model(input_batch),
loss = cross_entropy(logits.flatten(0, 1), target_batch.flatten()), loss.backward(), optimizer.step(), with
torch.optim.AdamW(lr=4e-4, weight_decay=0.1), in training mode (the config's dropout). The model:
torch.manual_seed(123); GPTModel(GPT_CONFIG_124M with the options below); --tie-head sets
out_head.weight = tok_emb.weight (GPT-2's and llm.c's tying). Random tokens from a seeded generator.
usage: bench/torch_train_step.py [--batch 2] [--tokens 256] [--context-length 256] [--drop-rate 0.1]
                                 [--qkv-bias] [--tie-head] [--threads 2] [--rounds 5]
One warm-up step, then --rounds timed ones; the last line of stdout is one JSON object (min_ms, median_ms, ...).

OMP_WAIT_POLICY=PASSIVE is set for this process before torch is imported, unless the caller's environment sets
it (the issue asks for the comparison under it: torch's OpenMP and OpenBLAS threads fight over 2 cores when they
spin)."""
import argparse
import json
import os
import resource
import statistics
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--context-length", type=int, default=256)
    ap.add_argument("--drop-rate", type=float, default=0.1)
    ap.add_argument("--qkv-bias", action="store_true")
    ap.add_argument("--tie-head", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--shared", default=os.path.join(HERE, "..", "..", "shared"),
                    help="the shared folder holding bench/llmc/gpt_book.py (default ../shared from the repo)")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.shared, "bench", "llmc"))
    import gpt_book  # noqa: E402
    torch.set_num_threads(a.threads)
    cfg = dict(gpt_book.GPT_CONFIG_124M, context_length=a.context_length, drop_rate=a.drop_rate,
               qkv_bias=a.qkv_bias)
    torch.manual_seed(123)
    model = gpt_book.GPTModel(cfg)
    if a.tie_head:
        model.out_head.weight = model.tok_emb.weight
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0004, weight_decay=0.1)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, cfg["vocab_size"], (a.batch, a.tokens), generator=g)
    y = torch.randint(0, cfg["vocab_size"], (a.batch, a.tokens), generator=g)
    ms, losses = [], []
    for r in range(a.rounds + 1):  # the first: warm-up
        t0 = time.perf_counter()
        optimizer.zero_grad()
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
        loss.backward()
        optimizer.step()
        t = (time.perf_counter() - t0) * 1e3
        losses.append(loss.item())
        if r:
            ms.append(t)
        print("step %d%s: %.1f ms (loss %.4f)" % (r, " (warm-up)" if r == 0 else "", t, losses[-1]), file=sys.stderr)
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"torch": torch.__version__, "threads": a.threads,
                      "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "batch": a.batch, "tokens": a.tokens,
                      "params": params, "tied": a.tie_head, "drop_rate": a.drop_rate, "min_ms": min(ms),
                      "median_ms": statistics.median(ms), "loss": losses[0],
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
