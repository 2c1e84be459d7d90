"""mha_generator_get_state / mha_generator_set_state against torch 1.13's
torch.get_rng_state / torch.set_rng_state (through ctypes on the build's
libmha.so), as the Python binding uses them, then the binding itself:

  export  after torch.manual_seed(s) and a sequence of draws (uniform,
          normal on both paths, the cached double normal, dropout), mha's
          bytes equal torch.get_rng_state() after the same sequence;
  import  torch's state taken mid-stream (the double normal cached or not,
          mid-block or at a twist) set into a fresh generator: mha's next
          draws equal torch's after set_rng_state, bit for bit, and the
          exported bytes equal torch's again;
  errors  wrong sizes (ERR_ARGUMENT), positions and words no mt19937 has
          (ERR_FORMAT), a cached float normal (ERR_UNSUPPORTED: no CPU
          kernel leaves one), the generator unchanged;
  python  with torch importable, mha's constructors, rand/randn and
          training-mode dropout draw from torch's global generator between
          torch's own draws, as the book's modules do; mha.manual_seed
          seeds torch; mha.get_rng_state/set_rng_state; without torch
          (import blocked) mha keeps its own generator.
"""
import ctypes
import os
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
if os.environ.get("MHA_BUILD_DIR") and not os.environ.get("MHA_LIBRARY"):  # this build's library
    os.environ["MHA_LIBRARY"] = os.path.join(os.environ["MHA_BUILD_DIR"], "libmha.so")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import mha  # noqa: E402
from mha import _lib  # noqa: E402

import book_modules as bm  # noqa: E402
import st  # noqa: E402

L = _lib.lib
SIZE = 5056
tally = st.Tally()
check = tally.check


def new_gen(seed=0):
    g = ctypes.c_void_p()
    assert L.mha_generator_create(seed, ctypes.byref(g)) == 0
    L.mha_generator_set_variant(g, mha._VARIANT)
    return g


def export(g):
    buf = (ctypes.c_uint8 * SIZE)()
    st = L.mha_generator_get_state(g, buf, SIZE)
    assert st == 0, st
    return bytes(buf)


def set_state(g, b):
    buf = (ctypes.c_uint8 * len(b)).from_buffer_copy(b)
    return L.mha_generator_set_state(g, buf, len(b))


def torch_state():
    return torch.get_rng_state().numpy().tobytes()


def fbits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


# One draw of each kind, in torch and in mha: (name, torch call, mha call)
def mha_uniform(g, n):
    out = np.empty(n, np.float32)
    L.mha_generator_uniform(g, out.ctypes.data_as(_lib.c_float_p), n, 0.0, 1.0)
    return out


def mha_normal(g, n):
    out = np.empty(n, np.float32)
    L.mha_generator_normal(g, out.ctypes.data_as(_lib.c_float_p), n, 0.0, 1.0)
    return out


L.mha_generator_random.restype, L.mha_generator_random.argtypes = ctypes.c_uint32, [ctypes.c_void_p]
L.mha_generator_dropout.restype = ctypes.c_int
L.mha_generator_dropout.argtypes = [ctypes.c_void_p, _lib.c_float_p, _lib.c_float_p, ctypes.c_size_t, ctypes.c_double]


def mha_dropout(g, n, p):
    x = np.ones(n, np.float32)
    assert L.mha_generator_dropout(g, x.ctypes.data_as(_lib.c_float_p), x.ctypes.data_as(_lib.c_float_p), n, p) == 0
    return x


DRAWS = {
    "rand7": (lambda: torch.rand(7).numpy(), lambda g: mha_uniform(g, 7)),
    "rand700": (lambda: torch.rand(700).numpy(), lambda g: mha_uniform(g, 700)),
    "randn1": (lambda: torch.randn(1).numpy(), lambda g: mha_normal(g, 1)),
    "randn5": (lambda: torch.randn(5).numpy(), lambda g: mha_normal(g, 5)),
    "randn37": (lambda: torch.randn(37).numpy(), lambda g: mha_normal(g, 37)),
    "dropout": (lambda: F.dropout(torch.ones(300), 0.1, True).numpy(), lambda g: mha_dropout(g, 300, 0.1)),
}
SEQUENCES = [[], ["rand7"], ["randn1"], ["randn5", "rand7"], ["randn37", "randn1"], ["rand700"],
             ["rand700", "randn1", "dropout"], ["dropout", "randn5"], ["rand700"] * 3 + ["randn1"]]


def run_both(names, g):
    for n in names:
        t, m = DRAWS[n]
        check(np.array_equal(fbits(t()), fbits(m(g))), "draw %s" % n)


def test_export_import():
    for seed in (123, 0, 2 ** 40 + 7, -3 & (2 ** 64 - 1)):
        for seq in SEQUENCES:
            torch.manual_seed(seed)
            g = new_gen(seed)
            run_both(seq, g)
            check(export(g) == torch_state(), "export after seed %d %s" % (seed, seq))
            check(struct.unpack_from("<Q", export(g))[0] == torch.initial_seed(), "initial_seed %d" % seed)
            # import torch's state mid-stream into a fresh generator, then continue both
            h = new_gen(999)
            check(set_state(h, torch_state()) == 0, "set_state")
            check(export(h) == torch_state(), "round trip after %s" % seq)
            for follow in (["randn1", "rand7"], ["randn5"], ["dropout", "randn37"]):
                saved = torch.get_rng_state()
                h2 = new_gen(1)
                set_state(h2, saved.numpy().tobytes())
                run_both(follow, h2)
                check(export(h2) == torch_state(), "continued %s then %s" % (seq, follow))
                torch.set_rng_state(saved)
            L.mha_generator_free(g)
            L.mha_generator_free(h)


