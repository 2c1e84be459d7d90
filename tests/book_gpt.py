"""Chapter 4 (and chapter 5's generate) of "Build a Large Language Model
(From Scratch)" in PyTorch: the oracle for mha's GPTModel. The classes are the
book's, built on the chapter 3 MultiHeadAttention of book_modules.py; to_hf
writes a model under Hugging Face GPT-2 names."""
import numpy as np
import torch
import torch.nn as nn

from book_modules import MultiHeadAttention

GPT_CONFIG_124M = {"vocab_size": 50257, "context_length": 1024, "emb_dim": 768, "n_heads": 12,
                   "n_layers": 12, "drop_rate": 0.1, "qkv_bias": False}


class LayerNorm(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.eps = 1e-5
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        norm_x = (x - mean) / torch.sqrt(var + self.eps)
        return self.scale * norm_x + self.shift


class GELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(torch.sqrt(torch.tensor(2.0 / torch.pi)) *
                                         (x + 0.044715 * torch.pow(x, 3))))


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(cfg["emb_dim"], 4 * cfg["emb_dim"]), GELU(),
                                    nn.Linear(4 * cfg["emb_dim"], cfg["emb_dim"]))

    def forward(self, x):
        return self.layers(x)


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.att = MultiHeadAttention(d_in=cfg["emb_dim"], d_out=cfg["emb_dim"],
                                      context_length=cfg["context_length"], num_heads=cfg["n_heads"],
                                      dropout=cfg["drop_rate"], qkv_bias=cfg["qkv_bias"])
        self.ff = FeedForward(cfg)
        self.norm1 = LayerNorm(cfg["emb_dim"])
        self.norm2 = LayerNorm(cfg["emb_dim"])
        self.drop_shortcut = nn.Dropout(cfg["drop_rate"])

    def forward(self, x):
        shortcut = x
        x = self.norm1(x)
        x = self.att(x)
        x = self.drop_shortcut(x)
        x = x + shortcut
        shortcut = x
        x = self.norm2(x)
        x = self.ff(x)
        x = self.drop_shortcut(x)
        x = x + shortcut
        return x


class GPTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.drop_emb = nn.Dropout(cfg["drop_rate"])
        self.trf_blocks = nn.Sequential(*[TransformerBlock(cfg) for _ in range(cfg["n_layers"])])
        self.final_norm = LayerNorm(cfg["emb_dim"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

    def forward(self, in_idx):
        batch_size, seq_len = in_idx.shape
        tok_embeds = self.tok_emb(in_idx)
        pos_embeds = self.pos_emb(torch.arange(seq_len, device=in_idx.device))
        x = tok_embeds + pos_embeds
        x = self.drop_emb(x)
        x = self.trf_blocks(x)
        x = self.final_norm(x)
        return self.out_head(x)


def generate_text_simple(model, idx, max_new_tokens, context_size):
    for _ in range(max_new_tokens):
        idx_cond = idx[:, -context_size:]
        with torch.no_grad():
            logits = model(idx_cond)
        logits = logits[:, -1, :]
        idx_next = torch.argmax(logits, dim=-1, keepdim=True)
        idx = torch.cat((idx, idx_next), dim=1)
    return idx


def generate(model, idx, max_new_tokens, context_size, temperature=0.0, top_k=None, eos_id=None):
    """Chapter 5's generate."""
    for _ in range(max_new_tokens):
        idx_cond = idx[:, -context_size:]
        with torch.no_grad():
            logits = model(idx_cond)
        logits = logits[:, -1, :]
        if top_k is not None:
            top_logits, _ = torch.topk(logits, top_k)
            min_val = top_logits[:, -1]
            logits = torch.where(logits < min_val, torch.tensor(float("-inf")).to(logits.device), logits)
        if temperature > 0.0:
            logits = logits / temperature
            probs = torch.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
        else:
            idx_next = torch.argmax(logits, dim=-1, keepdim=True)
        if idx_next == eos_id:
            break
        idx = torch.cat((idx, idx_next), dim=1)
    return idx


def to_hf(sd, n_layers, prefix="", mask_buffers=False, masked_bias=False, context_length=None):
    """The book's GPTModel state_dict (qkv_bias=True) under Hugging Face GPT-2 names: Conv1D weights
    (in, out), q|k|v side by side in c_attn, no head (tied to wte). mask_buffers adds h.N.attn.bias,
    masked_bias h.N.attn.masked_bias: buffers a loader must ignore."""
    g = lambda k: sd[k].detach().float().numpy()
    out = {prefix + "wte.weight": g("tok_emb.weight"), prefix + "wpe.weight": g("pos_emb.weight")}
    for n in range(n_layers):
        b, h = "trf_blocks.%d." % n, "%sh.%d." % (prefix, n)
        out[h + "ln_1.weight"] = g(b + "norm1.scale")
        out[h + "ln_1.bias"] = g(b + "norm1.shift")
        out[h + "attn.c_attn.weight"] = np.concatenate(
            [g(b + "att.W_query.weight"), g(b + "att.W_key.weight"), g(b + "att.W_value.weight")], axis=0).T
        out[h + "attn.c_attn.bias"] = np.concatenate(
            [g(b + "att.W_query.bias"), g(b + "att.W_key.bias"), g(b + "att.W_value.bias")])
        out[h + "attn.c_proj.weight"] = g(b + "att.out_proj.weight").T
        out[h + "attn.c_proj.bias"] = g(b + "att.out_proj.bias")
        out[h + "ln_2.weight"] = g(b + "norm2.scale")
        out[h + "ln_2.bias"] = g(b + "norm2.shift")
        out[h + "mlp.c_fc.weight"] = g(b + "ff.layers.0.weight").T
        out[h + "mlp.c_fc.bias"] = g(b + "ff.layers.0.bias")
        out[h + "mlp.c_proj.weight"] = g(b + "ff.layers.2.weight").T
        out[h + "mlp.c_proj.bias"] = g(b + "ff.layers.2.bias")
        if mask_buffers:
            c = context_length
            out[h + "attn.bias"] = np.tril(np.ones((c, c), np.float32)).reshape(1, 1, c, c)
        if masked_bias:
            out[h + "attn.masked_bias"] = np.array(-1e4, np.float32)
    out[prefix + "ln_f.weight"] = g("final_norm.scale")
    out[prefix + "ln_f.bias"] = g("final_norm.shift")
    return {k: np.ascontiguousarray(v) for k, v in out.items()}
