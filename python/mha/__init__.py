"""mha — the attention modules of chapter 3 of "Build a Large Language Model
(From Scratch)", and chapter 4's GPTModel, trainable as chapter 5 trains it,
computed by libmha (C), exact to PyTorch, from Python.

The book's classes, with the book's constructor signatures:

    import mha
    mha.manual_seed(123)                     # torch.manual_seed(123)
    m = mha.MultiHeadAttention(d_in=3, d_out=2, context_length=6, dropout=0.0, num_heads=2)
    y = m(x)                                 # x: float32 numpy array (b, T, d_in) or torch tensor

Constructing after mha.manual_seed(s) gives the weights torch gives after
torch.manual_seed(s), bit for bit; in training mode (the default, as in
torch; .eval() to leave it) dropout draws torch's mask from the same global
generator. Where torch can be imported that generator is torch's own
default CPU generator (its state goes in and out through
torch.get_rng_state / torch.set_rng_state around every call that draws), so
mha's draws and torch's interleave as in a script of the book's modules, and
torch.manual_seed seeds mha too; without torch it is mha's own.
m.backward(dy) returns dx and accumulates every parameter's gradient
(m.grads()); mha.optim.AdamW and SGD update them as torch.optim does.
state_dict() / load_state_dict() use torch's names; m.save(path) /
mha.load(path) use safetensors files that `mha run` also reads.

Chapter 4 and 5 (mha.gpt): torch.manual_seed(123); model =
mha.GPTModel(cfg) is the book's model; its parameters() are torch
Parameters over mha's memory and model(idx) joins torch's autograd, so the
book's train_model_simple runs unchanged with torch.optim.AdamW.
mha.tokenizer is GPT-2's tokenizer with tiktoken's interface.

Errors from the library raise mha.Error, whose message carries
mha_last_error(). See _lib.py for where libmha.so is looked for.
"""
import collections
import contextlib
import operator
import os
import sys
import threading

import numpy as np

from . import _lib
from ._lib import Error
from ._version import __version__

__all__ = ["SelfAttention_v1", "SelfAttention_v2", "CausalAttention", "MultiHeadAttentionWrapper",
           "MultiHeadAttention", "Module", "Error", "manual_seed", "rand", "randn", "load", "no_grad",
           "library_path", "library_version", "runtime", "optim", "GPTModel", "TransformerBlock",
           "GPT_CONFIG_124M", "initial_seed", "get_rng_state", "set_rng_state"]

_L = _lib.lib
_check = _lib.check
library_path = _lib.path


def library_version():
    """mha_version() of the library in use."""
    return _L.mha_version().decode()


def runtime():
    """The library's kernels, GEMM backend and threads."""
    return {"isa": _L.mha_runtime_isa().decode(), "blas": _L.mha_runtime_blas().decode(),
            "threads": _L.mha_runtime_threads()}


def set_num_threads(n):
    """torch.set_num_threads: threads the library's compute calls use."""
    _check(_L.mha_runtime_set_threads(operator.index(n)), "set_num_threads")


# ---- the global generator (torch's default CPU generator) -----------------

TORCH_DEFAULT_SEED = 67280421310721  # torch.initial_seed() of a fresh process


def _torch_variant():
    """1 (DEFAULT kernels) where torch runs them: ATEN_CPU_CAPABILITY=default
    or a CPU without AVX2; 0 (AVX2) otherwise."""
    if os.environ.get("ATEN_CPU_CAPABILITY", "").lower() == "default":
        return 1
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return 0 if " avx2" in line else 1
    except OSError:
        pass
    return 0


_VARIANT = _torch_variant()
# One generator for the process, as torch's: calls that draw from it hold
# this lock (ctypes releases the GIL during a call).
_gen_lock = threading.RLock()
_gen = _lib.c_void_p()
_check(_L.mha_generator_create(TORCH_DEFAULT_SEED, _lib.ctypes.byref(_gen)), "generator")
_L.mha_generator_set_variant(_gen, _VARIANT)
TORCH_STATE_SIZE = 5056  # MHA_GENERATOR_STATE_BYTES: torch.get_rng_state().numel()

_TORCH = []  # [torch module or None], once looked for


