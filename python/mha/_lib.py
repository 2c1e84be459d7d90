"""Finding and loading libmha.so, its C prototypes (ctypes), and its errors.

The library is searched for, in order:
  1. $MHA_LIBRARY (a path to the library; when set, nothing else is tried);
  2. next to the package (mha/libmha.so*, or in the directory above it);
  3. in an install prefix: the one the package is installed under
     (P/lib when the package is P/lib/python3.X/site-packages/mha),
     sys.prefix, /usr/local and /usr (lib, lib64, lib/<multiarch>), then
     the dynamic linker's own search (ldconfig);
  4. in a build tree: $MHA_BUILD_DIR, then the source tree's build*/
     directories (newest first) when the package is imported from python/.
A library built with AddressSanitizer is passed over unless the process has
the ASan runtime loaded (LD_PRELOAD), since loading it would abort Python.
When none loads, ImportError lists every place tried and why it failed.
"""
import ctypes
import ctypes.util
import glob
import os
import sys
import sysconfig

from ._version import __version__

c_int, c_int64, c_size_t, c_double, c_uint64, c_void_p, c_char_p, c_float = (
    ctypes.c_int, ctypes.c_int64, ctypes.c_size_t, ctypes.c_double, ctypes.c_uint64, ctypes.c_void_p,
    ctypes.c_char_p, ctypes.c_float)
P = ctypes.POINTER
c_float_p = P(c_float)


class Config(ctypes.Structure):
    """mha_config"""
    _fields_ = [("kind", c_int), ("d_in", c_int64), ("d_out", c_int64), ("context_length", c_int64),
                ("dropout", c_double), ("num_heads", c_int64), ("qkv_bias", c_int)]


class Param(ctypes.Structure):
    """mha_param"""
    _fields_ = [("name", c_char_p), ("ndim", c_int), ("shape", c_int64 * 2), ("numel", c_size_t),
                ("data", c_float_p)]


class ForwardOpts(ctypes.Structure):
    """mha_forward_opts"""
    _fields_ = [("training", c_int), ("rng", c_int), ("generator", c_void_p), ("philox_seed", c_uint64),
                ("philox_offset", c_uint64), ("lse", c_float_p)]


class AdamWConfig(ctypes.Structure):
    """mha_adamw_config"""
    _fields_ = [("lr", c_double), ("beta1", c_double), ("beta2", c_double), ("eps", c_double),
                ("weight_decay", c_double), ("amsgrad", c_int), ("variant", c_int)]


class SGDConfig(ctypes.Structure):
    """mha_sgd_config"""
    _fields_ = [("lr", c_double), ("momentum", c_double), ("dampening", c_double),
                ("weight_decay", c_double), ("nesterov", c_int), ("variant", c_int)]


class OptimizerConfig(ctypes.Structure):
    """mha_optimizer_config"""
    _fields_ = [("kind", c_int), ("adamw", AdamWConfig), ("sgd", SGDConfig)]


