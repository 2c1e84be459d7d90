"""Chapter 5 of "Build a Large Language Model (From Scratch)" in PyTorch: the
book's pretraining code (GPTDatasetV1, create_dataloader_v1, calc_loss_batch,
calc_loss_loader, evaluate_model, generate_and_print_sample,
train_model_simple), the oracle for `mha train GPTModel`. The tokenizer is
passed in (tiktoken's encode/decode interface: mha's, in the tests, so that
the oracle needs no network); the rest is the book's code as printed.

  book_train.py TEXT [--cfg JSON] [--epochs N] [--batch B] [--train-ratio R]
                [--eval-freq F] [--eval-iter I] [--lr LR] [--weight-decay WD]
                [--seed S] [--start-context T] [--sample-tokens N] [--json]

prints the book's log and samples, then with --json one line of JSON with
the full losses (the object `mha train GPTModel --json` prints, without the
timings)."""
import argparse
import json
import os
import subprocess
import sys

import torch
from torch.utils.data import Dataset, DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from book_gpt import GPTModel, GPT_CONFIG_124M, generate_text_simple  # noqa: E402


class MhaTokenizer:
    """tiktoken.get_encoding("gpt2")'s encode/decode through `mha tokenize`."""

    def __init__(self, binary):
        self.binary = binary

    def encode(self, text, allowed_special=None):
        parts = text.split("<|endoftext|>") if allowed_special else [text]
        ids = []
        for k, part in enumerate(parts):
            if k:
                ids.append(50256)
            if part:
                out = subprocess.run([self.binary, "tokenize", "-"], input=part.encode(),
                                     stdout=subprocess.PIPE, check=True).stdout.decode().strip()
                ids += [int(v) for v in out.split(",") if v]
        return ids

    def decode(self, ids):
        if not ids:
            return ""
        out = subprocess.run([self.binary, "tokenize", "--decode", "-n", ",".join(map(str, ids))],
                             stdout=subprocess.PIPE, check=True).stdout
        return out.decode("utf-8", errors="replace")


# ---- the book's code (chapter 2's dataset, chapter 5's loop) ----

class GPTDatasetV1(Dataset):
    def __init__(self, txt, tokenizer, max_length, stride):
        self.input_ids = []
        self.target_ids = []
        token_ids = tokenizer.encode(txt, allowed_special={"<|endoftext|>"})
        for i in range(0, len(token_ids) - max_length, stride):
            input_chunk = token_ids[i:i + max_length]
            target_chunk = token_ids[i + 1: i + max_length + 1]
            self.input_ids.append(torch.tensor(input_chunk))
            self.target_ids.append(torch.tensor(target_chunk))

    def __len__(self):
        return len(self.input_ids)

    def __getitem__(self, idx):
        return self.input_ids[idx], self.target_ids[idx]


def create_dataloader_v1(txt, tokenizer, batch_size=4, max_length=256, stride=128, shuffle=True,
                         drop_last=True, num_workers=0):
    dataset = GPTDatasetV1(txt, tokenizer, max_length, stride)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last,
                      num_workers=num_workers)


def text_to_token_ids(text, tokenizer):
    encoded = tokenizer.encode(text, allowed_special={'<|endoftext|>'})
    return torch.tensor(encoded).unsqueeze(0)


def token_ids_to_text(token_ids, tokenizer):
    flat = token_ids.squeeze(0)
    return tokenizer.decode(flat.tolist())


def calc_loss_batch(input_batch, target_batch, model, device):
    input_batch, target_batch = input_batch.to(device), target_batch.to(device)
    logits = model(input_batch)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target_batch.flatten())
    return loss


def calc_loss_loader(data_loader, model, device, num_batches=None):
    total_loss = 0.
    if len(data_loader) == 0:
        return float("nan")
    elif num_batches is None:
        num_batches = len(data_loader)
    else:
        num_batches = min(num_batches, len(data_loader))
    for i, (input_batch, target_batch) in enumerate(data_loader):
        if i < num_batches:
            loss = calc_loss_batch(input_batch, target_batch, model, device)
            total_loss += loss.item()
        else:
            break
    return total_loss / num_batches