def _torch():
    """torch where it can be imported (once tried), else None. Where it can,
    the global generator is torch's own default CPU generator."""
    if not _TORCH:
        try:
            import torch
            torch.get_rng_state, torch.set_rng_state  # noqa: B018  (a torch with a CPU generator)
        except (ImportError, AttributeError):
            torch = None
        _TORCH.append(torch)
    return _TORCH[0]


@contextlib.contextmanager
def _drawing(active=True):
    """The global generator, for a call that draws from it (None when not
    active): with torch, mha's generator takes torch's state
    (torch.get_rng_state) before the call and gives it back
    (torch.set_rng_state) after, so that mha's draws advance torch's
    generator exactly as the book's modules would."""
    if not active:
        yield None
        return
    with _gen_lock:
        torch = _torch()
        if torch is None:
            yield _gen
            return
        state = torch.get_rng_state()
        _check(_L.mha_generator_set_state(_gen, state.data_ptr(), state.numel()), "torch.get_rng_state")
        try:
            yield _gen
        finally:
            out = torch.empty(TORCH_STATE_SIZE, dtype=torch.uint8)
            _check(_L.mha_generator_get_state(_gen, out.data_ptr(), TORCH_STATE_SIZE), "torch state")
            torch.set_rng_state(out)


def manual_seed(seed):
    """torch.manual_seed(seed): reseeds the global generator that module
    construction, rand/randn and training-mode dropout draw from (torch's
    own where torch can be imported: this calls torch.manual_seed)."""
    seed = operator.index(seed)
    if not -(1 << 63) <= seed < (1 << 64):
        raise ValueError("seed must be in [-2**63, 2**64), got %d" % seed)
    with _gen_lock:
        _L.mha_generator_manual_seed(_gen, seed & ((1 << 64) - 1))
        torch = _torch()
        if torch is not None:
            torch.manual_seed(seed)


def initial_seed():
    """torch.initial_seed(): the seed of the global generator (the first 8
    bytes of its state, as torch stores it)."""
    return int(get_rng_state()[:8].view("<u8")[0])


def get_rng_state():
    """torch.get_rng_state(): the global generator's state, 5056 bytes
    (numpy uint8) in torch's format; set_rng_state(state) restores it."""
    out = np.empty(TORCH_STATE_SIZE, np.uint8)
    with _drawing() as g:
        _check(_L.mha_generator_get_state(g, out.ctypes.data, out.size), "get_rng_state")
    return out


def set_rng_state(state):
    """torch.set_rng_state(state): a state from get_rng_state (or torch's),
    as bytes, a uint8 numpy array or tensor."""
    if _is_torch(state):
        state = state.detach().cpu().numpy()
    a = np.ascontiguousarray(np.frombuffer(state, np.uint8) if isinstance(state, (bytes, bytearray))
                             else np.asarray(state, np.uint8)).reshape(-1)
    with _drawing() as g:
        _check(_L.mha_generator_set_state(g, a.ctypes.data, a.size), "set_rng_state")


