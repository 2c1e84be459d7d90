#!/usr/bin/python3
"""Writes the seed corpus of the safetensors fuzz target, deterministically:

    /usr/bin/python3 fuzz/make_corpus.py [OUT_DIR]   (default fuzz/corpus/safetensors)

valid_*    files the reader accepts: tiny tensors, every float dtype, metadata,
           zero-size and scalar tensors, and state_dicts of the book's classes
           built by PyTorch (torch.manual_seed(123), as the book does), which
           mha_module_load must read (tests/test_safetensors.c loads two).
invalid_*  one validation rule broken per file.
module_*   valid safetensors files that mha_module_from_st must reject.

No safetensors package: the format is written by hand (8-byte little-endian
header length, JSON header padded with spaces to a multiple of 8, raw
little-endian data). Files are kept small.
"""
import json
import os
import struct
import sys

import torch

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "corpus", "safetensors")

DT = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
      torch.float64: "F64", torch.int64: "I64", torch.int32: "I32",
      torch.uint8: "U8", torch.bool: "BOOL", torch.int8: "I8", torch.int16: "I16"}


def header_bytes(obj, pad=True):
    hb = json.dumps(obj, separators=(",", ":")).encode("utf-8")
    if pad and len(hb) % 8:
        hb += b" " * (8 - len(hb) % 8)
    return hb


def raw(hb, data=b"", hlen=None):
    return struct.pack("<Q", len(hb) if hlen is None else hlen) + hb + data


