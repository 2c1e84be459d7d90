"""Chapters 4 and 5 in Python: the book's GPTModel(cfg) and
TransformerBlock(cfg), computed by libmha, exact to the book's PyTorch code,
trainable with torch's autograd and optimizers or with mha's own.

    import torch, mha
    torch.manual_seed(123)                    # or mha.manual_seed(123) (the same generator)
    model = mha.GPTModel(cfg)                 # the book's weights, bit for bit
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0004, weight_decay=0.1)
    logits = model(input_batch)               # (b, T) LongTensor -> (b, T, vocab), in torch's graph
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target_batch.flatten())
    loss.backward(); optimizer.step()         # the book's train_model_simple runs unchanged

With torch importable the parameters are torch Parameters sharing mha's
memory, construction and training-mode dropout draw from torch's global
generator in the book's order, and a forward on a LongTensor with grad mode
on records a tape for mha_gpt_backward, which fills each parameter's .grad
(a tensor over mha's gradient). Without torch: numpy arrays, mha.manual_seed,
model.backward(dlogits) or model.loss_backward(idx, targets), and
mha.optim.AdamW(model.parameters()).
"""
import ctypes
import os

import numpy as np

from . import _lib
from ._lib import P, c_double, c_int, c_int64, c_void_p

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
_f = _lib.c_float_p
_PROTOTYPES = {
    "mha_gpt_config_init": (None, [P(GPTConfig), c_int]),
    "mha_gpt_create": (c_int, [P(GPTConfig), c_int, P(c_void_p)]),
    "mha_gpt_init": (c_int, [c_void_p, c_void_p]),
    "mha_gpt_free": (None, [c_void_p]),
    "mha_gpt_config_of": (P(GPTConfig), [c_void_p]),
    "mha_gpt_params": (c_void_p, [c_void_p]),
    "mha_gpt_forward": (c_int, [c_void_p, _f, _c_int32_p, c_int64, c_int64, c_int, c_void_p]),
    "mha_gpt_blocks_forward": (c_int, [c_void_p, _f, _f, c_int64, c_int64, c_void_p]),
    "mha_gpt_tape_create": (c_int, [P(c_void_p)]),
    "mha_gpt_tape_free": (None, [c_void_p]),
    "mha_gpt_forward_tape": (c_int, [c_void_p, _f, _c_int32_p, c_int64, c_int64, c_void_p, c_void_p]),
    "mha_gpt_backward": (c_int, [c_void_p, c_void_p, _f]),
    "mha_gpt_loss_backward": (c_int, [c_void_p, _f, _f, _c_int32_p, _c_int32_p, c_int64, c_int64, c_void_p,
                                      c_void_p]),
    "mha_generate_opts_init": (None, [P(GenerateOpts)]),
    "mha_gpt_generate": (c_int, [c_void_p, _c_int32_p, P(c_int64), _c_int32_p, c_int64, P(GenerateOpts),
                                 c_void_p, c_void_p]),
    "mha_gpt_save": (c_int, [c_void_p, ctypes.c_char_p]),
    "mha_gpt_load": (c_int, [ctypes.c_char_p, P(c_void_p)]),
}
_L = _lib.lib
for _name, (_res, _args) in _PROTOTYPES.items():
    _fn = getattr(_L, _name)
    _fn.restype, _fn.argtypes = _res, _args
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


class _Handle:
    """Owns the mha_gpt. Every array and tensor over the model's memory
    (parameters, gradients) keeps this alive rather than the model, so
    parameters an optimizer holds stay valid and the model itself is freed
    as soon as it is unreachable (no cycle through torch's storage)."""

    def __init__(self, h):
        self.h = h
        self.tapes = []  # free tapes, for the next forward that records

    def __del__(self):
        lib = getattr(_lib, "lib", None)
        if lib is None:
            return
        for t in self.tapes:
            lib.mha_gpt_tape_free(t)
        self.tapes = []
        if self.h:
            lib.mha_gpt_free(self.h)
            self.h = None


class _Tape:
    """One recorded forward: a tape taken from the handle's pool, given
    back when its backward has run or its graph is dropped."""

    def __init__(self, handle):
        self.handle = handle
        if handle.tapes:
            self.t = handle.tapes.pop()
        else:
            t = c_void_p()
            _check(_L.mha_gpt_tape_create(ctypes.byref(t)), "tape")
            self.t = t
        self.used = False

    def release(self):
        t, self.t = getattr(self, "t", None), None
        if t is not None and self.handle.h:
            self.handle.tapes.append(t)
        elif t is not None:
            _L.mha_gpt_tape_free(t)

    __del__ = release