# name: (restype, argtypes); mha_status is an int
_PROTOTYPES = {
    "mha_version": (c_char_p, []),
    "mha_status_name": (c_char_p, [c_int]),
    "mha_last_error": (c_char_p, []),
    "mha_generator_create": (c_int, [c_uint64, P(c_void_p)]),
    "mha_generator_free": (None, [c_void_p]),
    "mha_generator_manual_seed": (None, [c_void_p, c_uint64]),
    "mha_generator_set_variant": (None, [c_void_p, c_int]),
    "mha_generator_uniform": (None, [c_void_p, c_float_p, c_size_t, c_double, c_double]),
    "mha_generator_normal": (None, [c_void_p, c_float_p, c_size_t, c_double, c_double]),
    "mha_generator_get_state": (c_int, [c_void_p, c_void_p, c_size_t]),
    "mha_generator_set_state": (c_int, [c_void_p, c_void_p, c_size_t]),
    "mha_kind_name": (c_char_p, [c_int]),
    "mha_kind_from_name": (c_int, [c_char_p, P(c_int)]),
    "mha_config_init": (None, [P(Config), c_int]),
    "mha_config_validate": (c_int, [P(Config)]),
    "mha_config_is_batched": (c_int, [P(Config)]),
    "mha_config_output_width": (c_int64, [P(Config)]),
    "mha_module_create": (c_int, [P(Config), P(c_void_p)]),
    "mha_module_init": (c_int, [c_void_p, c_void_p]),
    "mha_module_free": (None, [c_void_p]),
    "mha_module_config_of": (P(Config), [c_void_p]),
    "mha_module_params": (c_void_p, [c_void_p]),
    "mha_params_count": (c_size_t, [c_void_p]),
    "mha_params_scalars": (c_int64, [c_void_p]),
    "mha_params_get": (c_int, [c_void_p, c_size_t, P(Param)]),
    "mha_params_grad": (c_int, [c_void_p, c_size_t, P(Param)]),
    "mha_params_zero_grad": (c_int, [c_void_p]),
    "mha_module_forward_ex": (c_int, [c_void_p, c_float_p, c_float_p, c_int64, c_int64, P(ForwardOpts),
                                      c_void_p, c_size_t]),
    "mha_tape_create": (c_int, [P(c_void_p)]),
    "mha_tape_free": (None, [c_void_p]),
    "mha_module_forward_tape": (c_int, [c_void_p, c_float_p, c_float_p, c_int64, c_int64, P(ForwardOpts),
                                        c_void_p, c_void_p, c_size_t]),
    "mha_module_backward": (c_int, [c_void_p, c_void_p, c_float_p, c_float_p, c_float_p, c_void_p, c_size_t]),
    "mha_module_save": (c_int, [c_void_p, c_char_p]),
    "mha_module_load": (c_int, [c_char_p, P(c_void_p)]),
    "mha_optimizer_config_init": (None, [P(OptimizerConfig), c_int]),
    "mha_optimizer_create": (c_int, [c_void_p, P(OptimizerConfig), P(c_void_p)]),
    "mha_optimizer_free": (None, [c_void_p]),
    "mha_optimizer_step": (c_int, [c_void_p]),
    "mha_optimizer_step_count": (c_int64, [c_void_p]),
    "mha_optimizer_lr": (c_double, [c_void_p]),
    "mha_optimizer_set_lr": (c_int, [c_void_p, c_double]),
    "mha_optimizer_save": (c_int, [c_void_p, c_char_p]),
    "mha_optimizer_load": (c_int, [c_void_p, c_char_p]),
    "mha_runtime_isa": (c_char_p, []),
    "mha_runtime_blas": (c_char_p, []),
    "mha_runtime_threads": (c_int, []),
    "mha_runtime_set_threads": (c_int, [c_int]),
}

NAMES = ("libmha.so.%s" % __version__.split(".")[0], "libmha.so")


def _package_dir():
    return os.path.dirname(os.path.abspath(__file__))


def _prefix_dirs(prefix):
    dirs = [os.path.join(prefix, "lib"), os.path.join(prefix, "lib64")]
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        dirs.append(os.path.join(prefix, "lib", multiarch))
    return dirs


def _candidates():
    """(how it was found, directory) in search order; a directory is searched
    for NAMES. ("ldconfig", name) for the dynamic linker's own search."""
    pkg = _package_dir()
    yield "next to the package", pkg
    yield "next to the package", os.path.dirname(pkg)
    prefixes = []
    # P/lib/python3.X/{site,dist}-packages/mha -> P
    parts = pkg.split(os.sep)
    for i in range(len(parts) - 1, 0, -1):
        if parts[i] in ("site-packages", "dist-packages") and i >= 3 and parts[i - 2] in ("lib", "lib64"):
            prefixes.append(os.sep.join(parts[:i - 2]) or os.sep)
            break
    for p in (sys.prefix, "/usr/local", "/usr"):
        if p not in prefixes:
            prefixes.append(p)
    for p in prefixes:
        for d in _prefix_dirs(p):
            yield "install prefix %s" % p, d
    yield "ldconfig", ctypes.util.find_library("mha")
    builds = []
    if os.environ.get("MHA_BUILD_DIR"):
        builds.append(("$MHA_BUILD_DIR", os.environ["MHA_BUILD_DIR"]))
    root = os.path.dirname(os.path.dirname(pkg))
    if os.path.exists(os.path.join(root, "include", "mha.h")):
        def age(d):
            f = os.path.join(d, NAMES[1])
            return -os.path.getmtime(f) if os.path.exists(f) else 0
        trees = sorted((d for d in glob.glob(os.path.join(root, "build*")) if os.path.isdir(d)), key=age)
        builds += [("build tree", d) for d in trees]
    for how, d in builds:
        yield how, d


