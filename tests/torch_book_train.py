"""The book's chapter 5 loop (tests/book_ch5.py, the book's code unchanged)
with mha.GPTModel swapped in for the book's GPTModel (tests/book_gpt.py),
against the same loop on the book's model, on small configurations of the
real tokenizer (vocab 50257) over the start of ../shared/data/the-verdict.txt
(or the repository's copy):

  - the untrained model's loss over both loaders, calc_loss_loader under
    torch.no_grad(), in eval and in training mode (dropout masks drawn
    without a tape);
  - then torch.manual_seed(123); model = GPTModel(cfg); model.to("cpu");
    torch.optim.AdamW(model.parameters(), lr=0.0004, weight_decay=0.1);
    train_model_simple(...): everything it prints equal (the "Ep N (Step
    ...)" lines and each epoch's sample), every logged loss within 1e-4 of
    torch's, the same tokens seen, and torch's global generator in the same
    state at the end (every draw of the DataLoaders, the shuffles and the
    dropout masks taken in the same number and order);
  - the same with optimizer.zero_grad(set_to_none=True).

Prints the times of both runs. Exit status 1 on any difference.
Usage: torch_book_train.py [--chars N] [--epochs N] [--sanitized]
(--sanitized, the ASan+UBSan build: the first configuration for one epoch
with zero_grad() alone, the code paths at a seventh of the time; under
scripts/test.sh its torch reference is computed by the release run and
read back, tests/torch_cache.py.)
"""
import argparse
import contextlib
import functools
import io
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
if os.environ.get("MHA_BUILD_DIR") and not os.environ.get("MHA_LIBRARY"):  # this build's library
    os.environ["MHA_LIBRARY"] = os.path.join(os.environ["MHA_BUILD_DIR"], "libmha.so")
import st  # noqa: E402,F401  (on import: malloc keeps freed memory, st.keep_freed_memory)
import torch  # noqa: E402

import book_gpt  # noqa: E402
import book_ch5 as bt  # noqa: E402
import mha  # noqa: E402
import torch_cache  # noqa: E402

CONFIGS = [
    # the brief's shape: the book's model, small
    {"vocab_size": 50257, "context_length": 32, "emb_dim": 64, "n_heads": 2, "n_layers": 2, "drop_rate": 0.1,
     "qkv_bias": False},
    # biases, more heads and layers, a shorter context, more dropout
    {"vocab_size": 50257, "context_length": 16, "emb_dim": 48, "n_heads": 4, "n_layers": 3, "drop_rate": 0.2,
     "qkv_bias": True},
]
fails = 0


def fail(what):
    global fails
    fails += 1
    print("FAIL:", what, flush=True)


def text_file():
    for p in (os.path.join(ROOT, "..", "shared", "data", "the-verdict.txt"),
              os.path.join(ROOT, "data", "the-verdict.txt")):
        if os.path.exists(p):
            return p
    sys.exit("torch_book_train: no the-verdict.txt in ../shared/data or data/")


def run(GPTModel, cfg, text_data, epochs, eval_freq, eval_iter, set_to_none=None):
    """The book's chapter 5 main script, GPTModel being either class."""
    device = torch.device("cpu")
    torch.manual_seed(123)
    train_ratio = 0.90
    split_idx = int(train_ratio * len(text_data))
    train_loader = bt.create_dataloader_v1(
        text_data[:split_idx], batch_size=2, max_length=cfg["context_length"], stride=cfg["context_length"],
        drop_last=True, shuffle=True, num_workers=0)
    val_loader = bt.create_dataloader_v1(
        text_data[split_idx:], batch_size=2, max_length=cfg["context_length"], stride=cfg["context_length"],
        drop_last=False, shuffle=False, num_workers=0)

    # section 5.1: the untrained model's losses
    torch.manual_seed(123)
    model = GPTModel(cfg)
    model.eval()
    initial = []
    for mode in ("eval", "train"):
        model.train(mode == "train")
        with torch.no_grad():
            initial.append(bt.calc_loss_loader(train_loader, model, device))
            initial.append(bt.calc_loss_loader(val_loader, model, device))

    # section 5.2: training
    t0 = time.perf_counter()
    torch.manual_seed(123)
    model = GPTModel(cfg)
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0004, weight_decay=0.1)
    if set_to_none is not None:
        optimizer.zero_grad = functools.partial(optimizer.zero_grad, set_to_none=set_to_none)
    tokenizer = bt.tiktoken.get_encoding("gpt2")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        train_losses, val_losses, tokens_seen = bt.train_model_simple(
            model, train_loader, val_loader, optimizer, device, num_epochs=epochs, eval_freq=eval_freq,
            eval_iter=eval_iter, start_context="Every effort moves you", tokenizer=tokenizer)
    return dict(printed=out.getvalue(), train=train_losses, val=val_losses, tokens=tokens_seen,
                initial=initial, state=torch.get_rng_state(), seconds=time.perf_counter() - t0,
                batches=(len(train_loader), len(val_loader)))


