#!/usr/bin/python3
"""PyTorch 1.13 running the book's chapter 4 GPTModel (GPT-2 124M, qkv_bias, seed 123, head tied to tok_emb:
the weights bench/llamacpp/make_gguf.py writes), timed as `mha bench GPTModel` times mha:
  prefill: one forward over a T-token prompt, up to the last position's logits;
  decode:  N steps of the book's generate_text_simple after a 4-token prompt (the book has no KV cache, so each
           step runs the whole context again: that is the book's code, not a handicap we added).
usage: bench/torch_gpt.py [--threads 2] [--prompt-tokens 1024] [--decode 64] [--rounds 3] [--size 124M]
--size medium|large|xl: GPT-2's larger configurations (bench/make_gguf_size.py's), the same draws as its files.
Prints one JSON object on the last line (prefill_tokens_per_s, decode_tokens_per_s, decode_ms_per_token).

Debian's torch runs OpenMP and OpenBLAS threads that fight over 2 cores when they spin; the issue asks for the
comparison under OMP_WAIT_POLICY=PASSIVE (3-4x faster decode here), so this script sets it for its own process
(unless the caller's environment already sets it) before torch is imported. The caller's environment is not
changed."""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import book_gpt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gguf_size import SIZES  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", choices=sorted(SIZES), default="124M")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    E, H, L = SIZES[a.size]
    cfg = dict(book_gpt.GPT_CONFIG_124M, qkv_bias=True, drop_rate=0.0, emb_dim=E, n_heads=H, n_layers=L)
    torch.manual_seed(123)
    model = book_gpt.GPTModel(cfg)
    model.out_head.weight = model.tok_emb.weight
    model.eval()
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, cfg["vocab_size"], (1, a.prompt_tokens), generator=g)
    start = torch.tensor([[15496, 11, 314, 716]])
    prefill, decode = [], []
    with torch.no_grad():
        model(prompt[:, :16])  # warm-up
        for _ in range(a.rounds):
            t0 = time.perf_counter()
            model(prompt)[:, -1, :]
            prefill.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            book_gpt.generate_text_simple(model, start, a.decode, cfg["context_length"])
            decode.append(time.perf_counter() - t0)
    p, d = min(prefill), min(decode)
    print(json.dumps({"torch": torch.__version__, "threads": a.threads, "size": a.size,
                      "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                      "prompt_tokens": a.prompt_tokens, "prefill_tokens_per_s": a.prompt_tokens / p,
                      "decode_steps": a.decode, "decode_tokens_per_s": a.decode / d,
                      "decode_ms_per_token": 1000.0 * d / a.decode}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
