"""Chapter 4 in Python: the book's GPTModel(cfg) and TransformerBlock(cfg),
computed by libmha, exact to the book's PyTorch code.

    import mha
    mha.manual_seed(123)                      # torch.manual_seed(123)
    model = mha.GPTModel(mha.GPT_CONFIG_124M) # torch's weights, bit for bit
    model.eval()
    logits = model(idx)                       # idx: (b, T) int array or LongTensor -> (b, T, vocab)
    ids = model.generate([[15496, 11, 314, 716]], max_new_tokens=10)

Training-mode forwards draw the book's dropout masks from mha's global
generator (mha.manual_seed), in torch's order. Forward only: the C library
has the chapter 4 backward (mha_gpt_loss_backward), this binding does not
wrap it yet.
"""
import ctypes
import os

import numpy as np

from . import _lib
from ._lib import Error, P, c_double, c_int, c_int64, c_void_p

GPT_CONFIG_124M = {"vocab_size": 50257, "context_length": 1024, "emb_dim": 768, "n_heads": 12,
                   "n_layers": 12, "drop_rate": 0.1, "qkv_bias": False}
_KEYS = ("vocab_size", "context_length", "emb_dim", "n_heads", "n_layers", "drop_rate", "qkv_bias")


class GPTConfig(ctypes.Structure):
    """mha_gpt_config"""
    _fields_ = [("kind", c_int), ("vocab_size", c_int64), ("context_length", c_int64), ("emb_dim", c_int64),
                ("n_heads", c_int64), ("n_layers", c_int64), ("drop_rate", c_double), ("qkv_bias", c_int)]


class GenerateOpts(ctypes.Structure):
    """mha_generate_opts"""
    _fields_ = [("max_new_tokens", c_int64), ("temperature", c_double), ("top_k", c_int64),
                ("seed", ctypes.c_uint64), ("use_cache", c_int), ("eos_id", ctypes.c_int32)]


_c_int32_p = P(ctypes.c_int32)
_PROTOTYPES = {
    "mha_gpt_config_init": (None, [P(GPTConfig), c_int]),
    "mha_gpt_create": (c_int, [P(GPTConfig), c_int, P(c_void_p)]),
    "mha_gpt_init": (c_int, [c_void_p, c_void_p]),
    "mha_gpt_free": (None, [c_void_p]),
    "mha_gpt_config_of": (P(GPTConfig), [c_void_p]),
    "mha_gpt_params": (c_void_p, [c_void_p]),
    "mha_gpt_forward": (c_int, [c_void_p, _lib.c_float_p, _c_int32_p, c_int64, c_int64, c_int, c_void_p]),
    "mha_gpt_blocks_forward": (c_int, [c_void_p, _lib.c_float_p, _lib.c_float_p, c_int64, c_int64, c_void_p]),
    "mha_generate_opts_init": (None, [P(GenerateOpts)]),
    "mha_gpt_generate": (c_int, [c_void_p, _c_int32_p, P(c_int64), _c_int32_p, c_int64, P(GenerateOpts),
                                 c_void_p, c_void_p]),
    "mha_gpt_save": (c_int, [c_void_p, ctypes.c_char_p]),
    "mha_gpt_load": (c_int, [ctypes.c_char_p, P(c_void_p)]),
}
_L = _lib.lib
for _name, (_res, _args) in _PROTOTYPES.items():
    _f = getattr(_L, _name)
    _f.restype, _f.argtypes = _res, _args
_check = _lib.check


def _ids(x):
    """(int32 C array, 'torch' or 'numpy') from token ids."""
    from . import _is_torch
    if _is_torch(x):
        return np.ascontiguousarray(x.detach().cpu().numpy(), dtype=np.int32), "torch"
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError("token ids must be integers, got %s" % a.dtype)
    return np.ascontiguousarray(a, dtype=np.int32), "numpy"