def compare(tag, want, got):
    n = 0
    for what in ("initial", "train", "val"):
        a, b = want[what], got[what]
        if len(a) != len(b):
            fail("%s: %d %s losses, torch has %d" % (tag, len(b), what, len(a)))
            continue
        for i, (x, y) in enumerate(zip(a, b)):
            n += 1
            if not abs(x - y) <= 1e-4:
                fail("%s: %s loss %d: %.7f, torch %.7f" % (tag, what, i, y, x))
    if want["tokens"] != got["tokens"]:
        fail("%s: tokens seen %s, torch %s" % (tag, got["tokens"], want["tokens"]))
    wl, gl = want["printed"].splitlines(), got["printed"].splitlines()
    if len(wl) != len(gl):
        fail("%s: %d lines printed, torch printed %d" % (tag, len(gl), len(wl)))
    for i, (x, y) in enumerate(zip(wl, gl)):
        if x != y:
            fail("%s: line %d:\n  torch: %s\n  mha:   %s" % (tag, i + 1, x, y))
    if not torch.equal(want["state"], got["state"]):
        fail("%s: torch's generator is not where the book's run leaves it" % tag)
    biggest = max(abs(x - y) for k in ("initial", "train", "val") for x, y in zip(want[k], got[k]))
    print("%s: %d lines equal, %d losses, largest difference %.2e; %.2f s (torch %.2f s)" % (
        tag, len(gl), n, biggest, got["seconds"], want["seconds"]), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chars", type=int, default=3000, help="characters of the text (default 3000)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--sanitized", action="store_true", help="one configuration, one epoch, one zero_grad mode")
    args = ap.parse_args()
    configs = CONFIGS[:1] if args.sanitized else CONFIGS
    if args.sanitized:
        args.epochs = 1
    with open(text_file(), "r", encoding="utf-8") as f:
        text = f.read()[:args.chars]
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    for k, cfg in enumerate(configs):
        epochs = args.epochs if k == 0 else max(1, args.epochs - 1)
        # the book's model: the same in every build (computed once per run of
        # scripts/test.sh, tests/torch_cache.py)
        want = torch_cache.cached("torch_book_train", (cfg, text, epochs, 3, 3),
                                  lambda: run(book_gpt.GPTModel, cfg, text, epochs, eval_freq=3, eval_iter=3))
        print("config %d: %s, %d train / %d val batches; torch prints:\n%s" % (
            k, cfg, want["batches"][0], want["batches"][1], want["printed"]), end="", flush=True)
        for set_to_none in (None,) if args.sanitized else (None, True):
            got = run(mha.GPTModel, cfg, text, epochs, eval_freq=3, eval_iter=3, set_to_none=set_to_none)
            compare("config %d, zero_grad(%s)" % (k, "set_to_none=True" if set_to_none else ""), want, got)
    if not args.sanitized and os.environ.get("MHA_TORCH_CACHE"):
        # the sanitizer build's reference (--sanitized: the first
        # configuration, one epoch), which that build reads back: computed
        # here in a few seconds, where there torch's every allocation goes
        # through ASan's allocator (16 of its 40 CPU s)
        torch_cache.cached("torch_book_train", (CONFIGS[0], text, 1, 3, 3),
                           lambda: run(book_gpt.GPTModel, CONFIGS[0], text, 1, eval_freq=3, eval_iter=3))
    print("torch_book_train: %s" % ("FAIL (%d)" % fails if fails else "OK"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