_GPT_FUNCTION = None


def _gpt_function():
    """A torch.autograd.Function around a GPTModel forward (the tape) and
    mha_gpt_backward; the parameters are inputs, so the logits require grad
    when they do, and the backward writes their .grad itself."""
    global _GPT_FUNCTION
    if _GPT_FUNCTION is None:
        import torch

        class GPTFunction(torch.autograd.Function):
            @staticmethod
            def forward(ctx, idx, model, *params):
                tape = _Tape(model._handle)
                logits = model._forward_tape(idx, tape)
                ctx.model, ctx.tape = model, tape
                ctx.versions = [p._version for p in params]
                return torch.from_numpy(logits)

            @staticmethod
            def backward(ctx, dlogits):
                model, tape = ctx.model, ctx.tape
                if tape is None or tape.used:
                    raise RuntimeError("Trying to backward through the graph a second time: mha's GPTModel "
                                       "keeps one backward per forward")
                params = model._torch_params()
                if any(p._version != v for p, v in zip(params, ctx.versions)):
                    raise RuntimeError("one of the variables needed for gradient computation has been modified "
                                       "by an inplace operation: a GPTModel parameter changed between the forward "
                                       "and its backward")
                model._torch_backward(tape, dlogits)
                ctx.tape = None
                return (None, None) + (None,) * len(params)

        _GPT_FUNCTION = GPTFunction
    return _GPT_FUNCTION


class _GPTBase:
    _KIND = 0

    def __init__(self, cfg):
        from . import _drawing
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
        self._adopt(h)
        with _drawing() as g:  # construction draws from the global generator, as torch's does
            _check(_L.mha_gpt_init(h, g), type(self).__name__)

    @classmethod
    def _wrap(cls, h):
        m = cls.__new__(cls)
        m._adopt(h)
        return m

    def _adopt(self, h):
        self._handle = _Handle(h)
        self._h = h
        self.training = True
        self._ps = _L.mha_gpt_params(h)  # the parameter set the optimizers take
        self._params = []  # (name, index) in state_dict order, a tied head once
        self._slot = {}    # every name -> its place in _params (the tied head: tok_emb's)
        self._all = []     # (name, index) of every name, a tied head's included
        first = {}
        for i in range(_L.mha_params_count(self._ps)):
            p = _lib.Param()
            _check(_L.mha_params_get(self._ps, i, ctypes.byref(p)), "parameter")
            name, addr = p.name.decode(), ctypes.cast(p.data, c_void_p).value
            if addr not in first:
                first[addr] = len(self._params)
                self._params.append((name, i))
            self._slot[name] = first[addr]
            self._all.append((name, i))
        self._names = [n for n, _ in self._all]
        self._tparams = None  # torch Parameters over the parameters, made at first need
        self._tgrads = None   # torch tensors over their gradients
        self._last = None     # the numpy path's recorded forward, for backward()

    # -- memory views --
    def _array(self, i, grad=False):
        from . import _Memory
        p = _lib.Param()
        _check((_L.mha_params_grad if grad else _L.mha_params_get)(self._ps, i, ctypes.byref(p)),
               "gradient" if grad else "parameter")
        return np.asarray(_Memory(self._handle, p))

    def _arrays(self, every=False):
        return [(n, self._array(i)) for n, i in (self._all if every else self._params)]

    def _torch_params(self):
        if self._tparams is None:
            import torch
            self._tparams = [torch.nn.Parameter(torch.from_numpy(a)) for _, a in self._arrays()]
        return self._tparams

    def _torch_grads(self):
        if self._tgrads is None:
            import torch
            self._tgrads = [torch.from_numpy(self._array(i, grad=True)) for _, i in self._params]
        return self._tgrads

    def __getstate__(self):
        raise TypeError("a %s is not picklable: save() it" % type(self).__name__)

    @property
    def cfg(self):
        c = _L.mha_gpt_config_of(self._h).contents
        return {k: (bool(getattr(c, k)) if k == "qkv_bias" else getattr(c, k)) for k in _KEYS}

    def __repr__(self):
        return "%s(%r)" % (type(self).__name__, self.cfg)

    # -- nn.Module's manners --
    def train(self, mode=True):
        """Training mode (dropout on), as nn.Module.train(); returns self."""
        self.training = bool(mode)
        return self

    def eval(self):
        return self.train(False)

    def to(self, *args, **kwargs):
        """model.to("cpu") / .to(torch.device("cpu")) / .to(torch.float32):
        the model already is there; anything else raises ValueError."""
        for a in list(args) + list(kwargs.values()):
            s = str(a)
            if s not in ("cpu", "torch.float32", "float32") and not s.startswith("cpu"):
                raise ValueError("%s lives on the CPU in float32 (libmha); cannot move it to %s" % (
                    type(self).__name__, s))
        return self

    def cpu(self):
        return self

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            if hasattr(p, "requires_grad_"):
                p.requires_grad_(requires_grad)
        return self

    def named_parameters(self):
        """[(name, parameter)] in state_dict order (a tied head once): torch
        Parameters sharing mha's memory where torch can be imported, else
        live numpy arrays (writing either changes the model)."""
        from . import _torch
        if _torch() is not None:
            return list(zip((n for n, _ in self._params), self._torch_params()))
        return self._arrays()

    def parameters(self):
        """model.parameters(), for torch.optim (torch Parameters) or mha.optim."""
        from . import ParameterList
        return ParameterList(self, [a for _, a in self.named_parameters()])

    def numel(self):
        """sum(p.numel() for p in model.parameters()) as torch counts it."""
        return int(_L.mha_params_scalars(self._ps))

    def grads(self):
        """{name: array}: every parameter's gradient in mha's buffer, live."""
        return {n: self._array(i, grad=True) for n, i in self._params}

    def zero_grad(self, set_to_none=False):
        """nn.Module.zero_grad: every gradient to zero; with set_to_none the
        torch parameters' .grad become None (mha's buffer is zeroed too)."""
        _check(_L.mha_params_zero_grad(self._ps), "zero_grad")
        for p in self._tparams or ():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.detach_()
                p.grad.zero_()

    def __getattr__(self, name):
        # model.pos_emb.weight, model.trf_blocks[0].att.W_query.weight, ...
        if name.startswith("_") or name == "training":
            raise AttributeError(name)
        return self._lookup(name)

    def _lookup(self, name):
        from . import _Node
        if name in self._slot:
            return self.named_parameters()[self._slot[name]][1]
        if any(n.startswith(name + ".") for n in self._names):
            return _Node(self, name + ".")
        raise AttributeError("%s has no attribute %r" % (type(self).__name__, name))

    def state_dict(self):
        """torch's names and order (without the att.mask buffers), copies."""
        return {k: v.copy() for k, v in self._arrays(every=True)}

    def load_state_dict(self, state_dict, strict=True):
        from . import _to_numpy
        params = dict(self._arrays(every=True))
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
        self._last = None  # a recorded forward no longer matches the parameters

    def save(self, path):
        """The book's names, F32, the cfg in the metadata (mha run, mha generate, mha.load read it)."""
        _check(_L.mha_gpt_save(self._h, os.fsencode(path)), "save")

    def __call__(self, x):
        return self.forward(x)

    def _dropout(self):
        return self.training and self.cfg["drop_rate"] > 0


