"""torch.optim.AdamW and torch.optim.SGD over a module's parameters, bit for
bit torch 1.13.1 on the CPU (libmha's mha_optimizer):

    opt = mha.optim.AdamW(m.parameters(), lr=1e-3)   # or AdamW(m, ...)
    y = m(x); m.backward(dy); opt.step(); opt.zero_grad()

A GPTModel's parameters too (model.loss_backward(idx, targets) or
model.backward(dlogits) for the gradients); with torch, torch.optim.AdamW
over model.parameters() gives the same steps through torch's own code.

Every parameter is updated at every step from its gradient (m.grads()).
The optimizer keeps its module alive. opt.param_groups[0]["lr"] = v changes
the learning rate, as in torch; save(path) / load(path) keep the state as
safetensors, to resume to the same bits.
"""
import ctypes
import os

from . import _lib

_L = _lib.lib


def _module_of(params):
    from . import Module, ParameterList
    from .gpt import _GPTBase
    if isinstance(params, (Module, _GPTBase)):
        return params
    if isinstance(params, ParameterList):
        return params.module
    raise TypeError("an mha optimizer takes a module or model, or its .parameters(), got %s" % type(params).__name__)


class _ParamGroup(dict):
    """param_groups[0]: setting "lr" changes the optimizer's learning rate."""

    def __init__(self, opt, values):
        super().__init__(values)
        self._opt = opt

    def __setitem__(self, k, v):
        if k == "lr":
            _lib.check(_L.mha_optimizer_set_lr(self._opt._h, float(v)), "lr")
        elif k in self:
            raise ValueError("only lr can change after construction in mha (got %r)" % k)
        super().__setitem__(k, v)


class Optimizer:
    def _create(self, params, cfg, values):
        from . import _VARIANT
        self.module = _module_of(params)
        cfg.adamw.variant = cfg.sgd.variant = _VARIANT
        h = ctypes.c_void_p()
        _lib.check(_L.mha_optimizer_create(self.module._ps, ctypes.byref(cfg), ctypes.byref(h)),
                   type(self).__name__)
        self._h = h
        self.param_groups = [_ParamGroup(self, values)]

    def __del__(self):
        lib = getattr(_lib, "lib", None)
        if lib is not None and getattr(self, "_h", None):
            lib.mha_optimizer_free(self._h)
            self._h = None

    def step(self):
        """optimizer.step(): one update from the module's gradients. A NaN or
        infinite gradient raises mha.Error and changes nothing."""
        _lib.check(_L.mha_optimizer_step(self._h), "%s step" % type(self).__name__)

    def zero_grad(self, set_to_none=False):
        self.module.zero_grad(set_to_none)

    @property
    def lr(self):
        return _L.mha_optimizer_lr(self._h)

    @lr.setter
    def lr(self, v):
        self.param_groups[0]["lr"] = v

    @property
    def step_count(self):
        """Steps taken (torch's state[p]["step"])."""
        return _L.mha_optimizer_step_count(self._h)

    def save(self, path):
        _lib.check(_L.mha_optimizer_save(self._h, os.fsencode(path)), "save")

    def load(self, path):
        """Restores a saved state (hyper-parameters included)."""
        _lib.check(_L.mha_optimizer_load(self._h, os.fsencode(path)), "load")
        dict.__setitem__(self.param_groups[0], "lr", self.lr)

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % kv for kv in self.param_groups[0].items()))


class AdamW(Optimizer):
    """torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
    weight_decay=1e-2, amsgrad=False)"""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False):
        oc = _lib.OptimizerConfig()
        _L.mha_optimizer_config_init(ctypes.byref(oc), 0)  # MHA_OPTIM_ADAMW
        c = oc.adamw
        c.lr, c.beta1, c.beta2, c.eps = float(lr), float(betas[0]), float(betas[1]), float(eps)
        c.weight_decay, c.amsgrad = float(weight_decay), 1 if amsgrad else 0
        self._create(params, oc,
                     dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=bool(amsgrad)))


class SGD(Optimizer):
    """torch.optim.SGD(params, lr, momentum=0, dampening=0, weight_decay=0,
    nesterov=False)"""

    def __init__(self, params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False):
        oc = _lib.OptimizerConfig()
        _L.mha_optimizer_config_init(ctypes.byref(oc), 1)  # MHA_OPTIM_SGD
        c = oc.sgd
        c.lr, c.momentum, c.dampening = float(lr), float(momentum), float(dampening)
        c.weight_decay, c.nesterov = float(weight_decay), 1 if nesterov else 0
        self._create(params, oc,
                     dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                          nesterov=bool(nesterov)))
