#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets other than safetensors
(fuzz/make_corpus.py writes that one), deterministically:

    /usr/bin/python3 fuzz/make_seeds.py   (into fuzz/corpus/TARGET/seed_*)

gpt_names    tiny chapter 4 models (E = 4, two heads, V = 5, C = 3): the
             book's GPTModel and TransformerBlock (torch.manual_seed(123)),
             Hugging Face GPT-2 names with and without "transformer.", with
             mask buffers, a separate lm_head, F16 and BF16 data; plus a few
             that must fail (missing, misshapen, unexpected tensors).
metadata     "key=value" lines of both configurations, valid and not.
cli_options  argv vectors (NUL-separated) of module options and --ids.
tokenizer    a mode byte, then text (even) or ids (odd; see the target).
"""
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import book_gpt  # noqa: E402
import st  # noqa: E402

CFG = {"vocab_size": 5, "context_length": 3, "emb_dim": 4, "n_heads": 2, "n_layers": 1,
       "drop_rate": 0.0, "qkv_bias": False}


def meta(cfg, module):
    keys = ["context_length", "emb_dim", "n_heads", "drop_rate", "qkv_bias"]
    if module == "GPTModel":
        keys = ["vocab_size", "n_layers"] + keys
    m = {k: str(cfg[k]).lower() if isinstance(cfg[k], bool) else str(cfg[k]) for k in keys}
    m["module"] = module
    return m


def sd_np(model, dtype=np.float32):
    return {k: v.detach().numpy().astype(dtype) for k, v in model.state_dict().items()}


def gpt_names():
    out = {}
    torch.manual_seed(123)
    g = book_gpt.GPTModel(CFG)
    out["book_gpt"] = st.serialize(sd_np(g), meta(CFG, "GPTModel"))
    out["book_gpt_f16"] = st.serialize(sd_np(g, np.float16), meta(CFG, "GPTModel"))
    cfg = dict(CFG, qkv_bias=True, n_layers=2)
    torch.manual_seed(123)
    g2 = book_gpt.GPTModel(cfg)
    out["book_gpt_bias_2layers"] = st.serialize(sd_np(g2), meta(cfg, "GPTModel"))
    torch.manual_seed(123)
    b = book_gpt.TransformerBlock(CFG)
    out["book_block"] = st.serialize(sd_np(b), meta(CFG, "TransformerBlock"))
    sd = g2.state_dict()
    hf = book_gpt.to_hf(sd, 2)
    out["hf"] = st.serialize(hf, {"n_heads": "2"})
    out["hf_prefix_masks"] = st.serialize(
        book_gpt.to_hf(sd, 2, prefix="transformer.", mask_buffers=True, masked_bias=True, context_length=3),
        {"n_head": "2"})
    untied = dict(hf)
    untied["lm_head.weight"] = sd["out_head.weight"].detach().numpy()
    out["hf_lm_head"] = st.serialize(untied, {"n_heads": "2"})
    bf = {k: torch.from_numpy(v).bfloat16().view(torch.int16).numpy() for k, v in hf.items()}
    # st.serialize has no BF16: write the int16 views, then rename the dtype
    blob = st.serialize(bf, {"n_heads": "2"})
    n = struct.unpack("<Q", blob[:8])[0]
    h = blob[8:8 + n].rstrip(b" ").replace(b'"I16"', b'"BF16"')
    h += b" " * (-len(h) % 8)
    out["hf_bf16"] = struct.pack("<Q", len(h)) + h + blob[8 + n:]
    # must fail
    miss = dict(hf)
    del miss["h.1.mlp.c_fc.bias"]
    out["hf_missing"] = st.serialize(miss, {"n_heads": "2"})
    bad = dict(hf)
    bad["h.0.attn.c_attn.weight"] = np.ascontiguousarray(bad["h.0.attn.c_attn.weight"].T)
    out["hf_transposed"] = st.serialize(bad, {"n_heads": "2"})
    extra = dict(hf)
    extra["h.2.ln_2.weight"] = np.ones(4, np.float32)
    out["hf_extra"] = st.serialize(extra, {"n_heads": "2"})
    out["hf_no_heads_e4"] = st.serialize(hf)
    sdb = sd_np(g)
    sdb["trf_blocks.0.att.mask"] = np.triu(np.ones((3, 3), np.float32), 1)
    sdb["trf_blocks.0.extra"] = np.zeros(1, np.float32)
    out["book_extra"] = st.serialize(sdb, meta(CFG, "GPTModel"))
    return {k + ".safetensors": v for k, v in out.items()}


def metadata():
    mha = "module=MultiHeadAttention\nd_in=3\nd_out=2\ncontext_length=6\nnum_heads=2\ndropout=0.0\nqkv_bias=false"
    gpt = "module=GPTModel\nvocab_size=5\ncontext_length=3\nemb_dim=4\nn_heads=2\nn_layers=1\ndrop_rate=0.1\nqkv_bias=False"
    return {
        "mha.txt": mha,
        "wrapper.txt": mha.replace("MultiHeadAttention", "MultiHeadAttentionWrapper"),
        "causal.txt": "module=CausalAttention\nd_in=3\nd_out=2\ncontext_length=6\ndropout=0.5\nqkv_bias=1",
        "v1.txt": "module=SelfAttention_v1\nd_in=3\nd_out=2",
        "v2.txt": "module=SelfAttention_v2\nd_in=3\nd_out=2\nqkv_bias=True",
        "gpt.txt": gpt,
        "block.txt": "module=TransformerBlock\ncontext_length=3\nemb_dim=4\nn_heads=2\ndrop_rate=0\nqkv_bias=true",
        "huge_mha.txt": mha.replace("d_in=3", "d_in=16000000").replace("d_out=2", "d_out=16000000"),
        "huge_gpt.txt": gpt.replace("emb_dim=4", "emb_dim=4096").replace("n_layers=1", "n_layers=64")
                           .replace("n_heads=2", "n_heads=64"),
        "bad_int.txt": mha.replace("d_in=3", "d_in=-3"),
        "bad_drop.txt": gpt.replace("drop_rate=0.1", "drop_rate=nan"),
        # the metadata rule's edges (docs/file-formats.md), one key each
        "rule_int_tab.txt": gpt.replace("emb_dim=4", "emb_dim=\t4"),
        "rule_int_space.txt": mha.replace("d_in=3", "d_in= 3"),
        "rule_int_plus.txt": gpt.replace("n_heads=2", "n_heads=+2"),
        "rule_int_zeros.txt": mha.replace("d_out=2", "d_out=002"),
        "rule_int_exp.txt": gpt.replace("vocab_size=5", "vocab_size=5e0"),
        "rule_int_range.txt": "k=9223372036854775807\nk2=-9223372036854775808\nk3=9223372036854775808\nk4=-0",
        "rule_float.txt": "a=0.1\nb=-2\nc=1e-08\nd=.5\ne=1E+2\nf=0.10000000000000001",
        "rule_float_bad.txt": "a=\nb=nan\nc=0x1p3\nd=+0.5\ne=inf\nf=1e999\ng=.\nh= 1",
        "rule_bool.txt": "a=true\nb=True\nc=1\nd=false\ne=False\nf=0\ng=TRUE\nh=yes\ni=01",
    }


def cli_options():
    v = lambda *a: "\0".join(a)
    return {
        "mha.argv": v("init", "--d-in", "3", "--d-out", "2", "--context-length", "6", "--num-heads", "2",
                      "--dropout", "0.5", "--seed", "123", "--qkv-bias"),
        "causal.argv": v("ini", "--d-in", "768", "--d-out", "768", "--context-length", "1024", "--dropout", "0.1",
                         "--seed", "-1"),
        "ids.argv": v("gen", "--ids", "15496,11,314,716", "--seed", "18446744073709551615"),
        "bad.argv": v("x", "--d-in", "3x", "--d-out", "", "--dropout", "1", "--seed", "-9223372036854775809",
                      "--ids", "1,,2", "--num-heads"),
        "numbers.argv": v("n", "0", "-0", "+5", " 7", "1e3", "0x10", "1099511627776", "9223372036854775807",
                          "0.99999999999999989", "2147483647,2147483648", "007,0"),
    }


def tokenizer():
    ids = lambda *a: bytes([1]) + b"".join(struct.pack("<H", i + 4) for i in a)
    return {
        "text.bin": b"\0Hello, world! It's 3.14 o'clock   \n\n\tin  caf\xc3\xa9s \xf0\x9f\xa4\x97",
        "text_unicode.bin": b"\0\xe4\xbd\xa0\xe5\xa5\xbd \xd0\xbf\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xef\xbb\xbf "
                            b"\xe2\x80\xa8 12\xd9\xa3 's 've 'LL",
        "text_invalid.bin": b"\0abc\xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xe2\x82",
        "ids.bin": ids(15496, 11, 995, 50256, 0, 50257, 50256),
        "ids_cut.bin": ids(8582, 97, 245),
        "ids_raw.bin": bytes([3]) + struct.pack("<iii", 15496, -1, 2 ** 31 - 1),
    }


def main():
    for target, files in [("gpt_names", gpt_names()), ("metadata", metadata()), ("cli_options", cli_options()),
                          ("tokenizer", tokenizer())]:
        d = os.path.join(HERE, "corpus", target)
        os.makedirs(d, exist_ok=True)
        for name, content in files.items():
            with open(os.path.join(d, "seed_" + name), "wb") as f:
                f.write(content.encode() if isinstance(content, str) else content)
        print("%s: %d seeds, %d bytes" % (target, len(files), sum(len(c) for c in files.values())))


main()