class _GPTBase:
    _KIND = 0

    def __init__(self, cfg):
        from . import _gen, _gen_lock
        missing = [k for k in _KEYS if k not in cfg and not (self._KIND == 2 and k in ("vocab_size", "n_layers"))]
        if missing:
            raise KeyError("cfg lacks %s" % ", ".join(missing))
        c = GPTConfig()
        _L.mha_gpt_config_init(ctypes.byref(c), self._KIND)
        for k in _KEYS:
            if k in cfg:
                setattr(c, k, int(cfg[k]) if k != "drop_rate" else float(cfg[k]))
        h = c_void_p()
        _check(_L.mha_gpt_create(ctypes.byref(c), 0, ctypes.byref(h)), type(self).__name__)
        self._h = h
        with _gen_lock:  # construction draws from the global generator, as torch's does
            _check(_L.mha_gpt_init(h, _gen), type(self).__name__)
        self.training = True

    @classmethod
    def _wrap(cls, h):
        m = cls.__new__(cls)
        m._h = h
        m.training = True
        return m

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            _L.mha_gpt_free(h)
            self._h = None

    @property
    def cfg(self):
        c = _L.mha_gpt_config_of(self._h).contents
        return {k: (bool(getattr(c, k)) if k == "qkv_bias" else getattr(c, k)) for k in _KEYS}

    def train(self, mode=True):
        self.training = bool(mode)
        return self

    def eval(self):
        return self.train(False)

    def named_parameters(self):
        from . import _view
        out = []
        ps = _L.mha_gpt_params(self._h)
        for i in range(_L.mha_params_count(ps)):
            p = _lib.Param()
            _check(_L.mha_params_get(ps, i, ctypes.byref(p)), "parameter")
            out.append((p.name.decode(), _view(self, p)))
        return out

    def parameters(self):
        return [a for _, a in self.named_parameters()]

    def numel(self):
        """sum(p.numel() for p in model.parameters()) as torch counts it."""
        return int(_L.mha_params_scalars(_L.mha_gpt_params(self._h)))

    def state_dict(self):
        """torch's names and order (without the att.mask buffers), copies."""
        return {k: v.copy() for k, v in self.named_parameters()}

    def load_state_dict(self, state_dict, strict=True):
        from . import _to_numpy
        params = dict(self.named_parameters())
        extra = [k for k in state_dict if k not in params and not k.endswith("att.mask")]
        missing = [k for k in params if k not in state_dict]
        if strict and (extra or missing):
            raise KeyError("load_state_dict: missing %s, unexpected %s" % (missing, extra))
        for k, v in state_dict.items():
            if k in params:
                a, _ = _to_numpy(v, k)
                if a.shape != params[k].shape:
                    raise ValueError("%s: shape %s, expected %s" % (k, a.shape, params[k].shape))
                params[k][...] = a

    def save(self, path):
        """The book's names, F32, the cfg in the metadata (mha run, mha generate, mha.load read it)."""
        _check(_L.mha_gpt_save(self._h, os.fsencode(path)), "save")

    def __call__(self, x):
        return self.forward(x)

    def _rng(self):
        from . import _gen
        return _gen if self.training and self.cfg["drop_rate"] > 0 else None


class GPTModel(_GPTBase):
    """The book's GPTModel(cfg): tok_emb, pos_emb, drop_emb, trf_blocks,
    final_norm, out_head (no bias, not tied)."""
    _KIND = 1

    def forward(self, in_idx):
        from . import _gen_lock, _like
        idx, kind = _ids(in_idx)
        if idx.ndim != 2:
            raise ValueError("in_idx must be (batch, num_tokens), got shape %s" % (idx.shape,))
        B, T = idx.shape
        V = self.cfg["vocab_size"]
        logits = np.empty((B, T, V), np.float32)
        with _gen_lock:
            _check(_L.mha_gpt_forward(self._h, logits.ctypes.data_as(_lib.c_float_p), idx.ctypes.data_as(_c_int32_p),
                                      B, T, 0, self._rng()), "GPTModel")
        return _like(logits, kind)

    def generate(self, idx, max_new_tokens, temperature=0.0, top_k=None, seed=0, use_cache=True, eos_id=None):
        """generate_text_simple (temperature 0) or chapter 5's generate
        (top_k, temperature: torch.multinomial's draws after
        torch.manual_seed(seed)), batch 1; the context cropped to
        context_length; a KV cache unless use_cache=False (same tokens).
        Returns the ids, the prompt's included, as a (1, n) array."""
        prompt, _ = _ids(idx)
        prompt = prompt.reshape(-1)
        o = GenerateOpts()
        _L.mha_generate_opts_init(ctypes.byref(o))
        o.max_new_tokens, o.temperature, o.top_k = int(max_new_tokens), float(temperature), int(top_k or 0)
        o.seed, o.use_cache, o.eos_id = int(seed) & ((1 << 64) - 1), int(bool(use_cache)), -1 if eos_id is None else int(eos_id)
        out = np.empty(prompt.size + o.max_new_tokens, np.int32)
        n = c_int64()
        _check(_L.mha_gpt_generate(self._h, out.ctypes.data_as(_c_int32_p), ctypes.byref(n),
                                   prompt.ctypes.data_as(_c_int32_p), prompt.size, ctypes.byref(o), None, None),
               "generate")
        return out[: n.value].astype(np.int64).reshape(1, -1)


class TransformerBlock(_GPTBase):
    """The book's TransformerBlock(cfg): att, ff, norm1, norm2, drop_shortcut."""
    _KIND = 2

    def forward(self, x):
        from . import _gen_lock, _like, _to_numpy
        a, kind = _to_numpy(x, "x")
        if a.ndim != 3:
            raise ValueError("x must be (batch, num_tokens, emb_dim), got shape %s" % (a.shape,))
        y = np.empty_like(a)
        with _gen_lock:
            _check(_L.mha_gpt_blocks_forward(self._h, y.ctypes.data_as(_lib.c_float_p), a.ctypes.data_as(_lib.c_float_p),
                                             a.shape[0], a.shape[1], self._rng()), "TransformerBlock")
        return _like(y, kind)


def load(path):
    """A GPTModel or TransformerBlock file (the book's names, or Hugging Face
    GPT-2's), or raises Error."""
    h = c_void_p()
    _check(_L.mha_gpt_load(os.fsencode(path), ctypes.byref(h)), "load")
    kind = _L.mha_gpt_config_of(h).contents.kind
    return (GPTModel if kind == 1 else TransformerBlock)._wrap(h)