def test_errors():
    torch.manual_seed(9)
    torch.rand(10)
    good = torch_state()
    g = new_gen(4)
    before = export(g)

    def refused(b, what, torch_refuses, status=-8):
        check(set_state(g, bytes(b)) == status, "status %d for %s" % (status, what))
        check(export(g) == before, "unchanged after %s" % what)
        if torch_refuses:
            try:
                torch.set_rng_state(torch.tensor(list(b), dtype=torch.uint8))
                check(False, "torch refuses %s" % what)
            except RuntimeError:
                pass

    def patched(off, fmt, v):
        b = bytearray(good)
        b[off:off + struct.calcsize(fmt)] = struct.pack(fmt, v)
        return b

    refused(good[:100], "a short state", True, -1)
    refused(good + b"\0", "a long state", True, -1)
    refused(good[:5048], "a legacy state", False, -1)
    refused(patched(8, "<i", 0), "left 0", True)
    refused(patched(8, "<i", 625), "left 625", True)
    refused(patched(16, "<Q", 625), "next 625", True)
    refused(patched(16, "<Q", 600), "next past the words left", False)
    refused(patched(24 + 8 * 5, "<Q", 1 << 32), "a 33-bit state word", False)
    refused(patched(5052, "<B", 1), "a cached float normal", False, -13)
    check(L.mha_generator_set_state(g, None, SIZE) == -1, "NULL state")
    buf = (ctypes.c_uint8 * SIZE)()
    check(L.mha_generator_get_state(g, buf, SIZE - 1) == -1, "get with a short buffer")
    check(L.mha_generator_get_state(None, buf, SIZE) == -1, "get NULL generator")
    # the seeded state (left 1, next 0) and the state after 624 draws (left 1, next 624) are fine
    torch.manual_seed(3)
    check(set_state(g, torch_state()) == 0, "freshly seeded state")
    torch.rand(624)
    check(set_state(g, torch_state()) == 0 and export(g) == torch_state(), "state at a twist")
    run_both(["rand7"], g)
    L.mha_generator_free(g)


def test_python_binding():
    # construction and dropout draw from torch's generator between torch's own draws
    torch.manual_seed(11)
    a = bm.MultiHeadAttention(4, 6, 5, 0.5, 2)
    r1 = torch.rand(3)
    x = torch.rand(2, 5, 4)
    with torch.no_grad():
        y = a(x)
    r2 = torch.randn(2)
    torch.manual_seed(11)
    m = mha.MultiHeadAttention(4, 6, 5, 0.5, 2)
    s1 = torch.rand(3)
    x2 = torch.rand(2, 5, 4)
    with torch.no_grad():
        y2 = m(x2)
    s2 = torch.randn(2)
    check(np.array_equal(fbits(a.W_query.weight.detach()), fbits(m.W_query.weight)), "module weights")
    check(np.array_equal(fbits(r1), fbits(s1)) and np.array_equal(fbits(r2), fbits(s2)), "torch's stream")
    check(np.abs(y.numpy() - y2.numpy()).max() < 1e-5, "training-mode dropout mask")
    mha.manual_seed(77)
    check(torch.initial_seed() == 77 and mha.initial_seed() == 77, "mha.manual_seed seeds torch")
    mha.manual_seed(-5)
    check(mha.initial_seed() == torch.initial_seed(), "initial_seed of a negative seed")
    mha.manual_seed(77)
    mr = mha.rand(5)
    torch.manual_seed(77)
    check(np.array_equal(fbits(mr), fbits(torch.rand(5))), "mha.rand is torch.rand")
    st = mha.get_rng_state()
    check(st.tobytes() == torch_state(), "mha.get_rng_state")
    v = torch.randn(3)
    mha.set_rng_state(st)
    check(np.array_equal(fbits(mha.randn(3)), fbits(v)), "mha.set_rng_state")
    try:
        mha.set_rng_state(b"\0" * 10)
        check(False, "set_rng_state refuses 10 bytes")
    except mha.Error as e:
        check(e.status == "MHA_ERR_ARGUMENT" and "5056" in str(e), "set_rng_state error: %s" % e)
    # without torch: mha's own generator, seeded by mha.manual_seed
    code = ("import sys; sys.modules['torch'] = None\n"
            "import mha\n"
            "mha.manual_seed(123); print(repr(mha.rand(2).tolist()))\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    p = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=120)
    torch.manual_seed(123)
    check(p.returncode == 0 and p.stdout.strip() == repr(torch.rand(2).tolist()),
          "without torch: %s %s" % (p.stdout, p.stderr[-500:]))


if __name__ == "__main__":
    test_export_import()
    test_errors()
    test_python_binding()
    print("torch_generator_state: %d passed, %d failed" % (tally.passes, tally.fails))
    sys.exit(tally.status())