def _asan_runtime_loaded():
    try:
        with open("/proc/self/maps") as f:
            return "libasan" in f.read()
    except OSError:
        return False


def _needs_asan(path):
    try:
        with open(path, "rb") as f:
            return b"libasan.so" in f.read()
    except OSError:
        return False


def _try(path):
    """(CDLL, None) or (None, why not)."""
    if os.sep in path:
        if not os.path.exists(path):
            return None, "not found"
        if _needs_asan(path) and not _asan_runtime_loaded():
            return None, ("built with AddressSanitizer; preload its runtime "
                          "(LD_PRELOAD=$(gcc -print-file-name=libasan.so), with libstdc++.so when torch is used) "
                          "to use it")
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        return None, str(e)
    try:
        version = lib.mha_version
        version.restype = c_char_p
        v = version().decode()
    except AttributeError:
        return None, "not mha (no mha_version)"
    if v.split(".")[:2] != __version__.split(".")[:2]:
        return None, "mha %s, but this package is %s" % (v, __version__)
    return lib, None


def load():
    """(CDLL, path) of the first library that loads; ImportError otherwise."""
    tried = []

    def attempt(how, path):
        lib, why = _try(path)
        if lib is None:
            tried.append("%s: %s: %s" % (how, path, why))
        return lib

    env = os.environ.get("MHA_LIBRARY")
    if env:
        lib = attempt("$MHA_LIBRARY", env)
        if lib is not None:
            return _declare(lib), env
    else:
        tried.append("$MHA_LIBRARY: not set")
        seen = set()
        for how, d in _candidates():
            if how == "ldconfig":
                if not d:
                    tried.append("the dynamic linker (ldconfig): no libmha.so in its cache")
                    continue
                lib = attempt("the dynamic linker (ldconfig)", d)
                if lib is not None:
                    return _declare(lib), d
                continue
            if d in seen:
                continue
            seen.add(d)
            present = [os.path.join(d, n) for n in NAMES if os.path.exists(os.path.join(d, n))]
            if not present:
                tried.append("%s: no %s in %s" % (how, " or ".join(NAMES), d))
            for path in present:
                lib = attempt(how, path)
                if lib is not None:
                    return _declare(lib), path
    raise ImportError("mha: cannot load libmha.so (build it with cmake, install it with cmake --install, "
                      "or set MHA_LIBRARY to its path). Tried:\n  " + "\n  ".join(tried))


def _declare(lib):
    for name, (res, args) in _PROTOTYPES.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


lib, path = load()


class Error(RuntimeError):
    """A failed mha call. status: the status name ("MHA_ERR_SHAPE"), code: its
    value (-3), detail: mha_last_error() at the failure."""

    def __init__(self, code, detail, what=None):
        self.code = code
        self.status = lib.mha_status_name(code).decode()
        self.detail = detail
        msg = "%s: %s" % (self.status, detail) if detail else self.status
        super().__init__("%s: %s" % (what, msg) if what else msg)


def check(code, what=None):
    """Raises Error for a failed status, with the library's detail."""
    if code != 0:
        detail = lib.mha_last_error()
        raise Error(code, detail.decode("utf-8", "replace") if detail else "", what)