def st(tensors, metadata=None):
    """tensors: list of (name, torch tensor) in file order (for modules:
    state_dict order, where a module's own buffer "mask" precedes its
    children's parameters)."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    data = b""
    for name, t in tensors:
        t = t.detach().contiguous()
        b = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": DT[t.dtype], "shape": list(t.shape),
                        "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    return raw(header_bytes(header), data)


files = {}


def put(name, content):
    assert name not in files
    files[name] = content


# --- the book's classes (tests/book_modules.py) ----------------------------

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from book_modules import (CausalAttention, MultiHeadAttention, MultiHeadAttentionWrapper,  # noqa: E402
                          SelfAttention_v1, SelfAttention_v2)


def module_file(cls, args, seed=123, dtype=None, py_style=True, edit=None):
    """state_dict of cls(**args) after torch.manual_seed(seed); metadata as a
    Python user would write it (str(value): "False", "0.0") or as mha
    writes it ("false", "%.17g")."""
    torch.manual_seed(seed)
    m = cls(**args)
    tensors = [(k, v if dtype is None or k.endswith("mask") else v.to(dtype))
               for k, v in m.state_dict().items()]
    meta = {"module": cls.__name__}
    for k, v in args.items():
        if isinstance(v, bool):
            meta[k] = str(v) if py_style else ("true" if v else "false")
        else:
            meta[k] = str(v) if py_style else ("%.17g" % v if isinstance(v, float) else str(v))
    if edit:
        tensors, meta = edit(tensors, meta)
    return st(tensors, meta)


f32 = torch.tensor

# --- valid ---------------------------------------------------------------

put("valid_tiny_f32", st([("x", f32([1.5, -2.0], dtype=torch.float32))]))
put("valid_empty", raw(b"{}      "))
put("valid_scalar", st([("s", f32(3.0, dtype=torch.float32))]))
put("valid_zero_size", st([("z", torch.zeros(0, 3)), ("w", f32([1.0, 2.0])),
                           ("y", torch.zeros(2, 0, dtype=torch.int64))]))
put("valid_metadata", st([("weight", f32([[1.0, 2.0], [3.0, 4.0]]))],
                         {"format": "pt", "note": "caf\u00e9 \u20ac \U0001F600"}))
# header order differs from data order
h = {"b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
     "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}
put("valid_reordered", raw(header_bytes(h), bytes([1, 2, 3, 4]) + struct.pack("<f", 7.0)))
put("valid_dtypes", st([
    ("f16", f32([1.0, 65504.0, 2.0 ** -24, float("inf"), float("nan"), -0.0],
                dtype=torch.float16)),
    ("bf16", f32([1.0, 3.140625, -1e38, float("-inf")], dtype=torch.bfloat16)),
    ("f64", f32([0.1, 1e300, -1e-50], dtype=torch.float64)),
    ("i32", f32([1, -1], dtype=torch.int32)),
    ("bool", f32([True, False], dtype=torch.bool)),
    ("i8", f32([-3], dtype=torch.int8)),
]))
put("valid_torch_v1", module_file(SelfAttention_v1, {"d_in": 3, "d_out": 2}))
put("valid_torch_v2_bias", module_file(SelfAttention_v2,
                                       {"d_in": 3, "d_out": 2, "qkv_bias": True}))
put("valid_torch_causal", module_file(
    CausalAttention, {"d_in": 3, "d_out": 2, "context_length": 6, "dropout": 0.0,
                      "qkv_bias": False}))
put("valid_torch_mha", module_file(
    MultiHeadAttention, {"d_in": 3, "d_out": 2, "context_length": 6, "dropout": 0.0,
                         "num_heads": 2, "qkv_bias": False}))
put("valid_torch_wrapper_bias", module_file(
    MultiHeadAttentionWrapper, {"d_in": 3, "d_out": 2, "context_length": 4,
                                "dropout": 0.1, "num_heads": 2, "qkv_bias": True},
    py_style=False))
put("valid_torch_mha_f16", module_file(
    MultiHeadAttention, {"d_in": 4, "d_out": 4, "context_length": 3, "dropout": 0.5,
                         "num_heads": 2, "qkv_bias": True}, dtype=torch.float16))

# --- invalid: one rule each ---------------------------------------------

T8 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
D8 = struct.pack("<2f", 1.0, 2.0)


def hdr(obj_text, data=D8):
    b = obj_text.encode("utf-8") if isinstance(obj_text, str) else obj_text
    return raw(b, data)


put("invalid_short", b"\x08\x00\x00\x00\x00")
put("invalid_hlen_zero", raw(b"", b"", hlen=0))
put("invalid_hlen_huge", raw(b"{}", b"", hlen=100_000_001))
put("invalid_hlen_beyond", raw(b"{}", b"", hlen=16))
put("invalid_utf8_overlong", hdr(b'{"__metadata__":{"k":"\xc0\xaf"}}', b""))
put("invalid_utf8_surrogate", hdr(b'{"__metadata__":{"k":"\xed\xa0\x80"}}', b""))
put("invalid_utf8_above_max", hdr(b'{"__metadata__":{"k":"\xf4\x90\x80\x80"}}', b""))
put("invalid_nul_byte", hdr(b'{"__metadata__":{"k":"a\x00b"}}', b""))
put("invalid_escaped_nul", hdr('{"a\\u0000":%s}' % json.dumps(T8)))
put("invalid_control_char", hdr('{"a\x01":%s}' % json.dumps(T8)))
put("invalid_not_object", hdr("[]", b""))
put("invalid_leading_space", hdr(' {"a":%s}' % json.dumps(T8)))
put("invalid_trailing_newline", hdr('{"a":%s}\n' % json.dumps(T8)))
put("invalid_json", hdr('{"a":%s,}' % json.dumps(T8)))
put("invalid_duplicate_tensor", hdr('{"a":%s,"a":%s}' % (json.dumps(T8), json.dumps(T8))))
put("invalid_duplicate_meta_key", hdr('{"__metadata__":{"k":"1","k":"2"},"a":%s}'
                                      % json.dumps(T8)))
put("invalid_duplicate_entry_key",
    hdr('{"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}'))
put("invalid_extra_entry_key",
    hdr('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":0}}'))
put("invalid_missing_dtype", hdr('{"a":{"shape":[2],"data_offsets":[0,8]}}'))
put("invalid_unknown_dtype", hdr('{"a":{"dtype":"F24","shape":[2],"data_offsets":[0,8]}}'))
put("invalid_negative_dim", hdr('{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}'))
put("invalid_float_dim", hdr('{"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}'))
put("invalid_too_many_dims",
    hdr('{"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}}', b"\0"))
put("invalid_inexact_dim",
    hdr('{"a":{"dtype":"U8","shape":[0,9007199254740993],"data_offsets":[0,0]}}', b""))
put("invalid_numel_overflow",
    hdr('{"a":{"dtype":"U8","shape":[4294967296,4294967296,4294967296],'
        '"data_offsets":[0,0]}}', b""))
put("invalid_offsets_reversed", hdr('{"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}'))
put("invalid_offsets_beyond", hdr('{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'))
put("invalid_size_mismatch", hdr('{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}'))
put("invalid_overlap", hdr('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                           '"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'))
put("invalid_gap", hdr('{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'))
put("invalid_trailing_bytes", hdr('{"a":%s}' % json.dumps(T8), D8 + b"\0"))
put("invalid_meta_not_string", hdr('{"__metadata__":{"k":1},"a":%s}' % json.dumps(T8)))
put("invalid_empty_name", hdr('{"":%s}' % json.dumps(T8)))

# --- valid files, invalid modules ---------------------------------------

MHA_ARGS = {"d_in": 4, "d_out": 4, "context_length": 3, "dropout": 0.0,
            "num_heads": 2, "qkv_bias": False}


def drop(name):
    return lambda t, m: ([x for x in t if x[0] != name], m)


def meta(k, v):
    def e(t, m):
        m = dict(m)
        m[k] = v
        return t, m
    return e


def nan_weight(t, m):
    t = [(k, v.clone()) for k, v in t]
    dict(t)["W_key.weight"][1, 2] = float("nan")
    return t, m


def reshape(t, m):
    return [(k, v.reshape(2, 8) if k == "W_key.weight" else v) for k, v in t], m


def extra(t, m):
    return t + [("foo", torch.zeros(1))], m


put("module_missing_tensor", module_file(MultiHeadAttention, MHA_ARGS,
                                         edit=drop("out_proj.bias")))
put("module_bad_d_in", module_file(MultiHeadAttention, MHA_ARGS, edit=meta("d_in", "4x")))
put("module_bad_heads", module_file(MultiHeadAttention, MHA_ARGS,
                                    edit=meta("num_heads", "3")))
put("module_unknown_class", module_file(MultiHeadAttention, MHA_ARGS,
                                        edit=meta("module", "GPTModel")))
put("module_nan_weight", module_file(MultiHeadAttention, MHA_ARGS, edit=nan_weight))
put("module_wrong_shape", module_file(MultiHeadAttention, MHA_ARGS, edit=reshape))
put("module_extra_tensor", module_file(MultiHeadAttention, MHA_ARGS, edit=extra))
# a few bytes asking for a 16M x 16M module: must fail before allocating it
put("module_huge_request", module_file(MultiHeadAttention, MHA_ARGS,
                                       edit=lambda t, m: meta("d_out", "16000000")(
                                           *meta("d_in", "16000000")(t, m))))

os.makedirs(OUT, exist_ok=True)
for name, content in sorted(files.items()):
    with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
        f.write(content)
print("wrote %d files to %s (%d bytes)" % (len(files), OUT,
                                           sum(len(c) for c in files.values())))
