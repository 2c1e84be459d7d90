"""The five attention classes of chapter 3 of "Build a Large Language Model
(From Scratch)", written exactly as the book writes them (the oracle for the
differential tests). See docs/book-reference.md.

Running this file checks them against the numbers the book prints.
"""
import torch
import torch.nn as nn


class SelfAttention_v1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        keys = x @ self.W_key
        queries = x @ self.W_query
        values = x @ self.W_value
        attn_scores = queries @ keys.T  # omega
        attn_weights = torch.softmax(
            attn_scores / keys.shape[-1]**0.5, dim=-1)
        context_vec = attn_weights @ values
        return context_vec


class SelfAttention_v2(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        attn_scores = queries @ keys.T
        attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)
        context_vec = attn_weights @ values
        return context_vec


class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length,
                 dropout, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            'mask',
            torch.triu(torch.ones(context_length, context_length),
                       diagonal=1)
        )

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)

        attn_scores = queries @ keys.transpose(1, 2)
        attn_scores.masked_fill_(
            self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(
            attn_scores / keys.shape[-1]**0.5, dim=-1
        )
        attn_weights = self.dropout(attn_weights)

        context_vec = attn_weights @ values
        return context_vec


class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length,
                 dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
             for _ in range(num_heads)]
        )

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length,
                 dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert (d_out % num_heads == 0), \
            "d_out must be divisible by num_heads"

        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads

        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "mask",
            torch.triu(torch.ones(context_length, context_length),
                       diagonal=1)
        )

    def forward(self, x):
        b, num_tokens, d_in = x.shape

        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)

        keys = keys.view(b, num_tokens, self.num_heads, self.head_dim)
        values = values.view(b, num_tokens, self.num_heads, self.head_dim)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)

        keys = keys.transpose(1, 2)
        queries = queries.transpose(1, 2)
        values = values.transpose(1, 2)

        attn_scores = queries @ keys.transpose(2, 3)
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        attn_scores.masked_fill_(mask_bool, -torch.inf)

        attn_weights = torch.softmax(
            attn_scores / keys.shape[-1]**0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)

        context_vec = (attn_weights @ values).transpose(1, 2)

        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
        context_vec = self.out_proj(context_vec)
        return context_vec


# --- what the CLI and the tests need to know about each class -------------

CLASSES = {
    "SelfAttention_v1": SelfAttention_v1,
    "SelfAttention_v2": SelfAttention_v2,
    "CausalAttention": CausalAttention,
    "MultiHeadAttentionWrapper": MultiHeadAttentionWrapper,
    "MultiHeadAttention": MultiHeadAttention,
}

# Constructor argument names, in order, per class.
ARGS = {
    "SelfAttention_v1": ("d_in", "d_out"),
    "SelfAttention_v2": ("d_in", "d_out", "qkv_bias"),
    "CausalAttention": ("d_in", "d_out", "context_length", "dropout", "qkv_bias"),
    "MultiHeadAttentionWrapper": ("d_in", "d_out", "context_length", "dropout",
                                  "num_heads", "qkv_bias"),
    "MultiHeadAttention": ("d_in", "d_out", "context_length", "dropout",
                           "num_heads", "qkv_bias"),
}

BATCHED = {"CausalAttention", "MultiHeadAttentionWrapper", "MultiHeadAttention"}


def construct(module, cfg, seed=None):
    """Module `module` built from cfg (a dict with at least the class's
    ARGS); torch.manual_seed(seed) first when seed is not None."""
    kwargs = {k: cfg[k] for k in ARGS[module]}
    if seed is not None:
        torch.manual_seed(seed)
    return CLASSES[module](**kwargs)


def output_width(module, cfg):
    if module == "MultiHeadAttentionWrapper":
        return cfg["num_heads"] * cfg["d_out"]
    return cfg["d_out"]


# --- the book's printed numbers -------------------------------------------