class GPTModel(_GPTBase):
    """The book's GPTModel(cfg): tok_emb, pos_emb, drop_emb, trf_blocks,
    final_norm, out_head (no bias, not tied)."""
    _KIND = 1

    def forward(self, in_idx):
        """logits = model(in_idx): (b, T) token ids (LongTensor or integer
        array) -> (b, T, vocab_size), of the same kind. In training mode
        dropout draws the book's masks from the global generator. With grad
        mode on (not torch.no_grad() / mha.no_grad()) the forward records
        what the backward needs: on a tensor, with parameters that require
        grad, the logits join torch's autograd graph (loss.backward() fills
        every parameter's .grad); on an array, model.backward(dlogits)
        follows."""
        from . import _grad_enabled, _like
        idx, kind = _ids(in_idx)
        if idx.ndim != 2:
            raise ValueError("in_idx must be (batch, num_tokens), got shape %s" % (idx.shape,))
        record = _grad_enabled()
        if record and kind == "torch":
            params = self._torch_params()
            if any(p.requires_grad for p in params):
                return _gpt_function().apply(in_idx, self, *params)
            record = False
        if record:
            tape = _Tape(self._handle)
            logits = self._forward_tape(idx, tape)
            self._last = tape
            return _like(logits, kind)
        return _like(self._forward(idx), kind)

    def _logits(self, idx):
        B, T = idx.shape
        return np.empty((B, T, self.cfg["vocab_size"]), np.float32), B, T

    def _forward(self, idx):
        from . import _drawing
        logits, B, T = self._logits(idx)
        with _drawing(self._dropout()) as g:
            _check(_L.mha_gpt_forward(self._h, logits.ctypes.data_as(_f), idx.ctypes.data_as(_c_int32_p),
                                      B, T, 0, g), "GPTModel")
        return logits

    def _forward_tape(self, in_idx, tape):
        from . import _drawing
        idx = in_idx if isinstance(in_idx, np.ndarray) else _ids(in_idx)[0]
        logits, B, T = self._logits(idx)
        with _drawing(self._dropout()) as g:
            _check(_L.mha_gpt_forward_tape(self._h, logits.ctypes.data_as(_f), idx.ctypes.data_as(_c_int32_p),
                                           B, T, g, tape.t), "GPTModel")
        return logits

    def _run_backward(self, tape, dlogits):
        from . import _to_numpy
        g = dlogits
        if not (isinstance(g, np.ndarray) and g.dtype == np.float32 and g.flags.c_contiguous):
            g, _ = _to_numpy(dlogits, "dlogits")
        _check(_L.mha_gpt_backward(self._h, tape.t, g.ctypes.data_as(_f)), "GPTModel backward")
        tape.used = True
        tape.release()

    def _torch_backward(self, tape, dlogits):
        """The autograd backward: gradients land in mha's buffer; each
        parameter's .grad is made a tensor over it. A parameter whose .grad
        is None (zero_grad(set_to_none=True)) or another tensor has its
        buffer zeroed first, so that what lands there is this backward's
        alone (added to that other tensor, as autograd accumulates)."""
        params, grads = self._torch_params(), self._torch_grads()
        fresh = []
        for k, (p, gt) in enumerate(zip(params, grads)):
            if p.grad is None or p.grad.data_ptr() != gt.data_ptr() or p.grad.shape != gt.shape:
                gt.zero_()
                fresh.append(k)
        self._run_backward(tape, dlogits.detach().float().contiguous().numpy())
        for k in fresh:
            p, gt = params[k], grads[k]
            if not p.requires_grad:
                continue
            if p.grad is None:
                p.grad = gt
            else:
                p.grad.add_(gt)

    def backward(self, dlogits):
        """For the numpy path: the backward of the last forward recorded on
        an array (outside no_grad), dlogits (b, T, vocab) the loss's
        gradient; accumulates into mha's gradients (grads(); the optimizers
        of mha.optim step from them)."""
        tape, self._last = self._last, None
        if tape is None:
            raise _lib.Error(-1, "no forward to go back through: call the model on an array first (outside "
                                 "no_grad()), once per backward", "backward")
        self._run_backward(tape, dlogits)

    def loss_backward(self, in_idx, targets):
        """One training step's forward and backward without torch:
        cross_entropy(model(in_idx).flatten(0, 1), targets.flatten()), its
        gradients accumulated into mha's (mha_gpt_loss_backward). Returns
        the loss as a float."""
        from . import _drawing
        idx, _ = _ids(in_idx)
        tgt, _ = _ids(targets)
        if idx.ndim != 2 or tgt.shape != idx.shape:
            raise ValueError("in_idx and targets must both be (batch, num_tokens), got %s and %s" % (
                idx.shape, tgt.shape))
        loss = ctypes.c_float()
        tape = _Tape(self._handle)
        try:
            with _drawing(self._dropout()) as g:
                _check(_L.mha_gpt_loss_backward(self._h, ctypes.byref(loss), None, idx.ctypes.data_as(_c_int32_p),
                                                tgt.ctypes.data_as(_c_int32_p), idx.shape[0], idx.shape[1], g,
                                                tape.t), "GPTModel loss_backward")
        finally:
            tape.release()
        return float(loss.value)

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
    """The book's TransformerBlock(cfg): att, ff, norm1, norm2, drop_shortcut.
    Forward only."""
    _KIND = 2

    def forward(self, x):
        from . import _drawing, _like, _to_numpy
        a, kind = _to_numpy(x, "x")
        if a.ndim != 3:
            raise ValueError("x must be (batch, num_tokens, emb_dim), got shape %s" % (a.shape,))
        y = np.empty_like(a)
        with _drawing(self._dropout()) as g:
            _check(_L.mha_gpt_blocks_forward(self._h, y.ctypes.data_as(_f), a.ctypes.data_as(_f),
                                             a.shape[0], a.shape[1], g), "TransformerBlock")
        return _like(y, kind)


def load(path):
    """A GPTModel or TransformerBlock file (the book's names, or Hugging Face
    GPT-2's), or raises Error."""
    h = c_void_p()
    _check(_L.mha_gpt_load(os.fsencode(path), ctypes.byref(h)), "load")
    kind = _L.mha_gpt_config_of(h).contents.kind
    return (GPTModel if kind == 1 else TransformerBlock)._wrap(h)