def _size(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return tuple(operator.index(s) for s in size)


def rand(*size):
    """torch.rand(*size) from the global generator, as a float32 array."""
    out = np.empty(_size(size), dtype=np.float32)
    with _drawing() as g:
        _L.mha_generator_uniform(g, _ptr(out), out.size, 0.0, 1.0)
    return out


def randn(*size):
    """torch.randn(*size) from the global generator, as a float32 array."""
    out = np.empty(_size(size), dtype=np.float32)
    with _drawing() as g:
        _L.mha_generator_normal(g, _ptr(out), out.size, 0.0, 1.0)
    return out


# ---- grad mode -------------------------------------------------------------

_no_grad_depth = 0


@contextlib.contextmanager
def no_grad():
    """Like torch.no_grad(): forwards inside record nothing for backward.
    (torch.no_grad() itself is honoured too when torch is imported.)"""
    global _no_grad_depth
    _no_grad_depth += 1
    try:
        yield
    finally:
        _no_grad_depth -= 1


def _grad_enabled():
    if _no_grad_depth:
        return False
    torch = sys.modules.get("torch")
    return not (torch is not None and hasattr(torch, "is_grad_enabled") and not torch.is_grad_enabled())


# ---- arrays ----------------------------------------------------------------

def _ptr(a):
    return a.ctypes.data_as(_lib.c_float_p)


def _is_torch(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _to_numpy(x, what):
    """(float32 C-contiguous array, 'torch' or 'numpy'); a copy, so that the
    caller's later changes cannot reach what a backward pass uses."""
    if _is_torch(x):
        return x.detach().to("cpu").float().contiguous().numpy().copy(), "torch"
    try:
        return np.array(x, dtype=np.float32, order="C", copy=True), "numpy"
    except (TypeError, ValueError) as e:
        raise TypeError("%s: expected an array of float32 values: %s" % (what, e)) from None


def _like(a, kind):
    if kind == "torch":
        return sys.modules["torch"].from_numpy(a)
    return a


class _Memory:
    """Memory the module owns, seen through numpy's array interface: the
    array made from it keeps it, and so the module, alive."""

    def __init__(self, owner, p):
        self.owner = owner
        shape = tuple(p.shape[k] for k in range(p.ndim))
        addr = _lib.ctypes.cast(p.data, _lib.c_void_p).value if p.numel else 0
        self.__array_interface__ = {"data": (addr, False), "shape": shape, "typestr": "<f4", "version": 3}


def _view(owner, p):
    if p.numel == 0:
        return np.zeros(tuple(p.shape[k] for k in range(p.ndim)), np.float32)
    return np.asarray(_Memory(owner, p))


class ParameterList(list):
    """module.parameters(): live arrays of the parameters, which the optimizers
    accept in place of the module, as torch.optim takes model.parameters()."""

    def __init__(self, module, arrays):
        super().__init__(arrays)
        self.module = module


class _Node:
    """m.W_query, m.heads[1].W_key, m.out_proj: a submodule's parameters by
    attribute (.weight, .bias), as in the PyTorch classes."""

    def __init__(self, module, prefix):
        self._module, self._prefix = module, prefix

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._module._lookup(self._prefix + name)

    def __getitem__(self, i):
        return self._module._lookup(self._prefix + str(operator.index(i)))

    def __len__(self):
        names = {n[len(self._prefix):].split(".")[0] for n in self._module._names if n.startswith(self._prefix)}
        return len(names)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self):
        return "<%s of %r>" % (self._prefix.rstrip("."), self._module)


_AUTOGRAD = None


def _autograd():
    """A torch.autograd.Function around a module's forward and backward."""
    global _AUTOGRAD
    if _AUTOGRAD is None:
        import torch

        class ModuleFunction(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, module):
                a, _ = _to_numpy(x, type(module).__name__)
                y = module._forward(a, "torch", True)
                ctx.module, ctx.forward_id = module, module._forwards
                return torch.from_numpy(y)

            @staticmethod
            def backward(ctx, dy):
                return ctx.module._backward(dy, ctx.forward_id), None

        _AUTOGRAD = ModuleFunction
    return _AUTOGRAD


# ---- the modules -------------------------------------------------------------

IncompatibleKeys = collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def _int(name, v):
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError("%s must be an integer, got %r" % (name, v)) from None


class Module:
    """What the book's classes share: a libmha module (mha_module) and its
    tape for backward. Subclasses only state their constructor."""

    _KIND = 0
    _ARGS = ()

    def __init__(self, **kw):
        c = _lib.Config()
        _L.mha_config_init(_lib.ctypes.byref(c), self._KIND)
        for k, v in kw.items():
            if k == "dropout":
                v = float(v)
            elif k == "qkv_bias":
                v = 1 if v else 0
            else:
                v = _int(k, v)
            setattr(c, k, v)
        h = _lib.c_void_p()
        _check(_L.mha_module_create(_lib.ctypes.byref(c), _lib.ctypes.byref(h)), type(self).__name__)
        self._adopt(h)
        with _drawing() as g:
            _check(_L.mha_module_init(self._h, g), type(self).__name__)

    @classmethod
    def _wrap(cls, h):
        m = object.__new__(cls)
        m._adopt(h)
        return m

    def _adopt(self, h):
        self._h = h
        self._tape = None
        self._saved = None  # (x, kind, forward number) of the forward the tape holds
        self._forwards = 0
        self.training = True
        self._cfg = _L.mha_module_config_of(h).contents
        self._ps = _L.mha_module_params(h)  # the module's parameter set
        self._names = []
        for i in range(_L.mha_params_count(self._ps)):
            p = _lib.Param()
            _check(_L.mha_params_get(self._ps, i, _lib.ctypes.byref(p)))
            self._names.append(p.name.decode())

    def __del__(self):
        lib = getattr(_lib, "lib", None)
        if lib is None:
            return
        if getattr(self, "_tape", None):
            lib.mha_tape_free(self._tape)
            self._tape = None
        if getattr(self, "_h", None):
            lib.mha_module_free(self._h)
            self._h = None

    # -- configuration --
    @property
    def config(self):
        """The constructor's arguments, as a dict."""
        c = self._cfg
        full = dict(d_in=c.d_in, d_out=c.d_out, context_length=c.context_length, dropout=c.dropout,
                    num_heads=c.num_heads, qkv_bias=bool(c.qkv_bias))
        return {k: full[k] for k in self._ARGS}

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % kv for kv in self.config.items()))

    def _batched(self):
        return bool(_L.mha_config_is_batched(_lib.ctypes.byref(self._cfg)))

    def _width(self):
        return _L.mha_config_output_width(_lib.ctypes.byref(self._cfg))

    # -- modes --
    def train(self, mode=True):
        """Training mode (dropout on), as nn.Module.train(); returns self."""
        self.training = bool(mode)
        return self

    def eval(self):
        """Eval mode (no dropout), as nn.Module.eval(); returns self."""
        return self.train(False)

    # -- forward, backward --
    def __call__(self, x):
        return self.forward(x)

    def forward(self, x):
        """y = module(x). x: (b, T, d_in) for CausalAttention, the wrapper and
        MultiHeadAttention, (T, d_in) for SelfAttention_v1/v2; float32 numpy
        array or torch tensor (other real values are converted to float32).
        Returns the same kind. In training mode dropout draws from the global
        generator, as torch does. Unless in no_grad(), what backward needs is
        recorded; a torch tensor that requires grad gives an output in torch's
        autograd graph, whose backward runs this module's (x.grad, and the
        module's own grads())."""
        a, kind = _to_numpy(x, type(self).__name__)
        record = _grad_enabled()
        if kind == "torch" and record and x.requires_grad:
            return _autograd().apply(x, self)
        return _like(self._forward(a, kind, record), kind)

    def _forward(self, a, kind, record):
        want = 3 if self._batched() else 2
        if a.ndim != want:
            raise ValueError("%s takes x of shape %s, got %d dimensions %s" % (
                type(self).__name__, "(b, num_tokens, d_in)" if want == 3 else "(num_tokens, d_in)",
                a.ndim, a.shape))
        if a.shape[-1] != self._cfg.d_in:
            raise ValueError("x has width %d but d_in is %d" % (a.shape[-1], self._cfg.d_in))
        B, T = (a.shape[0], a.shape[1]) if want == 3 else (1, a.shape[0])
        y = np.empty(a.shape[:-1] + (self._width(),), dtype=np.float32)
        what = "%s forward" % type(self).__name__
        # dropout 0 draws nothing: torch's state is left alone then
        with _drawing(self.training and self._cfg.dropout > 0):
            opts = _lib.ForwardOpts(training=int(self.training), rng=0, generator=_gen.value)
            self._run_forward(y, a, kind, B, T, opts, record, what)
        return y

    def _run_forward(self, y, a, kind, B, T, opts, record, what):
        if record:
            if self._tape is None:
                t = _lib.c_void_p()
                _check(_L.mha_tape_create(_lib.ctypes.byref(t)), "tape")
                self._tape = t
            self._saved = None
            _check(_L.mha_module_forward_tape(self._h, _ptr(y), _ptr(a), B, T, _lib.ctypes.byref(opts),
                                              self._tape, None, 0), what)
            self._forwards += 1
            self._saved = (a, kind, self._forwards)
        else:
            _check(_L.mha_module_forward_ex(self._h, _ptr(y), _ptr(a), B, T, _lib.ctypes.byref(opts), None, 0),
                   what)

    def backward(self, dy):
        """y.backward(dy) for the last forward: returns dx (x's shape and kind)
        and accumulates every parameter's gradient (see grads(); zero_grad()
        clears them). One backward per forward, with the parameters as they
        were at the forward."""
        return self._backward(dy, None)

    def _backward(self, dy, forward_id):
        if self._saved is None:
            raise Error(-1, "no forward to go back through: call the module first (outside no_grad()), "
                            "once per backward", "backward")
        x, kind, fid = self._saved
        if forward_id is not None and forward_id != fid:
            raise Error(-1, "the module ran forward again before this output's backward: mha keeps one "
                            "forward per module for backward", "backward")
        g, _ = _to_numpy(dy, "dy")
        want = x.shape[:-1] + (self._width(),)
        if g.shape != want:
            raise ValueError("dy must have y's shape %s, got %s" % (want, g.shape))
        dx = np.empty_like(x)
        _check(_L.mha_module_backward(self._h, self._tape, _ptr(dx), _ptr(x), _ptr(g), None, 0),
               "%s backward" % type(self).__name__)
        self._saved = None
        return _like(dx, kind)

    # -- parameters and gradients --
    def _param(self, i, grad=False):
        p = _lib.Param()
        _check((_L.mha_params_grad if grad else _L.mha_params_get)(self._ps, i, _lib.ctypes.byref(p)))
        return p

    def named_parameters(self):
        """[(name, array)]: the parameters in state_dict order, as live
        arrays (writing them changes the module)."""
        return [(n, _view(self, self._param(i))) for i, n in enumerate(self._names)]

    def parameters(self):
        return ParameterList(self, [a for _, a in self.named_parameters()])

    def grads(self):
        """{name: array}: every parameter's gradient (torch's p.grad), live."""
        return {n: _view(self, self._param(i, grad=True)) for i, n in enumerate(self._names)}

    def grad(self, name):
        """The gradient of one parameter, by its state_dict name."""
        try:
            i = self._names.index(name)
        except ValueError:
            raise KeyError("%s has no parameter %r (it has %s)" % (type(self).__name__, name, self._names)) from None
        return _view(self, self._param(i, grad=True))

    def zero_grad(self, set_to_none=False):
        """Every gradient to zero (mha keeps no None gradients)."""
        _check(_L.mha_params_zero_grad(self._ps), "zero_grad")

    def _lookup(self, name):
        if name in self._names:
            return _view(self, self._param(self._names.index(name)))
        if any(n.startswith(name + ".") for n in self._names):
            return _Node(self, name + ".")
        raise AttributeError("%s has no attribute %r" % (type(self).__name__, name))

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._lookup(name)

    # -- state --
    def _masks(self):
        """{name: the name of the parameter it precedes}: the mask buffers
        torch's state_dict() holds (a module's own buffer comes before its
        children's parameters)."""
        if self._KIND == 3 or self._KIND == 5:
            return {"mask": self._names[0]}
        if self._KIND == 4:
            return {"heads.%d.mask" % h: "heads.%d.%s" % (h, self._names[0].split(".", 2)[2])
                    for h in range(self._cfg.num_heads)}
        return {}

    def state_dict(self, as_torch=False):
        """torch's state_dict(): parameters and mask buffers under torch's
        names and in its order, as numpy arrays (copies), or torch tensors
        with as_torch=True (for torch's load_state_dict)."""
        L = self._cfg.context_length
        before = {v: k for k, v in self._masks().items()}
        out = collections.OrderedDict()
        for n, a in self.named_parameters():
            if n in before:
                out[before[n]] = np.triu(np.ones((L, L), dtype=np.float32), 1)
            out[n] = np.array(a)
        if as_torch:
            import torch
            out = collections.OrderedDict((k, torch.from_numpy(v)) for k, v in out.items())
        return out

    def load_state_dict(self, state_dict, strict=True):
        """torch's load_state_dict(): values (numpy arrays or torch tensors) by
        torch's names, of the parameters' shapes; mask buffers are accepted
        (they must be (context_length, context_length)). With strict, missing
        and unexpected keys are errors (RuntimeError, as in torch). Returns
        (missing_keys, unexpected_keys)."""
        L = self._cfg.context_length
        masks = self._masks()
        missing = [n for n in list(masks) + self._names if n not in state_dict]
        unexpected = [k for k in state_dict if k not in masks and k not in self._names]
        errors = []
        if strict and (missing or unexpected):
            if unexpected:
                errors.append("Unexpected key(s) in state_dict: %s." % ", ".join('"%s"' % k for k in unexpected))
            if missing:
                errors.append("Missing key(s) in state_dict: %s." % ", ".join('"%s"' % k for k in missing))
        values = {}
        for k, v in state_dict.items():
            if k in masks or k in self._names:
                a, _ = _to_numpy(v, k)
                values[k] = a
        params = dict(self.named_parameters())
        for k, a in values.items():
            want = params[k].shape if k in params else (L, L)
            if a.shape != want:
                errors.append("size mismatch for %s: copying a param with shape %s, the shape in current "
                              "model is %s." % (k, a.shape, want))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for %s:\n\t%s" % (
                type(self).__name__, "\n\t".join(errors)))
        for k, a in values.items():
            if k in params:
                params[k][...] = a
        self._saved = None  # a recorded forward no longer matches the parameters
        return IncompatibleKeys(missing, unexpected)

    def save(self, path):
        """Writes the module as safetensors (state_dict names, the
        constructor's arguments in the metadata): mha run and mha.load read it."""
        _check(_L.mha_module_save(self._h, os.fsencode(path)), "save")