def evaluate_model(model, train_loader, val_loader, device, eval_iter):
    model.eval()
    with torch.no_grad():
        train_loss = calc_loss_loader(train_loader, model, device, num_batches=eval_iter)
        val_loss = calc_loss_loader(val_loader, model, device, num_batches=eval_iter)
    model.train()
    return train_loss, val_loss


SAMPLES = []
SAMPLE_TOKENS = 50


def generate_and_print_sample(model, tokenizer, device, start_context):
    model.eval()
    context_size = model.pos_emb.weight.shape[0]
    encoded = text_to_token_ids(start_context, tokenizer).to(device)
    with torch.no_grad():
        token_ids = generate_text_simple(model=model, idx=encoded, max_new_tokens=SAMPLE_TOKENS,
                                         context_size=context_size)
    decoded_text = token_ids_to_text(token_ids, tokenizer)
    print(decoded_text.replace("\n", " "))  # Compact print format
    SAMPLES.append(decoded_text.replace("\n", " "))
    model.train()


LOG = []


def train_model_simple(model, train_loader, val_loader, optimizer, device, num_epochs, eval_freq, eval_iter,
                       start_context, tokenizer):
    train_losses, val_losses, track_tokens_seen = [], [], []
    tokens_seen, global_step = 0, -1
    for epoch in range(num_epochs):
        model.train()
        for input_batch, target_batch in train_loader:
            optimizer.zero_grad()
            loss = calc_loss_batch(input_batch, target_batch, model, device)
            loss.backward()
            optimizer.step()
            tokens_seen += input_batch.numel()
            global_step += 1
            if global_step % eval_freq == 0:
                train_loss, val_loss = evaluate_model(model, train_loader, val_loader, device, eval_iter)
                train_losses.append(train_loss)
                val_losses.append(val_loss)
                track_tokens_seen.append(tokens_seen)
                print(f"Ep {epoch+1} (Step {global_step:06d}): "
                      f"Train loss {train_loss:.3f}, Val loss {val_loss:.3f}")
                LOG.append({"epoch": epoch + 1, "step": global_step, "train_loss": train_loss,
                            "val_loss": val_loss, "tokens_seen": tokens_seen})
        if SAMPLE_TOKENS > 0:
            generate_and_print_sample(model, tokenizer, device, start_context)
    return train_losses, val_losses, track_tokens_seen


def main():
    global SAMPLE_TOKENS
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
    ap.add_argument("--sample-tokens", type=int, default=50)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--mha", default=os.environ.get("MHA_BIN", "mha"))
    a = ap.parse_args()
    SAMPLE_TOKENS = a.sample_tokens
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    cfg = dict(GPT_CONFIG_124M, context_length=256)
    cfg.update(json.loads(a.cfg))
    tokenizer = MhaTokenizer(a.mha)
    with open(a.text, "r", encoding="utf-8") as f:
        text_data = f.read()

    # the book, section 5.1.3
    train_ratio = a.train_ratio
    split_idx = int(train_ratio * len(text_data))
    train_data = text_data[:split_idx]
    val_data = text_data[split_idx:]
    torch.manual_seed(a.seed)
    train_loader = create_dataloader_v1(train_data, tokenizer, batch_size=a.batch,
                                        max_length=cfg["context_length"], stride=cfg["context_length"],
                                        drop_last=True, shuffle=True, num_workers=0)
    val_loader = create_dataloader_v1(val_data, tokenizer, batch_size=a.batch,
                                      max_length=cfg["context_length"], stride=cfg["context_length"],
                                      drop_last=False, shuffle=False, num_workers=0)
    # section 5.2
    torch.manual_seed(a.seed)
    model = GPTModel(cfg)
    model.to("cpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    train_model_simple(model, train_loader, val_loader, optimizer, "cpu", num_epochs=a.epochs,
                       eval_freq=a.eval_freq, eval_iter=a.eval_iter, start_context=a.start_context,
                       tokenizer=tokenizer)
    if a.json:
        print(json.dumps({"log": LOG, "samples": SAMPLES}))


if __name__ == "__main__":
    main()