INPUTS = [[0.43, 0.15, 0.89],
          [0.55, 0.87, 0.66],
          [0.57, 0.85, 0.64],
          [0.22, 0.58, 0.33],
          [0.77, 0.25, 0.10],
          [0.05, 0.80, 0.55]]


def _check(name, got, want, tol=5e-5):
    got = torch.as_tensor(got, dtype=torch.float32)
    want = torch.tensor(want, dtype=torch.float32)
    ok = got.shape == want.shape and bool(((got - want).abs() <= tol).all())
    print("%-40s %s" % (name, "ok" if ok else "MISMATCH\n got %s\nwant %s" % (got, want)))
    return ok


def self_check():
    inputs = torch.tensor(INPUTS)
    batch = torch.stack((inputs, inputs), dim=0)
    ok = True
    with torch.no_grad():
        torch.manual_seed(123)
        sa1 = SelfAttention_v1(3, 2)
        ok &= _check("SelfAttention_v1 query_2", (inputs[1] @ sa1.W_query).round(decimals=4),
                     [0.4306, 1.4551])
        ok &= _check("SelfAttention_v1(3,2)", sa1(inputs).round(decimals=4),
                     [[.2996, .8053], [.3061, .8210], [.3058, .8203],
                      [.2948, .7939], [.2927, .7891], [.2990, .8040]])
        torch.manual_seed(789)
        sa2 = SelfAttention_v2(3, 2)
        ok &= _check("SelfAttention_v2(3,2)", sa2(inputs).round(decimals=4),
                     [[-.0739, .0713], [-.0748, .0703], [-.0749, .0702],
                      [-.0760, .0685], [-.0763, .0679], [-.0754, .0693]])
        torch.manual_seed(123)
        drop = torch.nn.Dropout(0.5)
        ok &= _check("Dropout(0.5)(ones(6,6))", drop(torch.ones(6, 6)),
                     [[2, 2, 0, 2, 2, 0], [0, 0, 0, 2, 0, 2], [2, 2, 2, 2, 0, 2],
                      [0, 2, 2, 0, 0, 2], [0, 2, 0, 2, 0, 2], [0, 2, 2, 2, 2, 0]])
        ca_rows = [[-.4519, .2216], [-.5874, .0058], [-.6300, -.0632],
                   [-.5675, -.0843], [-.5526, -.0981], [-.5299, -.1081]]
        torch.manual_seed(123)
        ca = CausalAttention(3, 2, 6, 0.0)
        ok &= _check("CausalAttention(3,2,6,0.0)", ca(batch).round(decimals=4),
                     [ca_rows, ca_rows])
        torch.manual_seed(123)
        w = MultiHeadAttentionWrapper(3, 2, 6, 0.0, num_heads=2)
        h2 = [[.4772, .1063], [.5891, .3257], [.6202, .3860],
              [.5478, .3589], [.5321, .3428], [.5077, .3493]]
        rows = [a + b for a, b in zip(ca_rows, h2)]
        ok &= _check("MultiHeadAttentionWrapper(3,2,6,0.0,2)", w(batch).round(decimals=4),
                     [rows, rows])
        torch.manual_seed(123)
        m = MultiHeadAttention(3, 2, 6, 0.0, num_heads=2)
        mrows = [[.3190, .4858], [.2943, .3897], [.2856, .3593],
                 [.2693, .3873], [.2639, .3928], [.2575, .4028]]
        ok &= _check("MultiHeadAttention(3,2,6,0.0,2)", m(batch).round(decimals=4),
                     [mrows, mrows])
        n = sum(p.numel() for p in MultiHeadAttention(768, 768, 1024, 0.0, 12).parameters())
        print("%-40s %s" % ("MultiHeadAttention(768,...) params", "ok" if n == 2360064 else n))
        ok &= n == 2360064
    return ok


if __name__ == "__main__":
    import sys
    sys.exit(0 if self_check() else 1)