def load(path):
    """The module saved in path (by Module.save, mha init, or from PyTorch's
    state_dict with the constructor's arguments in the metadata), as its class;
    a chapter 4 file (GPTModel, TransformerBlock, Hugging Face GPT-2) as
    mha.GPTModel / mha.TransformerBlock."""
    h = _lib.c_void_p()
    code = _L.mha_module_load(os.fsencode(path), _lib.ctypes.byref(h))
    if code != 0:
        first = Error(code, (_L.mha_last_error() or b"").decode("utf-8", "replace"), "load")
        try:
            return gpt.load(path)
        except Error:
            raise first from None
    kind = _L.mha_module_config_of(h).contents.kind
    cls = _CLASSES.get(kind)
    if cls is None:
        _L.mha_module_free(h)
        raise Error(-11, "module kind %d has no Python class in this version of the package" % kind, "load")
    return cls._wrap(h)


# ---- the book's classes --------------------------------------------------------

class SelfAttention_v1(Module):
    """SelfAttention_v1(d_in, d_out) (section 3.4.1): W_query, W_key, W_value
    are (d_in, d_out) parameters; x is (num_tokens, d_in)."""
    _KIND = 1
    _ARGS = ("d_in", "d_out")

    def __init__(self, d_in, d_out):
        super().__init__(d_in=d_in, d_out=d_out)


