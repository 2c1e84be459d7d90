"""The oracle for `mha train GPTModel`: the book's chapter 5 run in torch,
through the book's code unchanged (book_ch5.py: GPTDatasetV1,
create_dataloader_v1, calc_loss_loader, evaluate_model,
generate_and_print_sample, train_model_simple) on the book's GPTModel
(book_gpt.py), with the settings as command-line options:

  book_train.py TEXT [--cfg JSON] [--epochs N] [--batch B] [--train-ratio R]
                [--eval-freq F] [--eval-iter I] [--lr LR] [--weight-decay WD]
                [--seed S] [--start-context T] [--json]

prints what the book prints, then with --json one line: {"log": [{"epoch",
"step", "train_loss", "val_loss", "tokens_seen"}...], "samples": [...]} with
the full losses train_model_simple returns (the object `mha train GPTModel
--json` prints, without the timings). tiktoken, where it is missing, is
mha's (python/mha/tokenizer.py), so the mha package must be importable."""
import argparse
import contextlib
import io
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
if os.environ.get("MHA_BUILD_DIR") and not os.environ.get("MHA_LIBRARY"):
    os.environ["MHA_LIBRARY"] = os.path.join(os.environ["MHA_BUILD_DIR"], "libmha.so")
import st  # noqa: E402,F401  (on import: malloc keeps freed memory, st.keep_freed_memory)
import torch  # noqa: E402

import book_ch5 as bt  # noqa: E402
from book_gpt import GPTModel, GPT_CONFIG_124M  # noqa: E402


class Tee(io.StringIO):
    def write(self, s):
        sys.__stdout__.write(s)
        return super().write(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("text")
    ap.add_argument("--cfg", default="{}")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--train-ratio", type=float, default=0.90)
    ap.add_argument("--eval-freq", type=int, default=5)
    ap.add_argument("--eval-iter", type=int, default=5)
    ap.add_argument("--lr", type=float, default=0.0004)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--start-context", default="Every effort moves you")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    cfg = dict(GPT_CONFIG_124M, context_length=256)
    cfg.update(json.loads(a.cfg))
    with open(a.text, "r", encoding="utf-8") as f:
        text_data = f.read()

    # the book, section 5.1.3
    split_idx = int(a.train_ratio * len(text_data))
    train_data, val_data = text_data[:split_idx], text_data[split_idx:]
    torch.manual_seed(a.seed)
    train_loader = bt.create_dataloader_v1(train_data, batch_size=a.batch, max_length=cfg["context_length"],
                                           stride=cfg["context_length"], drop_last=True, shuffle=True,
                                           num_workers=0)
    val_loader = bt.create_dataloader_v1(val_data, batch_size=a.batch, max_length=cfg["context_length"],
                                         stride=cfg["context_length"], drop_last=False, shuffle=False,
                                         num_workers=0)
    # section 5.2
    torch.manual_seed(a.seed)
    model = GPTModel(cfg)
    model.to("cpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    out = Tee()
    with contextlib.redirect_stdout(out):
        train_losses, val_losses, tokens_seen = bt.train_model_simple(
            model, train_loader, val_loader, optimizer, "cpu", num_epochs=a.epochs, eval_freq=a.eval_freq,
            eval_iter=a.eval_iter, start_context=a.start_context, tokenizer=bt.tiktoken.get_encoding("gpt2"))
    if a.json:
        lines = out.getvalue().split("\n")[:-1]
        rows = [re.match(r"Ep (\d+) \(Step (\d+)\)", l) for l in lines]
        steps = [(int(r.group(1)), int(r.group(2))) for r in rows if r]
        log = [{"epoch": e, "step": s, "train_loss": t, "val_loss": v, "tokens_seen": n}
               for (e, s), t, v, n in zip(steps, train_losses, val_losses, tokens_seen)]
        samples = [l for l, r in zip(lines, rows) if not r]
        print(json.dumps({"log": log, "samples": samples}))


if __name__ == "__main__":
    main()