class SelfAttention_v2(Module):
    """SelfAttention_v2(d_in, d_out, qkv_bias=False) (section 3.4.2): nn.Linear
    projections; x is (num_tokens, d_in)."""
    _KIND = 2
    _ARGS = ("d_in", "d_out", "qkv_bias")

    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__(d_in=d_in, d_out=d_out, qkv_bias=qkv_bias)


class CausalAttention(Module):
    """CausalAttention(d_in, d_out, context_length, dropout, qkv_bias=False)
    (section 3.5.3); x is (b, num_tokens, d_in)."""
    _KIND = 3
    _ARGS = ("d_in", "d_out", "context_length", "dropout", "qkv_bias")

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__(d_in=d_in, d_out=d_out, context_length=context_length, dropout=dropout,
                         qkv_bias=qkv_bias)


class MultiHeadAttentionWrapper(Module):
    """MultiHeadAttentionWrapper(d_in, d_out, context_length, dropout, num_heads,
    qkv_bias=False) (section 3.6.1): num_heads CausalAttention heads, outputs
    concatenated (width num_heads * d_out)."""
    _KIND = 4
    _ARGS = ("d_in", "d_out", "context_length", "dropout", "num_heads", "qkv_bias")

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in=d_in, d_out=d_out, context_length=context_length, dropout=dropout,
                         num_heads=num_heads, qkv_bias=qkv_bias)


class MultiHeadAttention(Module):
    """MultiHeadAttention(d_in, d_out, context_length, dropout, num_heads,
    qkv_bias=False) (section 3.6.2): weight splits, out_proj."""
    _KIND = 5
    _ARGS = ("d_in", "d_out", "context_length", "dropout", "num_heads", "qkv_bias")

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in=d_in, d_out=d_out, context_length=context_length, dropout=dropout,
                         num_heads=num_heads, qkv_bias=qkv_bias)

    @property
    def head_dim(self):
        return self._cfg.d_out // self._cfg.num_heads


_CLASSES = {c._KIND: c for c in (SelfAttention_v1, SelfAttention_v2, CausalAttention,
                                 MultiHeadAttentionWrapper, MultiHeadAttention)}

from . import optim  # noqa: E402  (needs the names above)
from . import gpt  # noqa: E402
from .gpt import GPT_CONFIG_124M, GPTModel, TransformerBlock  # noqa: E402
